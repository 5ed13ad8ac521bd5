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
# default: a 4,000-piece vocabulary makes a step 1.57x faster than 8,000
# pieces, so 1,600 steps take 1.28x the time of the former 800; test BLEU
# 18.2 -> 26.6 (benchmarks/findings/recipes-and-scale.md).
TRAINING_DEFAULTS = {
    "tiny": dict(epochs=16, steps_per_epoch=100, warmup_steps=400, vocabulary_size=4000, batch_tokens=4096),
    "small": dict(epochs=8, steps_per_epoch=100, warmup_steps=400, vocabulary_size=8000, batch_tokens=4096),
    "base": dict(epochs=20, steps_per_epoch=500, warmup_steps=4000, vocabulary_size=8000, batch_tokens=4096),
    "big": dict(epochs=20, steps_per_epoch=500, warmup_steps=4000, vocabulary_size=8000, batch_tokens=4096),
}
# On a GPU or TPU, what replaces a preset's TRAINING_DEFAULTS. tiny stays the
# default there: six recipes raced on one H200 (JAX, bf16), and tiny with
# batches twice as large, 3,000 steps and 1,000 warm-up steps scored best
# (test BLEU 35.27, held-out 24.94), ahead of small (29.44 / 20.72 in 1,500
# steps) and of base, which diverged at a 1.4e-3 peak (torch: NaN at step
# 1,156); run alone, 115 s from the command to the saved model, test 35.22,
# held-out 24.49 (benchmarks/results/gpu-h200-recipe-race, gpu-h200-default).
# Its step is bound by the host (3.7 ms, 2 % MFU): more tokens a step are
# nearly free there, unlike on a CPU.
ACCELERATOR_TRAINING_DEFAULTS = {
    "tiny": dict(epochs=12, steps_per_epoch=250, warmup_steps=1000, batch_tokens=8192),
}
DEFAULT_PRESET = "tiny"


def hardware_defaults():
    """The settings a run takes from the machine when it does not set them.

    On a GPU or TPU, batches are padded to multiples of 32 tokens (JAX
    compiles one program per padded length). On a GPU with bf16 tensor
    cores (one `model_flops.PEAK_BF16_FLOPS` names) the model computes in
    bfloat16 with float32 weights: on an H100 the base model trained
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
