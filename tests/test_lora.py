"""LoRA where Keras users expect it: the attention projections and the embeddings."""

import keras
import numpy as np
import pytest

from conftest import to_numpy
import keras_transformer as kt
from keras_transformer.layers import MultiHeadAttention

D_MODEL, RANK = 16, 2


def _model(**options):
    keras.utils.set_random_seed(0)
    return kt.models.transformer(40, 40, num_layers=1, d_model=D_MODEL, num_heads=2, ff_dim=32, max_length=12,
                                 dropout=0.0, **options)


def _data():
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, 40, size=(16, 6)).astype("int32")
    decoder = np.concatenate([np.ones((16, 1), "int32"), tokens[:, :-1]], axis=1)
    return {"encoder_tokens": tokens, "decoder_tokens": decoder}, tokens


def test_enable_lora_on_a_model_trains_the_query_and_value_adapters_only(tmp_path):
    model = _model()
    frozen = {v.path: to_numpy(v) for v in model.weights}
    adapted = kt.lora.enable_lora(model, RANK)
    # Q and V of the encoder's self-attention and the decoder's self- and cross-attention.
    assert sorted(layer.name for layer in adapted) == ["query"] * 3 + ["value"] * 3
    trainable = {v.path for v in model.trainable_weights}
    assert trainable and all(path.endswith(("lora_kernel_a", "lora_kernel_b")) for path in trainable)
    assert sum(int(np.prod(v.shape)) for v in model.trainable_weights) == 6 * 2 * D_MODEL * RANK
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = _data()
    model.fit(x, y, epochs=2, batch_size=8, verbose=0)
    for v in model.weights:
        if v.path in frozen:
            np.testing.assert_array_equal(to_numpy(v), frozen[v.path], err_msg=v.path)
    assert not np.allclose(to_numpy(model(x)), to_numpy(_model()(x)))
    # Saved with the adapters merged into the kernels: a plain model that
    # gives the adapted outputs.
    model.save(tmp_path / "lora.keras")
    reloaded = keras.saving.load_model(tmp_path / "lora.keras")
    np.testing.assert_allclose(to_numpy(reloaded(x)), to_numpy(model(x)), rtol=1e-5, atol=1e-5)
    assert not any("lora" in v.path for v in reloaded.weights)


def test_enable_lora_can_reach_every_projection_a_fused_kernel_and_the_embeddings():
    model = _model(fused_qkv=True, tie_embeddings=True)
    adapted = kt.lora.enable_lora(model, RANK, targets=("query", "output"), embeddings=True)
    names = sorted(layer.name for layer in adapted)
    assert names == ["attention_output"] * 3 + ["qkv"] * 3 + ["token_embedding"] * 2
    embedding = model.get_layer("decoder_embedding")
    assert embedding.token_embedding.lora_enabled
    # The tied output projection reads the adapted matrix.
    x, _ = _data()
    before = to_numpy(model(x))
    embedding.token_embedding.lora_embeddings_b.assign(np.ones((RANK, D_MODEL), "float32"))
    assert not np.allclose(to_numpy(model(x)), before)


def test_attention_enable_lora_refuses_unknown_targets_and_an_unbuilt_layer():
    layer = MultiHeadAttention(2, 4)
    with pytest.raises(ValueError, match="must be built"):
        layer.enable_lora(RANK)
    layer(np.zeros((1, 3, 8), "float32"), np.zeros((1, 3, 8), "float32"))
    with pytest.raises(ValueError, match="targets must be some of"):
        layer.enable_lora(RANK, targets=("W_Q",))
    with pytest.raises(ValueError, match="no 'gate' projection"):
        layer.enable_lora(RANK, targets=("gate",))


def test_keras_hubs_lora_recipe_finds_the_query_and_value_layers():
    # KerasHub's Backbone.enable_lora matches layers named "query" and "value".
    from keras_hub.src.models.backbone import Backbone

    names = {layer.name for layer in _model()._flatten_layers()}
    assert {"query", "value"} <= names and set(Backbone.default_lora_layer_names(None)) & names
