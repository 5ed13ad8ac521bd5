import keras
import numpy as np
import pytest

from conftest import to_numpy
from layer_contract import check_layer_contract
from keras_transformer.layers import DecoderLayer
from keras_transformer.layers import EncoderLayer

D_MODEL, HEADS, FF_DIM = 16, 4, 32
PADDING = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]], bool)


@pytest.fixture
def target(rng):
    return rng.normal(size=(2, 6, D_MODEL)).astype("float32")


@pytest.fixture
def source(rng):
    return rng.normal(size=(2, 5, D_MODEL)).astype("float32")


def _scramble(x, where, rng):
    changed = x.copy()
    changed[where] = rng.normal(size=changed[where].shape) * 10
    return changed


@pytest.mark.parametrize("layer_class", [EncoderLayer, DecoderLayer])
def test_d_model_not_divisible_by_num_heads_raises(layer_class):
    with pytest.raises(ValueError, match="num_heads=3"):
        layer_class(d_model=16, num_heads=3, ff_dim=32)


def test_head_size_is_d_model_over_num_heads(target):
    layer = EncoderLayer(D_MODEL, HEADS, FF_DIM)
    layer(target)
    assert layer.self_attention.key_dim == D_MODEL // HEADS
    assert tuple(layer.self_attention.query_dense.kernel.shape) == (D_MODEL, D_MODEL)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_encoder_padded_positions_do_not_change_real_outputs(target, rng, norm_first):
    layer = EncoderLayer(D_MODEL, HEADS, FF_DIM, norm_first=norm_first)
    a = to_numpy(layer(target, mask=PADDING))
    b = to_numpy(layer(_scramble(target, ~PADDING, rng), mask=PADDING))
    np.testing.assert_allclose(a[PADDING], b[PADDING], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post_ln", "pre_ln"])
def test_decoder_future_tokens_do_not_change_past_outputs(target, source, rng, norm_first):
    layer = DecoderLayer(D_MODEL, HEADS, FF_DIM, norm_first=norm_first)
    a = to_numpy(layer(target, source))
    b = to_numpy(layer(_scramble(target, np.s_[:, 3:], rng), source))
    np.testing.assert_allclose(a[:, :3], b[:, :3], rtol=1e-5, atol=1e-5)
    assert not np.allclose(a[:, 3:], b[:, 3:])


def test_decoder_ignores_padded_encoder_positions(target, source, rng):
    layer = DecoderLayer(D_MODEL, HEADS, FF_DIM)
    source_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], bool)
    a = to_numpy(layer(target, source, encoder_mask=source_mask))
    b = to_numpy(layer(target, _scramble(source, ~source_mask, rng), encoder_mask=source_mask))
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    c = to_numpy(layer(target, _scramble(source, source_mask, rng), encoder_mask=source_mask))
    assert not np.allclose(a, c)


def test_post_ln_normalizes_outputs_and_pre_ln_does_not(target):
    post = to_numpy(EncoderLayer(D_MODEL, HEADS, FF_DIM, norm_first=False)(target * 5))
    pre = to_numpy(EncoderLayer(D_MODEL, HEADS, FF_DIM, norm_first=True)(target * 5))
    np.testing.assert_allclose(post.std(axis=-1), 1.0, atol=1e-2)
    np.testing.assert_allclose(post.mean(axis=-1), 0.0, atol=1e-4)
    assert np.abs(pre.std(axis=-1) - 1.0).max() > 0.5


def test_decoder_without_encoder_has_no_cross_attention(target, source):
    layer = DecoderLayer(D_MODEL, HEADS, FF_DIM)
    layer(target)
    assert layer.cross_attention is None
    with pytest.raises(ValueError, match="encoder_outputs"):
        layer(target, source)


def test_residual_dropout_is_active_only_in_training(target):
    layer = EncoderLayer(D_MODEL, HEADS, FF_DIM, dropout=0.5)
    np.testing.assert_array_equal(to_numpy(layer(target)), to_numpy(layer(target)))
    assert not np.allclose(to_numpy(layer(target, training=True)), to_numpy(layer(target)))


def test_attention_options_pass_through():
    layer = EncoderLayer(
        D_MODEL, HEADS, FF_DIM, fused_qkv=True, qkv_initializer="fairseq",
        logit_scale="linear", attention_dropout=0.2, output_initializer="zeros",
    )
    layer.build((None, 4, D_MODEL))
    attention = layer.self_attention
    assert attention.fused_qkv and attention.qkv_initializer == "fairseq"
    assert attention.scale == pytest.approx(1 / (D_MODEL // HEADS))
    assert attention.attention_dropout == pytest.approx(0.2)
    np.testing.assert_array_equal(to_numpy(attention.output_dense.kernel), 0.0)
    np.testing.assert_array_equal(to_numpy(layer.feed_forward.output_dense.kernel), 0.0)


def test_encoder_layer_contract(target, tmp_path):
    def make_model(layer):
        x = keras.Input((None, D_MODEL))
        return keras.Model(x, layer(x))

    check_layer_contract(
        lambda: EncoderLayer(D_MODEL, HEADS, FF_DIM, norm_first=True, activation="gelu"),
        make_model, target, tmp_path,
    )


def test_decoder_layer_contract(target, source, tmp_path):
    def make_model(layer):
        x = keras.Input((None, D_MODEL))
        memory = keras.Input((None, D_MODEL))
        return keras.Model([x, memory], layer(x, memory))

    check_layer_contract(
        lambda: DecoderLayer(D_MODEL, HEADS, FF_DIM, fused_qkv=True),
        make_model, [target, source], tmp_path,
    )


@pytest.mark.parametrize("fused_qkv", [False, True], ids=["separate", "fused"])
def test_cached_decode_steps_equal_the_full_causal_decoder(target, source, fused_qkv):
    layer = DecoderLayer(D_MODEL, HEADS, FF_DIM, fused_qkv=fused_qkv, norm_first=fused_qkv)
    source_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    full = to_numpy(layer(target, source, encoder_mask=source_mask))
    cross_cache = layer.cross_attention_cache(source)
    cache = layer.empty_cache(2, target.shape[1])
    steps = []
    for i in range(target.shape[1]):
        step, cache = layer.decode_step(
            target[:, i : i + 1], cache, i, cross_attention_cache=cross_cache, encoder_mask=source_mask
        )
        steps.append(to_numpy(step))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-4, atol=1e-5)
