"""Stopping a run at its first NaN or infinite loss, with the last good backup kept and a message saying what to try."""

import math
import os
import threading

import keras

from keras_transformer.training import run_folder
from keras_transformer.errors import UserInputError


class NonFiniteLoss(Exception):
    """The loss of training step `step` (counted from 1 over the whole run) was `value`, NaN or infinite.

    Example:

    >>> str(NonFiniteLoss(8, float("nan")))
    'loss nan at step 8'
    """

    def __init__(self, step, value):
        super().__init__(f"loss {value} at step {step}")
        self.step, self.value = step, value


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Stops at the first step whose loss is NaN or infinite.

    `keras.callbacks.TerminateOnNaN` only asks `fit` to stop: `fit` then
    ends the epoch, so `BackupAndRestore` backs up the broken weights over
    the good ones and deletes its backups when training ends. Raising out
    of `fit` skips all of that: the last good backup stays on disk.

    It is `async_safe`: on JAX and torch, Keras then checks the steps'
    losses on worker threads while the host queues the next steps, and an
    error raised there reaches `fit` at a later step's end or, at the
    latest, before the epoch's backup. The workers run several checks at
    once and Keras may surface a later step's error first, so the step to
    report is `first_failure()`, not the error's.

    Args:
        steps_per_epoch: int, the run's steps per virtual epoch.

    Example:

    >>> check = StopOnNonFiniteLoss(steps_per_epoch=3)
    >>> check.on_epoch_begin(1)
    >>> check.on_train_batch_begin(0)
    >>> try:
    ...     check.on_train_batch_end(0, {"loss": float("inf")})
    ... except NonFiniteLoss as stop:
    ...     print(stop)
    loss inf at step 4
    >>> check.first_failure().step
    4
    """

    async_safe = True

    def __init__(self, steps_per_epoch):
        super().__init__()
        self.steps_per_epoch = steps_per_epoch
        self.epoch = 0
        self._checks = threading.Condition()
        self._steps_begun, self._steps_checked = [], set()
        self._first = None

    def on_epoch_begin(self, epoch, logs=None):
        # Keras has run every check of the last epoch before its end: only this epoch's steps are kept.
        with self._checks:
            self.epoch = epoch
            self._steps_begun, self._steps_checked = [], set()

    def on_train_batch_begin(self, batch, logs=None):
        with self._checks:  # on the main thread, in step order
            self._steps_begun.append(self._step(batch))

    def _step(self, batch):
        return self.epoch * self.steps_per_epoch + batch + 1

    def on_train_batch_end(self, batch, logs=None):
        step, loss = self._step(batch), None
        try:
            if (logs or {}).get("loss") is not None:
                # The epoch's running mean: NaN or infinite from the first bad step on.
                loss = float(keras.ops.convert_to_numpy(logs["loss"]))
        finally:
            with self._checks:
                self._steps_checked.add(step)
                if loss is not None and not math.isfinite(loss) and (self._first is None or step < self._first.step):
                    self._first = NonFiniteLoss(step, loss)
                self._checks.notify_all()
        if loss is not None and not math.isfinite(loss):
            raise NonFiniteLoss(step, loss)

    def first_failure(self, timeout=60.0):
        """The earliest step found non-finite, once every step begun before it is checked.

        Only the steps before it: Keras raises a check's error when it
        dispatches a later step's, so the step begun last may never be
        checked (waiting for it cost the whole timeout on torch).

        Args:
            timeout: float, the most seconds to wait for checks still running.

        Returns:
            A `NonFiniteLoss`, or None if no step was found non-finite.
        """
        def earlier_steps_checked():
            last = math.inf if self._first is None else self._first.step
            return all(step in self._steps_checked for step in self._steps_begun if step < last)

        with self._checks:
            self._checks.wait_for(earlier_steps_checked, timeout)
            return self._first


def stop_error(stop, config):
    """The one-line error a run stopped by a non-finite loss ends with: the step, the backup kept, what to try.

    Args:
        stop: the `NonFiniteLoss` of the earliest bad step.
        config: the run's resolved `TrainConfig`.

    Returns:
        A `UserInputError`.

    Example:

    >>> from keras_transformer.training.train_config import TrainConfig
    >>> config = TrainConfig(output="run", steps_per_epoch=3, mixed_precision=None)
    >>> str(stop_error(NonFiniteLoss(8, float("nan")), config))[:60]
    'the training loss became nan at step 8; training stopped the'
    """
    good_epochs = (stop.step - 1) // config.steps_per_epoch
    kept = (
        f"{os.path.join(config.output, run_folder.BACKUP_FOLDER)} keeps the state after step "
        f"{good_epochs * config.steps_per_epoch} (virtual epoch {good_epochs}), and nothing was saved after it"
        if good_epochs else "no virtual epoch had finished, so there is no backup and nothing was saved"
    )
    if config.mixed_precision and config.flash_attention is not False:
        advice = (
            "Under mixed precision the attention runs on the backend's fused kernel: try the explicit "
            "attention path first (the same command plus --no-flash-attention resumes from the backup), "
            "then float32 (--mixed-precision float32, with --overwrite)"
            + (", or bfloat16 rather than float16" if config.mixed_precision == "float16" else "")
            + "; a lower learning rate (a larger --warmup-steps, with --overwrite) helps if neither does."
        )
    else:
        advice = (
            "Lower the learning rate (a larger --warmup-steps)"
            + (" or train in float32 (--mixed-precision float32)" if config.mixed_precision else "")
            + " and start again with --overwrite; the same command resumes from the backup but will "
            "probably fail at the same step."
        )
    return UserInputError(
        f"the training loss became {stop.value} at step {stop.step}; training stopped there. {kept}. {advice}"
    )
