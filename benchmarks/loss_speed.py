"""The masked cross-entropy over the vocabulary: log-softmax against logsumexp.

    KERAS_BACKEND=torch python -m benchmarks.loss_speed --threads 1 --fit-steps 2 --out benchmarks/results/cpu-loss-speed/torch
    KERAS_BACKEND=jax python -m benchmarks.loss_speed --threads 1 --fit-steps 2 --out benchmarks/results/cpu-loss-speed/jax
    KERAS_BACKEND=tensorflow python -m benchmarks.loss_speed --threads 1 --fit-steps 2 --out benchmarks/results/cpu-loss-speed/tensorflow
    KERAS_BACKEND=torch python -m benchmarks.loss_speed --quick --out /tmp/loss   # a smoke test

Two formulations of `keras_transformer.training.MaskedSparseCrossentropy`,
both `keras.ops` only, with float32 reductions and padding selected out:

- `log_softmax`: materializes `log_softmax(z)` (B x T x V), gathers the
  target's log-probability and, with label smoothing, takes the mean of the
  log-probabilities over the vocabulary.
- `logsumexp`: `lse = logsumexp(z)`, `nll = lse - z[y]`, smoothing term
  `lse - mean(z)`: no B x T x V log-probabilities.

Each is timed forward and backward (the gradient of the loss with respect to
the logits: torch autograd eagerly, `jax.jit(jax.value_and_grad)`, TensorFlow
`GradientTape` in a `tf.function(jit_compile=True)` as `model.fit` compiles
it) on random logits of each `--shape` and `--dtype`, one quarter of the
labels padding. The formulations take turns (`benchmarks.run.interleaved_seconds`)
and the table gives medians. `--fit-steps N` also times `model.fit` of the
`small` model with either loss in the same process, interleaved, and
`MaskedAccuracy`'s argmax alone is timed for scale.
"""

import argparse
import statistics

import keras
import numpy as np
from keras import ops

from keras_transformer import training
from benchmarks.report import save_results
from benchmarks.run import describe_device
from benchmarks.run import interleaved_seconds
from benchmarks.run import limit_threads


def log_softmax_loss(y_true, y_pred, label_smoothing=0.0, padding_id=0):
    """The package's `MaskedSparseCrossentropy` (a materialized `log_softmax`), as a function.

    Args:
        y_true: int labels, shape `(B, T)`.
        y_pred: logits, shape `(B, T, V)`, any float dtype.
        label_smoothing: float in [0, 1).
        padding_id: int, the label left out.

    Returns:
        float32 scalar, the mean over real tokens.

    Example:

    >>> round(float(log_softmax_loss(np.array([[1, 0]]), np.zeros((1, 2, 4), "float32"))), 4)
    1.3863
    """
    return training.MaskedSparseCrossentropy(label_smoothing, padding_id).call(y_true, y_pred)


def logsumexp_loss(y_true, y_pred, label_smoothing=0.0, padding_id=0):
    """Mean masked cross-entropy as `logsumexp(z) - z[y]`.

    Args:
        y_true: int labels, shape `(B, T)`.
        y_pred: logits, shape `(B, T, V)`, any float dtype.
        label_smoothing: float in [0, 1).
        padding_id: int, the label left out.

    Returns:
        float32 scalar, the mean over real tokens.

    Example:

    >>> round(float(logsumexp_loss(np.array([[1, 0]]), np.zeros((1, 2, 4), "float32"))), 4)
    1.3863
    """
    y_true = ops.cast(y_true, "int32")
    logits = ops.cast(y_pred, "float32")
    lse = ops.logsumexp(logits, axis=-1)
    target_logit = ops.squeeze(ops.take_along_axis(logits, y_true[..., None], axis=-1), axis=-1)
    target = lse - target_logit
    if label_smoothing:
        target = lse - (1.0 - label_smoothing) * target_logit - label_smoothing * ops.mean(logits, axis=-1)
    real = ops.not_equal(y_true, padding_id)
    target = ops.where(real, target, ops.zeros_like(target))
    return ops.sum(target) / ops.maximum(ops.sum(ops.cast(real, "float32")), 1.0)


FORMULATIONS = {"log_softmax": log_softmax_loss, "logsumexp": logsumexp_loss}


class _Crossentropy(training.MaskedSparseCrossentropy):
    """`MaskedSparseCrossentropy` with its per-token formula replaced (for `--fit-steps`)."""

    def __init__(self, formulation, **kwargs):
        super().__init__(**kwargs)
        self.formulation = formulation

    def call(self, y_true, y_pred):
        return FORMULATIONS[self.formulation](y_true, y_pred, self.label_smoothing, self.padding_id)


def parse_args(argv=None):
    """The command line of `python -m benchmarks.loss_speed`.

    Example:

    >>> args = parse_args(["--quick"])
    >>> args.shape, args.repeats
    (['2x16x512'], 2)
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loss_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--shape", nargs="+", default=["16x128x8000", "32x256x8000"],
                        help="batch x length x vocabulary (default: %(default)s)")
    parser.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"], help="(default: %(default)s)")
    parser.add_argument("--label-smoothing", type=float, nargs="+", default=[0.1, 0.0],
                        help="(default: %(default)s; 0.1 is the trainer's)")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls of each, median (default: %(default)s)")
    parser.add_argument("--fit-steps", type=int, default=0,
                        help="also time model.fit of the small model, this many steps a repeat (default: off)")
    parser.add_argument("--fit-repeats", type=int, default=5, help="(default: %(default)s)")
    parser.add_argument("--threads", type=int, help="CPU threads (default: the backend's own)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 2 repeats: checks that everything runs")
    parser.add_argument("--out", default="benchmark_results/loss_speed")
    args = parser.parse_args(argv)
    if args.quick:
        args.shape, args.repeats, args.label_smoothing = ["2x16x512"], 2, [0.1]
        args.fit_repeats = min(args.fit_repeats, 2)
    return args


def _gradient_step(formulation, labels, logits, label_smoothing):
    """A function of no arguments: loss and gradient w.r.t. the logits, synchronized."""
    loss = FORMULATIONS[formulation]
    backend = keras.backend.backend()
    if backend == "torch":
        def step():
            logits.grad = None
            value = loss(labels, logits, label_smoothing)
            value.backward()
            return float(value.detach())
    elif backend == "jax":
        import jax

        compiled = jax.jit(jax.value_and_grad(lambda z: loss(labels, z, label_smoothing)))

        def step():
            return float(jax.block_until_ready(compiled(logits))[0])
    else:
        import tensorflow as tf

        @tf.function(jit_compile=True)
        def compiled(z):
            with tf.GradientTape() as tape:
                tape.watch(z)
                value = loss(labels, z, label_smoothing)
            return value, tape.gradient(value, z)

        def step():
            value, gradient = compiled(logits)
            gradient.numpy()
            return float(value)
    return step


def _argmax_step(labels, logits):
    """`MaskedAccuracy.update_state`'s work (argmax over the vocabulary), compiled where the backend compiles."""
    def hits(z):
        correct = ops.logical_and(ops.equal(ops.argmax(z, axis=-1), labels), ops.not_equal(labels, 0))
        return ops.sum(ops.cast(correct, "float32"))

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        hits = jax.jit(hits)
    elif backend == "tensorflow":
        import tensorflow as tf

        hits = tf.function(hits, jit_compile=True)
    return lambda: float(hits(logits))


def _inputs(shape, dtype, rng):
    batch, length, vocabulary = shape
    labels = rng.integers(1, vocabulary, size=(batch, length)).astype("int32")
    labels[:, length - length // 4:] = 0  # a quarter padding
    logits = (rng.normal(size=shape) * 3).astype("float32")
    labels_t = ops.convert_to_tensor(labels)
    logits_t = ops.cast(ops.convert_to_tensor(logits), dtype)
    if keras.backend.backend() == "torch":
        logits_t = logits_t.detach().requires_grad_()
    return labels_t, logits_t


def time_losses(args):
    """Interleaved medians of every formulation at every shape, dtype and smoothing; a list of rows."""
    rng = np.random.default_rng(0)
    rows = []
    for shape_text in args.shape:
        shape = tuple(int(n) for n in shape_text.split("x"))
        for dtype in args.dtype:
            labels, logits = _inputs(shape, dtype, rng)
            for label_smoothing in args.label_smoothing:
                steps = {name: _gradient_step(name, labels, logits, label_smoothing) for name in FORMULATIONS}
                values = {name: step() for name, step in steps.items()}
                wall, cpu = interleaved_seconds(steps, args.repeats)
                row = dict(shape=shape_text, dtype=dtype, label_smoothing=label_smoothing, loss=values,
                           wall=wall, cpu=cpu,
                           median_wall={name: statistics.median(times) for name, times in wall.items()},
                           median_cpu={name: statistics.median(times) for name, times in cpu.items()})
                rows.append(row)
                print(_loss_line(row), flush=True)
            wall, cpu = interleaved_seconds({"argmax": _argmax_step(labels, logits)}, args.repeats)
            rows.append(dict(shape=shape_text, dtype=dtype, label_smoothing=None, argmax_wall=wall["argmax"],
                             median_wall={"argmax": statistics.median(wall["argmax"])},
                             median_cpu={"argmax": statistics.median(cpu["argmax"])}))
            print(f"{shape_text} {dtype} argmax {statistics.median(wall['argmax']) * 1e3:.1f} ms", flush=True)
    return rows


def _loss_line(row):
    old, new = row["median_wall"]["log_softmax"], row["median_wall"]["logsumexp"]
    return (f"{row['shape']} {row['dtype']} smoothing {row['label_smoothing']}: log_softmax {old * 1e3:.1f} ms, "
            f"logsumexp {new * 1e3:.1f} ms, ratio {new / old:.3f}")


def time_fit(args):
    """Interleaved `model.fit` epochs of the small model with either loss; a dict of medians and repeats."""
    from benchmarks.reference_models import CONFIGS
    from benchmarks.reference_models import build_model
    from benchmarks.report import OURS

    config = CONFIGS["quick" if args.quick else "small"]
    seq_len, batch = (16, 2) if args.quick else (128, 16)
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, config["vocabulary_size"], size=(batch * args.fit_steps, seq_len)).astype("int32")
    tokens[:, seq_len - seq_len // 4:] = 0
    fits = {}
    for name in FORMULATIONS:
        keras.utils.set_random_seed(0)
        model = build_model(OURS, config, seq_len, 0.1)
        model.compile(optimizer=keras.optimizers.Adam(1e-4), loss=_Crossentropy(name, label_smoothing=0.1))
        data = dict(x={"encoder_tokens": tokens, "decoder_tokens": tokens}, y=tokens, batch_size=batch, verbose=0)
        fits[name] = lambda model=model, data=data: model.fit(**data)
    wall, cpu = interleaved_seconds(fits, args.fit_repeats)
    return dict(config="quick" if args.quick else "small", seq_len=seq_len, batch_size=batch, steps=args.fit_steps,
                wall=wall, cpu=cpu,
                median_wall={name: statistics.median(times) / args.fit_steps for name, times in wall.items()},
                median_cpu={name: statistics.median(times) / args.fit_steps for name, times in cpu.items()})


def markdown_table(report):
    """The loss table (medians, ratio new / old) and, when measured, the training-step table.

    Example:

    >>> row = dict(shape="2x3x4", dtype="float32", label_smoothing=0.1,
    ...            median_wall={"log_softmax": 0.2, "logsumexp": 0.1}, median_cpu={"log_softmax": 0.2, "logsumexp": 0.1})
    >>> report = dict(meta=dict(backend="torch", device="cpu", threads=1, repeats=3), rows=[row])
    >>> print(markdown_table(report).splitlines()[4])
    | 2x3x4 | float32 | 0.1 | 200.0 | 100.0 | 0.50 |
    """
    meta = report["meta"]
    lines = [
        f"Backend {meta['backend']} on {meta['device']}, {meta['threads'] or 'default'} thread(s); loss and its "
        f"gradient w.r.t. the logits, median wall time of {meta['repeats']} interleaved calls.",
        "",
        "| B x T x V | logits | smoothing | log_softmax ms | logsumexp ms | logsumexp / log_softmax |",
        "|---|---|---:|---:|---:|---:|",
    ]
    argmax = []
    for row in report["rows"]:
        if row["label_smoothing"] is None:
            argmax.append(f"| {row['shape']} | {row['dtype']} | {row['median_wall']['argmax'] * 1e3:,.1f} |")
            continue
        old, new = row["median_wall"]["log_softmax"], row["median_wall"]["logsumexp"]
        lines.append(f"| {row['shape']} | {row['dtype']} | {row['label_smoothing']} | {old * 1e3:,.1f} | "
                     f"{new * 1e3:,.1f} | {new / old:.2f} |")
    if argmax:
        lines += ["", "`MaskedAccuracy`'s argmax over the vocabulary alone (forward only):", "",
                  "| B x T x V | logits | argmax ms |", "|---|---|---:|", *argmax]
    fit = report.get("fit")
    if fit:
        old, new = fit["median_wall"]["log_softmax"], fit["median_wall"]["logsumexp"]
        lines += ["", f"`model.fit` of the `{fit['config']}` model, batch {fit['batch_size']} x {fit['seq_len']}, "
                      f"label smoothing 0.1, {fit['steps']} steps a repeat (median seconds per step):", "",
                  "| log_softmax s/step | logsumexp s/step | logsumexp / log_softmax |", "|---:|---:|---:|",
                  f"| {old:.3f} | {new:.3f} | {new / old:.3f} |"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    """Measures, writes `results.json` and `results.md`, prints the table; returns the report."""
    args = parse_args(argv)
    if args.threads:
        limit_threads(args.threads)
    device = describe_device()
    report = dict(meta=dict(backend=device["backend"], backend_version=device["backend_version"],
                            device=device["name"], threads=args.threads, repeats=args.repeats),
                  rows=time_losses(args))
    if args.fit_steps:
        report["fit"] = time_fit(args)
    print(save_results(report, markdown_table(report), args.out))
    return report


if __name__ == "__main__":
    main()
