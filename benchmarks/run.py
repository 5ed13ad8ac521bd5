"""Speed and memory of this package against KerasHub's layers and a tutorial-style model.

    python -m benchmarks.run --config small --seq-len 128 --repeats 5 --out results_dir
    python -m benchmarks.run --quick --out /tmp/bench          # tiny config, 2 repeats: a smoke test
    KERAS_BACKEND=jax python -m benchmarks.run --config big --seq-len 512 --mixed-precision bfloat16 --jit-compile

The same encoder-decoder configuration is built three ways
(`benchmarks.reference_models`) and timed on the same synthetic batches
(random token ids, no padding, so every implementation does the same work).
All three share one process, or, with `--process-per-implementation` (the
default where a GPU is visible), each has its own (`benchmarks.per_process`)
and the results are merged: two big models do not fit on one GPU together.
Each phase warms every implementation up first (tracing, compilation: never
timed), then times them round-robin, one repeat of each before the next
repeat of any, so a slow moment of a shared machine hits all of them alike.
Every repeat records wall time and the process's CPU time; medians of the
wall time are the headline, and on a CPU a second table uses the median CPU
time, which other processes on a shared machine barely change (exactly so
with `--threads 1`).

- training: `model.fit` steps (forward, backward, Adam update) on
  fixed-shape batches fed by `tf.data` (NumPy arrays when TensorFlow is not
  installed). A repeat is one epoch of `--steps` steps, timed from the
  epoch's start to its end (the end reads the loss, so asynchronous devices
  are synchronized). tokens/s counts source + target tokens.
- encoder inference: `predict` on the encoder half with its outputs
  summed over the features on the device, tokens/s; and `predict` of the
  whole outputs ("outputs to host"), which Keras copies to the host and
  concatenates with NumPy (on JAX all batches' at the end of the call).
- greedy decoding of `--new-tokens` tokens for `--decode-batch` sources:
  this package's `CachedDecoder` (KV cache) and KerasHub's own KV cache,
  each in the package's one decoding loop (`greedy_search`: one
  `keras.ops.while_loop`, compiled with XLA unless `--no-jit-compile`, and always on JAX); and
  for all three the uncached loop that re-runs the whole model on the
  prefix at every step (what the tutorial does;
  `keras.layers.MultiHeadAttention` has no cache). Its prefix has a fixed
  length of `--new-tokens` (later positions padding, hidden by the causal
  mask), so every step costs the same: only its first
  `--uncached-new-tokens` steps are timed, and its tokens/s is theirs.
- peak memory of building, compiling and the warm-up training epoch, over
  what was in use before: the allocator's peak on a GPU (TensorFlow and
  torch reset it per implementation; JAX cannot reset it, so a number
  below an earlier implementation's peak reads too high), the growth of
  the resident set size on a CPU, sampled every 5 ms from
  `/proc/self/statm` (process-wide: allocator pools and libraries loaded
  by an earlier implementation can make a later one look smaller).
- retraces: Python executions of the model's `call` during the timed epochs.
  Under `tf.function` or `jax.jit` that is the number of new traces and
  must be 0; torch without `--jit-compile` runs eagerly, so there is
  nothing to retrace and the count is not reported.
- FLOPs per step (`benchmarks.flops`), achieved FLOP/s and, on a GPU whose
  bf16 peak is known, model FLOPs utilization (MFU).

Writes `results.json` (every repeat, the settings) and `results.md`
(Markdown tables with ratios against this package) into `--out`, and prints
the tables. `--render results.json` rewrites `results.md` without measuring.
"""

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import sys
import threading
import time
import warnings

import keras
import numpy as np

from keras_transformer import model_flops as flops
from benchmarks import per_process
from benchmarks.reference_models import CONFIGS
from benchmarks.reference_models import IMPLEMENTATIONS
from benchmarks.reference_models import KerasHubCachedDecoder
from benchmarks.reference_models import build_model
from benchmarks.reference_models import encoder_model
from benchmarks.report import OURS
from benchmarks.report import write_report
from keras_transformer.decoding import UncachedDecoder
from keras_transformer.train_config import check_jit_compile

QUICK = dict(
    config="quick", seq_len=[16], repeats=2, steps=2, batch_tokens=256, decode_batch=2, new_tokens=8, encode_repeats=2
)


def parse_args(argv=None, prog="python -m benchmarks.run"):
    """Parses the command line of `python -m benchmarks.run`.

    Args:
        argv: list of str, or None for `sys.argv[1:]`.
        prog: str, the program name in usage and errors.

    Returns:
        An `argparse.Namespace`; `--quick` changes the defaults of the size
        options (ones given explicitly still apply).

    Example:

    >>> args = parse_args(["--quick", "--repeats", "1", "--out", "/tmp/b"])
    >>> args.config, args.repeats
    ('quick', 1)
    """
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small",
                        help="small: 4+4 layers, d_model 256; base: 6+6, 512; big: 6+6, 1024 (default: %(default)s)")
    parser.add_argument("--seq-len", type=int, nargs="+", default=[128],
                        help="source and target length of every example; several allowed (default: 128)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats, median reported (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=4, help="training steps per repeat (default: %(default)s)")
    parser.add_argument("--batch-tokens", type=int,
                        help="source + target tokens per training batch (default: 4096 on a CPU, 65536 on a GPU)")
    parser.add_argument("--encode-repeats", type=int, default=10,
                        help="timed repeats of encoder inference, which is cheap (default: %(default)s)")
    parser.add_argument("--decode-batch", type=int, default=8, help="sources decoded together (default: %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=256, help="tokens generated per source (default: %(default)s)")
    parser.add_argument("--decode-repeats", type=int,
                        help="timed repeats of each decoding loop (default: --repeats)")
    parser.add_argument("--uncached-new-tokens", type=int, default=32,
                        help="steps of the uncached loop timed, at most --new-tokens; each runs the whole model on "
                             "the full --new-tokens prefix, so each costs the same (default: %(default)s)")
    parser.add_argument("--implementations", nargs="+", choices=IMPLEMENTATIONS, default=list(IMPLEMENTATIONS))
    parser.add_argument("--uncached-implementations", nargs="+", choices=IMPLEMENTATIONS,
                        default=list(IMPLEMENTATIONS),
                        help="implementations whose uncached loop is timed; the tutorial's is the baseline of "
                             "cached decoding (default: all)")
    parser.add_argument("--encode-to-host-implementations", nargs="+", choices=IMPLEMENTATIONS,
                        default=list(IMPLEMENTATIONS),
                        help="implementations whose encoder is also timed with its whole outputs copied to the "
                             "host (default: all)")
    parser.add_argument("--phases", nargs="+", choices=("train", "encode", "decode"),
                        default=["train", "encode", "decode"])
    parser.add_argument("--mixed-precision", choices=("float16", "bfloat16"),
                        help="Keras mixed precision policy (softmax, layer norm and logits stay float32)")
    parser.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=None,
                        help="XLA for fit and the decoding step (default: Keras' 'auto' for fit; "
                             "the decoding step compiled on JAX and TensorFlow)")
    parser.add_argument("--dropout", type=float, default=0.1, help="(default: %(default)s, the paper's)")
    parser.add_argument("--fused-qkv", action=argparse.BooleanOptionalAction, default=True,
                        help="one Q/K/V kernel in this package's attention (default: on)")
    parser.add_argument("--threads", type=int,
                        help="CPU threads per backend (TensorFlow, torch, XLA); 1 makes CPU time a "
                             "stable measure on a shared machine (default: the backend's own)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny config, sequence 16, 2 repeats: checks that everything runs")
    parser.add_argument("--process-per-implementation", action=argparse.BooleanOptionalAction, default=None,
                        help="measure each implementation in its own process and merge the results "
                             "(default: on where a GPU is visible)")
    parser.add_argument("--resume", action="store_true",
                        help="with --process-per-implementation: keep the results of an implementation already "
                             "in --out/IMPLEMENTATION from the same command, measure the others")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmark_results", help="folder for results.json and results.md")
    parser.add_argument("--render", metavar="RESULTS_JSON",
                        help="measure nothing: rewrite results.md (and the derived numbers) from a results.json")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--quick" in argv:
        parser.set_defaults(**QUICK)  # options given explicitly still win
    args = parser.parse_args(argv)
    args.argv = argv
    args.decode_repeats = args.decode_repeats or args.repeats
    for name in ("repeats", "steps", "encode_repeats", "decode_batch", "new_tokens", "decode_repeats",
                 "uncached_new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    if min(args.seq_len) < 1:
        parser.error(f"--seq-len must be >= 1, got {args.seq_len}")
    return args


# --- the machine -------------------------------------------------------------


def cpu_name():
    """The CPU model and core count, e.g. `"Intel(R) Xeon(R) ... x 2 cores"`."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name} x {os.cpu_count()} cores"


def _rss_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: the high-water mark, which never goes down
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakMemory:
    """Peak memory growth of a `with` block: the GPU allocator's, or sampled RSS on a CPU.

    The growth is the peak during the block minus what was in use when it
    began, so models built earlier and still alive are not counted.

    Args:
        on_accelerator: bool, measure GPU memory through the backend.

    Attributes:
        peak_bytes: int after the block (None if the backend cannot say).
        method: str, how it was measured.

    Example:

    >>> with PeakMemory(on_accelerator=False) as memory:
    ...     block = np.ones(10_000_000)
    >>> memory.peak_bytes > 0
    True
    """

    def __init__(self, on_accelerator):
        self.on_accelerator = on_accelerator
        self.peak_bytes = None
        self.method = None

    def __enter__(self):
        backend = keras.backend.backend()
        if self.on_accelerator:
            if backend == "torch":
                import torch

                self._baseline = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                self.method = "GPU: torch.cuda.max_memory_allocated growth"
            elif backend == "tensorflow":
                import tensorflow as tf

                self._baseline = tf.config.experimental.get_memory_info("GPU:0")["current"]
                tf.config.experimental.reset_memory_stats("GPU:0")
                self.method = "GPU: tf.config.experimental.get_memory_info peak growth"
            else:
                import jax

                self._baseline = (jax.local_devices()[0].memory_stats() or {}).get("bytes_in_use", 0)
                self.method = ("GPU: JAX peak_bytes_in_use growth (JAX cannot reset its peak: "
                               "a phase below an earlier peak reads too high)")
            return self
        self.method = "CPU: resident set size growth, sampled every 5 ms (process-wide)"
        self._baseline = self._peak = _rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.005):
            self._peak = max(self._peak, _rss_bytes())

    def __exit__(self, *exc):
        backend = keras.backend.backend()
        if not self.on_accelerator:
            self._stop.set()
            self._thread.join()
            peak = max(self._peak, _rss_bytes())
        elif backend == "torch":
            import torch

            peak = torch.cuda.max_memory_allocated()
        elif backend == "tensorflow":
            import tensorflow as tf

            peak = tf.config.experimental.get_memory_info("GPU:0")["peak"]
        else:
            import jax

            peak = (jax.local_devices()[0].memory_stats() or {}).get("peak_bytes_in_use")
        self.peak_bytes = None if peak is None else int(peak - self._baseline)
        return False


# --- timing ----------------------------------------------------------------


class _EpochTimer(keras.callbacks.Callback):
    """Wall time of each epoch, the end synchronized by reading the loss."""

    def __init__(self, traces):
        super().__init__()
        self.traces = traces
        self.times, self.cpu_times, self.trace_counts = [], [], []

    def on_epoch_begin(self, epoch, logs=None):
        self._traces = self.traces["count"]
        self._start, self._cpu_start = time.perf_counter(), time.process_time()

    def on_epoch_end(self, epoch, logs=None):
        float(keras.ops.convert_to_numpy((logs or {}).get("loss", 0.0)))
        self.times.append(time.perf_counter() - self._start)
        self.cpu_times.append(time.process_time() - self._cpu_start)
        self.trace_counts.append(self.traces["count"] - self._traces)


def count_calls(model):
    """Counts Python executions of `model.call` (traces under `tf.function` / `jax.jit`).

    Args:
        model: a `keras.Model`; its `call` is wrapped in place.

    Returns:
        A dict whose `"count"` goes up by one per execution.

    Example:

    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> calls = count_calls(model)
    >>> _ = model(np.zeros((1, 2)))
    >>> calls["count"]
    1
    """
    counter = {"count": 0}
    call = model.call

    def counted(*args, **kwargs):
        counter["count"] += 1
        return call(*args, **kwargs)

    model.call = counted
    return counter


def _tokens(rng, vocabulary_size, shape):
    # Ids from 4 up: no padding (0) and no special tokens.
    return rng.integers(4, vocabulary_size, size=shape).astype("int32")


def _training_data(rng, vocabulary_size, batch_size, seq_len, steps):
    shape = (batch_size * steps, seq_len)
    x = {"encoder_tokens": _tokens(rng, vocabulary_size, shape), "decoder_tokens": _tokens(rng, vocabulary_size, shape)}
    y = _tokens(rng, vocabulary_size, shape)
    try:
        import tensorflow as tf
    except ImportError:
        return dict(x=x, y=y, batch_size=batch_size), "numpy arrays"
    # Already in memory: `cache()` would add nothing, and Keras stops each
    # epoch before the end of the data, so TensorFlow discards a partial cache.
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size, drop_remainder=True)
    return dict(x=dataset.prefetch(tf.data.AUTOTUNE)), "tf.data (in-memory tensors, prefetched)"


def _figures(seconds, digits=4):
    # Significant figures, not decimals: a tiny model's decoding step takes well
    # under a millisecond of CPU time, and rounding it to 0.000 dropped its rate.
    return float(f"{seconds:.{digits}g}")


def interleaved_seconds(functions, repeats):
    """Times several functions in turn, after one warm-up call of each.

    Round-robin repeats spread slow moments of a shared machine over all
    functions alike, so their ratios stay fair. Wall time and the process's
    CPU time (all its threads) are both recorded.

    Args:
        functions: dict `{name: function of no arguments}`.
        repeats: int, timed calls of each.

    Returns:
        `(wall, cpu)`: two dicts `{name: list of seconds}`.

    Example:

    >>> wall, cpu = interleaved_seconds({"a": lambda: None, "b": lambda: None}, 3)
    >>> sorted(wall), len(wall["a"]), len(cpu["b"])
    (['a', 'b'], 3, 3)
    """
    for function in functions.values():
        function()  # warm-up: tracing, compilation, allocator pools
    wall = {name: [] for name in functions}
    cpu = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            function()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - cpu_start)
    return wall, cpu


class _Subject:
    """One implementation under test: its model, data, timer and results."""

    def __init__(self, implementation, seq_len, args, device):
        config = CONFIGS[args.config]
        self.implementation = implementation
        self.batch_size = _batch_size(args, seq_len, device["accelerator"] is not None)
        self.rng = np.random.default_rng(args.seed)
        keras.utils.set_random_seed(args.seed)
        self.result = dict(implementation=implementation, seq_len=seq_len, batch_size=self.batch_size)
        set_precision(args)
        with PeakMemory(device["accelerator"] is not None) as memory:
            self.model = build_model(
                implementation, config, max(seq_len, args.new_tokens + 1), args.dropout, args.fused_qkv
            )
            self.model.compile(
                optimizer=keras.optimizers.Adam(1e-4),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=_fit_jit(args),
            )
            self.result["parameters"] = int(sum(np.prod(w.shape) for w in self.model.trainable_weights))
            self.result["dtype_policy"] = self.model.dtype_policy.name
            if "train" in args.phases:
                self.data, self.result["input_pipeline"] = _training_data(
                    self.rng, config["vocabulary_size"], self.batch_size, seq_len, args.steps
                )
                self.traces = count_calls(self.model)
                self.timer = _EpochTimer(self.traces)
                self.fit_epoch()  # warm-up: tracing, compilation
        if "train" in args.phases:
            self.result["memory"] = dict(
                peak_bytes=memory.peak_bytes, method=memory.method,
                phase="build, compile and the warm-up epoch of training",
            )

    def fit_epoch(self):
        self.model.fit(**self.data, epochs=1, shuffle=False, verbose=0, callbacks=[self.timer])


def set_precision(args):
    """Sets the global dtype policy that `--mixed-precision` asks for.

    Called before every model is built: `keras.backend.clear_session()`,
    which runs between implementations and sequence lengths, resets the
    policy to float32, so a policy set once at start-up would hold only
    for the first models of a bf16 run.

    Args:
        args: the parsed command line.

    Example:

    >>> set_precision(parse_args(["--quick", "--mixed-precision", "bfloat16"]))
    >>> keras.config.dtype_policy().name
    'mixed_bfloat16'
    >>> set_precision(parse_args(["--quick"])); keras.config.dtype_policy().name
    'float32'
    """
    keras.config.set_dtype_policy(f"mixed_{args.mixed_precision}" if args.mixed_precision else "float32")


def _fit_jit(args):
    return "auto" if args.jit_compile is None else args.jit_compile


def _decode_jit(args):
    # Default: compile the decoding loop where XLA is available (JAX, TensorFlow).
    return args.jit_compile if args.jit_compile is not None else keras.backend.backend() != "torch"


def _time_training(subjects, args, device, seq_len):
    # One untimed round after all are built: the first epoch of a second
    # `fit` call is still slow on TensorFlow, and the first round pays page
    # faults for memory that later rounds reuse (up to 2x the CPU time).
    for _ in range(1 + args.repeats):
        for subject in subjects:
            subject.fit_epoch()
    config = CONFIGS[args.config]
    for subject in subjects:
        model, timer = subject.model, subject.timer
        step_times = [t / args.steps for t in timer.times[2:]]
        seconds = statistics.median(step_times)
        step_flops = flops.training_flops(
            config["num_layers"], config["num_decoder_layers"], config["d_model"], config["ff_dim"],
            config["vocabulary_size"], seq_len, seq_len, subject.batch_size,
        )
        tokens_per_step = 2 * seq_len * subject.batch_size
        eager = keras.backend.backend() == "torch" and not model.jit_compile
        subject.result["train"] = dict(
            tokens_per_second=tokens_per_step / seconds,
            seconds_per_step=seconds,
            seconds_per_step_repeats=[_figures(t) for t in step_times],
            cpu_seconds_per_step_repeats=[_figures(t / args.steps) for t in timer.cpu_times[2:]],
            jit_compile=bool(model.jit_compile),
            # Eager torch runs the Python every step: there is nothing to retrace.
            traces_warmup=None if eager else sum(timer.trace_counts[:2]),
            traces_timed=None if eager else sum(timer.trace_counts[2:]),
            flops_per_step=step_flops,
            flops_per_token=step_flops / tokens_per_step,
            achieved_flops_per_second=step_flops / seconds,
            mfu=flops.model_flops_utilization(step_flops, seconds, device["peak_flops"]),
        )


def _time_encoders(subjects, args, seq_len):
    vocabulary_size = CONFIGS[args.config]["vocabulary_size"]
    functions, sizes = {}, {}
    for subject in subjects:
        encoder = encoder_model(subject.model)
        # `predict` keeps each batch's outputs on the device and concatenates
        # them all with NumPy at the end: for base@256 that copies 670 MB of
        # float32 to the host a call. The same encoder with its outputs summed
        # over the features copies one number a token, so it times the encoder.
        summed = keras.Model(encoder.input, keras.ops.sum(encoder.output, axis=-1), name=f"{encoder.name}_summed")
        tokens = _tokens(subject.rng, vocabulary_size, (subject.batch_size * args.steps, seq_len))
        sizes[subject.implementation] = tokens.size
        timed = [(subject.implementation, summed)]
        if subject.implementation in args.encode_to_host_implementations:
            timed.append((f"{subject.implementation} to host", encoder))
        for name, model in timed:
            model.compile(jit_compile=_fit_jit(args))
            functions[name] = (
                lambda model=model, tokens=tokens, batch=subject.batch_size:
                model.predict(tokens, batch_size=batch, verbose=0)
            )
    wall, cpu = interleaved_seconds(functions, args.encode_repeats)
    for subject in subjects:
        size, name = sizes[subject.implementation], subject.implementation
        subject.result["encode"] = dict(
            tokens_per_second=size / statistics.median(wall[name]),
            seconds_repeats=[_figures(t) for t in wall[name]],
            cpu_seconds_repeats=[_figures(t) for t in cpu[name]],
        )
        if f"{name} to host" in wall:
            subject.result["encode"].update(
                to_host_tokens_per_second=size / statistics.median(wall[f"{name} to host"]),
                to_host_seconds_repeats=[_figures(t) for t in wall[f"{name} to host"]],
                to_host_cpu_seconds_repeats=[_figures(t) for t in cpu[f"{name} to host"]],
            )


class ReferenceUncachedDecoder(UncachedDecoder):
    """`UncachedDecoder` on any model with the inputs `{"encoder_tokens", "decoder_tokens"}`.

    The package's `UncachedDecoder` reads the source vocabulary and length
    from the layers of a `transformer()` model, which KerasHub's and the
    tutorial's builds do not have; here they are not checked (the
    benchmark's ids are in range by construction). The loop is the same.

    Args:
        model: a `build_model(...)` model.
        max_length: int, the longest target, start token included.
        jit_compile: bool, as `UncachedDecoder`.
    """

    def __init__(self, model, max_length, jit_compile=False):
        self.model = model
        self.source_vocabulary_size = self.source_max_length = None
        self.max_length = max_length
        self.jit_compile = jit_compile


def _time_decoding(subjects, args, seq_len):
    from keras_transformer.decoding import CachedDecoder
    from keras_transformer.decoding import greedy_search

    vocabulary_size = CONFIGS[args.config]["vocabulary_size"]
    new_tokens, jit_compile = args.new_tokens, _decode_jit(args)
    # The uncached prefix is `new_tokens` long from the first step (padding
    # hidden by the causal mask): every step costs the same, so the first
    # `uncached_tokens` give the rate of all `new_tokens`.
    uncached_tokens = min(args.uncached_new_tokens, new_tokens)
    # The same sources for every implementation.
    source = _tokens(np.random.default_rng(args.seed + 1), vocabulary_size, (args.decode_batch, seq_len))
    functions = {}
    for subject in subjects:
        name, model = subject.implementation, subject.model
        decoder = None
        if name == OURS:
            decoder = CachedDecoder(model, max_length=new_tokens + 1, jit_compile=jit_compile)
        elif name == "keras_hub":
            decoder = KerasHubCachedDecoder(model, max_length=new_tokens + 1, jit_compile=jit_compile)
        if decoder is not None:
            functions[name, "cached"] = lambda decoder=decoder: greedy_search(
                decoder, source, new_tokens, stop_at_end=False
            )
        if name in args.uncached_implementations:
            uncached = (UncachedDecoder if name == OURS else ReferenceUncachedDecoder)(
                model, max_length=new_tokens + 1, jit_compile=jit_compile)
            functions[name, "uncached"] = lambda uncached=uncached: greedy_search(
                uncached, source, uncached_tokens, stop_at_end=False
            )
    wall, cpu = interleaved_seconds(functions, args.decode_repeats)
    generated = {"cached": args.decode_batch * new_tokens, "uncached": args.decode_batch * uncached_tokens}
    for subject in subjects:
        result = dict(new_tokens=new_tokens, uncached_new_tokens=uncached_tokens, batch_size=args.decode_batch,
                      jit_compile=jit_compile)
        for kind in ("cached", "uncached"):
            seconds = wall.get((subject.implementation, kind))
            if seconds:
                result[f"{kind}_tokens_per_second"] = generated[kind] / statistics.median(seconds)
                result[f"{kind}_seconds_repeats"] = [_figures(t) for t in seconds]
                result[f"{kind}_cpu_seconds_repeats"] = [_figures(t) for t in cpu[subject.implementation, kind]]
        subject.result["decode"] = result


# --- one sequence length ----------------------------------------------------


def _batch_size(args, seq_len, on_accelerator):
    batch_tokens = args.batch_tokens or (65536 if on_accelerator else 4096)
    return max(1, batch_tokens // (2 * seq_len))


def _hide_gpus_from_tensorflow():
    # tf.data feeds the JAX and torch models too; left alone, TensorFlow
    # would reserve most of the GPU's memory the first time it runs an op.
    try:
        import tensorflow as tf

        tf.config.set_visible_devices([], "GPU")
    except (ImportError, RuntimeError):
        pass


def limit_threads(threads):
    """Restricts TensorFlow, torch and XLA (JAX, TensorFlow's jit) to `threads` CPU threads.

    Call before the first computation: the thread pools are sized when
    they start.

    Args:
        threads: int >= 1.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = (
        f"{flags} --xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} "
        f"intra_op_parallelism_threads={threads}"
    ).strip()
    try:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except (ImportError, RuntimeError):
        pass
    if keras.backend.backend() == "torch":
        import torch

        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError:  # already started
            pass


def warm_up_process(args):
    """Runs every implementation once on the quick config, untimed.

    Libraries load and thread pools start on first use; without this the
    first implementation measured would be charged for them (in time of its
    warm-up, which is not reported, and in memory, which is).

    Args:
        args: the parsed command line.
    """
    rng = np.random.default_rng(0)
    tokens = _tokens(rng, CONFIGS["quick"]["vocabulary_size"], (2, 8))
    batch = {"encoder_tokens": tokens, "decoder_tokens": tokens}
    for implementation in args.implementations:
        set_precision(args)
        model = build_model(implementation, "quick", 16, args.dropout, args.fused_qkv)
        model.compile(optimizer=keras.optimizers.Adam(1e-4),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=_fit_jit(args))
        model.fit(batch, tokens, batch_size=2, epochs=1, verbose=0)
        model.predict(batch, verbose=0)
    keras.backend.clear_session()
    gc.collect()


def benchmark_seq_len(seq_len, args, device, log=print):
    """Every implementation and phase at one sequence length, repeats interleaved.

    All implementations are built first (each one's build, compile and
    warm-up epoch measured for memory; on a CPU after an untimed stand-in
    has taken the one-off growth), then each phase times them in turn, one
    repeat of each before the next repeat of any.

    Args:
        seq_len: int, source and target length.
        args: the parsed command line.
        device: dict from `describe_device`.
        log: function printing progress.

    Returns:
        list of dicts, one per implementation (see `results.json`).
    """
    started = time.perf_counter()
    subjects = []
    if device["accelerator"] is None and not args.quick:
        # A stand-in, built first and kept until the end, untimed and not
        # reported: on a CPU, where memory is the process's RSS growth, it
        # takes the one-off growth (allocator arenas, kernel caches) that
        # the first implementation would otherwise be charged (~0.5 GB on
        # TensorFlow at the small config).
        stand_in = _Subject(args.implementations[0], seq_len, args, device)
        log(f"    built a stand-in {args.implementations[0]} for the one-off memory growth "
            f"({time.perf_counter() - started:.0f} s)")
    for implementation in args.implementations:
        subjects.append(_Subject(implementation, seq_len, args, device))
        log(f"    built {implementation} ({time.perf_counter() - started:.0f} s)")
    phases = (
        ("train", lambda: _time_training(subjects, args, device, seq_len)),
        ("encode", lambda: _time_encoders(subjects, args, seq_len)),
        ("decode", lambda: _time_decoding(subjects, args, seq_len)),
    )
    for phase, timed in phases:
        if phase in args.phases:
            timed()
            log(f"    {phase} timed ({time.perf_counter() - started:.0f} s)")
    results = [subject.result for subject in subjects]
    del subjects
    stand_in = None
    gc.collect()
    keras.backend.clear_session()
    return results


def describe_device():
    """The device the backend computes on, with its bf16 peak where known.

    Returns:
        dict: `backend`, `backend_version`, `accelerator` (GPU name or
        None), `name`, `peak_flops` (FLOP/s or None).
    """
    accelerator = flops.accelerator_name()
    backend = keras.backend.backend()
    return dict(
        backend=backend,
        backend_version=getattr(sys.modules.get(backend), "__version__", None),
        accelerator=accelerator,
        name=accelerator or cpu_name(),
        peak_flops=flops.peak_flops(accelerator) if accelerator else None,
    )


def run(args):
    """Runs every implementation and sequence length, writes results.json and results.md.

    Args:
        args: from `parse_args`.

    Returns:
        The report dict written to `results.json`.
    """
    check_jit_compile(args.jit_compile)  # torch: see benchmarks/torch_compile.py for compiled steps
    if keras.backend.backend() != "tensorflow":
        _hide_gpus_from_tensorflow()
    if args.threads:
        limit_threads(args.threads)
    # The uncached loops start from a one-token prefix: a softmax over one key.
    warnings.filterwarnings("ignore", message="You are using a softmax over axis")
    device = describe_device()
    import keras_hub

    results = []
    # With one implementation in the process there is no one else to charge
    # library start-up to, and its own warm-up epochs come before any timing.
    if not args.quick and len(args.implementations) > 1:
        started = time.perf_counter()
        warm_up_process(args)
        print(f"[{device['backend']}] process warmed up ({time.perf_counter() - started:.0f} s)", flush=True)
    for seq_len in args.seq_len:
        print(f"[{device['backend']}] seq_len {seq_len}: {', '.join(args.implementations)}", flush=True)
        results += benchmark_seq_len(seq_len, args, device, log=lambda text: print(text, flush=True))
    report = dict(
        meta=dict(
            date=datetime.datetime.now().isoformat(timespec="seconds"),
            arguments=args.argv,
            device=device,
            keras=keras.__version__,
            keras_hub=keras_hub.__version__,
            python=platform.python_version(),
            config=args.config,
            config_values=CONFIGS[args.config],
            precision=f"mixed_{args.mixed_precision}" if args.mixed_precision else "float32",
            jit_compile="auto" if args.jit_compile is None else args.jit_compile,
            dropout=args.dropout,
            fused_qkv=args.fused_qkv,
            repeats=args.repeats,
            steps=args.steps,
            encode_repeats=args.encode_repeats,
            decode_repeats=args.decode_repeats,
            uncached_new_tokens=args.uncached_new_tokens,
            seed=args.seed,
            threads=args.threads,
        ),
        results=results,
    )
    print(write_report(report, args.out))
    print(f"written to {os.path.join(args.out, 'results.json')} and results.md", flush=True)
    return report


def main(argv=None, prog="python -m benchmarks.run"):
    """Entry point of `python -m benchmarks.run`.

    Args:
        argv: list of str, or None for `sys.argv[1:]`.
        prog: str, the program name in usage and errors.

    Returns:
        0, or 1 when an implementation measured in its own process failed.
    """
    args = parse_args(argv, prog)
    if args.render:
        with open(args.render) as f:
            report = json.load(f)
        print(write_report(report, os.path.dirname(os.path.abspath(args.render))))
        return 0
    if args.process_per_implementation is None:
        args.process_per_implementation = per_process.gpu_visible() and len(args.implementations) > 1
    if args.process_per_implementation:
        report = per_process.run_per_process(args)
        return 1 if report["meta"].get("failed") else 0
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
