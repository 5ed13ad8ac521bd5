"""The one command that checks what GPU users run, in bfloat16.

    KERAS_BACKEND=jax python -m benchmarks.gpu_check --out benchmarks/results/gpu-check-jax
    KERAS_BACKEND=torch python -m benchmarks.gpu_check --out benchmarks/results/gpu-check-torch

Three checks, each printed as it finishes; any non-finite value or a check
that fails makes the exit status non-zero. Needs no TensorFlow (a JAX or
torch GPU machine with the carried wheels: see benchmarks/README.md, "A session lent a GPU").

1. **attention**: `kt.layers.MultiHeadAttention` under `mixed_bfloat16`, on
   the kernel the backend picks (cuDNN / SDPA fused attention on a GPU),
   against the same layer's explicit float32-softmax path
   (`flash_attention=False`): forward outputs and the gradients with
   respect to the inputs, for every length 8, 16, ..., 256, for self-,
   causal and cross-attention, without padding and with rows padded to 3/4,
   1/2 and 0 (an empty row) of the length. Outputs at real positions must
   agree within bfloat16 tolerance and everything must be finite. Beside it,
   the raw kernel (`keras.ops.dot_product_attention`) with a mask that
   leaves one query row without keys: what a fused kernel does there (NaN
   is what the layer guards against).
2. **train**: `keras-transformer train` as a GPU user runs it (the base
   preset, bfloat16, the embedded corpus, the trainer's own input pipeline)
   for `--steps` steps in virtual epochs of `--steps-per-epoch` (25),
   printing the training and dev loss of each; they must be finite, and the
   last training loss below the first. `--train-settings` changes any other
   `TrainConfig` field.
3. **decode**: greedy tokens of the trained model with the KV cache equal
   those of the uncached loop that re-runs the whole model, on dev sources.
"""

import argparse
import math
import os
import sys
import tempfile
import time

import keras
import numpy as np
from keras import ops

from benchmarks.preset_ablation import parse_settings

LENGTHS = tuple(range(8, 257, 8))
KINDS = ("self", "causal", "cross")
# Tolerances against the explicit path, relative to the largest reference
# value: bfloat16 keeps 8 bits of mantissa (2^-8 = 0.4 %), and the two paths
# round at different places.
OUTPUT_TOLERANCE = 0.03
GRADIENT_TOLERANCE = 0.05
D_MODEL, NUM_HEADS, BATCH = 512, 8, 4


def padded_lengths_for(length, padded):
    """Real lengths of the batch's rows: all full, or full, 3/4, 1/2 and empty."""
    if not padded:
        return [length] * BATCH
    return [length, max(1, 3 * length // 4), max(1, length // 2), 0]


def _row_mask(lengths, length):
    return np.arange(length)[None, :] < np.array(lengths)[:, None]


def value_and_input_gradients(function, inputs, constants=()):
    """`function(*inputs, *constants)` and its gradients with respect to `inputs`.

    On JAX the whole forward and backward pass is one compiled program;
    arrays go in as arguments (`constants` too), never as captured
    constants, which XLA would fold at compile time.

    Args:
        function: callable of backend tensors returning `(scalar, outputs)`.
        inputs: list of float NumPy arrays.
        constants: more arguments, not differentiated.

    Returns:
        `(value, outputs, gradients)` as NumPy: a float, an array and a list
        of arrays.

    Example:

    >>> value, outputs, (gradient,) = value_and_input_gradients(
    ...     lambda x: (keras.ops.sum(x * x), 2 * x), [np.array([1.0, 2.0], "float32")])
    >>> float(value), outputs.tolist(), gradient.tolist()
    (5.0, [2.0, 4.0], [2.0, 4.0])
    """
    backend = keras.backend.backend()
    to_numpy = ops.convert_to_numpy
    constants = [ops.convert_to_tensor(c) for c in constants]
    if backend == "jax":
        import jax

        step = jax.jit(jax.value_and_grad(function, argnums=tuple(range(len(inputs))), has_aux=True))
        (value, outputs), gradients = step(*inputs, *constants)
    elif backend == "torch":
        import torch

        tensors = [ops.convert_to_tensor(x).detach().requires_grad_(True) for x in inputs]
        value, outputs = function(*tensors, *constants)
        gradients = torch.autograd.grad(value, tensors)
    else:
        import tensorflow as tf

        tensors = [tf.constant(x) for x in inputs]
        with tf.GradientTape() as tape:
            for tensor in tensors:
                tape.watch(tensor)
            value, outputs = function(*tensors, *constants)
        gradients = tape.gradient(value, tensors)
    outputs = [to_numpy(o) for o in outputs] if isinstance(outputs, (list, tuple)) else to_numpy(outputs)
    return float(to_numpy(value)), outputs, [to_numpy(g) for g in gradients]


def _relative_error(actual, expected, where=None):
    actual, expected = np.asarray(actual, "float32"), np.asarray(expected, "float32")
    if where is not None:
        actual, expected = actual[where], expected[where]
    if actual.size == 0:
        return 0.0
    scale = max(float(np.max(np.abs(expected))), 1e-6)
    return float(np.max(np.abs(actual - expected))) / scale


def attention_cases(length, cells, seed=0):
    """Cells of the matrix at one length: fused (the backend's choice) vs explicit attention.

    Every cell runs both paths, forward and backward; on JAX all of them
    make one compiled program (compiling is what a GPU run spends its time
    on), each cell with its own copies of the inputs, so its gradients are
    its own.

    Args:
        length: int, query length (and key length).
        cells: list of `(kind, padded)`: kind "self", "causal" or "cross";
            padded pads rows to 3/4, 1/2 and 0 of the length.
        seed: int, seeds weights and inputs.

    Returns:
        A list of dicts, one per cell: `kind`, `length`, `padded`, `finite`
        (outputs and gradients of both paths), `output_error` and
        `gradient_error` (relative to the explicit path, at real query
        positions), and `padded_rows_zero` (padded queries output exactly
        zero).

    Example:

    >>> [row] = attention_cases(8, [("causal", True)])
    >>> row["finite"], row["output_error"] < OUTPUT_TOLERANCE
    (True, True)
    """
    from keras_transformer.layers import MultiHeadAttention

    rng = np.random.default_rng(seed)
    keras.utils.set_random_seed(seed)
    shape = (BATCH, length, D_MODEL)
    layers = {}
    for path, flash in (("fused", None), ("explicit", False)):
        layers[path] = MultiHeadAttention(
            NUM_HEADS, D_MODEL // NUM_HEADS, flash_attention=flash, dtype="mixed_bfloat16"
        )
        layers[path].build(shape, shape)
    weights = [ops.convert_to_numpy(w) for w in layers["fused"].trainable_variables]
    runs, inputs, cotangents = [], [], []
    for kind, padded in cells:
        query_lengths = padded_lengths_for(length, padded)
        source_lengths = query_lengths if kind != "cross" else query_lengths[::-1][1:] + [0]
        masks = {
            "query_mask": _row_mask(query_lengths, length) if padded else None,
            "value_mask": _row_mask(source_lengths, length) if padded else None,
            "use_causal_mask": kind == "causal",
        }
        real = _row_mask(query_lengths, length)
        cell_inputs = [rng.normal(size=shape).astype("float32") for _ in range(2 if kind == "cross" else 1)]
        cotangent = rng.normal(size=shape).astype("float32") * real[..., None]
        for path in ("fused", "explicit"):
            runs.append(dict(kind=kind, padded=padded, path=path, masks=masks, real=real,
                             first_input=len(inputs), num_inputs=len(cell_inputs)))
            inputs += cell_inputs
            cotangents.append(cotangent)

    def function(*arguments):
        tensors = arguments[: len(inputs)]
        run_cotangents = arguments[len(inputs): len(inputs) + len(runs)]
        variables = list(arguments[len(inputs) + len(runs):])
        total, outputs = 0.0, []
        for run, cotangent in zip(runs, run_cotangents):
            query, *source = tensors[run["first_input"]: run["first_input"] + run["num_inputs"]]
            output, _ = layers[run["path"]].stateless_call(
                variables, [], query, source[0] if source else query, **run["masks"]
            )
            output = ops.cast(output, "float32")
            total = total + ops.sum(output * cotangent)
            outputs.append(output)
        return total, outputs

    _, outputs, gradients = value_and_input_gradients(function, inputs, cotangents + weights)
    rows = []
    for i in range(0, len(runs), 2):
        fused_run, explicit_run = runs[i], runs[i + 1]
        fused, explicit = outputs[i], outputs[i + 1]

        def gradients_of(run):
            return gradients[run["first_input"]: run["first_input"] + run["num_inputs"]]

        arrays = [fused, explicit, *gradients_of(fused_run), *gradients_of(explicit_run)]
        real = fused_run["real"]
        rows.append({
            "kind": fused_run["kind"],
            "length": length,
            "padded": fused_run["padded"],
            "finite": all(bool(np.isfinite(a).all()) for a in arrays),
            "output_error": _relative_error(fused, explicit, real),
            "gradient_error": max(
                _relative_error(a, b) for a, b in zip(gradients_of(fused_run), gradients_of(explicit_run))
            ),
            "padded_rows_zero": bool(np.all(fused[~real] == 0)),
        })
    return rows


def raw_kernel_case(length, seed=0):
    """`keras.ops.dot_product_attention` itself, in bfloat16, with mask tensors.

    Which inputs make the backend's kernel (cuDNN on JAX, SDPA on torch,
    on a GPU) give NaN: a query row with no visible key (forward), and the
    backward pass with a key-padding mask where every row sees a key, at
    (query, key) lengths (L, L), (L, L + 8) and (L + 8, L), which tells a
    fault of the query length from one of the key length.

    Returns:
        A dict: `length`, `row_without_keys_finite` (that row's forward
        output), and `backward_finite` for each of "LxL", "Lx(L+8)",
        "(L+8)xL".
    """
    rng = np.random.default_rng(seed)
    heads, head_dim = NUM_HEADS, D_MODEL // NUM_HEADS

    def inputs(query_length, key_length):
        return [rng.normal(size=(BATCH, n, heads, head_dim)).astype("float32")
                for n in (query_length, key_length, key_length)]

    def attend(q, k, v, mask):
        q, k, v = (ops.cast(x, "bfloat16") for x in (q, k, v))
        outputs = ops.cast(ops.dot_product_attention(q, k, v, mask=mask), "float32")
        return ops.sum(outputs), outputs

    mask = np.ones((BATCH, 1, length, length), bool)
    mask[:, :, 0, :] = False  # query 0 sees no key
    _, outputs, _ = value_and_input_gradients(attend, inputs(length, length), [mask])
    row = {"length": length, "row_without_keys_finite": bool(np.isfinite(outputs[:, 0]).all())}
    for name, (query_length, key_length) in (
        ("LxL", (length, length)), ("Lx(L+8)", (length, length + 8)), ("(L+8)xL", (length + 8, length))
    ):
        key_mask = _row_mask(padded_lengths_for(key_length, True)[:-1] + [1], key_length)
        mask = np.broadcast_to(key_mask[:, None, None, :], (BATCH, 1, query_length, key_length)).copy()
        _, outputs, gradients = value_and_input_gradients(attend, inputs(query_length, key_length), [mask])
        row[f"backward_finite_{name}"] = all(bool(np.isfinite(g).all()) for g in gradients)
    return row


def check_attention(lengths=LENGTHS, kinds=KINDS, log=print):
    """Runs the attention matrix; returns `(ok, rows, raw_rows)`."""
    log(f"== attention: {len(lengths)} lengths x {len(kinds)} kinds x (unpadded, padded), "
        f"bf16, batch {BATCH}, d_model {D_MODEL}, {NUM_HEADS} heads ==")
    rows, failures = [], []
    start = time.time()
    for length in lengths:
        log(f"   length {length} ({time.time() - start:.0f} s)")
        for row in attention_cases(length, [(kind, padded) for kind in kinds for padded in (False, True)]):
            rows.append(row)
            bad = (not row["finite"] or row["output_error"] > OUTPUT_TOLERANCE
                   or row["gradient_error"] > GRADIENT_TOLERANCE or not row["padded_rows_zero"])
            if bad:
                failures.append(row)
                log(f"   FAIL {row['kind']} length {length} padded {row['padded']}: finite {row['finite']}, "
                    f"output error {row['output_error']:.3g}, gradient error {row['gradient_error']:.3g}, "
                    f"padded rows zero {row['padded_rows_zero']}")
    log(f"   layer: {len(rows) - len(failures)}/{len(rows)} cells finite and within tolerance; "
        f"worst output error {max(r['output_error'] for r in rows):.4f}, "
        f"worst gradient error {max(r['gradient_error'] for r in rows):.4f}")
    raw_rows = [raw_kernel_case(length) for length in lengths]
    for key in raw_rows[0]:
        if key != "length":
            bad = [r["length"] for r in raw_rows if not r[key]]
            log(f"   raw kernel, {key}: NaN at {len(bad)}/{len(raw_rows)} lengths {bad}")
    return not failures, rows, raw_rows


class _LossEvery(keras.callbacks.Callback):
    """Prints and keeps the loss of every virtual epoch (25 steps each)."""

    def __init__(self, steps_per_epoch, log):
        super().__init__()
        self.steps_per_epoch, self.log, self.curve = steps_per_epoch, log, []
        self.start = time.time()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        row = {"step": (epoch + 1) * self.steps_per_epoch, "loss": float(logs.get("loss", math.nan)),
               "dev_loss": float(logs.get("val_loss", math.nan)), "seconds": time.time() - self.start}
        self.curve.append(row)
        self.log(f"   step {row['step']:4d}  loss {row['loss']:.4f}  dev loss {row['dev_loss']:.4f}  "
                 f"({row['seconds']:.0f} s)")


def check_training(output, steps=300, steps_per_epoch=25, preset="base", log=print, **overrides):
    """Trains the preset in bfloat16 with the package's trainer; returns `(ok, curve, summary)`."""
    from keras_transformer.training.train_config import TrainConfig
    from keras_transformer.errors import UserInputError
    from keras_transformer.training.trainer import train_translator

    settings = dict(preset=preset, mixed_precision="bfloat16", epochs=steps // steps_per_epoch,
                    steps_per_epoch=steps_per_epoch)
    config = TrainConfig(output=output, **{**settings, **overrides})
    log(f"== train: preset {preset}, bfloat16, {steps} steps, {overrides or 'trainer defaults'} ==")
    callback = _LossEvery(steps_per_epoch, log)
    try:
        summary = train_translator(config, overwrite=True, verbose=0, log=lambda m: log(f"   {m}"),
                                   callbacks=[callback], sample_sentences=0)
    except UserInputError as error:
        log(f"   FAIL {error}")
        return False, callback.curve, {"error": str(error)}
    losses = [row["loss"] for row in callback.curve] + [row["dev_loss"] for row in callback.curve]
    finite = all(math.isfinite(x) for x in losses)
    falling = bool(callback.curve) and callback.curve[-1]["loss"] < callback.curve[0]["loss"]
    if not (finite and falling):
        log(f"   FAIL finite={finite} falling={falling}")
    return finite and falling, callback.curve, summary


def check_decoding(output, sentences=16, max_new_tokens=32, log=print):
    """Cached vs uncached greedy tokens of the model in `output`; returns `(ok, report)`."""
    from keras_transformer.data import corpus
    from keras_transformer.decoding import CachedDecoder
    from keras_transformer.decoding import greedy_search
    from keras_transformer.decoding import greedy_search_uncached
    from keras_transformer.translation.translator import Translator

    translator = Translator.from_directory(output)
    pairs = corpus.load_bible_pairs("dev")[:sentences]
    ids = [np.asarray(row).reshape(-1) for row in translator.tokenizer.tokenize([p.source for p in pairs])]
    sources = np.zeros((len(ids), max(map(len, ids))), "int32")
    for row, row_ids in zip(sources, ids):
        row[: len(row_ids)] = row_ids
    cached = greedy_search(CachedDecoder(translator.model), sources, max_new_tokens, stop_at_end=False)
    uncached = greedy_search_uncached(translator.model, sources, max_new_tokens, stop_at_end=False)
    same_rows = int(np.sum(np.all(cached == uncached, axis=1)))
    same_tokens = float(np.mean(cached == uncached))
    log(f"== decode: {sentences} dev sources, {max_new_tokens} greedy tokens ==")
    log(f"   cached = uncached: {same_rows}/{sentences} sequences, {same_tokens:.1%} of tokens")
    return same_rows == sentences, {"same_sequences": same_rows, "sentences": sentences,
                                    "same_tokens": same_tokens}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="folder for results.json and results.md")
    parser.add_argument("--checks", default="attention,train,decode",
                        help="comma-separated subset of attention,train,decode (default: all)")
    parser.add_argument("--lengths", help="comma-separated attention lengths (default: 8,16,...,256)")
    parser.add_argument("--steps", type=int, default=300, help="training steps (default: %(default)s)")
    parser.add_argument("--steps-per-epoch", type=int, default=25,
                        help="the losses are printed and checked after every this many steps (default: %(default)s)")
    parser.add_argument("--preset", default="base")
    parser.add_argument("--bucket-width", type=int, default=32,
                        help="padded lengths are multiples of it: 32 gives the 32/64/96/128 buckets "
                             "(few shapes for JAX to compile) (default: %(default)s)")
    parser.add_argument("--run-folder", help="training output folder (default: a temporary one)")
    parser.add_argument("--train-settings", default="",
                        help="field=value,... of TrainConfig for the training check, over the ones above "
                             "(e.g. batch_tokens=2048 on a GPU with less memory)")
    args = parser.parse_args(argv)
    if args.steps < 2 * args.steps_per_epoch:
        parser.error("--steps must be at least twice --steps-per-epoch: the check compares the first "
                     "and the last virtual epoch's loss")
    train_settings = parse_settings(args.train_settings, option="--train-settings")
    checks = args.checks.split(",")
    lengths = tuple(int(x) for x in args.lengths.split(",")) if args.lengths else LENGTHS
    print(f"backend {keras.backend.backend()}, keras {keras.__version__}, devices "
          f"{keras.distribution.list_devices() if keras.backend.backend() != 'torch' else _torch_device()}",
          flush=True)
    report, ok = {"backend": keras.backend.backend()}, True
    start = time.time()
    if "attention" in checks:
        passed, rows, raw_rows = check_attention(lengths)
        ok &= passed
        report["attention"] = {"passed": passed, "rows": rows, "raw_kernel": raw_rows,
                               "seconds": time.time() - start}
    output = args.run_folder or tempfile.mkdtemp(prefix="gpu-check-")
    if "train" in checks:
        began = time.time()
        passed, curve, summary = check_training(output, steps=args.steps, steps_per_epoch=args.steps_per_epoch,
                                                preset=args.preset,
                                                **{"bucket_width": args.bucket_width, **train_settings})
        ok &= passed
        report["train"] = {"passed": passed, "curve": curve, "summary": summary,
                           "seconds": time.time() - began}
    if "decode" in checks and os.path.exists(os.path.join(output, "model.keras")):
        passed, decode = check_decoding(output)
        ok &= passed
        report["decode"] = {"passed": passed, **decode}
    report["passed"], report["seconds"] = bool(ok), time.time() - start
    print(f"== gpu_check {'PASSED' if ok else 'FAILED'} in {report['seconds']:.0f} s ==", flush=True)
    if args.out:
        from benchmarks.report import save_results

        save_results(report, _markdown(report), args.out)
    return 0 if ok else 1


def _torch_device():
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def _markdown(report):
    lines = [f"# gpu_check, {report['backend']} backend: {'passed' if report['passed'] else 'FAILED'}", ""]
    if "attention" in report:
        rows = report["attention"]["rows"]
        lines += ["## attention (bf16; fused vs explicit path; relative max error at real positions)", "",
                  "| kind | padded | lengths | all finite | worst output error | worst gradient error |",
                  "|---|---|---|---|---:|---:|"]
        for kind in KINDS:
            for padded in (False, True):
                cell = [r for r in rows if r["kind"] == kind and r["padded"] == padded]
                if cell:
                    lines.append(
                        f"| {kind} | {padded} | {cell[0]['length']}..{cell[-1]['length']} | "
                        f"{sum(r['finite'] for r in cell)}/{len(cell)} | "
                        f"{max(r['output_error'] for r in cell):.4f} | {max(r['gradient_error'] for r in cell):.4f} |")
        raw = report["attention"]["raw_kernel"]
        lines += ["", "raw `keras.ops.dot_product_attention` in bf16 (what the layer guards against):", ""]
        for key in raw[0]:
            if key != "length":
                bad = [r["length"] for r in raw if not r[key]]
                lines.append(f"- {key}: NaN at {len(bad)}/{len(raw)} lengths {bad}")
        lines.append("")
    if "train" in report:
        lines += ["## train", "", "| step | loss | dev loss | seconds |", "|---:|---:|---:|---:|"]
        lines += [f"| {r['step']} | {r['loss']:.4f} | {r['dev_loss']:.4f} | {r['seconds']:.0f} |"
                  for r in report["train"]["curve"]]
        lines.append("")
    if "decode" in report:
        d = report["decode"]
        lines += [f"## decode: cached = uncached greedy tokens for {d['same_sequences']}/{d['sentences']} "
                  f"sequences ({d['same_tokens']:.1%} of tokens)", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
