"""A Marian config.json is read key by key: every key is read, known to change nothing, or refused by name."""

import json

import pytest

from keras_transformer.checkpoints.marian.config import DEFAULT_ONLY_KEYS
from keras_transformer.checkpoints.marian.config import MODEL_KEYS
from keras_transformer.checkpoints.marian.config import NO_EFFECT_KEYS
from keras_transformer.checkpoints.marian.config import read_architecture
from keras_transformer.errors import UserInputError

# The config.json of an OPUS-MT model as the hub has it (opus-mt-es-en's keys, a small size).
OPUS_MT_CONFIG = {
    "_num_labels": 3, "activation_dropout": 0.0, "activation_function": "swish", "add_bias_logits": False,
    "add_final_layer_norm": False, "architectures": ["MarianMTModel"], "attention_dropout": 0.0,
    "bad_words_ids": [[99]], "bos_token_id": 0, "classif_dropout": 0.0, "classifier_dropout": 0.0, "d_model": 16,
    "decoder_attention_heads": 2, "decoder_ffn_dim": 32, "decoder_layerdrop": 0.0, "decoder_layers": 2,
    "decoder_start_token_id": 99, "decoder_vocab_size": 100, "dropout": 0.1, "encoder_attention_heads": 2,
    "encoder_ffn_dim": 32, "encoder_layerdrop": 0.0, "encoder_layers": 2, "eos_token_id": 0,
    "forced_eos_token_id": 0, "gradient_checkpointing": False, "id2label": {"0": "LABEL_0"}, "init_std": 0.02,
    "is_encoder_decoder": True, "label2id": {"LABEL_0": 0}, "max_length": 512, "max_position_embeddings": 64,
    "model_type": "marian", "normalize_before": False, "normalize_embedding": False, "num_beams": 4,
    "num_hidden_layers": 2, "pad_token_id": 99, "scale_embedding": True, "share_encoder_decoder_embeddings": True,
    "static_position_embeddings": True, "transformers_version": "4.22.0.dev0", "use_cache": True,
    "vocab_size": 100,
}


def _folder(tmp_path, **changes):
    with open(tmp_path / "config.json", "w") as f:
        json.dump({**OPUS_MT_CONFIG, **changes}, f)
    return tmp_path


@pytest.mark.backend_independent
def test_every_key_of_transformers_marian_config_is_read_or_named():
    transformers = pytest.importorskip("transformers")
    keys = set(transformers.MarianConfig().to_dict())
    assert {"vocab_size", "d_model", "share_encoder_decoder_embeddings"} <= keys
    known = MODEL_KEYS | NO_EFFECT_KEYS | set(DEFAULT_ONLY_KEYS)
    assert not keys - known, f"keys of MarianConfig this importer neither reads nor names: {sorted(keys - known)}"
    assert not MODEL_KEYS & NO_EFFECT_KEYS


@pytest.mark.backend_independent
def test_an_opus_mt_config_reads_to_its_architecture(tmp_path):
    architecture = read_architecture(_folder(tmp_path))
    assert (architecture.vocabulary_size, architecture.d_model, architecture.num_layers) == (100, 16, 2)
    assert (architecture.activation, architecture.embedding_scale, architecture.pad_id) == ("swish", "sqrt", 99)


@pytest.mark.backend_independent
def test_a_key_it_does_not_know_is_refused_by_name(tmp_path):
    with pytest.raises(UserInputError, match=r"config.json: layernorm_embedding=True: a setting this importer does not know"):
        read_architecture(_folder(tmp_path, layernorm_embedding=True))


@pytest.mark.backend_independent
@pytest.mark.parametrize("key, value", [("tie_encoder_decoder", True), ("add_cross_attention", True),
                                        ("pruned_heads", {"0": [1]})])
def test_a_base_config_key_that_changes_the_model_is_refused_unless_at_its_default(tmp_path, key, value):
    read_architecture(_folder(tmp_path, **{key: DEFAULT_ONLY_KEYS[key]}))
    with pytest.raises(UserInputError, match=f"{key}="):
        read_architecture(_folder(tmp_path, **{key: value}))
