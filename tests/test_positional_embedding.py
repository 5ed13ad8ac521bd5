import math

import keras
import numpy as np
import pytest

from conftest import to_numpy
from layer_contract import check_layer_contract
from keras_transformer.layers import PositionalEmbedding
from keras_transformer.layers import sinusoidal_encoding

TOKENS = np.array([[3, 9, 4, 0, 0], [7, 1, 2, 8, 5]], dtype="int32")


def _paper_sinusoid(pos, feature, depth):
    angle = pos / 10000 ** (2 * (feature // 2) / depth)
    return math.sin(angle) if feature % 2 == 0 else math.cos(angle)


def test_sinusoid_table_equals_the_papers_closed_form():
    table = sinusoidal_encoding(60, 12)
    expected = np.array([[_paper_sinusoid(p, f, 12) for f in range(12)] for p in range(60)])
    np.testing.assert_allclose(table, expected, atol=1e-6)
    odd_depth = sinusoidal_encoding(5, 7)
    assert odd_depth.shape == (5, 7)
    assert odd_depth[3, 6] == pytest.approx(_paper_sinusoid(3, 6, 7), abs=1e-6)


@pytest.mark.parametrize("scale, factor", [("sqrt", 4.0), (None, 1.0), (2.5, 2.5)])
def test_output_is_scaled_token_vector_plus_sinusoid(scale, factor):
    layer = PositionalEmbedding(20, 16, max_length=8, scale=scale)
    outputs = to_numpy(layer(TOKENS))
    embeddings = to_numpy(layer.embeddings)
    expected = factor * embeddings[TOKENS] + sinusoidal_encoding(5, 16)[None]
    np.testing.assert_allclose(outputs, expected, rtol=1e-6, atol=1e-6)


def test_default_token_init_has_std_one_over_sqrt_d_model():
    layer = PositionalEmbedding(4000, 256, max_length=8)
    layer.build()
    assert float(np.std(to_numpy(layer.embeddings))) == pytest.approx(256**-0.5, rel=0.02)


def test_concat_keeps_width_d_model_with_token_and_position_parts():
    layer = PositionalEmbedding(20, 16, max_length=8, merge="concat", position_dim=6)
    outputs = to_numpy(layer(TOKENS))
    assert outputs.shape == (2, 5, 16)
    embeddings = to_numpy(layer.embeddings)
    assert embeddings.shape == (20, 10)
    np.testing.assert_allclose(outputs[..., :10], math.sqrt(10) * embeddings[TOKENS], rtol=1e-6)
    np.testing.assert_allclose(outputs[0, :, 10:], sinusoidal_encoding(5, 6), atol=1e-6)


def test_learned_positions_follow_start_index():
    layer = PositionalEmbedding(20, 8, max_length=10, positions="learned", scale=None,
                                embeddings_initializer="zeros")
    full = to_numpy(layer(np.array([[1, 1, 1, 1]])))
    step = to_numpy(layer(np.array([[1]]), start_index=3))
    np.testing.assert_allclose(step[0, 0], full[0, 3], rtol=1e-6)
    np.testing.assert_allclose(full[0], to_numpy(layer.position_embeddings)[:4], rtol=1e-6)


def test_start_index_as_tensor_matches_python_int():
    layer = PositionalEmbedding(20, 8, max_length=10)
    by_int = to_numpy(layer(TOKENS[:, :2], start_index=4))
    by_tensor = to_numpy(layer(TOKENS[:, :2], start_index=keras.ops.convert_to_tensor(4)))
    np.testing.assert_allclose(by_tensor, by_int, rtol=1e-6)


def test_sequence_longer_than_max_length_raises():
    layer = PositionalEmbedding(20, 8, max_length=4)
    with pytest.raises(ValueError, match="max_length=4"):
        layer(TOKENS)
    with pytest.raises(ValueError, match="max_length=4"):
        layer(TOKENS[:, :2], start_index=3)


def test_mask_zero_propagates_a_keras_mask_to_downstream_layers():
    tokens = keras.Input((None,), dtype="int32")
    embedded = PositionalEmbedding(20, 8, max_length=8, mask_zero=True)(tokens)
    pooled = keras.layers.GlobalAveragePooling1D()(embedded)
    model = keras.Model(tokens, [embedded, pooled])
    embedded_values, pooled_values = (to_numpy(y) for y in model(TOKENS))
    np.testing.assert_allclose(pooled_values[0], embedded_values[0, :3].mean(axis=0), rtol=1e-5)


def test_tied_projection_is_hidden_times_embedding_transpose(rng):
    layer = PositionalEmbedding(20, 8, max_length=8)
    layer.build()
    hidden = rng.normal(size=(2, 3, 8)).astype("float32")
    logits = to_numpy(layer.project_to_vocabulary(hidden))
    np.testing.assert_allclose(logits, hidden @ to_numpy(layer.embeddings).T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("width", [8, 264])  # each side of YNNPACK_FREE_WIDTH: transposed once, or as it lies
def test_the_once_read_vocabulary_kernel_projects_as_the_reverse_embedding(rng, width):
    layer = PositionalEmbedding(12, width, max_length=6)
    layer.build((1, 2))
    hidden = rng.normal(size=(3, 2, width)).astype("float32")
    kernel = layer.vocabulary_kernel()
    assert sorted(kernel.shape) == sorted((12, width))
    expected = hidden @ to_numpy(layer.embeddings).T
    np.testing.assert_allclose(to_numpy(layer.project_to_vocabulary(hidden, kernel=kernel)), expected, atol=1e-4)
    np.testing.assert_allclose(to_numpy(layer.project_to_vocabulary(hidden)), expected, atol=1e-4)


def test_sinusoid_stays_accurate_under_bfloat16():
    keras.config.set_dtype_policy("mixed_bfloat16")
    layer = PositionalEmbedding(4, 64, max_length=2048, embeddings_initializer="zeros")
    positions = to_numpy(layer(np.ones((1, 2048), "int32"))).astype("float32")[0]
    exact = sinusoidal_encoding(2048, 64)
    # bfloat16 rounding of the final values only: < 2^-8 relative.
    assert np.max(np.abs(positions - exact)) <= 2**-8 + 1e-7


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(merge="concat"), "position_dim"),
        (dict(merge="concat", position_dim=16), "position_dim"),
        (dict(positions="rotary"), "positions"),
        (dict(scale="log"), "scale"),
        (dict(merge="mul"), "merge"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PositionalEmbedding(20, 16, max_length=8, **kwargs)


def test_tied_projection_with_concat_raises():
    layer = PositionalEmbedding(20, 16, max_length=8, merge="concat", position_dim=4)
    layer.build()
    with pytest.raises(ValueError, match="merge='add'"):
        layer.project_to_vocabulary(np.zeros((1, 2, 16), "float32"))


def test_layer_contract(tmp_path):
    def make_model(layer):
        tokens = keras.Input((None,), dtype="int32")
        embedded = layer(tokens)
        return keras.Model(tokens, [embedded, layer.project_to_vocabulary(embedded)])

    check_layer_contract(
        lambda: PositionalEmbedding(20, 8, max_length=8, positions="learned", mask_zero=True),
        make_model,
        TOKENS,
        tmp_path,
    )


def test_sinusoids_in_halves_are_the_interleaved_table_with_its_features_permuted():
    from keras_transformer.layers import sinusoidal_encoding

    for depth in (8, 9):
        interleaved = sinusoidal_encoding(12, depth)
        halves = sinusoidal_encoding(12, depth, layout="halves")
        order = list(range(0, depth, 2)) + list(range(1, depth, 2))
        np.testing.assert_array_equal(halves, interleaved[:, order])
    layer = PositionalEmbedding(10, 8, max_length=12, sinusoid_layout="halves", scale=None)
    tokens = np.zeros((1, 12), "int32")
    layer.build(tokens.shape)
    embedded = to_numpy(layer(tokens)) - to_numpy(layer.embeddings)[0]
    np.testing.assert_allclose(embedded[0], sinusoidal_encoding(12, 8, layout="halves"), atol=1e-6)


def test_output_bias_is_added_to_the_tied_projection_and_kept_by_its_config():
    layer = PositionalEmbedding(10, 4, max_length=6, output_bias=True)
    layer.build((1, 2))
    bias = np.arange(10, dtype="float32")
    layer.logits_bias.assign(bias)
    hidden = np.random.default_rng(0).normal(size=(2, 4)).astype("float32")
    without = to_numpy(hidden @ to_numpy(layer.embeddings).T)
    np.testing.assert_allclose(to_numpy(layer.project_to_vocabulary(hidden)), without + bias, atol=1e-5)
    kernel = layer.vocabulary_kernel()
    np.testing.assert_allclose(to_numpy(layer.project_to_vocabulary(hidden, kernel=kernel)), without + bias, atol=1e-5)
    rebuilt = PositionalEmbedding.from_config(layer.get_config())
    assert rebuilt.output_bias and rebuilt.sinusoid_layout == "interleaved"
