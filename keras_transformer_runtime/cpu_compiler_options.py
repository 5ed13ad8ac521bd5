"""XLA's options for compiling a decoding program on a CPU: its own code for a small model's products, not YNNPACK's.

XLA's CPU backend hands a matrix product of more than one row to YNNPACK,
a library call that splits it over XLA's threads. A decoding step of the
README's model (128 wide) multiplies 4 to 32 rows at a time, dozens of
small products a step, with one batch a core already decoding side by
side: there, a call into the library costs more than it saves. On a
2-core AMD EPYC without AVX-512 (2026-11-28, JAX 0.10.2), the engine
translated the 605 test sentences 1.22x (greedy) and 1.26x (beam 4) faster
with XLA's own code, the same translations. At opus-mt-es-en's width
(512) float32 steps took 0.93-1.13x their time with YNNPACK, and int8 ones
1.15-3.2x: YNNPACK's int8 product is the fast one
(benchmarks/results/cpu-engine-without-ynnpack). So only a float32
program of a model at most `YNNPACK_FREE_WIDTH` wide leaves YNNPACK.

A JAX whose XLA does not know the option compiles as it would without it.
"""

import numpy as np

# An empty list of fusion kinds: no product goes to YNNPACK.
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}
# The widest model (the largest of its matrices' smaller sides) whose programs leave YNNPACK.
YNNPACK_FREE_WIDTH = 256


def leaves_ynnpack(weights):
    """Whether a program of these weights is compiled without YNNPACK on a CPU: float32, at most 256 wide.

    Args:
        weights: the program's weight arrays (anything with `shape` and `dtype`).

    Returns:
        bool: no integer matrix (a quantized model's products are
        YNNPACK's fastest), and no matrix whose smaller side is wider
        than `YNNPACK_FREE_WIDTH`.

    Example:

    >>> tiny = [np.zeros((4000, 128), np.float32), np.zeros((128, 512), np.float32)]
    >>> leaves_ynnpack(tiny), leaves_ynnpack([np.zeros((512, 2048), np.float32)])
    (True, False)
    >>> leaves_ynnpack(tiny + [np.zeros((2,), np.uint32)]), leaves_ynnpack(tiny + [np.zeros((128, 512), np.int8)])
    (True, False)
    """
    matrices = [w for w in weights if len(w.shape) == 2]
    # An integer kernel is a quantized product's; an integer vector, a dropout's seed, say.
    if not matrices or any(np.issubdtype(np.dtype(w.dtype), np.integer) for w in weights if len(w.shape) >= 2):
        return False
    return max(min(w.shape) for w in matrices) <= YNNPACK_FREE_WIDTH


def compile_for_cpu(lowered, weights):
    """`lowered.compile()`, with `CPU_COMPILER_OPTIONS` on a CPU when `leaves_ynnpack(weights)`.

    Args:
        lowered: a `jax.stages.Lowered` (`jax.jit(f).lower(...)`).
        weights: the program's weight arrays (`leaves_ynnpack`).

    Returns:
        The `jax.stages.Compiled`. On a CPU whose XLA refuses the options
        (an older JAX), the one compiled without them.

    Example:

    >>> import jax
    >>> a, w = np.ones((8, 16), np.float32), np.ones((16, 4), np.float32)
    >>> compile_for_cpu(jax.jit(lambda a, w: a @ w).lower(a, w), [w])(a, w)[0, 0].item()
    16.0
    """
    import jax

    if jax.default_backend() != "cpu" or not leaves_ynnpack(weights):
        return lowered.compile()
    try:
        return lowered.compile(compiler_options=CPU_COMPILER_OPTIONS)
    except Exception:  # noqa: BLE001  (XLA's error for an option it does not know has no type of its own)
        return lowered.compile()
