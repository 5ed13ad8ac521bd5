"""What XLA makes of a training step: `KERAS_BACKEND=jax python -m benchmarks.xla_cost`.

Compiles (without running) the jitted Keras training step of a
`benchmarks.run` model (same build and compile: Adam, sparse cross-entropy
from logits) for one batch, and the encoder's forward pass that
`benchmarks.run` times as "encode", and reports for each:

- XLA's own totals: `compiled.cost_analysis()` (FLOPs, bytes accessed,
  transcendentals), next to the model FLOPs of
  `keras_transformer.model_flops` (matmuls only, see there);
- the optimized HLO (`compiled.as_text()`) sorted into categories, with the
  ops executed (while-loop bodies times their known trip count; on a GPU
  about one kernel launch each), FLOPs and bytes: dense matmuls, attention
  matmuls (dots with batch dimensions), fused attention kernels (cuDNN
  `fmha` custom-calls: flash attention), attention softmax and masks,
  logits and loss over the vocabulary, dropout RNG, the optimizer, layer
  norm, copies and transposes, collectives, host transfers and callbacks,
  other element-wise work (`categorize_hlo`, a pure function of the text);
- the dtypes of every matmul, as JAX asked for them (the HLO before XLA's
  passes) and as compiled: whether mixed precision reaches the matmuls;
- a roofline for a device (default one H100 SXM): every op costs
  max(FLOPs / peak, bytes / bandwidth), with bf16/f16 matmuls at
  `--peak-flops`, f32 matmuls at `--peak-flops-f32` (TF32 tensor cores)
  and everything else at the memory bandwidth alone.

A CPU compile shows what the program asks for (the ops, matmul dtypes,
RNG, the loss over the vocabulary) but not what a GPU runs: XLA's GPU
compiler fuses differently (cuBLAS / Triton matmuls, cuDNN attention
where it is chosen), so its categories, op counts and bytes differ. The
roofline of a CPU compile is a suggestion for the GPU, no more; run the
tool on the GPU for its own program.

    KERAS_BACKEND=jax python -m benchmarks.xla_cost --config small --seq-len 128 --batch-size 16 --out results_dir
    KERAS_BACKEND=jax python -m benchmarks.xla_cost --config base --seq-len 256 --batch-size 128 \\
        --mixed-precision bfloat16 --implementations keras_transformer keras_hub tutorial --out $OUT/xla-cost

The second command is the GPU table's base@256 shape (65,536 tokens a
step); on the device machines (no TensorFlow, Keras from wheels, see
benchmarks/README.md "The GPU check"):

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && \\
      PYTHONPATH=/tmp/site KERAS_BACKEND=jax python3 -m benchmarks.xla_cost --config base --seq-len 256 \\
      --batch-size 128 --mixed-precision bfloat16 --implementations keras_transformer keras_hub tutorial \\
      --time-calls 20 --save-hlo --out $OUT/xla-cost-base-256

`--time-calls N` also runs each compiled program N times on random tokens
and reports its median time without Keras' `fit`/`predict` around it:
set beside `benchmarks.run`'s tokens/s, the difference is host and
dispatch time.

Writes `results.json` (everything, with each program's HLO category table)
and `results.md` to `--out`, the optimized HLO of every program as
`IMPLEMENTATION-PROGRAM.hlo.txt` beside them (with `--save-hlo`), and
prints the tables.
"""

import argparse
import collections
import datetime
import os
import platform
import re
import sys
import time

import keras
import numpy as np

from benchmarks.reference_models import CONFIGS
from benchmarks.reference_models import IMPLEMENTATIONS
from benchmarks.reference_models import build_model
from benchmarks.reference_models import encoder_model
from benchmarks.report import save_results
from benchmarks.run import describe_device
from benchmarks.run import set_precision
from keras_transformer import model_flops

H100_BF16_FLOPS = 989e12  # dense bf16, SXM data sheet
H100_TF32_FLOPS = 494.5e12  # dense TF32, what XLA uses for f32 matmuls on the GPU by default
H100_BANDWIDTH = 3.35e12  # HBM3, SXM data sheet

# The categories, most specific first: a fusion takes the first category any
# of its ops falls into.
CATEGORIES = (
    "matmul (dense)",
    "matmul (attention)",
    "attention (fused kernel)",
    "host transfers and callbacks",
    "collectives",
    "dropout RNG",
    "optimizer",
    "logits and loss over the vocabulary",
    "layer norm",
    "attention (softmax, masks)",
    "copies and transposes",
    "other element-wise",
    "other",
)

# Ops that move no data and run no kernel of their own (control flow is
# counted through the computations it runs).
_BOOKKEEPING = {
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "call", "conditional",
    "after-all", "partition-id", "replica-id", "opt-barrier", "add-dependency", "domain",
}
_HOST = {"infeed", "outfeed", "send", "recv", "send-done", "recv-done"}
_COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                "collective-broadcast", "ragged-all-to-all")
_LAYOUT = {"copy", "transpose", "copy-start", "copy-done", "reshape", "broadcast", "slice", "concatenate", "pad",
           "dynamic-slice", "dynamic-update-slice", "gather", "scatter", "reverse", "iota"}
_ARITHMETIC = {
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "exponential", "exponential-minus-one", "log",
    "log-plus-one", "sqrt", "rsqrt", "cbrt", "power", "tanh", "logistic", "negate", "abs", "compare", "select",
    "erf", "sine", "cosine", "remainder", "and", "or", "xor", "not", "shift-left", "shift-right-logical",
    "shift-right-arithmetic", "clamp", "convert", "floor", "ceil", "round-nearest-even", "sign", "atan2",
}
_TRANSCENDENTAL = {"exponential", "exponential-minus-one", "log", "log-plus-one", "sqrt", "rsqrt", "cbrt", "power",
                   "tanh", "logistic", "erf", "sine", "cosine", "atan2"}
_RNG_NAMES = ("threefry", "random_bits", "_bernoulli", "_uniform", "rng_bit_generator", "random_")
_LOSS_NAMES = ("compile_loss", "crossentropy", "log_softmax", "logsumexp")
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
          "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "s4": 0.5, "u4": 0.5, "token": 0}
_ARRAY = re.compile(r"\b([a-z]+[0-9]*(?:e[0-9]m[0-9](?:fn|fnuz)?)?)\[([0-9,]*)\]")
_HEADER = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*(\(.*\))?\s*(->.*)?\{\s*$")


def _arrays(shape):
    """`(dtype, dims)` of every array in an HLO shape string (tuples flattened)."""
    return [(dtype, tuple(int(d) for d in dims.split(",") if d)) for dtype, dims in _ARRAY.findall(shape)]


def _bytes(shape):
    return sum(_BYTES.get(dtype, 1) * int(np.prod(dims, dtype=np.int64)) for dtype, dims in _arrays(shape))


def _elements(shape):
    return sum(int(np.prod(dims, dtype=np.int64)) for _, dims in _arrays(shape))


def _closing(text, start):
    """Index just past the bracket that closes the one at `text[start]`."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    depth, quote = 0, False
    for i in range(start, len(text)):
        c = text[i]
        if c == '"' and text[i - 1] != "\\":
            quote = not quote
        elif quote:
            continue
        elif c in pairs:
            depth += 1
        elif c in pairs.values():
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _split_top(text):
    """`text` split at commas outside brackets and quotes."""
    parts, depth, quote, current = [], 0, False, []
    for c in text:
        if c == '"':
            quote = not quote
        if not quote:
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif c == "," and depth == 0:
                parts.append("".join(current).strip())
                current = []
                continue
        current.append(c)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def _instruction(line):
    """One HLO instruction line as a dict, or None for anything else."""
    body = line.strip()
    if body.startswith("ROOT "):
        body = body[5:]
    if " = " not in body:
        return None
    name, rest = body.split(" = ", 1)
    if rest.startswith("("):
        end = _closing(rest, 0)
    else:
        end = rest.find(" ")
    if end <= 0:
        return None
    shape, rest = rest[:end], rest[end:].lstrip()
    match = re.match(r"([a-z][\w\-$]*)\(", rest)
    if not match:
        return None
    opcode = match.group(1)
    close = _closing(rest, match.end() - 1)
    operands = [] if opcode in ("parameter", "constant") else [
        part.split()[-1].lstrip("%") for part in _split_top(rest[match.end():close - 1]) if part.split()]
    attributes = {}
    for part in _split_top(rest[close:].lstrip(", ")):
        if "=" in part:
            key, value = part.split("=", 1)
            attributes[key.strip()] = value.strip()
    op_name = re.search(r'op_name="([^"]*)"', attributes.get("metadata", ""))
    return dict(name=name.strip().lstrip("%"), shape=shape, opcode=opcode, operands=operands,
                attributes=attributes, op_name=op_name.group(1) if op_name else "")


def parse_hlo_module(text):
    """The computations of an HLO module's text.

    Reads both XLA's optimized text (`compiled.as_text()`) and the HLO JAX
    hands to XLA (`lowered.as_text(dialect="hlo")`).

    Args:
        text: str, an HLO module.

    Returns:
        `(computations, entry)`: dict from computation name to its list of
        instruction dicts (`name`, `shape`, `opcode`, `operands`,
        `attributes`, `op_name`), and the entry computation's name.

    Example:

    >>> computations, entry = parse_hlo_module('''
    ... ENTRY %main (p: f32[2,3]) -> f32[2,2] {
    ...   %p = f32[2,3]{1,0} parameter(0)
    ...   ROOT %d = f32[2,2]{1,0} dot(%p, %p), lhs_contracting_dims={1}, rhs_contracting_dims={1}
    ... }''')
    >>> entry, [(i["name"], i["opcode"], i["operands"]) for i in computations[entry]]
    ('main', [('p', 'parameter', []), ('d', 'dot', ['p', 'p'])])
    """
    computations, entry, current = {}, None, None
    for line in text.splitlines():
        stripped = line.strip()
        if current is None:
            header = _HEADER.match(stripped)
            if header and not stripped.startswith("HloModule"):
                current = header.group(2)
                computations[current] = []
                if header.group(1):
                    entry = current
            continue
        if stripped == "}":
            current = None
            continue
        instruction = _instruction(stripped)
        if instruction:
            computations[current].append(instruction)
    return computations, entry


def _dims(attribute):
    return [int(d) for d in attribute.strip("{}").split(",") if d.strip()]


def _dot_flops(instruction, shapes):
    """2 x output elements x contracted size of a dot (None for other ops)."""
    lhs = _arrays(shapes.get(instruction["operands"][0], "")) if instruction["operands"] else []
    if not lhs:
        return None
    contracted = int(np.prod([lhs[0][1][d] for d in _dims(instruction["attributes"].get("lhs_contracting_dims", ""))],
                             dtype=np.int64))
    return 2 * _elements(instruction["shape"]) * contracted


def _dot_dtypes(instruction, shapes):
    operands = [(_arrays(shapes.get(name, "")) or [("?", ())])[0][0] for name in instruction["operands"][:2]]
    output = (_arrays(instruction["shape"]) or [("?", ())])[0][0]
    return f"{' x '.join(operands)} -> {output}"


def _is_matmul(instruction):
    target = instruction["attributes"].get("custom_call_target", "").lower()
    return instruction["opcode"] in ("dot", "convolution") or (
        instruction["opcode"] == "custom-call" and any(k in target for k in ("gemm", "matmul", "conv")))


def _is_fused_attention(instruction):
    target = instruction["attributes"].get("custom_call_target", "").lower()
    return instruction["opcode"] == "custom-call" and "cudnn" in target and any(
        k in target for k in ("fmha", "fused_attention", "flash"))


def _segments(op_name):
    return [segment for segment in re.split(r"[/;()]", op_name) if segment]


def _own_category(instruction, vocabulary_size, optimizer_name):
    """The category of one op by itself (no fused computation looked into)."""
    opcode, op_name = instruction["opcode"], instruction["op_name"]
    target = instruction["attributes"].get("custom_call_target", "").lower()
    if _is_matmul(instruction):
        return "matmul (attention)" if "lhs_batch_dims" in instruction["attributes"] else "matmul (dense)"
    if _is_fused_attention(instruction):
        return "attention (fused kernel)"
    if opcode in _HOST or (opcode == "custom-call" and ("callback" in target or "host" in target)):
        return "host transfers and callbacks"
    if any(opcode.startswith(name) for name in _COLLECTIVES):
        return "collectives"
    if opcode in ("rng", "rng-bit-generator", "rng-get-and-update-state") or "threefry" in target or any(
            name in op_name for name in _RNG_NAMES):
        return "dropout RNG"
    segments = _segments(op_name)
    if optimizer_name in segments:
        return "optimizer"
    outputs = [dims for _, dims in _arrays(instruction["shape"])]
    if any(name in op_name for name in _LOSS_NAMES) or (
            vocabulary_size and any(len(dims) >= 2 and dims[-1] == vocabulary_size for dims in outputs)):
        return "logits and loss over the vocabulary"
    if any(segment.endswith("norm") for segment in segments):
        return "layer norm"
    if any("attention" in segment for segment in segments):
        return "attention (softmax, masks)"
    if opcode in _LAYOUT:
        return "copies and transposes"
    if opcode in _ARITHMETIC or opcode in ("reduce", "reduce-window", "select-and-scatter", "map", "sort"):
        return "other element-wise"
    return "other"


def categorize_hlo(text, vocabulary_size=None, optimizer_name="adam"):
    """Sorts the ops an HLO module executes into `CATEGORIES`.

    Every op of the entry computation and of the computations it runs
    (while bodies and conditions, times their known trip count; calls;
    conditional branches) is counted once per execution; bookkeeping ops
    (parameters, tuples, bitcasts...) are not. A fusion is one op, in the
    first category (in `CATEGORIES` order) of any op inside it; its bytes
    are its operands' and output's sizes (what a fused kernel reads and
    writes, an upper bound where it reads a slice), its FLOPs those of the
    ops inside. Matmul FLOPs are 2 x output elements x contracted size;
    element-wise ops count one FLOP per output element.

    Args:
        text: str, an HLO module (optimized or not).
        vocabulary_size: int or None; an op whose output's last dimension
            is this (rank >= 2) is counted with the loss over the
            vocabulary, as are ops under the loss's name scopes.
        optimizer_name: str, the optimizer's name scope. Defaults to
            `"adam"` (Keras' default name for Adam).

    Returns:
        dict with `categories` (name -> `ops`, `flops`, `bytes`,
        `transcendentals`), `matmul_dtypes` (`"bf16 x bf16 -> f32"` ->
        count, FLOPs), `fused_attention_targets` (custom-call target ->
        count), `while_loops` (executed loops and their trip counts) and
        `unknown_trip_counts`.

    Example:

    >>> report = categorize_hlo('''
    ... %fused (a: bf16[4,8], b: bf16[8,16]) -> f32[4,16] {
    ...   %a = bf16[4,8]{1,0} parameter(0)
    ...   %b = bf16[8,16]{1,0} parameter(1)
    ...   ROOT %dot.1 = f32[4,16]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
    ... }
    ... ENTRY %main (x: bf16[4,8], w: bf16[8,16]) -> f32[4,16] {
    ...   %x = bf16[4,8]{1,0} parameter(0)
    ...   %w = bf16[8,16]{1,0} parameter(1)
    ...   %f = f32[4,16]{1,0} fusion(%x, %w), kind=kOutput, calls=%fused
    ...   ROOT %e = f32[4,16]{1,0} exponential(%f), metadata={op_name="jit(step)/compile_loss/log_softmax/exp"}
    ... }''', vocabulary_size=16)
    >>> report["categories"]["matmul (dense)"]
    {'ops': 1, 'flops': 1024, 'bytes': 576, 'transcendentals': 0}
    >>> report["categories"]["logits and loss over the vocabulary"]["transcendentals"]
    64
    >>> report["matmul_dtypes"]
    {'bf16 x bf16 -> f32': {'ops': 1, 'flops': 1024}}
    """
    computations, entry = parse_hlo_module(text)
    shapes = {}
    for instructions in computations.values():
        for instruction in instructions:
            shapes[instruction["name"]] = instruction["shape"]
    categories = {name: dict(ops=0, flops=0, bytes=0, transcendentals=0) for name in CATEGORIES}
    matmul_dtypes = collections.defaultdict(lambda: dict(ops=0, flops=0))
    attention_targets = collections.Counter()
    loops, unknown = [], []

    def inner_cost(instructions):
        flops = transcendentals = 0
        for op in instructions:
            if _is_matmul(op):
                flops += _dot_flops(op, shapes) or 0
            elif op["opcode"] in _ARITHMETIC:
                flops += _elements(op["shape"])
                transcendentals += _elements(op["shape"]) if op["opcode"] in _TRANSCENDENTAL else 0
            elif op["opcode"] == "reduce":
                flops += _elements(shapes.get(op["operands"][0], "")) if op["operands"] else 0
        return flops, transcendentals

    def fused(instruction):
        called = instruction["attributes"].get("calls", "").lstrip("%")
        return computations.get(called, [])

    def walk(name, times, seen):
        if name not in computations or name in seen:
            return
        for instruction in computations[name]:
            opcode, attributes = instruction["opcode"], instruction["attributes"]
            if opcode == "while":
                trip = re.search(r'"known_trip_count":\{"n":"([0-9]+)"', attributes.get("backend_config", ""))
                count = int(trip.group(1)) if trip else 1
                loops.append(dict(op_name=instruction["op_name"], trip_count=count if trip else None))
                if not trip:
                    unknown.append(instruction["name"])
                for key in ("body", "condition"):
                    walk(attributes.get(key, "").lstrip("%"), times * count, seen | {name})
                continue
            if opcode in ("call", "async-start"):
                walk((attributes.get("to_apply") or attributes.get("calls", "")).lstrip("%"), times, seen | {name})
                continue
            if opcode == "conditional":
                for branch in re.findall(r"%?([\w.\-]+)", attributes.get("branch_computations", "")):
                    walk(branch, times, seen | {name})
                continue
            if opcode in _BOOKKEEPING or opcode == "async-done":
                continue
            inside = fused(instruction) if opcode == "fusion" else [instruction]
            own = [_own_category(op, vocabulary_size, optimizer_name) for op in inside
                   if op["opcode"] not in _BOOKKEEPING]
            if opcode == "fusion":
                own.append(_own_category(instruction, vocabulary_size, optimizer_name))
            category = min(own, key=CATEGORIES.index) if own else "other"
            flops, transcendentals = inner_cost(inside)
            data = _bytes(instruction["shape"]) + sum(_bytes(shapes.get(o, "")) for o in instruction["operands"])
            entry_ = categories[category]
            entry_["ops"] += times
            entry_["flops"] += times * flops
            entry_["bytes"] += times * data
            entry_["transcendentals"] += times * transcendentals
            for op in inside:
                if _is_matmul(op):
                    dtypes = matmul_dtypes[_dot_dtypes(op, shapes)]
                    dtypes["ops"] += times
                    dtypes["flops"] += times * (_dot_flops(op, shapes) or 0)
                if _is_fused_attention(op):
                    attention_targets[op["attributes"]["custom_call_target"].strip('"')] += times

    walk(entry, 1, frozenset())
    return dict(
        categories={name: value for name, value in categories.items() if value["ops"]},
        matmul_dtypes=dict(matmul_dtypes),
        fused_attention_targets=dict(attention_targets),
        while_loops=loops,
        unknown_trip_counts=unknown,
    )


def roofline(categories, matmul_dtypes=None, peak_flops=H100_BF16_FLOPS, peak_flops_f32=H100_TF32_FLOPS,
             bandwidth=H100_BANDWIDTH):
    """Seconds per category on a device that reaches its peaks: max(FLOPs / peak, bytes / bandwidth).

    Matmul categories run at `peak_flops`, scaled down by the share of
    their FLOPs in f32 matmuls (which run at `peak_flops_f32`); the rest is
    memory-bound: bytes / bandwidth.

    Args:
        categories: dict from `categorize_hlo(...)["categories"]`.
        matmul_dtypes: dict from `categorize_hlo(...)["matmul_dtypes"]`,
            or None (all matmuls at `peak_flops`).
        peak_flops: float, FLOP/s of bf16/f16 matmuls. Defaults to an
            H100 SXM's dense bf16 989e12.
        peak_flops_f32: float, FLOP/s of f32 matmuls. Defaults to the
            H100 SXM's dense TF32 494.5e12.
        bandwidth: float, memory bytes/s. Defaults to the H100 SXM's 3.35e12.

    Returns:
        dict: category -> dict(seconds, bound) with bound `"compute"` or
        `"memory"`.

    Example:

    >>> roofline({"matmul (dense)": {"flops": 989e9, "bytes": 1e9}, "other": {"flops": 0, "bytes": 3.35e9}})
    {'matmul (dense)': {'seconds': 0.001, 'bound': 'compute'}, 'other': {'seconds': 0.001, 'bound': 'memory'}}
    """
    total = sum(value["flops"] for value in (matmul_dtypes or {}).values())
    f32 = sum(value["flops"] for key, value in (matmul_dtypes or {}).items() if key.startswith("f32"))
    share = f32 / total if total else 0.0
    rate = 1.0 / ((1 - share) / peak_flops + share / peak_flops_f32)
    out = {}
    for name, value in categories.items():
        compute = value["flops"] / rate if name.startswith("matmul") or name == "attention (fused kernel)" else 0.0
        memory = value["bytes"] / bandwidth
        out[name] = dict(seconds=round(max(compute, memory), 9), bound="compute" if compute > memory else "memory")
    return out


def _cost_analysis(compiled):
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):  # older JAX: one dict per device
        cost = cost[0] if cost else {}
    keys = ("flops", "bytes accessed", "transcendentals", "optimal_seconds")
    return {key: float(cost[key]) for key in keys if key in (cost or {})}


def _abstract(variables):
    import jax

    return [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in variables]


def time_compiled(compiled, state, data, calls, feeds_state=True):
    """Median seconds of one call of a compiled step, on the device, without Keras around it.

    The first call is a warm-up; with `feeds_state`, the state a call
    returns feeds the next (the training step donates its state); every
    call waits for its outputs. Set beside `benchmarks.run`'s tokens/s (through `fit` and
    `predict`), the difference is host and dispatch time.

    Args:
        compiled: a `jax.stages.Compiled` taking `(state, data)` and
            returning `(outputs, state)`.
        state: its first argument, concrete arrays.
        data: its second argument, concrete arrays.
        calls: int, timed calls.
        feeds_state: bool, whether the second output is the next call's
            state (a training step) or not (`predict_step` returns the
            non-trainable variables only). Defaults to True.

    Returns:
        list of float, the seconds of each timed call.
    """
    import jax

    seconds = []
    for i in range(calls + 1):
        started = time.perf_counter()
        outputs, new_state = compiled(state, data)
        jax.block_until_ready((outputs, new_state))
        if feeds_state:
            state = new_state
        if i:
            seconds.append(time.perf_counter() - started)
    return seconds


def _concrete_tokens(args, vocabulary_size):
    rng = np.random.default_rng(args.seed)
    return rng.integers(4, vocabulary_size, size=(args.batch_size, args.seq_len)).astype("int32")


def _program_report(lowered, compiled, seconds, vocabulary_size, model_flops_count, args, hlo_path=None):
    import jax

    on_cpu = jax.devices()[0].platform == "cpu"
    optimized = compiled.as_text()
    if hlo_path:
        with open(hlo_path, "w") as f:
            f.write(optimized)
    report = categorize_hlo(optimized, vocabulary_size)
    requested = categorize_hlo(lowered.as_text(dialect="hlo"), vocabulary_size)
    xla = _cost_analysis(compiled)
    return dict(
        compile_seconds=round(seconds, 2),
        xla_cost_analysis=xla,
        model_flops=model_flops_count,
        xla_over_model_flops=xla["flops"] / model_flops_count if xla.get("flops") and model_flops_count else None,
        categories=report["categories"],
        # XLA's CPU compiler turns bf16 matmuls into f32 ones, a GPU's keeps them: on a CPU, the matmul
        # rate comes from the dtypes JAX asked for.
        roofline=roofline(report["categories"], requested["matmul_dtypes"] if on_cpu else report["matmul_dtypes"],
                          args.peak_flops, args.peak_flops_f32, args.bandwidth),
        roofline_matmul_dtypes="requested" if on_cpu else "compiled",
        matmul_dtypes_compiled=report["matmul_dtypes"],
        matmul_dtypes_requested=requested["matmul_dtypes"],
        fused_attention_targets=report["fused_attention_targets"],
        while_loops=len(report["while_loops"]),
        while_loop_iterations=sum(loop["trip_count"] or 1 for loop in report["while_loops"]),
        unknown_trip_counts=len(report["unknown_trip_counts"]),
    )


def analyze_implementation(implementation, args, log=print):
    """Compiles one implementation's training step and encoder forward pass and analyses both.

    Args:
        implementation: one of `benchmarks.reference_models.IMPLEMENTATIONS`.
        args: the parsed command line (`parse_args`).
        log: function printing progress.

    Returns:
        dict: `parameters`, and `train` and `encode` reports (see
        `results.json`: XLA's cost analysis, model FLOPs, categories,
        roofline, matmul dtypes).

    Example:

    >>> report = analyze_implementation("keras_transformer", parse_args(
    ...     ["--config", "quick", "--seq-len", "8", "--batch-size", "2", "--programs", "encode"]), log=lambda _: None)
    >>> report["encode"]["categories"]["matmul (dense)"]["ops"] > 0
    True
    """
    import jax

    config = CONFIGS[args.config]
    keras.utils.set_random_seed(args.seed)
    set_precision(args)  # for every model: the clear_session() after each one resets the policy
    model = build_model(implementation, config, args.seq_len, args.dropout)
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tokens = jax.ShapeDtypeStruct((args.batch_size, args.seq_len), "int32")
    vocabulary_size = config["vocabulary_size"]
    result = dict(implementation=implementation,
                  parameters=int(sum(np.prod(w.shape) for w in model.trainable_weights)))
    safe = implementation.replace("/", "_")
    if "train" in args.programs:
        model.optimizer.build(model.trainable_variables)
        state = tuple(_abstract(variables) for variables in (
            model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
            model.metrics_variables))
        data = ({"encoder_tokens": tokens, "decoder_tokens": tokens}, tokens)
        started = time.perf_counter()
        # What Keras' JAX trainer compiles for `fit` (make_train_function).
        lowered = jax.jit(model.train_step, donate_argnums=0).lower(state, data)
        compiled = lowered.compile()
        seconds = time.perf_counter() - started
        log(f"  {implementation}: training step compiled in {seconds:.1f} s")
        train_flops = model_flops.training_flops(
            config["num_layers"], config["num_decoder_layers"], config["d_model"], config["ff_dim"],
            vocabulary_size, args.seq_len, args.seq_len, args.batch_size)
        result["train"] = _program_report(
            lowered, compiled, seconds, vocabulary_size, train_flops, args,
            os.path.join(args.out, f"{safe}-train.hlo.txt") if args.save_hlo else None)
        if args.time_calls:
            concrete = _concrete_tokens(args, vocabulary_size)
            # Copies: the step donates its state, and the encoder below reads the same weights.
            state = tuple([jax.numpy.copy(v.value) for v in variables] for variables in (
                model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
                model.metrics_variables))
            times = time_compiled(compiled, state, ({"encoder_tokens": concrete, "decoder_tokens": concrete},
                                                    concrete), args.time_calls)
            result["train"]["timed"] = _timed(times, 2 * args.batch_size * args.seq_len, train_flops)
            log(f"  {implementation}: training step {result['train']['timed']['seconds']:.4f} s a call")
    if "encode" in args.programs:
        encoder = encoder_model(model)
        state = (_abstract(encoder.trainable_variables), _abstract(encoder.non_trainable_variables))
        started = time.perf_counter()
        # What `predict` compiles (make_predict_function), without its state plumbing.
        lowered = jax.jit(encoder.predict_step).lower(state, (tokens,))
        compiled = lowered.compile()
        seconds = time.perf_counter() - started
        log(f"  {implementation}: encoder forward pass compiled in {seconds:.1f} s")
        # One forward pass of the encoder stack: the encoder part of `forward_flops`.
        encode_flops = args.batch_size * model_flops.forward_flops(
            config["num_layers"], 0, config["d_model"], config["ff_dim"], 0, args.seq_len, 0)
        result["encode"] = _program_report(
            lowered, compiled, seconds, None, encode_flops, args,
            os.path.join(args.out, f"{safe}-encode.hlo.txt") if args.save_hlo else None)
        if args.time_calls:
            state = ([v.value for v in encoder.trainable_variables], [v.value for v in encoder.non_trainable_variables])
            times = time_compiled(compiled, state, (_concrete_tokens(args, vocabulary_size),), args.time_calls,
                                  feeds_state=False)
            result["encode"]["timed"] = _timed(times, args.batch_size * args.seq_len, encode_flops)
            log(f"  {implementation}: encoder forward pass {result['encode']['timed']['seconds']:.4f} s a call")
    del model
    keras.backend.clear_session()
    return result


def _timed(times, tokens, flops):
    import statistics

    seconds = statistics.median(times)
    peak = model_flops.peak_flops(model_flops.accelerator_name())
    return dict(seconds=seconds, seconds_repeats=[round(t, 6) for t in times], tokens_per_second=tokens / seconds,
                model_flops_per_second=flops / seconds,
                mfu=model_flops.model_flops_utilization(flops, seconds, peak))


def _number(value, unit=""):
    if value is None:
        return "-"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:,.2f} {prefix}{unit}".rstrip()
    return f"{value:,.0f} {unit}".rstrip()


def program_table(program):
    """The Markdown category table of one program's report.

    Args:
        program: dict, a `train` or `encode` report of `analyze_implementation`.

    Returns:
        str.

    Example:

    >>> program = {"categories": {"other": {"ops": 2, "flops": 0, "bytes": 3.35e9, "transcendentals": 0}},
    ...            "roofline": {"other": {"seconds": 0.001, "bound": "memory"}}}
    >>> print(program_table(program).splitlines()[2])
    | other | 2 | 0 | 3.35 GB | 1,000.0 | 100.0 % | memory |
    """
    total = sum(value["seconds"] for value in program["roofline"].values()) or 1.0
    lines = ["| category | ops executed | FLOPs | bytes | roofline µs | share | bound |",
             "|---|---:|---:|---:|---:|---:|---|"]
    order = sorted(program["categories"], key=lambda name: -program["roofline"][name]["seconds"])
    for name in order:
        value, line = program["categories"][name], program["roofline"][name]
        lines.append(f"| {name} | {value['ops']:,} | {_number(value['flops'])} | {_number(value['bytes'], 'B')} | "
                     f"{line['seconds'] * 1e6:,.1f} | {line['seconds'] / total:.1%} | {line['bound']} |"
                     .replace("%", " %"))
    ops = sum(value["ops"] for value in program["categories"].values())
    lines.append(f"| **all** | {ops:,} | {_number(sum(v['flops'] for v in program['categories'].values()))} | "
                 f"{_number(sum(v['bytes'] for v in program['categories'].values()), 'B')} | {total * 1e6:,.1f} | "
                 "100.0 % | |")
    return "\n".join(lines)


def markdown_report(report):
    """The whole report as Markdown: settings, then per implementation and program the totals and table.

    Args:
        report: dict written to `results.json` by `run`.

    Returns:
        str.
    """
    meta = report["meta"]
    device = meta["device"]
    lines = [
        f"XLA's view of `{meta['config']}` at sequence length {meta['seq_len']}, batch {meta['batch_size']} "
        f"({meta['precision']}), compiled on {device['name']} (JAX {device['backend_version']}, "
        f"Keras {meta['keras']}); roofline on a device of {meta['peak_flops'] / 1e12:,.1f} TFLOP/s (bf16 matmuls), "
        f"{meta['peak_flops_f32'] / 1e12:,.1f} TFLOP/s (f32 matmuls), {meta['bandwidth'] / 1e12:,.2f} TB/s.",
        "",
    ]
    if device["accelerator"] is None:
        lines += ["**Compiled for a CPU**: XLA's GPU compiler fuses differently (cuBLAS/Triton matmuls, cuDNN "
                  "attention where chosen), so the op counts, bytes and roofline below only suggest what a GPU "
                  "would run.", ""]
    for result in report["results"]:
        for program in ("train", "encode"):
            if program not in result:
                continue
            data = result[program]
            xla = data["xla_cost_analysis"]
            tokens = meta["batch_size"] * meta["seq_len"] * (2 if program == "train" else 1)
            roof = sum(value["seconds"] for value in data["roofline"].values())
            title = "training step" if program == "train" else "encoder forward pass"
            lines += [
                f"### {result['implementation']}: {title}",
                "",
                f"Compiled in {data['compile_seconds']:.1f} s. XLA: {_number(xla.get('flops'))} FLOPs "
                f"({data['xla_over_model_flops'] or 0:.2f}x the model FLOPs, {_number(data['model_flops'])}), "
                f"{_number(xla.get('bytes accessed'), 'B')} accessed, "
                f"{_number(xla.get('transcendentals'))} transcendentals. Roofline: {roof * 1e3:,.2f} ms "
                f"({tokens / roof if roof else 0:,.0f} tokens/s, {tokens:,} tokens); at the model FLOPs alone "
                f"{data['model_flops'] / meta['peak_flops'] * 1e3:,.3f} ms. "
                f"While loops executed: {data['while_loops']} ({data['while_loop_iterations']} iterations).",
                "",
            ]
            if "timed" in data:
                timed = data["timed"]
                lines += [
                    f"Timed on {device['name']}, the compiled program alone ({len(timed['seconds_repeats'])} calls, "
                    f"median): {timed['seconds'] * 1e3:,.2f} ms a call, {timed['tokens_per_second']:,.0f} tokens/s, "
                    f"{_number(timed['model_flops_per_second'])}FLOP/s of model FLOPs"
                    + (f", MFU {timed['mfu']:.1%}" if timed["mfu"] is not None else "") + ".",
                    "",
                ]
            lines += [
                program_table(data),
                "",
                "Matmuls by dtype (operands -> output): as compiled "
                + ", ".join(f"{key}: {value['ops']} ({_number(value['flops'])}FLOPs)"
                            for key, value in data["matmul_dtypes_compiled"].items())
                + "; as JAX asked (before XLA's passes) "
                + ", ".join(f"{key}: {value['ops']} ({_number(value['flops'])}FLOPs)"
                            for key, value in data["matmul_dtypes_requested"].items()) + ".",
                "",
                "Fused attention (cuDNN) kernels: "
                + (", ".join(f"`{key}` x {value}" for key, value in data["fused_attention_targets"].items())
                   or "none (no flash attention in this program)") + ".",
                "",
            ]
    return "\n".join(lines)


def parse_args(argv=None):
    """The command line of `python -m benchmarks.xla_cost`.

    Example:

    >>> args = parse_args(["--config", "quick", "--batch-size", "2"])
    >>> args.seq_len, args.implementations, args.peak_flops
    (128, ['keras_transformer'], 989000000000000.0)
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.xla_cost", description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small", help="(default: %(default)s)")
    parser.add_argument("--seq-len", type=int, default=128, help="source and target length (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=16, help="(default: %(default)s)")
    parser.add_argument("--mixed-precision", choices=("bfloat16", "float16"),
                        help="Keras' mixed_<dtype> policy (default: float32)")
    parser.add_argument("--implementations", nargs="+", choices=IMPLEMENTATIONS, default=["keras_transformer"],
                        help="(default: %(default)s)")
    parser.add_argument("--programs", nargs="+", choices=("train", "encode"), default=["train", "encode"],
                        help="(default: %(default)s)")
    parser.add_argument("--dropout", type=float, default=0.1, help="(default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    parser.add_argument("--peak-flops", type=float, default=H100_BF16_FLOPS,
                        help="bf16 matmul FLOP/s of the roofline's device (default: H100 SXM, %(default)s)")
    parser.add_argument("--peak-flops-f32", type=float, default=H100_TF32_FLOPS,
                        help="f32 matmul FLOP/s (default: H100 SXM TF32, %(default)s)")
    parser.add_argument("--bandwidth", type=float, default=H100_BANDWIDTH,
                        help="memory bytes/s (default: H100 SXM, %(default)s)")
    parser.add_argument("--time-calls", type=int, default=0,
                        help="also run each compiled program this many times (after one warm-up) on random tokens "
                             "and report the median, without Keras' fit/predict around it (default: %(default)s, "
                             "compile only)")
    parser.add_argument("--threads", type=int, help="CPU threads for XLA (default: its own)")
    parser.add_argument("--save-hlo", action="store_true", help="also write each program's optimized HLO text")
    parser.add_argument("--out", default="benchmark_results/xla_cost", help="(default: %(default)s)")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def run(args, log=print):
    """Analyses every implementation, writes `results.json` and `results.md`, returns the report.

    Args:
        args: from `parse_args`.
        log: function printing progress.

    Returns:
        dict, the report written to `results.json`.
    """
    if keras.backend.backend() != "jax":
        raise RuntimeError("benchmarks.xla_cost reads XLA's compiled program through JAX: "
                           "run it with KERAS_BACKEND=jax.")
    if args.threads:
        from benchmarks.run import limit_threads

        limit_threads(args.threads)
    policy = keras.config.dtype_policy().name
    os.makedirs(args.out, exist_ok=True)
    try:
        results = [analyze_implementation(implementation, args, log) for implementation in args.implementations]
    finally:
        keras.config.set_dtype_policy(policy)
    report = dict(
        meta=dict(
            date=datetime.datetime.now().isoformat(timespec="seconds"),
            arguments=args.argv,
            device=describe_device(),
            keras=keras.__version__,
            python=platform.python_version(),
            config=args.config,
            config_values=CONFIGS[args.config],
            seq_len=args.seq_len,
            batch_size=args.batch_size,
            precision=f"mixed_{args.mixed_precision}" if args.mixed_precision else "float32",
            dropout=args.dropout,
            peak_flops=args.peak_flops,
            peak_flops_f32=args.peak_flops_f32,
            bandwidth=args.bandwidth,
            xla_flags=os.environ.get("XLA_FLAGS", ""),
        ),
        results=results,
    )
    table = markdown_report(report)
    save_results(report, table, args.out)
    return report


def main(argv=None):
    """Entry point of `python -m benchmarks.xla_cost`; prints the tables.

    Args:
        argv: list of str, or None for `sys.argv[1:]`.

    Returns:
        0.
    """
    args = parse_args(argv)
    report = run(args, log=lambda text: print(text, flush=True))
    print(markdown_report(report))
    print(f"written to {os.path.join(args.out, 'results.json')} and results.md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
