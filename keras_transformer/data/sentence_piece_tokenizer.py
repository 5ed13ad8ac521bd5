"""The joint SentencePiece vocabulary: `keras_transformer_runtime.sentence_piece_tokenizer`, under its old name.

The module moved to `keras_transformer_runtime`, which imports no Keras,
so that `keras-transformer translate` can tokenize without it; this name
keeps working for code written against it.
"""

from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer  # noqa: F401
from keras_transformer_runtime.sentence_piece_tokenizer import normalize  # noqa: F401
from keras_transformer_runtime.sentence_piece_tokenizer import read_vocabulary  # noqa: F401
from keras_transformer_runtime.sentence_piece_tokenizer import train_tokenizer  # noqa: F401
