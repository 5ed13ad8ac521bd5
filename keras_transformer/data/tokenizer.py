"""A joint Spanish + English SentencePiece vocabulary, trained and loaded.

One unigram vocabulary (Kudo, 2018) serves both languages, so the encoder
and decoder share ids and a tied embedding is possible. Ids 0..3 are the
specials: `PAD_ID` (padding), `UNK_ID`, `START_ID` and `END_ID`. Training
uses `sentencepiece` with the settings of KerasHub's
`compute_sentence_piece_proto` (unigram model, `nmt_nfkc` normalization,
pad/unk/bos/eos = 0/1/2/3) plus full character coverage; the result loads
as a `keras_hub.tokenizers.SentencePieceTokenizer`.

A TensorFlow edge of the package: this module imports TensorFlow (through
KerasHub); the layers and models never do.
"""

import io
import os
import re
import unicodedata

import keras_hub
import sentencepiece

from keras_transformer.data.special_tokens import END_ID
from keras_transformer.data.special_tokens import PAD_ID
from keras_transformer.data.special_tokens import START_ID
from keras_transformer.data.special_tokens import UNK_ID

_SPECIAL_IDS = {"pad_id": PAD_ID, "unk_id": UNK_ID, "bos_id": START_ID, "eos_id": END_ID}


def train_tokenizer(texts, vocabulary_size=8000, path=None):
    """Learns one SentencePiece unigram vocabulary from an iterable of texts.

    Pass the Spanish and the English training texts together: the vocabulary
    is joint. Every character of `texts` gets a piece (character coverage
    1.0; KerasHub's `compute_sentence_piece_proto` keeps SentencePiece's
    default 0.9995, which on the Bible corpus sends `(`, `)` and `Ó` to
    `<unk>`), and all sentences are used in their given order, so the same
    texts always give the same vocabulary. About 5 s for the ~57k training
    sentences of the embedded corpus at 8000 pieces on 2 CPU cores.

    Args:
        texts: iterable of `str`, one sentence each.
        vocabulary_size: int, number of pieces, the 4 specials included.
            Defaults to 8000.
        path: optional file path; when given, the serialized model is also
            written there (e.g. `"vocabulary.spm"`).

    Returns:
        The serialized SentencePiece model proto, as `bytes`.

    Example:

    >>> texts = ["En el principio creó Dios los cielos y la tierra.",
    ...          "In the beginning, God created the heavens and the earth."]
    >>> proto = train_tokenizer(texts, vocabulary_size=32)
    >>> tokenizer = load_tokenizer(proto)
    >>> tokenizer.vocabulary_size()
    32
    >>> tokenizer.detokenize(tokenizer.tokenize(["Dios created  the cielos. "]))
    ['Dios created the cielos.']
    """
    if isinstance(texts, (str, bytes)):
        raise ValueError(
            "`texts` must be an iterable of sentences, not a single string; "
            "received a string. Wrap it in a list: texts=[text]."
        )
    texts = list(texts)
    if not texts:
        raise ValueError("`texts` is empty; pass at least one sentence to train on.")
    if not all(isinstance(text, str) for text in texts):
        raise ValueError("`texts` must contain only `str` sentences.")
    if not isinstance(vocabulary_size, int) or vocabulary_size <= len(_SPECIAL_IDS):
        raise ValueError(
            f"`vocabulary_size` must be an int larger than the {len(_SPECIAL_IDS)} "
            f"special ids; received vocabulary_size={vocabulary_size!r}"
        )
    writer = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_writer=writer,
            vocab_size=vocabulary_size,
            model_type="unigram",
            normalization_rule_name="nmt_nfkc",
            character_coverage=1.0,
            # 0 = train on every sentence: no random sampling, deterministic.
            input_sentence_size=0,
            minloglevel=2,
            **_SPECIAL_IDS,
        )
    except RuntimeError as error:
        raise _vocabulary_size_error(error, vocabulary_size) from error
    proto = writer.getvalue()
    if path is not None:
        with open(os.fspath(path), "wb") as f:
            f.write(proto)
    return proto


def _vocabulary_size_error(error, vocabulary_size):
    message = str(error)
    too_high = re.search(r"Vocabulary size too high.*<= (\d+)", message)
    if too_high:
        return ValueError(
            f"vocabulary_size={vocabulary_size} is too large for these texts: they "
            f"support at most {too_high.group(1)} pieces. Pass a smaller "
            f"`vocabulary_size` or more text."
        )
    too_low = re.search(r"smaller than required_chars\. \d+ vs (\d+)", message)
    if too_low:
        return ValueError(
            f"vocabulary_size={vocabulary_size} is too small: these texts have "
            f"{int(too_low.group(1)) - len(_SPECIAL_IDS)} distinct characters, each "
            f"needing a piece besides the {len(_SPECIAL_IDS)} specials. Pass "
            f"vocabulary_size >= {too_low.group(1)}."
        )
    return error


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
    if isinstance(proto, (str, os.PathLike)):
        path = os.fspath(proto)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"No vocabulary file at proto={path!r}; pass the path written by "
                f"train_tokenizer(..., path=...) or the proto bytes it returned."
            )
        with open(path, "rb") as f:
            proto = f.read()
    if not isinstance(proto, bytes):
        raise ValueError(
            f"`proto` must be the bytes returned by train_tokenizer or a file path; "
            f"received type(proto)={type(proto).__name__}"
        )
    try:
        processor = sentencepiece.SentencePieceProcessor(model_proto=proto)
    except RuntimeError as error:
        raise ValueError(
            "`proto` is not a serialized SentencePiece model; pass the bytes "
            "returned by train_tokenizer or the file it wrote."
        ) from error
    found = {name: getattr(processor, name)() for name in _SPECIAL_IDS}
    if found != _SPECIAL_IDS:
        raise ValueError(
            f"The vocabulary in `proto` has special ids {found}; keras_transformer "
            f"needs {_SPECIAL_IDS} (padding must be 0). Train it with "
            f"train_tokenizer."
        )
    return keras_hub.tokenizers.SentencePieceTokenizer(proto=proto)


def normalize(text):
    """The text a tokenize -> detokenize round trip gives back.

    SentencePiece's default `nmt_nfkc` normalization, stated simply: Unicode
    NFKC, then whitespace runs collapsed to one space and the ends stripped.
    So `tokenizer.detokenize(tokenizer.tokenize(text)) == normalize(text)`
    for every text whose characters all occur in the vocabulary's training
    texts. Caveats: a character never seen in training becomes `UNK_ID` and
    comes back as `" ⁇ "`; `nmt_nfkc` also deletes control and zero-width
    characters, which this function leaves in place.

    Args:
        text: str.

    Returns:
        The normalized `str`.

    Example:

    >>> normalize("  ﬁn   del\\tmundo ")
    'fin del mundo'
    """
    return " ".join(unicodedata.normalize("NFKC", text).split())


__all__ = [
    "END_ID",
    "PAD_ID",
    "START_ID",
    "UNK_ID",
    "load_tokenizer",
    "normalize",
    "train_tokenizer",
]
