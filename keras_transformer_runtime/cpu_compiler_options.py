"""XLA's options for compiling a decoding program on a CPU: its own code for the matrix products, not YNNPACK's.

XLA's CPU backend hands a matrix product of more than one row to YNNPACK,
a library call that splits it over XLA's threads. A decoding step of the
README's model multiplies 4 to 32 rows at a time, dozens of products a
step, with one batch a core already decoding side by side: there, a call
into the library costs more than it saves. On a 2-core AMD EPYC without
AVX-512 (2026-11-28, JAX 0.10.2), the engine translated the 605 test
sentences at 199-210 sentences/s greedy and 72.9-74.2 with beam 4 with
XLA's own code, against 156-171 and 58.0 with YNNPACK, the same
translations (benchmarks/results/cpu-engine-without-ynnpack).

A JAX whose XLA does not know the option compiles as it would without it.
"""

# An empty list of fusion kinds: no product goes to YNNPACK.
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def compile_for_cpu(lowered):
    """`lowered.compile()` with `CPU_COMPILER_OPTIONS` when it runs on a CPU, else as it is.

    Args:
        lowered: a `jax.stages.Lowered` (`jax.jit(f).lower(...)`).

    Returns:
        The `jax.stages.Compiled`. On a CPU whose XLA refuses the options
        (an older JAX), the one compiled without them.

    Example:

    >>> import jax, numpy as np
    >>> lowered = jax.jit(lambda a, b: a @ b).lower(np.ones((8, 16), np.float32), np.ones((16, 4), np.float32))
    >>> compile_for_cpu(lowered)(np.ones((8, 16), np.float32), np.ones((16, 4), np.float32))[0, 0].item()
    16.0
    """
    import jax

    if jax.default_backend() != "cpu":
        return lowered.compile()
    try:
        return lowered.compile(compiler_options=CPU_COMPILER_OPTIONS)
    except Exception:  # noqa: BLE001  (XLA's error for an option it does not know has no type of its own)
        return lowered.compile()
