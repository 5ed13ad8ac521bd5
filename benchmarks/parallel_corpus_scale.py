"""A generated corpus of a million pairs, streamed (`--stream`) and in memory: peak RSS, time to the first step, tokens/s.

    python -m benchmarks.parallel_corpus_scale --out benchmarks/results/cpu-corpus-scale
    python -m benchmarks.parallel_corpus_scale --pairs 2000 --memory-pairs 2000 --steps 3 --out /tmp/scale  # smoke
    python -m benchmarks.parallel_corpus_scale --pairs 100000 --small-pairs 100000 --modes stream \
        --input-pipelines tf.data python --steps 10 --out benchmarks/results/cpu-stream-pipelines-torch  # the two streams

The corpus: pairs of two embedded Bible verses each (verse i then verse j,
both sides, i and j drawn with a seeded generator), so SentencePiece sees
real Spanish and English and a side has about 55 tokens (the figure is
measured and written out). One TSV, uncompressed, in a temporary folder.

Each measurement runs in its own process (`--child`), so its peak RSS
(`getrusage`, the process' high-water mark) is its own:

- **train**: `train_translator` on the tiny preset for `--steps` steps
  (one virtual epoch), `--stream` or in memory; the time to the end of the
  first training step counted from the call, with the time of each of the
  trainer's log lines (reading / scanning the corpus, the vocabulary, the
  tokenization, the batch statistics), the peak RSS at the first step and
  at the end, and the training steps/s after the first step.
- **pipeline**: the batches alone, no model: the streamed pipeline
  (reading, tokenizing, shuffling, bucketing), or the in-memory one (the
  corpus read and tokenized first, timed apart, then the batch plan's
  batches); real (non-padding) source + target tokens per second, and the
  RSS after the imports (before the pipeline is built) beside the peak.

`--input-pipelines tf.data python` measures each mode on both input
pipelines (`--input-pipeline`); a python measurement runs with TensorFlow
blocked (`sys.modules["tensorflow"] = None`), as on a machine without it,
so its RSS holds no TensorFlow. `--modes stream` leaves out in memory.
"""

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

PIPELINE_DEV_FRACTION = 0.002  # 2,000 dev pairs a million: the dev pass stays short


def generate_corpus(path, pairs, seed=0):
    """Writes `pairs` lines `es_i es_j<TAB>en_i en_j` of embedded Bible verses; returns their count."""
    from keras_transformer.data import load_bible_pairs

    verses = [(pair.source, pair.target) for pair in load_bible_pairs("all")]
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(pairs):
            (es_a, en_a), (es_b, en_b) = rng.choice(verses), rng.choice(verses)
            f.write(f"{es_a} {es_b}\t{en_a} {en_b}\n")
    return pairs


def _peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def _config(corpus, output, stream, steps, input_pipeline="auto"):
    from keras_transformer.training.train_config import TrainConfig

    return TrainConfig(
        output=output, corpus=corpus, stream=stream, preset="tiny", epochs=1, steps_per_epoch=steps,
        dev_fraction=PIPELINE_DEV_FRACTION, test_fraction=PIPELINE_DEV_FRACTION, source_language="es",
        target_language="en", input_pipeline=input_pipeline,
    )


def child_train(corpus, stream, steps, output, input_pipeline="auto"):
    import keras

    from keras_transformer.training.trainer import train_translator

    start = time.perf_counter()
    log, steps_done = [], []

    class FirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            steps_done.append((time.perf_counter() - start, _peak_rss_mb()))

    summary = train_translator(
        _config(corpus, output, stream, steps, input_pipeline), verbose=0, callbacks=[FirstStep()],
        sample_sentences=0,
        log=lambda line: log.append((round(time.perf_counter() - start, 1), line)),
    )
    later = steps_done[-1][0] - steps_done[0][0]
    return {
        "seconds_to_first_step": steps_done[0][0],
        "peak_rss_mb_at_first_step": steps_done[0][1],
        "peak_rss_mb": _peak_rss_mb(),
        "train_steps_per_second": (len(steps_done) - 1) / later if later > 0 else None,
        "train_tokens_per_second": summary["tokens_per_second"],
        "train_pairs": summary["train_pairs"],
        "padding_fraction": summary["padding_fraction"],
        "log": log,
    }


def child_pipeline(corpus, stream, batches, vocabulary, input_pipeline="tf.data"):
    import numpy as np

    config = _config(corpus, None, stream, 1, input_pipeline).resolved()
    python = input_pipeline == "python"
    if python:
        from keras_transformer.data import python_pipeline as pipeline
        from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer as load_tokenizer
    else:
        from keras_transformer.data import pipeline
        from keras_transformer.data.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(vocabulary)
    result = {"rss_mb_after_imports": _peak_rss_mb()}
    start = time.perf_counter()
    if stream:
        from keras_transformer.data.corpus_scan import scan_corpus

        train_lines = scan_corpus(config.parallel_corpus(), vocabulary_sample=2).train_lines
        result["seconds_to_scan"] = time.perf_counter() - start
        if python:
            from keras_transformer.data.python_streaming import StreamedPyDataset as streamed_dataset
        else:
            from keras_transformer.data.streaming import streamed_dataset
        dataset = streamed_dataset(config.parallel_corpus(), train_lines, tokenizer, config.max_length, seed=0)
    else:
        pairs = config.parallel_corpus().read()["train"]
        result["seconds_to_read"] = time.perf_counter() - start
        tokens = pipeline.tokenize_pairs(pairs, tokenizer, config.max_length)
        result["seconds_to_read_and_tokenize"] = time.perf_counter() - start
        lengths = np.diff(tokens.source_offsets) if python else tokens.sources.row_lengths().numpy()
        result["source_tokens_per_pair"] = float(np.mean(lengths))
        del pairs
        dataset = (pipeline.TranslationPyDataset(tokens, repeat=True, seed=0) if python
                   else pipeline.translation_dataset(tokens, repeat=True, seed=0))
    iterator = iter(dataset)
    next(iterator)
    result["seconds_to_first_batch"] = time.perf_counter() - start
    real, sources, rows, begin = 0, 0, 0, time.perf_counter()
    for _ in range(batches):
        inputs, labels = next(iterator)
        sources += int(np.count_nonzero(inputs["encoder_tokens"]))
        real += int(np.count_nonzero(inputs["encoder_tokens"])) + int(np.count_nonzero(labels))
        rows += len(labels)
    seconds = time.perf_counter() - begin
    result.setdefault("source_tokens_per_pair", sources / rows)
    result.update(batches=batches, tokens_per_second=real / seconds, peak_rss_mb=_peak_rss_mb())
    return result


def _run_child(args, *child_args):
    command = [sys.executable, "-m", "benchmarks.parallel_corpus_scale", "--child", *child_args]
    environment = dict(os.environ, KERAS_BACKEND=os.environ.get("KERAS_BACKEND", "torch"))
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, env=environment)
    if done.returncode:
        return {"error": done.stderr.strip().splitlines()[-1:], "wall_seconds": time.perf_counter() - start}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_seconds"] = time.perf_counter() - start
    return result


def _markdown(results):
    lines = [
        f"# Corpus scale: {results['machine']}, KERAS_BACKEND={results['backend']}, tiny preset",
        "",
        "Generated corpus: pairs of two Bible verses"
        + (f", {results['source_tokens_per_pair']:.1f} source tokens a pair (8000-piece vocabulary; targets alike; "
           "truncated to 128)." if results["source_tokens_per_pair"] == results["source_tokens_per_pair"] else "."),
        "",
        "| mode | input pipeline | pairs | peak RSS (MB), first step / end | seconds to the first step "
        "| train steps/s | pipeline alone, tokens/s | pipeline RSS (MB), after imports / peak |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in results["runs"]:
        train, pipe = row["train"], row["pipeline"]
        pipeline = row.get("input_pipeline", "tf.data")
        if "error" in train:
            lines.append(f"| {row['mode']} | {pipeline} | {row['pairs']:,} | failed: {train['error']} | | | | |")
            continue
        lines.append(
            f"| {row['mode']} | {pipeline} | {row['pairs']:,} | {train['peak_rss_mb_at_first_step']:,.0f} / "
            f"{train['peak_rss_mb']:,.0f} | {train['seconds_to_first_step']:.0f} | "
            f"{train['train_steps_per_second']:.2f} | {pipe.get('tokens_per_second', float('nan')):,.0f} | "
            f"{pipe.get('rss_mb_after_imports', float('nan')):,.0f} / {pipe.get('peak_rss_mb', float('nan')):,.0f} |"
        )
    lines += ["", "Where the time to the first step goes (seconds from the call, the trainer's log lines):", ""]
    for row in results["runs"]:
        for seconds, line in row["train"].get("log", []):
            lines.append(f"- {row['mode']} {row.get('input_pipeline', 'tf.data')} {row['pairs']:,}: "
                         f"{seconds:7.1f} s  {line[:140]}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1_000_000, help="pairs of the large corpus")
    parser.add_argument("--memory-pairs", type=int, default=1_000_000,
                        help="pairs of the in-memory measurement (lower it if 1M does not fit)")
    parser.add_argument("--small-pairs", type=int, default=100_000,
                        help="a second, smaller corpus for both modes: memory against corpus size")
    parser.add_argument("--steps", type=int, default=20, help="training steps of each train measurement")
    parser.add_argument("--batches", type=int, default=300, help="batches of each pipeline measurement")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per measurement")
    parser.add_argument("--modes", nargs="+", choices=("stream", "memory"), default=["stream", "memory"],
                        help="streamed (--stream) and/or in memory")
    parser.add_argument("--input-pipelines", nargs="+", choices=("tf.data", "python"), default=["tf.data"],
                        help="the input pipelines to measure each mode on; python runs with TensorFlow blocked")
    parser.add_argument("--out", help="folder for results.json and results.md (required)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, corpus, stream, number, extra, input_pipeline = args.child
        if input_pipeline == "python":
            sys.modules["tensorflow"] = None  # as on a machine without TensorFlow: `import tensorflow` fails
        stream = stream == "stream"
        result = (child_train(corpus, stream, int(number), extra, input_pipeline) if kind == "train"
                  else child_pipeline(corpus, stream, int(number), extra, input_pipeline))
        print(json.dumps(result), flush=True)
        os._exit(0)  # no interpreter teardown under tf.data's threads
    import platform

    if not args.out:
        parser.error("--out is required")
    os.makedirs(args.out, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="corpus-scale-")
    plan = [(mode, size) for mode, size in (("stream", args.small_pairs), ("stream", args.pairs),
                                             ("memory", args.small_pairs), ("memory", args.memory_pairs))
            if mode in args.modes]
    sizes = sorted({size for _, size in plan})
    corpora = {}
    for size in sizes:
        corpora[size] = os.path.join(folder, f"pairs{size}.es-en.tsv")
        start = time.perf_counter()
        generate_corpus(corpora[size], size)
        print(f"generated {size:,} pairs ({os.path.getsize(corpora[size]) / 1e6:.0f} MB) in "
              f"{time.perf_counter() - start:.0f} s", flush=True)
    runs = []
    for mode, size in dict.fromkeys(plan):
        for pipeline in args.input_pipelines:
            output = os.path.join(folder, f"run-{mode}-{size}-{pipeline}")
            name = f"{mode} {pipeline} {size:,}"
            train = _run_child(args, "train", corpora[size], mode, str(args.steps), output, pipeline)
            print(f"{name} train: {json.dumps({k: v for k, v in train.items() if k != 'log'})}", flush=True)
            pipe = {}
            if "error" not in train:
                vocabulary = os.path.join(output, "vocabulary.spm")
                pipe = _run_child(args, "pipeline", corpora[size], mode, str(args.batches), vocabulary, pipeline)
                print(f"{name} pipeline: {json.dumps(pipe)}", flush=True)
            runs.append({"mode": mode, "input_pipeline": pipeline, "pairs": size, "train": train, "pipeline": pipe})
    source_tokens = [run["pipeline"].get("source_tokens_per_pair") for run in runs]
    results = {
        "machine": f"{os.cpu_count()} CPU cores, {platform.processor() or platform.machine()}",
        "backend": os.environ.get("KERAS_BACKEND", "torch"),
        "date": time.strftime("%Y-%m-%d"),
        "source_tokens_per_pair": next((value for value in source_tokens if value), float("nan")),
        "runs": runs,
    }
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(_markdown(results))
    print(_markdown(results))


if __name__ == "__main__":
    main()
