"""Is training input-bound? The live `tf.data` pipeline against the same batches from memory.

`python -m benchmarks.input_pipeline --config small` tokenizes the bundled
corpus, builds the training pipeline `keras-transformer train` uses
(`translation_dataset`: shuffled, repeated, bucketed by length, prefetched)
and measures, in one process, repeats interleaved:

- the pipeline alone: batches and tokens per second of iterating it, with
  no model;
- `model.fit` on the live pipeline, seconds per step;
- `model.fit` on the same batches already materialized in memory
  (`take(steps).cache()`, filled before timing), seconds per step.

Every measurement leaves out the first batch of each fresh iterator
(opening it and filling the length buckets happens once per training run,
not once per step). The stateless shuffle gives every iterator the same
batches, so both fits
run exactly the same batch shapes and tokens; the difference between them
is what the input pipeline costs the training step. A live/cached ratio
near 1 means compute-bound; well above 1 means input-bound. Writes
`results.json` and `results.md` to `--out`.

Needs TensorFlow (the pipeline is `tf.data`); the model runs on whatever
`KERAS_BACKEND` says.
"""

import argparse
import os
import statistics
import time

import keras
import numpy as np

from benchmarks.machine import describe_device
from benchmarks.machine import limit_threads
from benchmarks.reference_models import CONFIGS
from benchmarks.reference_models import build_model
from benchmarks.report import OURS
from benchmarks.report import save_results


def parse_args(argv=None):
    """The command line of `python -m benchmarks.input_pipeline`.

    Example:

    >>> parse_args(["--config", "quick"]).steps
    10
    """
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.input_pipeline",
        description="Time model.fit on the live tf.data pipeline against the same batches cached in memory.",
    )
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small", help="(default: %(default)s)")
    parser.add_argument("--max-length", type=int, default=128, help="longest sequence (default: %(default)s)")
    parser.add_argument("--batch-tokens", type=int, default=4096, help="tokens per batch and tensor (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=10,
                        help="training steps per repeat, the first untimed (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats, median reported (default: %(default)s)")
    parser.add_argument("--vocabulary-size", type=int, default=8000, help="SentencePiece vocabulary (default: %(default)s)")
    parser.add_argument("--train-pairs", type=int, help="use only the first N training pairs (default: all)")
    parser.add_argument("--corpus", help="gzipped TSV corpus (default: the one shipped with the package)")
    parser.add_argument("--threads", type=int, help="CPU threads per backend (default: the backend's own)")
    parser.add_argument("--dropout", type=float, default=0.1, help="(default: %(default)s)")
    parser.add_argument("--out", default="benchmark_results/input_pipeline", help="folder for results.json and results.md")
    args = parser.parse_args(argv)
    if args.config == "quick":
        args.vocabulary_size = min(args.vocabulary_size, CONFIGS["quick"]["vocabulary_size"])
    for name in ("max_length", "batch_tokens", "repeats", "vocabulary_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step of each repeat is not timed)")
    if args.batch_tokens < args.max_length:
        parser.error("--batch-tokens must be at least --max-length (a batch holds the longest pair)")
    return args


def tokenized_corpus(args):
    """The corpus's training pairs, tokenized with a vocabulary trained on them (cached in `--out`).

    Returns:
        A `keras_transformer.data.pipeline.TokenizedPairs`.
    """
    from keras_transformer.data import corpus
    from keras_transformer.data import pipeline
    from keras_transformer.data import tokenizer as tokenizer_lib

    pairs = corpus.load_bible_pairs("train", path=args.corpus)[: args.train_pairs]
    path = os.path.join(args.out, f"vocabulary-{args.vocabulary_size}.spm")
    if not os.path.exists(path):
        texts = [p.source for p in pairs] + [p.target for p in pairs]
        tokenizer_lib.train_tokenizer(texts, args.vocabulary_size, path=path)
    return pipeline.tokenize_pairs(pairs, tokenizer_lib.load_tokenizer(path), args.max_length)


def _count_tokens(inputs, labels):
    labels, source = np.asarray(labels), np.asarray(inputs["encoder_tokens"])
    return labels.size + source.size, int(np.count_nonzero(labels) + np.count_nonzero(source))


def time_pipeline_alone(dataset, steps):
    """Seconds per batch of drawing batches 2..`steps` from a fresh iterator, and their tokens.

    The first batch is left out, as in `_SteadySteps`: it pays for opening
    the iterator and filling the length buckets, once per training run.

    Returns:
        `(seconds_per_batch, padded_tokens, real_tokens)`, tokens per batch:
        source + target, with and without padding.
    """
    padded = real = 0
    for index, (inputs, labels) in enumerate(dataset.take(steps)):
        if index == 0:
            start = time.perf_counter()
            continue
        batch_padded, batch_real = _count_tokens(inputs, labels)
        padded, real = padded + batch_padded, real + batch_real
    return (time.perf_counter() - start) / (steps - 1), padded / (steps - 1), real / (steps - 1)


class _SteadySteps(keras.callbacks.Callback):
    """Seconds per step of a `fit` epoch after its first step.

    Each `fit` call opens a new iterator over the dataset; a training run
    opens one. The first step, which pays for it, is left out.
    """

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            self.start, self.steps = time.perf_counter(), 0
        else:
            self.steps += 1

    def on_epoch_end(self, epoch, logs=None):
        self.seconds_per_step = (time.perf_counter() - self.start) / self.steps


def live_and_cached(tokenized, batch_tokens, steps):
    """The training pipeline, and its first `steps` batches held in memory.

    Args:
        tokenized: `TokenizedPairs`.
        batch_tokens: int, as in `translation_dataset`.
        steps: int, batches to hold.

    Returns:
        `(live, cached)`: two endless `tf.data.Dataset`s whose every
        iterator starts with the same `steps` batches; `cached` repeats
        them from memory (already filled).
    """
    import tensorflow as tf

    from keras_transformer.data import pipeline

    live = pipeline.translation_dataset(tokenized, batch_tokens=batch_tokens, shuffle=True, seed=0, repeat=True)
    cached = live.take(steps).cache().repeat().prefetch(tf.data.AUTOTUNE)
    for _ in cached.take(steps):  # fills the cache: later passes read memory
        pass
    return live, cached


def measure(args, log=print):
    """Runs the three measurements, repeats interleaved; returns the report dict."""
    if args.threads:
        limit_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    tokenized = tokenized_corpus(args)
    log(f"tokenized {len(tokenized):,} pairs (max_length {args.max_length})")
    live, cached = live_and_cached(tokenized, args.batch_tokens, args.steps)

    config = dict(CONFIGS[args.config])
    config["vocabulary_size"] = args.vocabulary_size
    keras.utils.set_random_seed(0)
    model = build_model(OURS, config, args.max_length, args.dropout)
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    timer = _SteadySteps()

    def fit(data):
        model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0, callbacks=[timer])
        return timer.seconds_per_step

    fit(cached)  # warm-up: compiles every batch shape of the `steps` batches
    fit(live)
    alone, live_step, cached_step = [], [], []
    tokens = None
    for repeat in range(args.repeats):
        seconds, padded, real = time_pipeline_alone(live, args.steps)
        alone.append(seconds)
        tokens = (padded, real)
        live_step.append(fit(live))
        cached_step.append(fit(cached))
        log(f"repeat {repeat + 1}/{args.repeats}: pipeline {alone[-1] * 1e3:.1f} ms/batch, "
            f"fit live {live_step[-1] * 1e3:.0f} ms/step, fit cached {cached_step[-1] * 1e3:.0f} ms/step")
    median = {name: statistics.median(values)
              for name, values in (("pipeline", alone), ("live", live_step), ("cached", cached_step))}
    return dict(
        meta=dict(device=describe_device(), backend=keras.backend.backend(), config=args.config,
                  max_length=args.max_length, batch_tokens=args.batch_tokens, steps=args.steps,
                  repeats=args.repeats, vocabulary_size=args.vocabulary_size, pairs=len(tokenized),
                  threads=args.threads, keras=keras.__version__),
        padded_tokens_per_batch=tokens[0],
        real_tokens_per_batch=tokens[1],
        seconds_per_batch=dict(pipeline_alone=alone, fit_live=live_step, fit_cached=cached_step),
        median_seconds_per_batch=median,
        pipeline_tokens_per_second=tokens[0] / median["pipeline"],
        train_tokens_per_second=tokens[0] / median["cached"],
        pipeline_headroom=median["cached"] / median["pipeline"],
        live_over_cached=median["live"] / median["cached"],
    )


def markdown_table(report):
    """The report as a Markdown table and a one-line verdict.

    Example:

    >>> print(markdown_table({"meta": {"backend": "jax", "config": "small", "max_length": 128,
    ...     "batch_tokens": 4096, "steps": 10, "repeats": 3, "pairs": 100,
    ...     "device": {"name": "cpu"}}, "padded_tokens_per_batch": 8192.0,
    ...     "real_tokens_per_batch": 6000.0,
    ...     "median_seconds_per_batch": {"pipeline": 0.001, "live": 0.5, "cached": 0.5},
    ...     "pipeline_tokens_per_second": 8192000.0, "train_tokens_per_second": 16384.0,
    ...     "pipeline_headroom": 500.0, "live_over_cached": 1.0}).splitlines()[-1])
    Verdict: compute-bound (live / cached = 1.00; the pipeline alone is 500.0x faster than a training step).
    """
    meta, median = report["meta"], report["median_seconds_per_batch"]
    ratio = report["live_over_cached"]
    verdict = "compute-bound" if ratio < 1.05 else ("partly input-bound" if ratio < 1.5 else "input-bound")
    return "\n".join([
        f"Backend `{meta['backend']}` on {meta['device']['name']}; config `{meta['config']}`, "
        f"max_length {meta['max_length']}, {meta['batch_tokens']} tokens per batch and tensor, "
        f"{meta['pairs']:,} training pairs; {meta['repeats']} repeats of {meta['steps']} batches, interleaved; "
        f"medians. Tokens are source + target; "
        f"{report['real_tokens_per_batch'] / report['padded_tokens_per_batch']:.0%} of them are not padding.",
        "",
        "| measurement | ms per batch | tokens/s (padded) |",
        "|---|---:|---:|",
        f"| `tf.data` pipeline alone | {median['pipeline'] * 1e3:,.1f} | {report['pipeline_tokens_per_second']:,.0f} |",
        f"| `fit`, live pipeline | {median['live'] * 1e3:,.1f} | "
        f"{report['padded_tokens_per_batch'] / median['live']:,.0f} |",
        f"| `fit`, same batches from memory | {median['cached'] * 1e3:,.1f} | {report['train_tokens_per_second']:,.0f} |",
        "",
        f"Verdict: {verdict} (live / cached = {ratio:.2f}; the pipeline alone is "
        f"{report['pipeline_headroom']:,.1f}x faster than a training step).",
    ]) + "\n"


def main(argv=None):
    """Runs the benchmark and writes `results.json` and `results.md`; returns the report."""
    args = parse_args(argv)
    report = measure(args)
    print(save_results(report, markdown_table(report), args.out))
    return report


if __name__ == "__main__":
    main()
