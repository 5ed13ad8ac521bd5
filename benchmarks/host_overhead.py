"""Does `fit` wait for each training step? The trainer's per-step checks, run synchronously and asynchronously.

Keras (3.15) runs the batch-end work of `fit` (its progress bar, `History`,
every callback's `on_train_batch_end`, and converting the step's loss to a
Python float, which waits for the step to finish) on worker threads only
when every callback is `async_safe` or has no batch-end hook, and only on
backends it calls thread-safe (JAX, torch; never TensorFlow). Otherwise it
does that work on the main thread after every step, so the host prepares
and queues step n+1 only once step n is done, and a GPU idles meanwhile.

On the trainer's own model and batches (`trainer.build_translator`,
`train_input.train_data`: the embedded corpus, its vocabulary, the
pipeline the trainer picks), compiled once, this times `fit` epochs of
`--steps` steps in four ways, repeats interleaved:

- `async`: the trainer's per-step check (`_StopOnNonFiniteLoss`, async-safe
  since d36b8fb): Keras converts and checks each loss on a worker thread.
- `tensorboard`: the same, plus the trainer's TensorBoard callback (where
  TensorFlow imports), async-safe too. Its batch-end hook read the model on
  Keras' worker thread until issue 31 was fixed, and on JAX that crashed
  `fit` at the third step ("Array has been deleted").
- `sync`: the same as `async`, plus one callback whose batch-end hook is not
  async-safe: Keras then does the batch-end work on the main thread after
  every step. This is what the trainer did before d36b8fb, when its NaN
  check, `BackupAndRestore` and `TensorBoard` each had such a hook.
- `bare`: no callback but the clock: `fit`'s floor.

The clock is the trainer's (`training_speed.TrainingSpeed`: from the
epoch's start until its last step has finished). The pipeline alone (its
batches drawn with no model) is timed too. `sync` minus `async` is the
time the device waited for the host each step; on a CPU the host and the
"device" share the same cores, so the ratio there is a lower bound of a
GPU's.

    python -m benchmarks.host_overhead --threads 1 --out benchmarks/results/cpu-host-overhead-tiny
    python -m benchmarks.host_overhead --num-layers 1 --d-model 32 --num-heads 2 --ff-dim 64 \\
        --vocabulary-size 1000 --batch-tokens 1024 --steps 100 --out results_dir   # a model small enough that the host shows

Writes `results.json` and `results.md` to `--out`.
"""

import argparse
import os
import statistics
import tempfile
import threading
import time

import keras

VARIANTS = ("async", "tensorboard", "sync", "bare")


def parse_args(argv=None):
    """The command line of `python -m benchmarks.host_overhead`.

    Example:

    >>> args = parse_args(["--d-model", "32"])
    >>> args.preset, args.d_model, args.steps
    (None, 32, 50)
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.host_overhead",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", help="a corpus file as `keras-transformer train --corpus` takes it (default: the embedded one)")
    parser.add_argument("--preset", help="TrainConfig preset (default: the trainer's: tiny on a CPU, base on a GPU)")
    for name in ("num-layers", "d-model", "num-heads", "ff-dim", "vocabulary-size", "bucket-width"):
        parser.add_argument(f"--{name}", type=int, help="(default: the preset's, as the trainer takes it)")
    parser.add_argument("--batch-tokens", type=int, default=4096, help="(default: %(default)s)")
    parser.add_argument("--max-length", type=int, default=128, help="(default: %(default)s)")
    parser.add_argument("--mixed-precision", choices=("float32", "bfloat16", "float16"),
                        help="(default: the trainer's for this machine)")
    parser.add_argument("--input-pipeline", choices=("auto", "tf.data", "python"), default="auto",
                        help="(default: %(default)s, as the trainer)")
    parser.add_argument("--steps", type=int, default=50, help="steps per timed epoch (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="timed epochs per variant, interleaved (default: %(default)s)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--threads", type=int, help="CPU threads per backend (default: the backend's own)")
    parser.add_argument("--out", default="benchmark_results/host_overhead", help="folder for results.json and results.md")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.repeats < 1:
        parser.error("--steps must be at least 2 and --repeats at least 1")
    return args


class _WaitsForEachStep(keras.callbacks.Callback):
    """The `sync` variant's callback: a batch-end hook that is not async-safe and does nothing itself."""

    def on_train_batch_end(self, batch, logs=None):
        pass


class BatchEndThread(keras.callbacks.Callback):
    """Records whether each `on_train_batch_end` ran on the main thread; async-safe, so it changes nothing.

    Example:

    >>> import numpy as np
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> threads = BatchEndThread()
    >>> _ = model.fit(np.zeros((8, 2)), np.zeros((8, 1)), batch_size=4, verbose=0, callbacks=[threads])
    >>> threads.on_main_thread == [keras.backend.backend() == "tensorflow"] * 2  # worker threads on JAX and torch
    True
    """

    async_safe = True

    def __init__(self):
        super().__init__()
        self.on_main_thread = []

    def on_train_batch_end(self, batch, logs=None):
        self.on_main_thread.append(threading.current_thread() is threading.main_thread())


def _config(args, output):
    from keras_transformer.train_config import TrainConfig

    sizes = {name: getattr(args, name) for name in
             ("num_layers", "d_model", "num_heads", "ff_dim", "vocabulary_size", "bucket_width")}
    return TrainConfig(output=output, corpus=args.corpus, preset=args.preset, batch_tokens=args.batch_tokens,
                       max_length=args.max_length, mixed_precision=args.mixed_precision,
                       input_pipeline=args.input_pipeline, steps_per_epoch=args.steps, epochs=1,
                       **{key: value for key, value in sizes.items() if value is not None}).resolved()


def _time_pipeline(dataset, steps):
    """Seconds per batch of drawing batches 2..`steps` of the dataset with no model."""
    if isinstance(dataset, keras.utils.PyDataset):
        batches = (dataset[index] for index in range(steps))
    else:
        batches = iter(dataset.take(steps))
    next(batches)
    start = time.perf_counter()
    for _ in batches:
        pass
    return (time.perf_counter() - start) / (steps - 1)


def measure(args, log=print):
    """Builds the trainer's model and batches, then times the variants; returns the report dict."""
    if args.threads:
        from benchmarks.run import limit_threads

        limit_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="host-overhead-") as output:  # the vocabulary's folder
        return _measure(args, output, log)


def _measure(args, output, log):
    from benchmarks.run import describe_device
    from keras_transformer import distribute
    from keras_transformer import model_flops
    from keras_transformer import train_input
    from keras_transformer import trainer
    from keras_transformer import training_speed
    from keras_transformer.train_config import tensorflow_imports

    config = _config(args, output)
    keras.config.set_dtype_policy(f"mixed_{config.mixed_precision}" if config.mixed_precision else "float32")
    keras.utils.set_random_seed(config.seed)
    corpus_data = train_input.read_corpus(config)
    vocabulary = os.path.join(output, "vocabulary.spm")
    train_input.learn_vocabulary(config, corpus_data, vocabulary)
    placement = distribute.place(config, log)
    data = train_input.train_data(config, corpus_data, vocabulary, placement, 0, log)
    model = trainer.build_translator(**config.model_arguments())
    flops = model_flops.mean_training_flops(data.batch_shapes, config.num_layers, config.num_layers, config.d_model,
                                            config.ff_dim, config.vocabulary_size)

    variants = list(args.variants)
    if "tensorboard" in variants and not tensorflow_imports():
        log("the tensorboard variant needs TensorFlow, which does not import here: left out")
        variants.remove("tensorboard")

    def fit(variant):
        speed, threads = training_speed.TrainingSpeed(args.steps), BatchEndThread()
        callbacks = [speed]
        if variant != "bare":
            callbacks += [trainer._StopOnNonFiniteLoss(args.steps), threads]
        if variant == "tensorboard":
            callbacks.append(trainer._EpochTensorBoard(os.path.join(output, "logs")))
        if variant == "sync":
            callbacks.append(_WaitsForEachStep())
        model.fit(data.train, epochs=1, steps_per_epoch=args.steps, callbacks=callbacks, verbose=0, shuffle=False)
        on_main = threads.on_main_thread
        return speed.epoch_seconds[-1] / args.steps, (all(on_main) if on_main else None)

    start = time.perf_counter()
    for variant in variants:  # compiles the shapes of the first `steps` batches, which every fit starts with
        fit(variant)
    log(f"warm-up (compiling) {time.perf_counter() - start:.1f} s")
    seconds = {variant: [] for variant in variants}
    on_main_thread = {}
    pipeline = []
    for repeat in range(args.repeats):
        pipeline.append(_time_pipeline(data.train, args.steps))
        order = variants[repeat % len(variants):] + variants[:repeat % len(variants)]
        for variant in order:
            step, on_main_thread[variant] = fit(variant)
            seconds[variant].append(step)
        log(f"repeat {repeat + 1}/{args.repeats}: pipeline {pipeline[-1] * 1e3:.2f} ms/batch, "
            + ", ".join(f"{variant} {seconds[variant][-1] * 1e3:.2f} ms/step" for variant in variants))
    median = {variant: statistics.median(values) for variant, values in seconds.items()}
    device = describe_device()
    peak = model_flops.peak_flops(device["accelerator"]) if device["accelerator"] else None
    return dict(
        meta=dict(device=device, backend=keras.backend.backend(), keras=keras.__version__, preset=config.preset,
                  num_layers=config.num_layers, d_model=config.d_model, num_heads=config.num_heads,
                  ff_dim=config.ff_dim, vocabulary_size=config.vocabulary_size, batch_tokens=config.batch_tokens,
                  max_length=config.max_length, bucket_width=config.bucket_width,
                  mixed_precision=config.mixed_precision or "float32", input_pipeline=data.pipeline,
                  steps=args.steps, repeats=args.repeats, threads=args.threads, parameters=model.count_params()),
        seconds_per_step=seconds,
        median_seconds_per_step=median,
        pipeline_seconds_per_batch=pipeline,
        median_pipeline_seconds_per_batch=statistics.median(pipeline),
        batch_ends_on_main_thread=on_main_thread,
        real_tokens_per_step=data.tokens_per_batch,
        model_flops_per_step=flops,
        mfu={variant: model_flops.model_flops_utilization(flops, value, peak) for variant, value in median.items()},
        sync_over_async=(median["sync"] / median["async"]) if {"sync", "async"} <= set(median) else None,
        tensorboard_over_async=(median["tensorboard"] / median["async"]) if {"tensorboard", "async"} <= set(median)
        else None,
    )


def markdown_table(report):
    """The report as a Markdown table and a one-line reading.

    Example:

    >>> report = {"meta": {"backend": "jax", "device": {"name": "cpu"}, "preset": "tiny", "num_layers": 1,
    ...     "d_model": 32, "ff_dim": 64, "vocabulary_size": 1000, "batch_tokens": 1024,
    ...     "mixed_precision": "float32", "input_pipeline": "python", "steps": 50, "repeats": 3,
    ...     "parameters": 90000}, "median_seconds_per_step": {"async": 0.010, "sync": 0.015, "bare": 0.009},
    ...     "batch_ends_on_main_thread": {"async": False, "sync": True, "bare": None},
    ...     "median_pipeline_seconds_per_batch": 0.002, "real_tokens_per_step": 1500.0,
    ...     "mfu": {"async": None, "sync": None, "bare": None}, "sync_over_async": 1.5}
    >>> print(markdown_table(report).splitlines()[-1])
    Waiting for each step (sync) costs 1.50x the asynchronous step: 5.00 ms a step.
    """
    meta, median = report["meta"], report["median_seconds_per_step"]
    rows = [
        f"Backend `{meta['backend']}` on {meta['device']['name']}; the trainer's model (preset `{meta['preset']}`, "
        f"{meta['num_layers']}+{meta['num_layers']} layers, d_model {meta['d_model']}, ff_dim {meta['ff_dim']}, "
        f"{meta['vocabulary_size']:,}-piece vocabulary, {meta['parameters']:,} parameters, "
        f"{meta['mixed_precision']}) and batches ({meta['batch_tokens']:,} tokens a side, "
        f"`{meta['input_pipeline']}` pipeline); medians of {meta['repeats']} epochs of {meta['steps']} steps "
        "per variant, interleaved.",
        "",
        "| variant | batch ends on | ms per step | real tokens/s | MFU |",
        "|---|---|---:|---:|---:|",
    ]
    where = {True: "main thread", False: "worker threads", None: "(no batch-end work)"}
    for variant, seconds in median.items():
        mfu = report["mfu"].get(variant)
        rows.append(f"| `{variant}` | {where[report['batch_ends_on_main_thread'].get(variant)]} | "
                    f"{seconds * 1e3:,.2f} | {report['real_tokens_per_step'] / seconds:,.0f} | "
                    f"{'-' if mfu is None else f'{mfu:.1%}'} |")
    rows.append(f"| the pipeline alone | | {report['median_pipeline_seconds_per_batch'] * 1e3:,.2f} | | |")
    rows.append("")
    if report["sync_over_async"] is not None:
        rows.append(f"Waiting for each step (sync) costs {report['sync_over_async']:.2f}x the asynchronous step: "
                    f"{(median['sync'] - median['async']) * 1e3:.2f} ms a step.")
    if report.get("tensorboard_over_async") is not None:
        rows.append(f"The trainer's TensorBoard callback costs {report['tensorboard_over_async']:.2f}x the "
                    "asynchronous step.")
    return "\n".join(rows) + "\n"


def main(argv=None):
    """Runs the benchmark and writes `results.json` and `results.md`; returns the report."""
    from benchmarks.report import save_results

    args = parse_args(argv)
    report = measure(args)
    print(save_results(report, markdown_table(report), args.out))
    return report


if __name__ == "__main__":
    main()
