import keras
import numpy as np
import pytest

from conftest import to_numpy
from keras_transformer.initializers import FAIRSEQ_QKV_GAIN
from keras_transformer.initializers import DepthScaled
from keras_transformer.initializers import FusedQKV
from keras_transformer.initializers import with_seed_offset
from keras_transformer.layers import MultiHeadAttention

D_MODEL, HEADS = 512, 8
GLOROT_STD = np.sqrt(2.0 / (D_MODEL + D_MODEL))  # fan_in = d, fan_out = heads * key_dim = d
FUSED_MATRIX_GLOROT_STD = np.sqrt(2.0 / (D_MODEL + 3 * D_MODEL))


def _built_attention(**kwargs):
    layer = MultiHeadAttention(HEADS, D_MODEL // HEADS, **kwargs)
    layer.build((None, 4, D_MODEL), (None, 4, D_MODEL))
    return layer


def _std(variable):
    return float(np.std(to_numpy(variable)))


def test_each_separate_projection_has_glorot_std_of_its_own_fans():
    layer = _built_attention()
    for kernel in (layer.query_dense.kernel, layer.key_dense.kernel, layer.value_dense.kernel, layer.output_dense.kernel):
        assert _std(kernel) == pytest.approx(GLOROT_STD, rel=0.02)


def test_fused_qkv_slices_match_separate_std_not_fused_matrix_glorot():
    layer = _built_attention(fused_qkv=True)
    kernel = to_numpy(layer.qkv_dense.kernel)
    assert kernel.shape == (D_MODEL, 3 * D_MODEL)
    for part in np.split(kernel, 3, axis=-1):
        assert np.std(part) == pytest.approx(GLOROT_STD, rel=0.02)
    assert abs(np.std(kernel) - FUSED_MATRIX_GLOROT_STD) > 0.2 * FUSED_MATRIX_GLOROT_STD


def test_glorot_on_the_fused_matrix_is_offered_and_smaller():
    layer = _built_attention(fused_qkv=True, qkv_initializer="glorot_uniform")
    assert _std(layer.qkv_dense.kernel) == pytest.approx(FUSED_MATRIX_GLOROT_STD, rel=0.02)


def test_fairseq_variant_scales_each_slice_by_one_over_sqrt_two():
    layer = _built_attention(fused_qkv=True, qkv_initializer="fairseq")
    assert _std(layer.qkv_dense.kernel) == pytest.approx(GLOROT_STD * FAIRSEQ_QKV_GAIN, rel=0.02)


def test_user_initializers_are_honoured_per_projection():
    layer = _built_attention(
        query_initializer=keras.initializers.Constant(0.5),
        key_initializer=keras.initializers.RandomNormal(stddev=0.1),
        value_initializer="zeros",
        output_initializer=DepthScaled(num_layers=8),
        bias_initializer="ones",
    )
    np.testing.assert_array_equal(to_numpy(layer.query_dense.kernel), 0.5)
    assert _std(layer.key_dense.kernel) == pytest.approx(0.1, rel=0.02)
    np.testing.assert_array_equal(to_numpy(layer.value_dense.kernel), 0.0)
    assert _std(layer.output_dense.kernel) == pytest.approx(GLOROT_STD / 4.0, rel=0.02)
    np.testing.assert_array_equal(to_numpy(layer.query_dense.bias), 1.0)


def test_one_seeded_initializer_gives_distinct_q_k_v():
    seeded = keras.initializers.GlorotUniform(seed=7)
    layer = _built_attention(query_initializer=seeded, key_initializer=seeded, value_initializer=seeded)
    q, k, v = (to_numpy(w) for w in (layer.query_dense.kernel, layer.key_dense.kernel, layer.value_dense.kernel))
    assert not np.allclose(q, k) and not np.allclose(k, v)


def test_fused_and_separate_layers_start_from_the_same_seeded_weights():
    seeded = dict(
        query_initializer=keras.initializers.GlorotUniform(seed=1),
        key_initializer=keras.initializers.GlorotUniform(seed=2),
        value_initializer=keras.initializers.GlorotUniform(seed=3),
    )
    separate = _built_attention(**seeded)
    fused = _built_attention(fused_qkv=True, **seeded)
    expected = np.concatenate(
        [to_numpy(w) for w in (separate.query_dense.kernel, separate.key_dense.kernel, separate.value_dense.kernel)], axis=-1
    )
    np.testing.assert_array_equal(to_numpy(fused.qkv_dense.kernel), expected)


def test_depth_scaled_divides_std_by_sqrt_two_num_layers():
    base = keras.initializers.RandomNormal(stddev=1.0, seed=3)
    scaled = DepthScaled(num_layers=12, initializer=base)((256, 256))
    np.testing.assert_allclose(to_numpy(scaled), to_numpy(base((256, 256))) / np.sqrt(24.0), rtol=1e-6)


@pytest.mark.parametrize(
    "initializer", [FusedQKV(gain=0.5), DepthScaled(3, "he_normal")], ids=["fused", "depth"]
)
def test_initializer_config_round_trips(initializer):
    config = keras.initializers.serialize(initializer)
    clone = keras.initializers.deserialize(config)
    assert keras.initializers.serialize(clone) == config


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="num_layers"):
        DepthScaled(num_layers=0)
    with pytest.raises(ValueError, match="equal slices"):
        FusedQKV()((4, 10))


def test_with_seed_offset_keeps_an_unseeded_initializer_random():
    first = with_seed_offset("glorot_uniform", 0)((8, 8))
    second = with_seed_offset("glorot_uniform", 0)((8, 8))
    assert not np.allclose(to_numpy(first), to_numpy(second))
