"""The joint vocabulary as a KerasHub tokenizer: the `tf.data` and export side.

`load_tokenizer` returns a `keras_hub.tokenizers.SentencePieceTokenizer`,
which also runs inside `tf.data` and `tf.function` (on tensorflow-text's
SentencePiece op). It imports KerasHub, hence TensorFlow, when called, not
when this module is imported. Training the vocabulary, and a tokenizer with
the same ids on the `sentencepiece` library alone, live in
`keras_transformer_runtime.sentence_piece_tokenizer` (re-exported here), which
never imports TensorFlow.
"""

from keras_transformer_runtime.sentence_piece_tokenizer import END_ID
from keras_transformer_runtime.sentence_piece_tokenizer import PAD_ID
from keras_transformer_runtime.sentence_piece_tokenizer import START_ID
from keras_transformer_runtime.sentence_piece_tokenizer import UNK_ID
from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer
from keras_transformer_runtime.sentence_piece_tokenizer import normalize
from keras_transformer_runtime.sentence_piece_tokenizer import read_vocabulary
from keras_transformer_runtime.sentence_piece_tokenizer import train_tokenizer


def load_tokenizer(proto):
    """Loads a vocabulary from `train_tokenizer` as a KerasHub tokenizer.

    The tokenizer maps strings to int32 ids without adding `START_ID` or
    `END_ID` (the data pipeline adds them). Called eagerly on a list of
    strings it returns lists of ids; inside `tf.data` or a `tf.function` it
    returns a `tf.RaggedTensor`.

    Args:
        proto: serialized SentencePiece model (`bytes`), or the path of a file
            holding one.

    Returns:
        A `keras_hub.tokenizers.SentencePieceTokenizer`.

    Example:

    >>> texts = ["En el principio creó Dios los cielos y la tierra.",
    ...          "In the beginning, God created the heavens and the earth."]
    >>> tokenizer = load_tokenizer(train_tokenizer(texts, vocabulary_size=32))
    >>> tokenizer.get_vocabulary()[:4]
    ['<pad>', '<unk>', '<s>', '</s>']
    >>> ids = tokenizer.tokenize(["la tierra", "the earth"])
    >>> ids == [tokenizer.tokenize("la tierra").tolist(),
    ...         tokenizer.tokenize("the earth").tolist()]
    True
    >>> tokenizer.detokenize(ids)
    ['la tierra', 'the earth']
    """
    proto, _ = read_vocabulary(proto)
    import keras_hub  # imports TensorFlow: only here, not when this module loads

    return keras_hub.tokenizers.SentencePieceTokenizer(proto=proto)


__all__ = [
    "END_ID",
    "PAD_ID",
    "START_ID",
    "UNK_ID",
    "SentencePieceTokenizer",
    "load_tokenizer",
    "normalize",
    "read_vocabulary",
    "train_tokenizer",
]
