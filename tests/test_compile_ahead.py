"""Steps compiled ahead, side by side: `fit` then loads every step it compiles from JAX's cache."""

import logging

import keras
import numpy as np
import pytest

from keras_transformer.training.compile_ahead import StepsCompiledAhead

pytestmark = pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX's persistent compilation cache")

SHAPES = [(4, 8, 8), (2, 16, 8), (2, 16, 16)]  # (rows, source length, target length)


class _Batches(keras.utils.PyDataset):
    """Translation-shaped batches, `(inputs, labels)`, of the given shapes in turn."""

    def __init__(self, shapes):
        super().__init__()
        self.shapes = shapes

    @property
    def num_batches(self):
        return len(self.shapes)

    def __len__(self):
        return len(self.shapes)

    def __getitem__(self, index):
        rows, source, target = self.shapes[index]
        tokens = np.random.default_rng(index).integers(1, 20, (rows, max(source, target))).astype("int32")
        inputs = {"encoder_tokens": tokens[:, :source], "decoder_tokens": tokens[:, :target]}
        return inputs, tokens[:, :target]


def _model():
    source = keras.Input((None,), dtype="int32", name="encoder_tokens")
    target = keras.Input((None,), dtype="int32", name="decoder_tokens")
    context = keras.ops.mean(keras.layers.Embedding(20, 8)(source), axis=1, keepdims=True)
    logits = keras.layers.Dense(20)(keras.layers.Embedding(20, 8)(target) + context)
    model = keras.Model({"encoder_tokens": source, "decoder_tokens": target}, logits)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    return model


@pytest.fixture
def compilation_cache(tmp_path):
    import jax

    kept = {name: getattr(jax.config, name) for name in (
        "jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs", "jax_log_compiles")}
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "xla"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_log_compiles", True)
    steps = []  # (phase, "compiled" or "cache hit", step)

    class Record(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            for step in ("train_step", "test_step"):
                if message.startswith(f"Finished XLA compilation of jit({step})"):
                    steps.append((phase[0], "compiled", step))
                elif message.startswith(f"Persistent compilation cache hit for 'jit_{step}'"):
                    steps.append((phase[0], "cache hit", step))

    phase = ["before fit"]
    handler = Record()
    logging.getLogger("jax").addHandler(handler)
    yield steps, phase
    logging.getLogger("jax").removeHandler(handler)
    for name, value in kept.items():
        jax.config.update(name, value)


def test_fit_loads_every_step_it_compiles_from_the_steps_compiled_ahead(compilation_cache):
    steps, phase = compilation_cache

    class Fit(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            phase[0] = "in fit"

    validation = _Batches([(4, 8, 8), (2, 16, 16), (1, 16, 16)])
    ahead = StepsCompiledAhead(SHAPES, validation, threads=2)
    _model().fit(_Batches(SHAPES), epochs=2, verbose=0, validation_data=validation, callbacks=[ahead, Fit()])
    assert ahead.error is None and ahead.compiled == 3 + 3
    in_fit = [(what, step) for when, what, step in steps if when == "in fit"]
    # Each of fit's compilations of a step is a load: its cache hit is logged, then its (short) compilation.
    assert sorted(in_fit) == sorted([("cache hit", "train_step"), ("compiled", "train_step")] * 3
                                    + [("cache hit", "test_step"), ("compiled", "test_step")] * 3)


def test_without_the_cache_nothing_is_compiled_ahead(compilation_cache):
    import jax

    jax.config.update("jax_compilation_cache_dir", None)
    ahead = StepsCompiledAhead(SHAPES, _Batches(SHAPES))
    _model().fit(_Batches(SHAPES), epochs=1, verbose=0, validation_data=_Batches(SHAPES), callbacks=[ahead])
    assert ahead.compiled == 0 and ahead.error is None
