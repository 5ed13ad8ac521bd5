"""The joint SentencePiece vocabulary, trained and used with `sentencepiece` alone.

One unigram vocabulary (Kudo, 2018) serves both languages, so the encoder
and decoder share ids and a tied embedding is possible. Ids 0..3 are the
specials: `PAD_ID` (padding), `UNK_ID`, `START_ID` and `END_ID`. Training
uses `sentencepiece` with the settings of KerasHub's
`compute_sentence_piece_proto` (unigram model, `nmt_nfkc` normalization,
pad/unk/bos/eos = 0/1/2/3) plus full character coverage.

This module imports neither TensorFlow nor KerasHub: training the
vocabulary, tokenizing the corpus for the `keras.utils.PyDataset` pipeline
and translating all run where TensorFlow is not installed.
`SentencePieceTokenizer` gives the ids and strings of the KerasHub tokenizer
of `keras_transformer.data.tokenizer.load_tokenizer` (which the `tf.data`
pipeline and the SavedModel export use) on the same vocabulary file.
"""

import io
import itertools
import os
import re
import unicodedata

import numpy as np
import sentencepiece

from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID
from keras_transformer_runtime.special_tokens import START_ID
from keras_transformer_runtime.special_tokens import UNK_ID

_SPECIAL_IDS = {"pad_id": PAD_ID, "unk_id": UNK_ID, "bos_id": START_ID, "eos_id": END_ID}


def train_tokenizer(texts, vocabulary_size=8000, path=None):
    """Learns one SentencePiece unigram vocabulary from an iterable of texts.

    Pass the Spanish and the English training texts together: the vocabulary
    is joint. Every character of `texts` gets a piece (character coverage
    1.0; KerasHub's `compute_sentence_piece_proto` keeps SentencePiece's
    default 0.9995, which on the Bible corpus sends `(`, `)` and `Ó` to
    `<unk>`), and all sentences are used in their given order, so the same
    texts always give the same vocabulary. Seconds for the training
    sentences of the embedded corpus (benchmarks/findings/recipes-and-scale.md,
    "A corpus of a million pairs").

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
    >>> tokenizer = SentencePieceTokenizer(proto)
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


def read_vocabulary(proto):
    """Reads and checks a vocabulary from `train_tokenizer`.

    Args:
        proto: serialized SentencePiece model (`bytes`), or the path of a file
            holding one.

    Returns:
        A `(proto_bytes, processor)` pair: the bytes, and the
        `sentencepiece.SentencePieceProcessor` loaded from them.

    Raises:
        FileNotFoundError: `proto` is a path with no file.
        ValueError: `proto` is not a SentencePiece model, or one whose
            special ids are not 0..3 (pad, unk, start, end).

    Example:

    >>> proto = train_tokenizer(["Sea la luz.", "Let there be light."], vocabulary_size=20)
    >>> proto_bytes, processor = read_vocabulary(proto)
    >>> processor.pad_id(), processor.eos_id()
    (0, 3)
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
    return proto, processor


class SentencePieceTokenizer:
    """Strings to ids and back with the `sentencepiece` library, no TensorFlow.

    The eager counterpart of the KerasHub tokenizer that
    `keras_transformer.data.tokenizer.load_tokenizer` returns, with the
    same ids and strings (tested on the corpus) and the same calls
    (`tokenize`, `detokenize`, `vocabulary_size`, `get_vocabulary`,
    `id_to_token`, `token_to_id`), so `Translator` and the
    `keras.utils.PyDataset` pipeline run where TensorFlow is not installed.
    `START_ID` and `END_ID` are never added: the pipelines add them.

    Args:
        proto: serialized SentencePiece model (`bytes`) from
            `train_tokenizer`, or the path of a file holding one (e.g. the
            `vocabulary.spm` of a training run).
        num_threads: int, threads of one batched `sentencepiece` call; -1
            (the default) lets `sentencepiece` use every core.

    Raises:
        FileNotFoundError: `proto` is a path with no file.
        ValueError: `proto` is not a vocabulary of `train_tokenizer`.

    Example:

    >>> tokenizer = SentencePieceTokenizer(train_tokenizer(
    ...     ["En el principio creó Dios los cielos y la tierra.",
    ...      "In the beginning, God created the heavens and the earth."],
    ...     vocabulary_size=32))
    >>> tokenizer.get_vocabulary()[:4]
    ['<pad>', '<unk>', '<s>', '</s>']
    >>> ids = tokenizer.tokenize(["la tierra", "the earth"])
    >>> ids[1] == tokenizer.tokenize("the earth").tolist()
    True
    >>> tokenizer.detokenize(ids)
    ['la tierra', 'the earth']
    >>> values, offsets = tokenizer.tokenize_flat(["la tierra", "the earth"])
    >>> values[offsets[1]:offsets[2]].tolist() == ids[1]
    True
    """

    def __init__(self, proto, num_threads=-1):
        if isinstance(num_threads, bool) or not isinstance(num_threads, int):
            raise TypeError(f"num_threads must be an int, got num_threads={num_threads!r}.")
        self.proto, self._processor = read_vocabulary(proto)
        self.num_threads = num_threads

    def vocabulary_size(self):
        """Number of pieces, the 4 specials included."""
        return self._processor.get_piece_size()

    def get_vocabulary(self):
        """The pieces as a list of strings, indexed by id."""
        return [self._processor.id_to_piece(i) for i in range(self.vocabulary_size())]

    def id_to_token(self, id):
        """The piece of one id."""
        if not 0 <= id < self.vocabulary_size():
            raise ValueError(f"`id` must be in [0, {self.vocabulary_size()}), received id={id!r}")
        return self._processor.id_to_piece(int(id))

    def token_to_id(self, token):
        """The id of one piece (`UNK_ID` for a piece not in the vocabulary)."""
        return self._processor.piece_to_id(token)

    def tokenize(self, inputs):
        """Token ids of a string (an int32 array) or of a list of strings (lists of ints)."""
        texts, batched = _texts(inputs)
        ids = self._processor.encode(texts, out_type=int, num_threads=self.num_threads)
        return ids if batched else np.array(ids[0], "int32")

    def tokenize_flat(self, texts):
        """Token ids of many texts as two NumPy arrays, not lists of lists.

        One batched `sentencepiece` call per 8192 texts, flattened in C.

        Args:
            texts: list of `str`.

        Returns:
            `(values, offsets)`: int32 ids of all texts one after the other,
            and int64 offsets of length `len(texts) + 1`, so the ids of text
            `i` are `values[offsets[i]:offsets[i + 1]]`.
        """
        texts, _ = _texts(list(texts))
        values, lengths = [], []
        for start in range(0, len(texts), 8192):
            ids = self._processor.encode(texts[start:start + 8192], out_type=int, num_threads=self.num_threads)
            chunk_lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            values.append(np.fromiter(
                itertools.chain.from_iterable(ids), dtype=np.int32, count=int(chunk_lengths.sum())
            ))
            lengths.append(chunk_lengths)
        lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return (np.concatenate(values) if values else np.zeros(0, np.int32)), offsets

    def detokenize(self, inputs):
        """Strings of a list of id sequences (or one string of one sequence)."""
        rows, batched = id_rows(inputs)
        texts = self._processor.decode(rows, num_threads=self.num_threads)
        return texts if batched else texts[0]

    def __repr__(self):
        return f"<SentencePieceTokenizer: {self.vocabulary_size()} pieces>"


def id_rows(inputs):
    """`(rows, batched)`: id sequences as lists of Python ints, and whether `inputs` held several.

    sentencepiece 0.2.0 decodes Python ints only.

    Example:

    >>> id_rows(np.array([[4, 5], [6, 7]])), id_rows([4, 5])
    (([[4, 5], [6, 7]], True), ([[4, 5]], False))
    """
    if isinstance(inputs, np.ndarray):
        inputs = inputs.tolist()
    if isinstance(inputs, (int, np.integer)):
        inputs = [inputs]
    inputs = list(inputs)
    batched = bool(inputs) and not isinstance(inputs[0], (int, np.integer))
    rows = [[int(i) for i in np.asarray(row).reshape(-1)] for row in inputs] if batched else [[int(i) for i in inputs]]
    return rows, batched


def _texts(inputs):
    """(list of str, batched) for a string, bytes or a list of them."""
    if isinstance(inputs, (str, bytes)):
        inputs, batched = [inputs], False
    elif isinstance(inputs, np.ndarray) and inputs.ndim == 0:
        inputs, batched = [inputs.item()], False
    elif isinstance(inputs, (list, tuple, np.ndarray)):
        inputs, batched = list(inputs), True
    else:
        raise ValueError(
            f"Input should be a string or a list of strings; received {type(inputs).__name__}."
        )
    texts = []
    for text in inputs:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if not isinstance(text, str):
            raise ValueError(f"Every input must be a string; received {type(text).__name__} ({text!r:.40}).")
        texts.append(text)
    return texts, batched


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
    "SentencePieceTokenizer",
    "normalize",
    "read_vocabulary",
    "train_tokenizer",
]
