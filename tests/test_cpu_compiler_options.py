"""The engine's programs on a CPU: a small float32 model's without YNNPACK, the same numbers, older XLAs unharmed."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from keras_transformer_runtime.cpu_compiler_options import CPU_COMPILER_OPTIONS  # noqa: E402
from keras_transformer_runtime.cpu_compiler_options import compile_for_cpu  # noqa: E402
from keras_transformer_runtime.cpu_compiler_options import leaves_ynnpack  # noqa: E402


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
    ours = compile_for_cpu(lowered, [inputs[1]])
    assert "__ynn_fusion" not in ours.as_text()
    np.testing.assert_allclose(np.asarray(ours(*inputs)), np.asarray(plain(*inputs)), rtol=1e-5, atol=1e-5)
    # A quantized model's weights, or a wide model's, keep YNNPACK's products.
    assert "__ynn_fusion" in compile_for_cpu(lowered, [inputs[1], np.zeros((8, 8), np.int8)]).as_text()
    assert "__ynn_fusion" in compile_for_cpu(lowered, [np.zeros((512, 2048), np.float32)]).as_text()


def test_only_float32_models_at_most_256_wide_leave_ynnpack():
    def matrix(rows, columns, dtype=np.float32):
        return np.zeros((rows, columns), dtype)

    # A dropout's seed is an integer weight too, not a quantized product's.
    assert leaves_ynnpack([matrix(4000, 128), matrix(128, 512), np.zeros((128,), np.float32), np.zeros((2,), np.uint32)])
    assert leaves_ynnpack([matrix(8000, 256), matrix(256, 1024)])
    assert not leaves_ynnpack([matrix(65001, 512), matrix(512, 2048)])
    assert not leaves_ynnpack([matrix(4000, 128), matrix(128, 512, np.int8), np.zeros((512,), np.float32)])
    assert not leaves_ynnpack([np.zeros((3,), np.float32)])


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
    assert compile_for_cpu(Refusing(), [np.zeros((4, 4), np.float32)]) == "compiled"
    assert calls == [CPU_COMPILER_OPTIONS, None]
