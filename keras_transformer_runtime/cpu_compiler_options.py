"""How the engine's programs meet XLA's CPU kernels: YNNPACK's products or XLA's own, and a lone sentence's rows.

XLA's CPU backend hands a matrix product of more than one row to YNNPACK,
a library call that splits it over XLA's threads, and emits its own code
for a product of one row (where it widens int8 weights to float32 at every
call). Two choices follow, each measured (benchmarks/findings/decoding.md,
"The gap to CTranslate2 on a CPU without AVX-512" and "On a CPU with
AVX-512 and AMX"):

- **YNNPACK or XLA's own code.** A decoding step of the README's model
  (128 wide) multiplies 4 to 32 rows at a time, dozens of small products.
  On a CPU without AVX-512 the engine translated the test sentences faster
  with XLA's own code; on one with AVX-512 it ran slower, so YNNPACK stays
  there. At opus-mt-es-en's width (512) float32 steps took about as long
  without YNNPACK, and int8 ones far longer: YNNPACK's int8 product is the
  fast one. So only a float32 program of a model at most
  `YNNPACK_FREE_WIDTH` wide, on a CPU without AVX-512, leaves YNNPACK.
- **A lone sentence's rows.** On a CPU with AMX, YNNPACK multiplies int8
  matrices of several rows in AMX tiles: a greedy step of a quantized
  opus-mt-es-en-shaped model ran faster for a lone sentence decoded in 4
  rows than in one; at the README model's width (128) 4 rows were slower.
  On one without AMX, YNNPACK multiplies two rows or more as int8, where
  XLA's own code widens one row's int8 weights to int32 (at NLLB-200's
  size, gigabytes held and a slower step: "The output projection as the
  token matrix lies, weights mapped in place"). With AVX-512 VNNI two rows
  pay from opus-mt-es-en's width (512); with AVX2 alone only from
  NLLB-200's (1,024: "On a CPU without AVX-512"). So a
  quantized program at least `AMX_INT8_WIDTH` wide decodes a lone sentence
  as enough copies to give its products `AMX_INT8_ROWS` rows with AMX,
  `INT8_ROWS` with VNNI, and at least `AVX2_INT8_WIDTH` wide `INT8_ROWS`
  with AVX2 (a beam has them already), the copies' translations dropped.

A JAX whose XLA does not know the option compiles as it would without it.
"""

import numpy as np

from keras_transformer_runtime.cpu import cpu_flags

# An empty list of fusion kinds: no product goes to YNNPACK.
CPU_COMPILER_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}
# The widest model (the largest of its matrices' smaller sides) whose programs leave YNNPACK.
YNNPACK_FREE_WIDTH = 256
# Rows a quantized product needs on a CPU with AMX: from these on YNNPACK multiplies int8 in AMX tiles.
AMX_INT8_ROWS = 4
# Rows a quantized product needs on an x86 CPU without AMX (AVX2, AVX-512 VNNI): from two on YNNPACK multiplies
# int8 as int8; one row is XLA's own code, which widens the int8 weights to int32 (a gigabyte at NLLB-200's
# vocabulary).
INT8_ROWS = 2
# The narrowest model whose lone sentence gets those rows (with AMX, 512 wide gained and 128 lost).
AMX_INT8_WIDTH = 512
# With AVX2 and no VNNI: the narrowest model that gets `INT8_ROWS` (narrower ones decode faster in one row).
AVX2_INT8_WIDTH = 1024


def is_quantized(weights):
    """Whether a program's weights hold an integer matrix, a quantized product's kernel.

    Args:
        weights: the program's weight arrays (anything with `shape` and `dtype`).

    Returns:
        bool: an integer array of two or more dimensions among them (an
        integer vector is a dropout's seed, say, not a kernel).

    Example:

    >>> is_quantized([np.zeros((128, 512), np.int8)]), is_quantized([np.zeros((2,), np.uint32)])
    (True, False)
    """
    return any(np.issubdtype(np.dtype(w.dtype), np.integer) for w in weights if len(w.shape) >= 2)


def model_width(weights):
    """A model's width as its weights show it: the largest of its matrices' smaller sides.

    Args:
        weights: the program's weight arrays (anything with `shape`).

    Returns:
        int: the width, 0 when no weight is a matrix.

    Example:

    >>> model_width([np.zeros((4000, 128)), np.zeros((128, 512)), np.zeros((512,))])
    128
    """
    return max((min(w.shape) for w in weights if len(w.shape) == 2), default=0)


def leaves_ynnpack(weights, flags=None):
    """Whether a program of these weights is compiled without YNNPACK: float32, at most 256 wide, no AVX-512.

    Args:
        weights: the program's weight arrays (anything with `shape` and `dtype`).
        flags: the CPU's flags (`cpu_flags()` when None).

    Returns:
        bool: not quantized (`is_quantized`), no matrix whose smaller side
        is wider than `YNNPACK_FREE_WIDTH`, and a CPU without AVX-512.

    Example:

    >>> tiny = [np.zeros((4000, 128), np.float32), np.zeros((128, 512), np.float32)]
    >>> leaves_ynnpack(tiny, {"avx2"}), leaves_ynnpack([np.zeros((512, 2048), np.float32)], {"avx2"})
    (True, False)
    >>> leaves_ynnpack(tiny + [np.zeros((128, 512), np.int8)], {"avx2"}), leaves_ynnpack(tiny, {"avx512f"})
    (False, False)
    """
    flags = cpu_flags() if flags is None else flags
    if "avx512f" in flags or is_quantized(weights):
        return False
    return 0 < model_width(weights) <= YNNPACK_FREE_WIDTH


def lone_sentence_rows(weights, beam_width=1, flags=None):
    """The sentences a lone sentence decodes as on a CPU: copies of it for a quantized program where rows pay.

    Args:
        weights: the program's weight arrays (`is_quantized`).
        beam_width: the program's beam; a batch of `n` sentences has
            `n * beam_width` rows.
        flags: the CPU's flags (`cpu_flags()` when None).

    Returns:
        int: for a quantized program at least `AMX_INT8_WIDTH` wide, the
        fewest sentences whose rows reach `AMX_INT8_ROWS` on a CPU with
        `amx_int8`, `INT8_ROWS` on one with `avx512_vnni`, and on one with
        `avx2` alone if at least `AVX2_INT8_WIDTH` wide; else 1.

    Example:

    >>> int8 = [np.zeros((512, 2048), np.int8)]
    >>> lone_sentence_rows(int8, 1, {"amx_int8"}), lone_sentence_rows(int8, 4, {"amx_int8"})
    (4, 1)
    >>> lone_sentence_rows(int8, 1, {"avx2", "avx512_vnni"}), lone_sentence_rows(int8, 1, {"avx2"})
    (2, 1)
    >>> lone_sentence_rows([np.zeros((1024, 4096), np.int8)], 1, {"avx2"})
    2
    >>> lone_sentence_rows([np.zeros((128, 512), np.int8)], 1, {"amx_int8"})
    1
    """
    flags = cpu_flags() if flags is None else flags
    if not is_quantized(weights) or model_width(weights) < AMX_INT8_WIDTH:
        return 1
    if "amx_int8" in flags:
        rows = AMX_INT8_ROWS
    elif "avx512_vnni" in flags or ("avx2" in flags and model_width(weights) >= AVX2_INT8_WIDTH):
        rows = INT8_ROWS
    else:
        rows = 1
    return max(1, -(-rows // int(beam_width)))


def compile_for_cpu(lowered, weights, flags=None):
    """`lowered.compile()`, with `CPU_COMPILER_OPTIONS` on a CPU when `leaves_ynnpack(weights, flags)`.

    Args:
        lowered: a `jax.stages.Lowered` (`jax.jit(f).lower(...)`).
        weights: the program's weight arrays (`leaves_ynnpack`).
        flags: the CPU's flags (`cpu_flags()` when None).

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

    if jax.default_backend() != "cpu" or not leaves_ynnpack(weights, flags):
        return lowered.compile()
    try:
        return lowered.compile(compiler_options=CPU_COMPILER_OPTIONS)
    except Exception:  # noqa: BLE001  (XLA's error for an option it does not know has no type of its own)
        return lowered.compile()
