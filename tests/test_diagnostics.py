"""The diagnostics return the known values on inputs where they are known."""

import math

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer import diagnostics


@pytest.mark.parametrize("key_dim", [8, 64, 512])
def test_dot_product_variance_is_key_dim_and_one_after_scaling(key_dim):
    assert diagnostics.dot_product_variance(key_dim, num_samples=50_000) == pytest.approx(
        key_dim, rel=0.05
    )
    scaled = diagnostics.dot_product_variance(key_dim, num_samples=50_000, scale=key_dim**-0.5)
    assert scaled == pytest.approx(1.0, rel=0.05)


def test_small_logit_matrices_give_scattered_variance_estimates():
    small = diagnostics.logit_variance_estimates(64, 4, 4, trials=300)
    large = diagnostics.logit_variance_estimates(64, 128, 128, trials=30)
    assert np.mean(large) == pytest.approx(64, rel=0.05)
    # Unbiased on average, but one small matrix is far off far more often.
    assert np.mean(small) == pytest.approx(64, rel=0.15)
    assert np.std(small) > 5 * np.std(large)


def _explicit_jacobian_norm(logits):
    p = np.exp(logits - logits.max())
    p /= p.sum()
    return np.linalg.norm(np.diag(p) - np.outer(p, p))


def test_softmax_statistics_match_their_definitions():
    n = 6
    assert diagnostics.softmax_entropy(np.zeros(n)) == pytest.approx(math.log(n))
    assert diagnostics.softmax_max_weight(np.zeros(n)) == pytest.approx(1 / n)
    assert diagnostics.softmax_jacobian_norm(np.zeros(n)) == pytest.approx(math.sqrt(n - 1) / n)
    saturated = np.array([50.0, 0.0, 0.0])
    assert diagnostics.softmax_entropy(saturated) == pytest.approx(0.0, abs=1e-12)
    assert diagnostics.softmax_max_weight(saturated) == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(5, 7)) * 3
    expected = [_explicit_jacobian_norm(row) for row in rows]
    np.testing.assert_allclose(diagnostics.softmax_jacobian_norm(rows), expected, rtol=1e-10)


def _small_model(**options):
    keras.utils.set_random_seed(1)
    return kt.models.transformer(
        40, 40, num_layers=1, d_model=16, num_heads=2, ff_dim=32, max_length=12, **options
    )


BATCH = {
    "encoder_tokens": np.array([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14]]),
    "decoder_tokens": np.array([[2, 20, 21, 0], [2, 22, 23, 24]]),
}


@pytest.mark.parametrize("norm_first", [False, True])
def test_attention_logits_softmax_to_the_layers_own_attention_weights(norm_first):
    model = _small_model(norm_first=norm_first)
    logits = diagnostics.attention_logits(model, BATCH)["encoder_layer_0"]
    layer = model.get_layer("encoder_layer_0")
    x = model.get_layer("encoder_embedding")(BATCH["encoder_tokens"])
    if norm_first:
        x = layer.self_attention_norm(x)
    mask = BATCH["encoder_tokens"] != 0
    _, scores = layer.self_attention(
        x, x, query_mask=mask, value_mask=mask, return_attention_scores=True
    )
    scores = keras.ops.convert_to_numpy(scores)
    masked = np.where(np.isnan(logits), -np.inf, logits)
    for b in range(2):
        real = int(mask[b].sum())
        weights = np.exp(masked[b, :, :real] - masked[b, :, :real].max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        np.testing.assert_allclose(weights, scores[b, :, :real], atol=1e-5)
    # Padded keys and queries are hidden; the decoder's future is too.
    assert np.isnan(logits[0, :, :, 4:]).all() and np.isnan(logits[0, :, 4:, :]).all()
    assert not np.isnan(logits[1]).any()
    decoder = diagnostics.attention_logits(model, BATCH)["decoder_layer_0"]
    assert np.isnan(decoder[1][:, np.triu_indices(4, 1)[0], np.triu_indices(4, 1)[1]]).all()
    assert not np.isnan(decoder[1][:, np.tril_indices(4)[0], np.tril_indices(4)[1]]).any()


def test_linear_logit_scale_divides_the_logits_by_a_further_sqrt_key_dim():
    sqrt = diagnostics.attention_statistics(_small_model(), BATCH)
    linear = diagnostics.attention_statistics(_small_model(logit_scale="linear"), BATCH)
    key_dim = 16 // 2
    for name in sqrt:
        assert linear[name]["logit_std"] == pytest.approx(
            sqrt[name]["logit_std"] / math.sqrt(key_dim), rel=1e-4
        )
        assert linear[name]["entropy"] > sqrt[name]["entropy"]


def _embedding(d_model, **options):
    layer = kt.layers.PositionalEmbedding(d_model, d_model, max_length=32, **options)
    layer.build()
    return layer


def test_embedding_position_ratio_with_unit_token_vectors():
    d_model = 64
    for scale, expected in (("sqrt", math.sqrt(2)), (None, math.sqrt(2 / d_model))):
        layer = _embedding(d_model, scale=scale)
        layer.embeddings.assign(np.eye(d_model, dtype="float32"))
        # Every sinusoid row has norm sqrt(d_model / 2): d_model / 2 (sin, cos) pairs.
        assert diagnostics.embedding_position_ratio(layer) == pytest.approx(expected, rel=1e-5)


def test_positional_subspace_energy_is_one_inside_and_zero_outside():
    d_model, rank = 64, 8
    layer = _embedding(d_model)
    positions = np.asarray(keras.ops.convert_to_numpy(layer.position_table()), dtype="float64")
    basis = np.linalg.svd(positions, full_matrices=True)[2]
    rng = np.random.default_rng(0)
    inside = rng.normal(size=(d_model, rank)) @ basis[:rank]
    layer.embeddings.assign(inside.astype("float32"))
    assert diagnostics.positional_subspace_energy(layer, rank)["energy"] == pytest.approx(1.0, abs=1e-4)
    outside = rng.normal(size=(d_model, d_model - rank)) @ basis[rank:]
    layer.embeddings.assign(outside.astype("float32"))
    assert diagnostics.positional_subspace_energy(layer, rank)["energy"] == pytest.approx(0.0, abs=1e-4)
    with pytest.raises(ValueError, match="merge='add'"):
        diagnostics.positional_subspace_energy(_embedding(d_model, merge="concat", position_dim=16))


def test_principal_angles_of_known_subspaces():
    a = np.eye(3)[:, :1]
    b = np.array([[1.0], [1.0], [0.0]])
    np.testing.assert_allclose(diagnostics.principal_angles(a, b), [math.pi / 4], atol=1e-12)


def test_gradient_norms_match_the_closed_form_of_a_linear_model():
    inputs = keras.Input((3,))
    outputs = keras.layers.Dense(2, name="dense")(inputs)
    model = keras.Model(inputs, outputs)
    kernel = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]], "float32")
    model.get_layer("dense").set_weights([kernel, np.zeros(2, "float32")])
    x = np.array([[1.0, 2.0, 3.0], [0.0, 1.0, -1.0]], "float32")
    t = np.zeros((2, 2), "float32")
    norms = diagnostics.gradient_norms(model, x, t, keras.losses.MeanSquaredError())
    error = x @ kernel - t
    d_kernel = 2 * x.T @ error / error.size
    d_bias = 2 * error.sum(axis=0) / error.size
    expected = math.sqrt((d_kernel**2).sum() + (d_bias**2).sum())
    assert norms["dense"] == pytest.approx(expected, rel=1e-5)
    np.testing.assert_array_equal(model.get_layer("dense").get_weights()[0], kernel)


def test_diagnostics_logger_writes_its_statistics_to_the_csv_log(tmp_path):
    model = _small_model()
    model.compile("adam", kt.training.MaskedSparseCrossentropy())
    x = {key: np.tile(value, (2, 1)) for key, value in BATCH.items()}
    y = np.tile(np.array([[20, 21, 3, 0], [22, 23, 24, 3]]), (2, 1))
    logger = diagnostics.DiagnosticsLogger(x, y, every_n_batches=2)
    path = tmp_path / "log.csv"
    model.fit(x, y, batch_size=1, epochs=1, verbose=0,
              callbacks=[logger, keras.callbacks.CSVLogger(str(path))])
    header = path.read_text().splitlines()[0].split(",")
    for key in ("attention_logit_std/encoder_layer_0", "gradient_norm/decoder_layer_0",
                "embedding_position_ratio/decoder_embedding"):
        assert key in header
    assert [entry["step"] for entry in logger.history] == [2, 4]
    # Training moves the weights, so the logged gradient norms change.
    norms = [entry["gradient_norm/decoder_layer_0"] for entry in logger.history]
    assert len(set(norms)) > 1


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="the compiled gradient is JAX's")
def test_gradient_norms_compile_once_per_model_and_do_not_keep_the_model_alive():
    import gc
    import weakref

    from keras_transformer.diagnostics import gradients

    model = _small_model()
    model.compile("adam", kt.training.MaskedSparseCrossentropy())
    y = np.array([[20, 21, 3, 0], [22, 23, 24, 3]])
    first = diagnostics.gradient_norms(model, BATCH, y)
    assert diagnostics.gradient_norms(model, BATCH, y) == first
    assert len(gradients._jax_gradients[model]) == 1  # one compiled gradient, reused
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None  # the cache holds no reference to it
