"""What the machine is, in one place: an accelerator, the CPU model, its flags, its cores.

Timings and defaults depend on these facts: `keras-transformer train`
picks its preset, and the `Translator` its batch size, by whether an
accelerator is present; a CPU with AVX-512 ran the default training much
faster than one without (docs/measured.md), so every timing names the
CPU it was measured on, with the instruction sets that change speed.
Training, decoding, the command line and the benchmarks read them here.
"""

import os

from keras_transformer_runtime.cpu import cpu_flags  # noqa: F401  (re-exported: timings name the CPU)
from keras_transformer_runtime.cpu import cpu_model  # noqa: F401

#: The CPU flags (as `/proc/cpuinfo` names them) that change how fast
#: this package runs on a CPU, and how the docs name them.
SPEED_FLAGS = (("avx512f", "AVX-512"), ("avx512_bf16", "AVX512_BF16"), ("amx_tile", "AMX"))


def has_accelerator():
    """True when Keras sees a GPU or TPU.

    Example:

    >>> has_accelerator() in (True, False)
    True
    """
    import keras

    if keras.backend.backend() == "torch":  # keras.distribution does not cover torch
        import torch

        return torch.cuda.is_available()
    return any(
        kind in device.lower()
        for device in keras.distribution.list_devices()
        for kind in ("gpu", "tpu", "cuda")
    )


def describe_cpu():
    """The CPU as timings name it: model, cores, and the speed-relevant flags it has or lacks.

    Example:

    >>> description = describe_cpu()
    >>> "cores" in description and "AVX-512" in description
    True
    """
    flags = cpu_flags()
    have = [label for flag, label in SPEED_FLAGS if flag in flags]
    lacking = "" if "avx512f" in flags else ", no AVX-512"
    return f"{cpu_model()}, {os.cpu_count()} cores" + "".join(f", {label}" for label in have) + lacking
