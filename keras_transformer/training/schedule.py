"""The paper's learning-rate schedule: warm-up, then inverse square root decay.

Backend-agnostic (`keras.ops` only) and serializable, so an optimizer
built on it saves and reloads with its model as `.keras`.
"""

import keras
from keras import ops

_PACKAGE = "keras_transformer"


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Warm-up then inverse square root decay (section 5.3 of the paper).

    `lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`,
    with `step` counted from 1: linear growth for `warmup_steps` steps, then
    decay as 1/sqrt(step).

    Args:
        d_model: int, the model width.
        warmup_steps: int, steps of linear warm-up. Defaults to 4000.
        scale: float, multiplies the whole schedule. Defaults to 1.0.

    Example:

    >>> schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 6)  # peak, at step 4000
    0.000699
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        if d_model < 1 or warmup_steps < 1:
            raise ValueError(
                "TransformerSchedule needs d_model >= 1 and warmup_steps >= 1, got "
                f"d_model={d_model}, warmup_steps={warmup_steps}."
            )
        self.d_model = int(d_model)
        self.warmup_steps = int(warmup_steps)
        self.scale = float(scale)

    @classmethod
    def with_peak(cls, d_model, warmup_steps, peak):
        """The schedule of this shape whose peak, at `warmup_steps`, is `peak`.

        Example:

        >>> schedule = TransformerSchedule.with_peak(128, warmup_steps=50, peak=1e-3)
        >>> round(float(schedule(49)), 6), round(float(schedule(199)), 6)  # the peak, then 1/sqrt(step)
        (0.001, 0.0005)
        """
        return cls(d_model, warmup_steps=warmup_steps, scale=peak * (d_model * warmup_steps) ** 0.5)

    def __call__(self, step):
        # Optimizer iterations start at 0; the paper's step starts at 1.
        step = ops.cast(step, "float32") + 1.0
        decay = ops.minimum(ops.rsqrt(step), step * self.warmup_steps**-1.5)
        return self.scale * self.d_model**-0.5 * decay

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}
