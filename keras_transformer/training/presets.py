"""The presets: each one's model sizes, and what its runs train with on this machine.

`TrainConfig` (`keras_transformer.training.train_config`) takes a preset's sizes and
training defaults for the fields a run leaves at None. Importing this module
imports neither Keras nor a backend.
"""

from keras_transformer.data.batch_plan import BUCKET_WIDTH
from keras_transformer.machine import has_accelerator

PRESETS = {
    "tiny": dict(num_layers=2, d_model=128, num_heads=4, ff_dim=512),
    "small": dict(num_layers=3, d_model=256, num_heads=4, ff_dim=1024),
    "base": dict(num_layers=6, d_model=512, num_heads=8, ff_dim=2048),
    "big": dict(num_layers=6, d_model=1024, num_heads=16, ff_dim=4096),
}
# Training defaults per preset, for the fields left at None. tiny is the CPU
# default: a 4,000-piece vocabulary makes a step faster than 8,000 pieces, so
# twice the former 800 steps take only a little longer, for a much higher
# test BLEU (benchmarks/findings/recipes-and-scale.md, "Training recipes").
TRAINING_DEFAULTS = {
    "tiny": dict(epochs=16, steps_per_epoch=100, warmup_steps=400, vocabulary_size=4000, batch_tokens=4096),
    "small": dict(epochs=8, steps_per_epoch=100, warmup_steps=400, vocabulary_size=8000, batch_tokens=4096),
    "base": dict(epochs=20, steps_per_epoch=500, warmup_steps=4000, vocabulary_size=8000, batch_tokens=4096),
    "big": dict(epochs=20, steps_per_epoch=500, warmup_steps=4000, vocabulary_size=8000, batch_tokens=4096),
}
# On a GPU or TPU, what replaces a preset's TRAINING_DEFAULTS. tiny stays the
# default there: of six recipes raced on one GPU (JAX, bf16), tiny with
# batches twice as large, 3,000 steps and 1,000 warm-up steps scored best,
# ahead of small, and base diverged at the peak learning rate of that
# warm-up (benchmarks/findings/gpu.md, "The GPU default"). Its step is bound
# by the host: more tokens a step are nearly free there, unlike on a CPU.
ACCELERATOR_TRAINING_DEFAULTS = {
    "tiny": dict(epochs=12, steps_per_epoch=250, warmup_steps=1000, batch_tokens=8192),
}
DEFAULT_PRESET = "tiny"


def hardware_defaults():
    """The settings a run takes from the machine when it does not set them.

    On a GPU or TPU, batches are padded to multiples of 32 tokens (JAX
    compiles one program per padded length). On a GPU with bf16 tensor
    cores (one `model_flops.PEAK_BF16_FLOPS` names) the model computes in
    bfloat16 with float32 weights: on a GPU the base model trained
    finitely in bf16 on both JAX and torch (benchmarks/findings/gpu.md).

    Returns:
        dict: `bucket_width`, `mixed_precision` (None: float32).

    Example:

    >>> sorted(hardware_defaults())
    ['bucket_width', 'mixed_precision']
    """
    from keras_transformer.training import model_flops

    accelerator = has_accelerator()
    bf16 = accelerator and model_flops.peak_flops(model_flops.accelerator_name()) is not None
    return {"bucket_width": 32 if accelerator else BUCKET_WIDTH, "mixed_precision": "bfloat16" if bf16 else None}


def training_defaults(preset):
    """What a run of `preset` trains with where it leaves a setting open, on this machine.

    Args:
        preset: a name of `PRESETS`.

    Returns:
        dict: `epochs`, `steps_per_epoch`, `warmup_steps`,
        `vocabulary_size`, `batch_tokens`: `TRAINING_DEFAULTS[preset]`,
        updated by `ACCELERATOR_TRAINING_DEFAULTS` on a GPU or TPU.

    Example:

    >>> training_defaults("base")["warmup_steps"]
    4000
    """
    defaults = dict(TRAINING_DEFAULTS[preset])
    if has_accelerator():
        defaults.update(ACCELERATOR_TRAINING_DEFAULTS.get(preset, {}))
    return defaults
