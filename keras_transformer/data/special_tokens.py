"""Ids of the special tokens: `keras_transformer_runtime.special_tokens`, under its old name."""

from keras_transformer_runtime.special_tokens import END_ID  # noqa: F401
from keras_transformer_runtime.special_tokens import PAD_ID  # noqa: F401
from keras_transformer_runtime.special_tokens import START_ID  # noqa: F401
from keras_transformer_runtime.special_tokens import UNK_ID  # noqa: F401
