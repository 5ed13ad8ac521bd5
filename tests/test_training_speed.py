"""The trainer's speed figures: what the step clock counts, model FLOPs over real batch shapes, MFU."""

import collections
import time

import keras
import numpy as np
import pytest

from keras_transformer.training import model_flops
from keras_transformer.training.train_input import token_statistics
from keras_transformer.training.training_speed import TrainingSpeed
from keras_transformer.training.training_speed import describe


class _Sleep(keras.callbacks.Callback):
    """Sleeps in every training step, in validation and at each epoch's end."""

    def __init__(self, step, elsewhere):
        super().__init__()
        self.step, self.elsewhere = step, elsewhere

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(self.step)

    def on_test_begin(self, logs=None):
        time.sleep(self.elsewhere)

    def on_epoch_end(self, epoch, logs=None):
        time.sleep(self.elsewhere)


def test_the_clock_counts_the_training_steps_and_leaves_out_validation_and_epoch_end_work():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    speed = TrainingSpeed(steps_per_epoch=2)
    data = np.zeros((8, 2), "float32"), np.zeros((8, 1), "float32")
    model.fit(*data, batch_size=4, epochs=2, validation_data=data, verbose=0,
              callbacks=[speed, _Sleep(step=0.05, elsewhere=2.0)])
    assert len(speed.epoch_seconds) == 2
    # The epoch after the first (which compiles): 2 steps of >= 0.05 s, and none of the 4 s of other work.
    # The bound leaves 1.9 s for the steps: a loaded CI machine once measured 1.4 s for this epoch.
    assert 0.1 <= speed.epoch_seconds[1] < 2.0, speed.epoch_seconds
    assert speed.seconds_per_step() == speed.epoch_seconds[1] / 2


@pytest.mark.backend_independent
def test_the_report_takes_the_median_after_the_first_epoch_and_the_peak_of_every_device():
    speed = TrainingSpeed(steps_per_epoch=10, flops_per_step=3e14, devices=2, device_name="NVIDIA H100 80GB HBM3")
    speed.epoch_seconds = [60.0, 2.0, 4.0, 3.0]  # the first epoch compiled
    report = speed.report()
    assert report["train_step_seconds"] == pytest.approx(0.3)
    assert report["timed_epochs"] == 3
    assert report["model_flops_per_second"] == pytest.approx(1e15)
    assert report["peak_flops"] == pytest.approx(2 * 989e12)
    assert report["mfu"] == pytest.approx(1e15 / (2 * 989e12))
    assert "MFU 50.6 % of NVIDIA H100 80GB HBM3 (1,978 TFLOP/s bf16 peak)" in describe(report)

    on_cpu = TrainingSpeed(steps_per_epoch=10, flops_per_step=3e11)
    on_cpu.epoch_seconds = speed.epoch_seconds
    on_cpu = on_cpu.report()
    assert on_cpu["mfu"] is None and on_cpu["peak_flops"] is None and on_cpu["device"] == "cpu"
    assert "MFU unknown" in describe(on_cpu)

    without_flops = TrainingSpeed(steps_per_epoch=10)
    without_flops.epoch_seconds = [5.0]  # one epoch: it is all there is
    assert without_flops.report()["train_step_seconds"] == pytest.approx(0.5)
    assert without_flops.report()["model_flops_per_second"] is None
    assert describe(TrainingSpeed(1, flops_per_step=1e9).report()) == "speed: no epoch was timed"


@pytest.mark.backend_independent
def test_model_flops_are_the_mean_over_the_shapes_of_the_batches():
    def batch(rows, source_length, target_length, real):
        source = np.zeros((rows, source_length), "int32")
        labels = np.zeros((rows, target_length), "int32")
        source.flat[:real] = labels.flat[:real] = 5
        return {"encoder_tokens": source, "decoder_tokens": labels}, labels

    batches = [batch(4, 8, 16, 10), batch(2, 24, 32, 20), batch(4, 8, 16, 12)]
    count, real, padding, shapes = token_statistics(batches)
    assert count == 3 and real == 2 * (10 + 20 + 12)
    assert padding == pytest.approx(1 - real / (2 * 4 * 8 + 2 * 4 * 16 + 2 * 24 + 2 * 32))
    assert shapes == collections.Counter({(4, 8, 16): 2, (2, 24, 32): 1})

    sizes = dict(num_layers=2, num_decoder_layers=2, d_model=32, ff_dim=64, vocabulary_size=100)
    want = (2 * model_flops.training_flops(source_length=8, target_length=16, batch_size=4, **sizes)
            + model_flops.training_flops(source_length=24, target_length=32, batch_size=2, **sizes)) / 3
    assert model_flops.mean_training_flops(shapes, **sizes) == pytest.approx(want)
    assert model_flops.mean_training_flops({}, **sizes) is None


class _SlowFirstStep(keras.callbacks.Callback):
    """Sleeps in the first step of the first epoch, as tracing and compiling do."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds
        self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == 0 and batch == 0:
            time.sleep(self.seconds)


def test_the_first_estimate_states_compiling_apart_and_does_not_project_it_onto_later_epochs():
    from keras_transformer.training.training_speed import RunClock

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    lines, epoch_ends = [], []
    start = time.time()
    clock = RunClock(10, start, lines.append)
    ended = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: epoch_ends.append(time.time()))
    model.fit(np.zeros((16, 2)), np.zeros((16, 1)), batch_size=4, epochs=10, verbose=0,
              callbacks=[_SlowFirstStep(1.0), clock, ended])
    first_epoch, first_total = clock.estimates[0]
    assert first_epoch == 1
    assert "compiling" in lines[0]
    # What it projects for each of the 9 epochs left: the epoch without its slow step (a few ms of
    # four tiny steps, however busy the host), not the 1 s of that step.
    projected_per_epoch = (first_total - (epoch_ends[0] - start)) / 9
    assert -0.01 < projected_per_epoch < 0.5, (first_total, lines)  # the epoch end is read twice, µs apart


class _TwoShapes(keras.utils.PyDataset):
    """Validation batches in two shapes, as the trainer's bucketed dev batches come."""

    def __len__(self):
        return 3

    @property
    def num_batches(self):
        return 3

    def __getitem__(self, index):
        length = 4 if index != 1 else 8
        return {"tokens": np.ones((2, length), "float32")}, np.zeros((2, 1), "float32")


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="counts XLA compilations through JAX's log")
def test_validation_is_compiled_before_the_first_epoch_and_never_again_in_it():
    import logging

    import jax

    from keras_transformer.training.training_speed import ValidationCompiledFirst

    compiled = []  # (when, function)

    class Record(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            if message.startswith("Finished XLA compilation of jit(test_step)"):
                compiled.append(phase[0])

    class Phase(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            phase[0] = "in fit"

    phase = ["before fit"]
    inputs = keras.Input((None,), name="tokens")
    outputs = keras.layers.Dense(1)(keras.ops.mean(keras.ops.expand_dims(inputs, -1), axis=1))
    model = keras.Model({"tokens": inputs}, outputs)
    model.compile("sgd", "mse", jit_compile=True)
    handler, logger = Record(), logging.getLogger("jax")
    logger.addHandler(handler)
    jax.config.update("jax_log_compiles", True)
    try:
        first = ValidationCompiledFirst(_TwoShapes())
        model.fit(_TwoShapes(), epochs=2, verbose=0, validation_data=_TwoShapes(), callbacks=[first, Phase()])
    finally:
        jax.config.update("jax_log_compiles", False)
        logger.removeHandler(handler)
    assert first.compiled == 2
    assert compiled == ["before fit", "before fit"]  # both shapes before the first step, none after
