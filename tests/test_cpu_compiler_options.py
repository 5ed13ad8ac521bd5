"""The engine's programs on a CPU: a small float32 model's without YNNPACK where that pays, the same numbers,
older XLAs unharmed; a quantized lone sentence in several rows where AMX multiplies."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from keras_transformer_runtime.cpu_compiler_options import CPU_COMPILER_OPTIONS  # noqa: E402
from keras_transformer_runtime.cpu_compiler_options import compile_for_cpu  # noqa: E402
from keras_transformer_runtime.cpu_compiler_options import leaves_ynnpack  # noqa: E402
from keras_transformer_runtime.cpu_compiler_options import lone_sentence_rows  # noqa: E402

WITHOUT_AVX512 = {"avx2", "fma"}


def _lowered(rows=8):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((rows, 128), np.float32), rng.standard_normal((128, 512), np.float32)
    return jax.jit(lambda x, w: jax.nn.relu(x @ w)).lower(a, b), (a, b)


def test_a_product_of_several_rows_leaves_ynnpack_and_gives_the_same_numbers():
    if jax.default_backend() != "cpu":
        pytest.skip("the options are for XLA's CPU backend")
    lowered, inputs = _lowered()
    plain = lowered.compile()
    if "__ynn_fusion" not in plain.as_text():
        pytest.skip("this JAX's XLA sends no product to YNNPACK")
    ours = compile_for_cpu(lowered, [inputs[1]], WITHOUT_AVX512)
    assert "__ynn_fusion" not in ours.as_text()
    np.testing.assert_allclose(np.asarray(ours(*inputs)), np.asarray(plain(*inputs)), rtol=1e-5, atol=1e-5)
    # A quantized model's weights, or a wide model's, or a CPU with AVX-512 keep YNNPACK's products.
    assert "__ynn_fusion" in compile_for_cpu(lowered, [inputs[1], np.zeros((8, 8), np.int8)], WITHOUT_AVX512).as_text()
    assert "__ynn_fusion" in compile_for_cpu(lowered, [np.zeros((512, 2048), np.float32)], WITHOUT_AVX512).as_text()
    assert "__ynn_fusion" in compile_for_cpu(lowered, [inputs[1]], WITHOUT_AVX512 | {"avx512f"}).as_text()


def test_only_float32_models_at_most_256_wide_leave_ynnpack_on_a_cpu_without_avx512():
    def matrix(rows, columns, dtype=np.float32):
        return np.zeros((rows, columns), dtype)

    # A dropout's seed is an integer weight too, not a quantized product's.
    tiny = [matrix(4000, 128), matrix(128, 512), np.zeros((128,), np.float32), np.zeros((2,), np.uint32)]
    assert leaves_ynnpack(tiny, WITHOUT_AVX512)
    assert not leaves_ynnpack(tiny, WITHOUT_AVX512 | {"avx512f"})
    assert leaves_ynnpack([matrix(8000, 256), matrix(256, 1024)], WITHOUT_AVX512)
    assert not leaves_ynnpack([matrix(65001, 512), matrix(512, 2048)], WITHOUT_AVX512)
    assert not leaves_ynnpack([matrix(4000, 128), matrix(128, 512, np.int8), np.zeros((512,), np.float32)],
                              WITHOUT_AVX512)
    assert not leaves_ynnpack([np.zeros((3,), np.float32)], WITHOUT_AVX512)


def test_a_quantized_lone_sentence_takes_several_rows_only_where_the_cpu_multiplies_int8_rows_as_int8():
    int8 = [np.zeros((65001, 512), np.float32), np.zeros((512, 2048), np.int8), np.zeros((2,), np.uint32)]
    float32 = [np.zeros((65001, 512), np.float32), np.zeros((2,), np.uint32)]  # a dropout's seed is no kernel
    narrow = [np.zeros((4000, 128), np.float32), np.zeros((128, 512), np.int8)]  # the README's model: slower so
    amx = WITHOUT_AVX512 | {"avx512f", "avx512_vnni", "amx_tile", "amx_int8"}
    assert lone_sentence_rows(int8, 1, amx) == 4
    assert lone_sentence_rows(int8, 2, amx) == 2  # a beam's rows count: 2 sentences of 2 hypotheses
    assert lone_sentence_rows(int8, 4, amx) == 1
    vnni = amx - {"amx_tile", "amx_int8"}  # YNNPACK multiplies two rows or more as int8; one row is widened
    assert lone_sentence_rows(int8, 1, vnni) == 2
    assert lone_sentence_rows(int8, 2, vnni) == 1
    assert lone_sentence_rows(int8, 1, WITHOUT_AVX512) == 1  # AVX2 alone at 512 wide: one row was the faster
    nllb = [np.zeros((256206, 1024), np.float32), np.zeros((1024, 4096), np.int8)]
    assert lone_sentence_rows(nllb, 1, WITHOUT_AVX512) == 2  # at 1,024 wide two rows were
    assert lone_sentence_rows(nllb, 1, WITHOUT_AVX512 - {"avx2"}) == 1
    assert lone_sentence_rows(narrow, 1, vnni) == 1
    assert lone_sentence_rows(float32, 1, amx) == 1
    assert lone_sentence_rows(narrow, 1, amx) == 1


def test_an_xla_that_refuses_the_options_compiles_without_them():
    calls = []

    class Refusing:
        def compile(self, compiler_options=None):
            calls.append(compiler_options)
            if compiler_options:
                raise RuntimeError("No such compile option: 'xla_cpu_experimental_ynn_fusion_type'")
            return "compiled"

    if jax.default_backend() != "cpu":
        pytest.skip("off a CPU the options are never asked for")
    assert compile_for_cpu(Refusing(), [np.zeros((4, 4), np.float32)], WITHOUT_AVX512) == "compiled"
    assert calls == [CPU_COMPILER_OPTIONS, None]
