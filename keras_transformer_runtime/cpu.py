"""The CPU this process runs on, as `/proc/cpuinfo` names it: its model and its feature flags.

Kept in the runtime, which imports no Keras, because the compiled engine
chooses by them how XLA compiles its programs and how many rows a lone
sentence decodes in (`cpu_compiler_options`); `keras_transformer.machine`
names the CPU in every timing from the same two functions.
"""

import functools
import platform


def _cpuinfo_field(name):
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":", 1)[0].strip() == name:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model():
    """The CPU's model name, as `/proc/cpuinfo`'s `model name` line gives it (else `platform`'s).

    Returns:
        str: the model name.

    Example:

    >>> isinstance(cpu_model(), str)
    True
    """
    return _cpuinfo_field("model name") or platform.processor() or platform.machine()


@functools.lru_cache(maxsize=None)
def _flags():
    return frozenset((_cpuinfo_field("flags") or "").split())


def cpu_flags():
    """The CPU's feature flags as a set of `/proc/cpuinfo` names (empty where unknown).

    Returns:
        set: e.g. `{"avx2", "fma", "avx512f", "amx_int8", ...}`; read once a process.

    Example:

    >>> isinstance(cpu_flags(), set)
    True
    """
    return set(_flags())
