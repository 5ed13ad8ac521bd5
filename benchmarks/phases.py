"""How `benchmarks.run` times each phase: training, encoder inference, greedy decoding.

A `Subject` is one implementation under test at one sequence length: its
model built, compiled and warmed up under the `--mixed-precision` policy
(`set_precision`), its memory measured (`benchmarks.machine.PeakMemory`),
its synthetic batches and its epoch timer. `time_training`,
`time_encoders` and `time_decoding` then time all subjects of a sequence
length round-robin (`interleaved_seconds`) and store the rates in each
subject's result. Here too are the tools they share (`count_calls`, which
counts retraces; `ReferenceUncachedDecoder`, the uncached loop on the
reference builds) and `warm_up_process`, which runs every implementation
once, untimed, before the first is measured.
"""

import gc
import statistics
import time

import keras
import numpy as np

from keras_transformer.training import model_flops as flops
from benchmarks.machine import PeakMemory
from benchmarks.reference_models import CONFIGS
from benchmarks.reference_models import KerasHubCachedDecoder
from benchmarks.reference_models import build_model
from benchmarks.reference_models import encoder_model
from benchmarks.report import OURS
from keras_transformer.decoding import UncachedDecoder


# --- measuring tools ---------------------------------------------------------


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


def _figures(seconds, digits=4):
    # Significant figures, not decimals: a tiny model's decoding step takes well
    # under a millisecond of CPU time, and rounding it to 0.000 dropped its rate.
    return float(f"{seconds:.{digits}g}")


def _rate(tokens, wall, cpu, prefix=""):
    # One timed function's entries of a result: its median rate and every repeat's wall and CPU seconds.
    return {f"{prefix}tokens_per_second": tokens / statistics.median(wall),
            f"{prefix}seconds_repeats": [_figures(t) for t in wall],
            f"{prefix}cpu_seconds_repeats": [_figures(t) for t in cpu]}


# --- the implementations under test ------------------------------------------


def set_precision(args):
    """Sets the global dtype policy that `--mixed-precision` asks for.

    Called before every model is built: `keras.backend.clear_session()`,
    which runs between implementations and sequence lengths, resets the
    policy to float32, so a policy set once at start-up would hold only
    for the first models of a bf16 run.

    Args:
        args: the parsed command line.

    Example:

    >>> from argparse import Namespace  # as `benchmarks.run.parse_args` gives
    >>> set_precision(Namespace(mixed_precision="bfloat16"))
    >>> keras.config.dtype_policy().name
    'mixed_bfloat16'
    >>> set_precision(Namespace(mixed_precision=None)); keras.config.dtype_policy().name
    'float32'
    """
    keras.config.set_dtype_policy(f"mixed_{args.mixed_precision}" if args.mixed_precision else "float32")


def _fit_jit(args):
    return "auto" if args.jit_compile is None else args.jit_compile


def _compile(model, args):
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=_fit_jit(args))


def _decode_jit(args):
    # Default: compile the decoding loop where XLA is available (JAX, TensorFlow).
    return args.jit_compile if args.jit_compile is not None else keras.backend.backend() != "torch"


def _batch_size(args, seq_len, on_accelerator):
    batch_tokens = args.batch_tokens or (65536 if on_accelerator else 4096)
    return max(1, batch_tokens // (2 * seq_len))


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


class Subject:
    """One implementation under test: its model, data, timer and results.

    Built, compiled and (with the training phase) warmed up by one epoch
    on construction, the memory of all that measured.

    Args:
        implementation: str, one of `benchmarks.reference_models.IMPLEMENTATIONS`.
        seq_len: int, source and target length.
        args: the parsed command line.
        device: dict from `benchmarks.machine.describe_device`.
    """

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
            _compile(self.model, args)
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
        """Runs one training epoch of `--steps` steps, timed by `self.timer`."""
        self.model.fit(**self.data, epochs=1, shuffle=False, verbose=0, callbacks=[self.timer])


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
        _compile(model, args)
        model.fit(batch, tokens, batch_size=2, epochs=1, verbose=0)
        model.predict(batch, verbose=0)
    keras.backend.clear_session()
    gc.collect()


# --- the phases --------------------------------------------------------------


def time_training(subjects, args, device, seq_len):
    """Times `--repeats` training epochs of every subject, round-robin, into `result["train"]`.

    Args:
        subjects: list of `Subject`, built with the training phase.
        args: the parsed command line.
        device: dict from `benchmarks.machine.describe_device`.
        seq_len: int, source and target length.
    """
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


def time_encoders(subjects, args, seq_len):
    """Times the encoder's `predict` of every subject, round-robin, into `result["encode"]`.

    Args:
        subjects: list of `Subject`.
        args: the parsed command line.
        seq_len: int, source length.
    """
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
        subject.result["encode"] = _rate(size, wall[name], cpu[name])
        if f"{name} to host" in wall:
            subject.result["encode"].update(_rate(size, wall[f"{name} to host"], cpu[f"{name} to host"], "to_host_"))


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


def time_decoding(subjects, args, seq_len):
    """Times the cached and uncached greedy loops of every subject, round-robin, into `result["decode"]`.

    Args:
        subjects: list of `Subject`.
        args: the parsed command line.
        seq_len: int, source length.
    """
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
            if wall.get((subject.implementation, kind)):
                result.update(_rate(generated[kind], wall[subject.implementation, kind],
                                    cpu[subject.implementation, kind], f"{kind}_"))
        subject.result["decode"] = result
