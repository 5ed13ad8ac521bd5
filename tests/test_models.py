import keras
import numpy as np
import pytest

from conftest import to_numpy
import keras_transformer as kt

SMALL = dict(num_layers=2, d_model=16, num_heads=4, ff_dim=32, max_length=12)
SOURCE = np.array([[5, 6, 7, 8, 0, 0], [9, 4, 3, 0, 0, 0]], "int32")
TARGET = np.array([[1, 11, 12, 13, 14], [1, 15, 16, 0, 0]], "int32")


def _logits(model, encoder_tokens, decoder_tokens):
    return to_numpy(model({"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}))


@pytest.fixture(scope="module")
def translator():
    keras.utils.set_random_seed(0)
    return kt.models.transformer(30, 40, **SMALL)


def test_transformer_outputs_float32_logits_over_target_vocabulary(translator):
    logits = _logits(translator, SOURCE, TARGET)
    assert logits.shape == (2, 5, 40) and logits.dtype == np.float32


def test_future_decoder_tokens_do_not_change_past_logits(translator):
    changed = TARGET.copy()
    changed[:, 3:] = [[21, 22], [23, 24]]
    a, b = _logits(translator, SOURCE, TARGET), _logits(translator, SOURCE, changed)
    np.testing.assert_allclose(a[:, :3], b[:, :3], rtol=1e-5, atol=1e-5)
    assert not np.allclose(a[:, 3:], b[:, 3:])


def test_extra_padding_changes_no_real_position(translator):
    longer_source = np.pad(SOURCE, ((0, 0), (0, 4)))
    longer_target = np.pad(TARGET, ((0, 0), (0, 3)))
    a = _logits(translator, SOURCE, TARGET)
    b = _logits(translator, longer_source, longer_target)
    real = TARGET != 0
    np.testing.assert_allclose(a[real], b[:, :5][real], rtol=1e-5, atol=1e-5)


def test_source_tokens_matter_through_cross_attention(translator):
    changed = SOURCE.copy()
    changed[0, 1] = 20
    a, b = _logits(translator, SOURCE, TARGET), _logits(translator, changed, TARGET)
    assert not np.allclose(a[0], b[0]) and np.allclose(a[1], b[1], atol=1e-6)


def test_tied_embeddings_replace_the_output_projection():
    untied = kt.models.transformer(30, 40, **SMALL)
    tied = kt.models.transformer(30, 40, tie_embeddings=True, **SMALL)
    assert untied.count_params() - tied.count_params() == 16 * 40 + 40
    assert "output_projection" not in [layer.name for layer in tied.layers]
    hidden = keras.Model(tied.inputs, tied.get_layer("decoder_layer_1").output)
    batch = {"encoder_tokens": SOURCE, "decoder_tokens": TARGET}
    embeddings = to_numpy(tied.get_layer("decoder_embedding").embeddings)
    expected = to_numpy(hidden(batch)) @ embeddings.T
    np.testing.assert_allclose(to_numpy(tied(batch)), expected, rtol=1e-4, atol=1e-4)


def test_pre_ln_models_end_with_a_final_layer_norm():
    model = kt.models.transformer(30, 40, norm_first=True, **SMALL)
    names = [layer.name for layer in model.layers]
    assert "encoder_final_norm" in names and "decoder_final_norm" in names
    post = kt.models.transformer(30, 40, **SMALL)
    assert "decoder_final_norm" not in [layer.name for layer in post.layers]


def test_encoder_classifier_ignores_padding_length():
    model = kt.models.encoder_classifier(30, 3, **SMALL)
    a = to_numpy(model(SOURCE))
    b = to_numpy(model(np.pad(SOURCE, ((0, 0), (0, 5)))))
    assert a.shape == (2, 3)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_language_model_is_causal():
    model = kt.models.language_model(40, **SMALL)
    changed = TARGET.copy()
    changed[:, 2:] = 17
    a, b = to_numpy(model(TARGET)), to_numpy(model(changed))
    np.testing.assert_allclose(a[:, :2], b[:, :2], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("builder", ["transformer", "encoder_classifier", "language_model"])
def test_saved_model_reloads_to_identical_outputs(builder, tmp_path):
    if builder == "transformer":
        model = kt.models.transformer(30, 40, tie_embeddings=True, fused_qkv=True, **SMALL)
        inputs = {"encoder_tokens": SOURCE, "decoder_tokens": TARGET}
    elif builder == "encoder_classifier":
        model = kt.models.encoder_classifier(30, 3, norm_first=True, **SMALL)
        inputs = SOURCE
    else:
        model = kt.models.language_model(40, positions="learned", **SMALL)
        inputs = TARGET
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(to_numpy(reloaded(inputs)), to_numpy(model(inputs)))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_model_gives_finite_float32_logits(policy):
    keras.config.set_dtype_policy(policy)
    model = kt.models.transformer(30, 40, **SMALL)
    logits = _logits(model, SOURCE, TARGET)
    assert logits.dtype == np.float32 and np.all(np.isfinite(logits))


def test_fit_learns_to_copy_a_short_sequence():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    source = rng.integers(3, 12, size=(64, 5)).astype("int32")
    decoder_in = np.concatenate([np.ones((64, 1), "int32"), source[:, :-1]], axis=1)
    model = kt.models.transformer(12, 12, dropout=0.0, **SMALL)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = model.fit(
        {"encoder_tokens": source, "decoder_tokens": decoder_in}, source,
        batch_size=16, epochs=25, verbose=0,
    )
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0]


def test_unknown_layer_option_is_rejected():
    with pytest.raises(ValueError, match="norm_frist"):
        kt.models.transformer(30, 40, norm_frist=True, **SMALL)
