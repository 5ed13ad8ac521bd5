"""The training and validation steps of every batch shape, compiled side by side before the first step (JAX).

XLA compiles `fit`'s training step once per batch shape, when the shape
first comes, one after the other: on the GPU default the training and
validation shapes compiled so were most of the first `train`'s time
(benchmarks/findings/gpu.md, "The user's wait"). Here each step of each
shape is lowered (traced, one at a time), then the lowered programs are
compiled on threads at once (XLA releases the GIL); the compiled code goes
to JAX's persistent compilation cache, from which `fit`'s own compilations
then load it in a fraction of the compiling's time. So it only runs with
that cache on (the command line's `train` turns it on), on JAX, on one
device. The trainer asks for it on an accelerator only, for a run that
meets every shape: on a CPU two threads compiled no faster than one (XLA's
CPU compiler keeps every core busy). Not yet measured on a GPU.
"""

import concurrent.futures
import os

import keras
import numpy as np

from keras_transformer.training.train_input import first_batch_of_each_shape


def _aval(value):
    import jax

    return jax.ShapeDtypeStruct(np.shape(value), jax.dtypes.canonicalize_dtype(np.asarray(value).dtype))


def train_batch_avals(example, shapes):
    """The abstract train batches of `shapes`, in the structure and dtypes of `example` (a dev batch).

    Args:
        example: one `(inputs, labels)` batch, inputs a dict with
            `encoder_tokens` and `decoder_tokens`.
        shapes: `(rows, source length, target length)` triples
            (`train_input.TrainData.batch_shapes`).

    Returns:
        A list of `(inputs, labels)` of `jax.ShapeDtypeStruct`.

    Example:

    >>> example = ({"encoder_tokens": np.ones((2, 8), "int32"), "decoder_tokens": np.ones((2, 8), "int32")},
    ...            np.ones((2, 8), "int32"))
    >>> [(inputs["encoder_tokens"].shape, labels.shape) for inputs, labels in train_batch_avals(example, [(4, 16, 24)])]
    [((4, 16), (4, 24))]
    """
    inputs, labels = example
    avals = []
    for rows, source_length, target_length in shapes:
        sizes = {"encoder_tokens": (rows, source_length), "decoder_tokens": (rows, target_length)}
        batch_inputs = {name: _aval(np.zeros(sizes[name], np.asarray(value).dtype)) for name, value in inputs.items()}
        avals.append((batch_inputs, _aval(np.zeros((rows, target_length), np.asarray(labels).dtype))))
    return avals


class StepsCompiledAhead(keras.callbacks.Callback):
    """At the start of `fit`, compiles the training step of every train batch shape and the validation step of every
    validation batch shape, side by side, into JAX's persistent compilation cache.

    Does nothing unless Keras runs on JAX with `jit_compile`, without a
    distribution, and the cache is on (`jax_compilation_cache_dir`, every
    program kept: `jax_persistent_cache_min_compile_time_secs` 0).

    Args:
        train_shapes: `(rows, source length, target length)` of the train
            batches (`TrainData.batch_shapes`).
        validation_data: `fit`'s `validation_data` (a `keras.utils.PyDataset`
            or an iterable of `(inputs, labels)`), read once; its first batch
            also gives the train batches' structure and dtypes.
        threads: compilations at once; None is the cores this process may use.

    Example:

    >>> callback = StepsCompiledAhead([(4, 8, 8)], [])
    >>> callback.compiled
    0
    """

    def __init__(self, train_shapes, validation_data, threads=None):
        super().__init__()
        self.train_shapes = sorted(train_shapes)
        self.validation_data = validation_data
        self.threads = threads or len(os.sched_getaffinity(0))
        self.compiled = 0
        self.error = None  # what stopped the compiling ahead, if anything did

    def _applies(self):
        if keras.backend.backend() != "jax" or not getattr(self.model, "jit_compile", False):
            return False
        import jax

        return (keras.distribution.distribution() is None and bool(jax.config.jax_compilation_cache_dir)
                and jax.config.jax_persistent_cache_min_compile_time_secs == 0)

    def _compile_ahead(self):
        if not self._applies():
            return
        import jax

        validation = first_batch_of_each_shape(self.validation_data) if self.validation_data is not None else []
        if not validation:
            return
        model = self.model

        def values(variables):
            return [_aval(variable.value) for variable in variables]

        trainable, non_trainable = values(model.trainable_variables), values(model.non_trainable_variables)
        metrics = values(model.metrics_variables)
        # Keras' own `jit(model.train_step, donate_argnums=0)`: the same program, so the same cache key.
        train_step = jax.jit(model.train_step, donate_argnums=0)
        test_step = jax.jit(model.test_step, donate_argnums=0)
        train_state = (trainable, non_trainable, values(model.optimizer.variables), metrics)
        lowered = [train_step.lower(train_state, batch) for batch in train_batch_avals(validation[0],
                                                                                        self.train_shapes)]
        lowered += [test_step.lower((trainable, non_trainable, metrics), keras.tree.map_structure(_aval, batch))
                    for batch in validation]
        with concurrent.futures.ThreadPoolExecutor(self.threads) as pool:
            list(pool.map(lambda program: program.compile(), lowered))
        self.compiled = len(lowered)

    def on_train_begin(self, logs=None):
        try:
            self._compile_ahead()
        except Exception as error:  # noqa: BLE001 - a head start, never a reason to stop: fit compiles as before
            self.error = error
