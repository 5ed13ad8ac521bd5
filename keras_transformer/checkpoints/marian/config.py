"""A Hugging Face Marian `config.json`, read as this package's `transformer()` arguments.

Marian's settings map onto options of `keras_transformer.models.transformer`
(`MarianArchitecture.builder_arguments`); a setting the layers cannot
express is refused with the file and the setting named.
"""

import os
import typing

from keras_transformer.checkpoints import imported_model
from keras_transformer.checkpoints.hugging_face_files import CONFIG_FILE
from keras_transformer.checkpoints.imported_model import check_config
from keras_transformer.checkpoints.imported_model import checked_activation
from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.marian_tokenizer import read_json_object
from keras_transformer_runtime.special_tokens import PAD_ID

# Hugging Face's LayerNorm epsilon in every Marian layer (torch's default).
LAYER_NORM_EPSILON = 1e-5

# Every key a Marian config.json may hold, in three kinds: none is ignored unnamed.
# The keys `read_architecture` reads: each becomes an argument of the model, or
# a value it refuses where the layers cannot express it.
MODEL_KEYS = frozenset({
    "model_type", "vocab_size", "decoder_vocab_size", "d_model", "encoder_layers", "decoder_layers",
    "encoder_attention_heads", "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
    "max_position_embeddings", "activation_function", "scale_embedding", "dropout", "pad_token_id",
    "eos_token_id", "decoder_start_token_id", "share_encoder_decoder_embeddings", "tie_word_embeddings",
    "normalize_before", "add_final_layer_norm", "normalize_embedding", "add_bias_logits",
    "static_position_embeddings",
})
# Keys that change nothing of the model, and keys that must keep their defaults: every family's.
NO_EFFECT_KEYS = imported_model.NO_EFFECT_KEYS
DEFAULT_ONLY_KEYS = imported_model.DEFAULT_ONLY_KEYS


class MarianArchitecture(typing.NamedTuple):
    """What `config.json` says of the model, as `transformer()` arguments.

    Attributes:
        vocabulary_size, num_layers, num_decoder_layers, d_model, num_heads,
            ff_dim, max_length, activation, embedding_scale, dropout:
            `transformer()`'s arguments.
        pad_id, eos_id, decoder_start_id: Marian's ids of its padding, end
            and start tokens.
        share_embeddings: one token matrix for source and target (else
            each has its own, as a run exported from this package).
        target_vocabulary_size: the decoder's vocabulary (`decoder_vocab_size`):
            `vocabulary_size` unless the target has a table of its own.
    """

    vocabulary_size: int
    num_layers: int
    num_decoder_layers: int
    d_model: int
    num_heads: int
    ff_dim: int
    max_length: int
    activation: str
    embedding_scale: object
    dropout: float
    pad_id: int
    eos_id: int
    decoder_start_id: int
    share_embeddings: bool = True
    target_vocabulary_size: int = None

    def builder_arguments(self, decoder_start_id=PAD_ID):
        """The keyword arguments of `transformer()` for this architecture.

        Args:
            decoder_start_id: the start token in this package's ids
                (Marian's `decoder_start_id` through `marian_id_order`).
        """
        return dict(
            source_vocabulary_size=self.vocabulary_size,
            target_vocabulary_size=self.target_vocabulary_size or self.vocabulary_size,
            num_layers=self.num_layers, num_decoder_layers=self.num_decoder_layers, d_model=self.d_model,
            num_heads=self.num_heads, ff_dim=self.ff_dim, max_length=self.max_length, dropout=self.dropout,
            activation=self.activation, embedding_scale=self.embedding_scale, layer_norm_epsilon=LAYER_NORM_EPSILON,
            tie_embeddings=True, share_embeddings=self.share_embeddings, output_bias=True, sinusoid_layout="halves",
            decoder_start_id=decoder_start_id,
        )


def read_architecture(directory):
    """The `MarianArchitecture` of a Hugging Face Marian folder's `config.json`.

    Args:
        directory: the folder.

    Returns:
        A `MarianArchitecture`.

    Raises:
        UserInputError: `config.json` is missing or unreadable, describes
            another architecture (BART, mBART, `normalize_before`, ...), or a
            setting the layers cannot express; the message names the file
            and the setting.

    Example:

    >>> import json, tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "config.json"), "w") as f:
    ...     json.dump({"model_type": "bart"}, f)
    >>> read_architecture(folder)
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: ...config.json: model_type 'bart' is not a Marian model ...
    """
    path = os.path.join(directory, CONFIG_FILE)
    config = read_json_object(path, "a Hugging Face model folder holds config.json.")
    if config.get("model_type") != "marian":
        raise UserInputError(
            f"{path}: model_type {config.get('model_type')!r} is not a Marian model (MarianMTModel, "
            "model_type 'marian'); only Marian checkpoints (OPUS-MT) are imported."
        )

    def setting(key, default=None):
        return config.get(key, default)

    def refuse(key, why):
        raise UserInputError(f"{path}: {key}={setting(key)!r}: {why}")

    check_config(config, path, MODEL_KEYS, NO_EFFECT_KEYS, "Marian's model")
    for key in ("normalize_before", "add_final_layer_norm", "normalize_embedding", "add_bias_logits"):
        if setting(key):
            refuse(key, "the layers express Marian's post-LN model without extra norms or logits biases.")
    if setting("static_position_embeddings") is False:
        refuse("static_position_embeddings", "only sinusoidal positions are imported.")
    activation = checked_activation(config, path, "gelu")
    vocabulary_size = setting("vocab_size")
    target_size = setting("decoder_vocab_size", vocabulary_size)
    share_embeddings = bool(setting("share_encoder_decoder_embeddings", True))
    if target_size != vocabulary_size and share_embeddings:
        refuse("decoder_vocab_size", f"differs from vocab_size={vocabulary_size}, but "
                                     "share_encoder_decoder_embeddings=true gives both sides one matrix.")
    if isinstance(target_size, bool) or not isinstance(target_size, int) or target_size < 4:
        refuse("decoder_vocab_size", "a vocabulary needs at least its 3 specials and one piece.")
    if vocabulary_size < 4:
        refuse("vocab_size", "a vocabulary needs at least its 3 specials and one piece.")
    start = setting("decoder_start_token_id", setting("pad_token_id"))
    for key in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):  # the decoder's ids
        if not isinstance(setting(key, start), int) or not 0 <= setting(key, start) < target_size:
            refuse(key, f"outside the decoder's vocabulary of {target_size}.")
    return MarianArchitecture(
        vocabulary_size=vocabulary_size,
        num_layers=setting("encoder_layers"),
        num_decoder_layers=setting("decoder_layers"),
        d_model=setting("d_model"),
        num_heads=setting("encoder_attention_heads"),
        ff_dim=setting("encoder_ffn_dim"),
        max_length=setting("max_position_embeddings"),
        activation=activation,
        embedding_scale="sqrt" if setting("scale_embedding", False) else None,
        dropout=float(setting("dropout", 0.1)),
        pad_id=setting("pad_token_id"),
        eos_id=setting("eos_token_id"),
        decoder_start_id=start,
        share_embeddings=share_embeddings,
        target_vocabulary_size=target_size,
    )
