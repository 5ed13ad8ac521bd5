"""A Hugging Face M2M-100 `config.json` (NLLB-200's and M2M-100's), read as this package's `transformer()` arguments.

NLLB-200 and M2M-100 are one architecture in transformers
(`M2M100ForConditionalGeneration`, `model_type` "m2m_100"): pre-LN layers
with a LayerNorm after each stack, ReLU, biases on every projection, one
token matrix for source, target and output scaled by sqrt(d_model), and
fairseq's sinusoids (`sinusoid_layout="fairseq"`). A setting the layers
cannot express is refused with the file and the setting named.
"""

import os
import typing

from keras_transformer.checkpoints import imported_model
from keras_transformer.checkpoints.hugging_face_files import CONFIG_FILE
from keras_transformer.checkpoints.imported_model import check_config
from keras_transformer.checkpoints.imported_model import checked_activation
from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.marian_tokenizer import read_json_object

MODEL_TYPE = "m2m_100"
# torch's LayerNorm epsilon, which every M2M-100 LayerNorm keeps.
LAYER_NORM_EPSILON = 1e-5

# Every key an M2M-100 config.json may hold, in three kinds: none is ignored unnamed.
MODEL_KEYS = frozenset({
    "model_type", "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
    "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings",
    "activation_function", "scale_embedding", "dropout", "pad_token_id", "eos_token_id",
    "decoder_start_token_id", "tie_word_embeddings",
})
# Keys that change nothing of the model, and keys that must keep their defaults: every family's.
NO_EFFECT_KEYS = imported_model.NO_EFFECT_KEYS
DEFAULT_ONLY_KEYS = imported_model.DEFAULT_ONLY_KEYS


class NllbArchitecture(typing.NamedTuple):
    """What `config.json` says of the model, as `transformer()` arguments.

    Attributes:
        vocabulary_size, num_layers, num_decoder_layers, d_model, num_heads,
            ff_dim, max_length, activation, embedding_scale, dropout:
            `transformer()`'s arguments.
        pad_id, eos_id, decoder_start_id: the model's ids of its padding,
            end and start tokens.
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

    def builder_arguments(self, decoder_start_id):
        """The keyword arguments of `transformer()` for this architecture.

        Args:
            decoder_start_id: the start token in this package's ids.
        """
        return dict(
            source_vocabulary_size=self.vocabulary_size, target_vocabulary_size=self.vocabulary_size,
            num_layers=self.num_layers, num_decoder_layers=self.num_decoder_layers, d_model=self.d_model,
            num_heads=self.num_heads, ff_dim=self.ff_dim, max_length=self.max_length, dropout=self.dropout,
            activation=self.activation, embedding_scale=self.embedding_scale, layer_norm_epsilon=LAYER_NORM_EPSILON,
            norm_first=True, tie_embeddings=True, share_embeddings=True, sinusoid_layout="fairseq",
            decoder_start_id=decoder_start_id,
        )


def read_architecture(directory, name=CONFIG_FILE):
    """The `NllbArchitecture` of a Hugging Face NLLB-200 or M2M-100 folder's `config.json`.

    Args:
        directory: the folder.
        name: the config's file: `config.json`, or an imported run's `nllb_config.json`.

    Returns:
        An `NllbArchitecture`.

    Raises:
        UserInputError: `config.json` is missing or unreadable, describes
            another architecture, or a setting the layers cannot express;
            the message names the file and the setting.

    Example:

    >>> import json, tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "config.json"), "w") as f:
    ...     json.dump({"model_type": "m2m_100", "encoder_layerdrop": 0.05, "moe_experts": 4}, f)
    >>> read_architecture(folder)
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: ...config.json: moe_experts=4: a setting this importer does not ...
    """
    path = os.path.join(directory, name)
    config = read_json_object(path, f"a Hugging Face model folder holds {name}.")
    if config.get("model_type") != MODEL_TYPE:
        raise UserInputError(f"{path}: model_type {config.get('model_type')!r} is not an M2M-100 model "
                             "(NLLB-200 or M2M-100, model_type 'm2m_100').")

    def setting(key, default=None):
        return config.get(key, default)

    def refuse(key, why):
        raise UserInputError(f"{path}: {key}={setting(key)!r}: {why}")

    check_config(config, path, MODEL_KEYS, NO_EFFECT_KEYS, "M2M-100's model")
    activation = checked_activation(config, path, "relu")
    if setting("pad_token_id") != 1:
        refuse("pad_token_id", "fairseq's positions count from the padding id 1 (sinusoid_layout='fairseq').")
    start = setting("decoder_start_token_id", setting("eos_token_id"))
    for key in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        if not isinstance(setting(key, start), int) or not 0 <= setting(key, start) < setting("vocab_size"):
            refuse(key, f"outside the vocabulary of {setting('vocab_size')}.")
    return NllbArchitecture(
        vocabulary_size=setting("vocab_size"),
        num_layers=setting("encoder_layers"),
        num_decoder_layers=setting("decoder_layers"),
        d_model=setting("d_model"),
        num_heads=setting("encoder_attention_heads"),
        ff_dim=setting("encoder_ffn_dim"),
        max_length=setting("max_position_embeddings"),
        activation=activation,
        embedding_scale="sqrt" if setting("scale_embedding", True) else None,
        dropout=float(setting("dropout", 0.1)),
        pad_id=setting("pad_token_id"),
        eos_id=setting("eos_token_id"),
        decoder_start_id=start,
    )
