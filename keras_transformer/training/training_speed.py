"""Training speed measured during `fit`: seconds per step, model FLOP/s and MFU; the run's time.

The trainer reports these in its summary; `keras_transformer.training.model_flops`
counts the FLOPs and knows the GPUs' peaks. `RunClock` tells the user how
long the whole run should take once an epoch is measured, and how long it
took.
"""

import statistics
import time

import keras

from keras_transformer.training import model_flops
from keras_transformer.training.train_input import first_batch_of_each_shape


class TrainingSpeed(keras.callbacks.Callback):
    """Times the training steps of each epoch, without validation or epoch-end work.

    An epoch's clock runs from `on_epoch_begin` to the start of its
    validation (or to its end, without validation). Before stopping it, it
    reads the optimizer's step counter, which waits for the last step to
    finish: GPUs run asynchronously, and the host would otherwise stop the
    clock while steps are still queued. The first epoch of a process also
    compiles, so `seconds_per_step` is the median of the later epochs when
    there are any.

    Args:
        steps_per_epoch: int, the steps `fit` runs in an epoch.
        flops_per_step: model FLOPs of one (global) training step, e.g.
            `model_flops.mean_training_flops(...)`, or None.
        devices: int, the devices that share each step.
        device_name: str, the accelerator's name (its bf16 peak is
            looked up in `model_flops.PEAK_BF16_FLOPS`), or None.
        log: callable that gets the one-line `describe(report())` when
            training ends, or None.

    Example:

    >>> import numpy as np
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> speed = TrainingSpeed(steps_per_epoch=2)
    >>> _ = model.fit(np.zeros((8, 2)), np.zeros((8, 1)), batch_size=4, epochs=3,
    ...               verbose=0, callbacks=[speed])
    >>> len(speed.epoch_seconds), speed.seconds_per_step() > 0
    (3, True)
    """

    def __init__(self, steps_per_epoch, flops_per_step=None, devices=1, device_name=None, log=None):
        super().__init__()
        self.steps_per_epoch = int(steps_per_epoch)
        self.flops_per_step = flops_per_step
        self.devices = devices
        self.device_name = device_name
        self.log = log
        self.epoch_seconds = []
        self.train_end_time = None  # time.time() when fit's epochs (and their end-of-epoch work) were done
        self._start = None

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def _stop(self):
        if self._start is None:
            return
        keras.ops.convert_to_numpy(self.model.optimizer.iterations)  # waits for the last step
        self.epoch_seconds.append(time.perf_counter() - self._start)
        self._start = None

    def on_test_begin(self, logs=None):
        self._stop()

    def on_epoch_end(self, epoch, logs=None):
        self._stop()

    def seconds_per_step(self):
        """Median seconds per training step, leaving out the first (compiling) epoch when there are others.

        Returns:
            float, or None before an epoch has ended.
        """
        epochs = self.epoch_seconds[1:] or self.epoch_seconds
        if not epochs:
            return None
        return statistics.median(epochs) / self.steps_per_epoch

    def on_train_end(self, logs=None):
        self.train_end_time = time.time()
        if self.log is not None:
            self.log(describe(self.report()))

    def report(self):
        """The speed figures of the trainer's summary, from the epochs timed and the constructor's figures.

        Returns:
            A dict: `train_step_seconds`, `timed_epochs`, `model_flops_per_step`,
            `model_flops_per_second`, `device`, `peak_flops` (all devices,
            dense bf16) and `mfu`; a figure that cannot be known is None.
        """
        flops_per_step, devices, device_name = self.flops_per_step, self.devices, self.device_name
        seconds = self.seconds_per_step()
        peak = model_flops.peak_flops(device_name) if device_name else None
        achieved = flops_per_step / seconds if flops_per_step and seconds else None
        return {
            "train_step_seconds": seconds,
            "timed_epochs": max(len(self.epoch_seconds) - 1, 0) or len(self.epoch_seconds),
            "model_flops_per_step": flops_per_step,
            "model_flops_per_second": achieved,
            "device": device_name or "cpu",
            "peak_flops": peak * devices if peak else None,
            "mfu": achieved / (peak * devices) if achieved and peak else None,
        }


def duration(seconds):
    """Seconds as people read them: `"45 s"`, `"12.5 min"`, `"2.1 h"`.

    Example:

    >>> duration(45.2), duration(750), duration(7560)
    ('45 s', '12.5 min', '2.1 h')
    """
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 100 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class RunClock(keras.callbacks.Callback):
    """Says how long the whole run should take, after the first two epochs it trains.

    After each of the first two virtual epochs a process trains, the time
    left is estimated as the epochs left times what an epoch costs once
    compiled: its median step times its steps, plus its time outside the
    steps (validation, dev BLEU, backup: everything else `fit` does). The
    steps' time beyond that median (tracing and XLA compiling each new
    batch shape) is stated apart, not projected onto the later epochs:
    counting epoch 1's compiling as every epoch's made the first estimate
    of the default run far longer than the run (docs/measured.md).
    `estimates` keeps both; the trainer compares the last with the run's
    time at its end. Place it after the callbacks whose epoch-end work it
    should count.

    Args:
        epochs: int, the run's virtual epochs (`fit`'s `epochs`).
        run_start: float, `time.time()` when the run began (reading the
            corpus, building the model count too).
        log: callable for one-line messages.

    Example:

    >>> import numpy as np, time
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse")
    >>> lines = []
    >>> _ = model.fit(np.zeros((8, 2)), np.zeros((8, 1)), batch_size=4, epochs=3, verbose=0,
    ...               callbacks=[RunClock(3, time.time(), lines.append)])
    >>> [line.split(":")[0] for line in lines]
    ['time after virtual epoch 1', 'time after virtual epoch 2']
    """

    def __init__(self, epochs, run_start, log=print):
        super().__init__()
        self.epochs = int(epochs)
        self.run_start = run_start
        self.log = log
        self.estimates = []  # (virtual epoch, estimated total seconds)
        self._last = None

    def on_train_begin(self, logs=None):
        self._last = time.time()

    def on_epoch_begin(self, epoch, logs=None):
        self._step_starts = []

    def on_train_batch_begin(self, batch, logs=None):
        # A batch's begin, not its end: Keras runs batch ends on a worker thread
        # when every callback allows it, and this callback must not forbid it.
        self._step_starts.append(time.time())

    def on_epoch_end(self, epoch, logs=None):
        now = time.time()
        epoch_seconds, self._last = now - self._last, now
        if len(self.estimates) >= 2:
            return
        steps = [end - start for start, end in zip(self._step_starts, self._step_starts[1:])]
        compiling = max(0.0, sum(steps) - statistics.median(steps) * len(steps)) if steps else 0.0
        left = self.epochs - (epoch + 1)
        total = now - self.run_start + left * (epoch_seconds - compiling)
        self.estimates.append((epoch + 1, total))
        apart = f" (of which about {duration(compiling)} compiling)" if compiling >= 0.1 * epoch_seconds else ""
        self.log(
            f"time after virtual epoch {epoch + 1}: it took {duration(epoch_seconds)}{apart}; "
            + (f"about {duration(total)} for the whole run, {duration(total - (now - self.run_start))} left "
               f"({left} more virtual epoch{'s' * (left != 1)})" if left else "the last one")
        )


class ValidationCompiledFirst(keras.callbacks.Callback):
    """Before the first epoch, evaluates one batch of each shape of the validation data, so its steps are compiled.

    XLA compiles the validation step once per batch shape, in the first
    epoch's validation: on the GPU default it took far longer than the
    epoch's steps, so `RunClock`'s first estimate, which counts an epoch's
    time outside its steps as every epoch's, was far longer than the run
    (benchmarks/findings/gpu.md, "The user's wait"). Compiled before
    `fit`'s first step, that time is spent once and known as spent. Only
    for a model that compiles its steps (`jit_compile`); it changes no
    weight (validation does not train) and no metric (`fit` resets them).

    Args:
        validation_data: what `fit` gets as `validation_data`: a
            `keras.utils.PyDataset` or any iterable of `(inputs, labels)`
            batches, read once here.

    Example:

    >>> import numpy as np
    >>> x, y = np.zeros((12, 2)), np.zeros((12, 1))
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile("sgd", "mse", jit_compile=True)
    >>> shapes = ValidationCompiledFirst([(x[:4], y[:4]), (x[4:], y[4:]), (x[:4], y[:4])])
    >>> _ = model.fit(x, y, epochs=1, verbose=0, validation_data=(x, y), callbacks=[shapes])
    >>> shapes.compiled
    2
    """

    def __init__(self, validation_data):
        super().__init__()
        self.validation_data = validation_data
        self.compiled = 0

    def on_train_begin(self, logs=None):
        if not getattr(self.model, "jit_compile", False) or self.validation_data is None:
            return
        first = first_batch_of_each_shape(self.validation_data)
        if first:
            self.model.evaluate(_Batches(first), verbose=0)
        self.compiled = len(first)


class _Batches(keras.utils.PyDataset):
    """A list of batches as a `PyDataset`, which `evaluate` reads as it reads `fit`'s validation data."""

    def __init__(self, batches):
        super().__init__()
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        return self.batches[index]


def describe(report):
    """One line for people from `TrainingSpeed.report`'s dict.

    Args:
        report: dict from `TrainingSpeed.report`.

    Returns:
        str.

    Example:

    >>> describe({"train_step_seconds": 0.1, "timed_epochs": 4, "model_flops_per_second": 9.89e13,
    ...           "device": "NVIDIA H100 80GB HBM3", "peak_flops": 9.89e14, "mfu": 0.1})
    'speed: 0.100 s a step (median of 4 epochs), 98.9 model TFLOP/s, MFU 10.0 % of NVIDIA H100 80GB HBM3 (989 TFLOP/s bf16 peak)'
    >>> describe({"train_step_seconds": 1.2, "timed_epochs": 1, "model_flops_per_second": 2.5e11,
    ...           "device": "cpu", "peak_flops": None, "mfu": None})
    'speed: 1.200 s a step (median of 1 epoch), 0.25 model TFLOP/s, MFU unknown (no peak known for cpu)'
    """
    if report["train_step_seconds"] is None:
        return "speed: no epoch was timed"
    epochs = report["timed_epochs"]
    line = f"speed: {report['train_step_seconds']:.3f} s a step (median of {epochs} epoch{'s' * (epochs != 1)})"
    achieved = report["model_flops_per_second"]
    if achieved:
        line += f", {achieved / 1e12:.{1 if achieved >= 1e13 else 2}f} model TFLOP/s"
    if report["mfu"] is not None:
        line += (f", MFU {report['mfu'] * 100:.1f} % of {report['device']} "
                 f"({report['peak_flops'] / 1e12:,.0f} TFLOP/s bf16 peak)")
    else:
        line += f", MFU unknown (no peak known for {report['device']})"
    return line


__all__ = ["TrainingSpeed", "describe"]
