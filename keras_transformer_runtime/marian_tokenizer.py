"""The tokenizer of a Marian (OPUS-MT) translator: two SentencePiece models and one id table.

A Hugging Face `MarianMTModel` folder tokenizes the source with
`source.spm`, the target with `target.spm`, and numbers the pieces of both
with one table, `vocab.json`, whose ids the model's embedding rows follow.
Its specials differ from this package's (`special_tokens`): `</s>` is 0,
`<unk>` 1 and `<pad>` the last id. An imported model keeps every row, in
an order that puts Marian's specials where this package's decoding and
pipelines expect theirs (`marian_id_order`), so nothing downstream needs
to know where a model came from. `MarianTokenizer` gives ids in that
order, with the strings Hugging Face's `MarianTokenizer` gives.

Imports neither Keras, TensorFlow, torch nor transformers.
"""

import json
import os

import numpy as np
import sentencepiece

from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.run_files import ID_TABLE_FILE
from keras_transformer_runtime.run_files import MARIAN_VOCABULARY_FILES  # noqa: F401 (part of this module's names)
from keras_transformer_runtime.run_files import SOURCE_VOCABULARY_FILE
from keras_transformer_runtime.run_files import TARGET_ID_TABLE_FILE
from keras_transformer_runtime.run_files import TARGET_VOCABULARY_FILE
from keras_transformer_runtime.run_files import TOKENIZER_CONFIG_FILE
from keras_transformer_runtime.sentence_piece_tokenizer import id_rows
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID
from keras_transformer_runtime.special_tokens import UNK_ID

_DEFAULT_SPECIALS = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}


def marian_id_order(size, pad_id, unk_id, eos_id):
    """For each id of this package, the Marian id of the same piece.

    Marian's padding, unknown and end ids go to `PAD_ID`, `UNK_ID` and
    `END_ID` (0, 1, 3); every other Marian id keeps its relative order in
    the ids left (2, then 4, 5, ...). A permutation: nothing is added or
    dropped, so the model keeps Marian's parameter count.

    Args:
        size: int, the vocabulary size (at least 4).
        pad_id, unk_id, eos_id: int, Marian's ids of `<pad>`, `<unk>`, `</s>`.

    Returns:
        int64 NumPy `(size,)`: entry `i` is the Marian id of this package's id `i`.

    Example:

    >>> marian_id_order(6, pad_id=5, unk_id=1, eos_id=0).tolist()
    [5, 1, 2, 0, 3, 4]
    """
    specials = {PAD_ID: pad_id, UNK_ID: unk_id, END_ID: eos_id}
    if size < 4 or len(set(specials.values())) != 3 or not all(0 <= i < size for i in specials.values()):
        raise ValueError(f"A Marian vocabulary needs 4 ids or more and three distinct specials in [0, {size}), "
                         f"got size={size}, pad={pad_id}, unk={unk_id}, eos={eos_id}.")
    order = np.empty(size, np.int64)
    ours = np.ones(size, bool)
    theirs = np.ones(size, bool)
    for our_id, their_id in specials.items():
        order[our_id] = their_id
        ours[our_id] = theirs[their_id] = False
    order[ours] = np.flatnonzero(theirs)  # the rest keep their relative order
    return order


def read_json_object(path, missing):
    """The JSON object in `path`, or a `UserInputError` naming the file.

    Args:
        path: the file.
        missing: what to say when the file is missing (after "missing; ").

    Example:

    >>> read_json_object("/no/such/config.json", "a model folder holds one.")
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: /no/such/config.json: missing; a model folder holds one.
    """
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except FileNotFoundError:
        raise UserInputError(f"{path}: missing; {missing}") from None
    except (ValueError, UnicodeDecodeError) as error:
        raise UserInputError(f"{path}: not a JSON file ({error}).") from None
    if not isinstance(value, dict) or not value:
        raise UserInputError(f"{path}: expected a JSON object, got {type(value).__name__}.")
    return value


def read_id_table(directory, name=ID_TABLE_FILE):
    """`(pieces, specials)` of a Marian folder: its pieces by Marian id, and its special pieces.

    Args:
        directory: a folder with `vocab.json` (and optionally
            `tokenizer_config.json`, which may rename the specials).
        name: the table's file: `vocab.json`, or `target_vocab.json` for
            a model whose target has a vocabulary of its own.

    Returns:
        `pieces`, a list of str indexed by Marian id, and `specials`, a dict
        with `eos_token`, `unk_token` and `pad_token`.

    Raises:
        UserInputError: `vocab.json` is missing, not JSON, not a one-to-one
            map of pieces to the ids 0..n-1, or lacks a special.

    Example:

    >>> import json, tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "vocab.json"), "w") as f:
    ...     json.dump({"</s>": 0, "<unk>": 1, "▁a": 2, "<pad>": 3}, f)
    >>> read_id_table(folder)[0]
    ['</s>', '<unk>', '▁a', '<pad>']
    """
    path = os.path.join(directory, name)
    table = read_json_object(path, f"a Marian folder numbers its pieces in {name}.")
    ids = sorted(table.values()) if all(isinstance(i, int) for i in table.values()) else None
    if ids != list(range(len(table))):
        raise UserInputError(f"{path}: the ids are not 0..{len(table) - 1}, one piece each.")
    pieces = [None] * len(table)
    for piece, i in table.items():
        pieces[i] = piece
    specials = dict(_DEFAULT_SPECIALS)
    config = _tokenizer_config(directory)
    for key in specials:
        value = config.get(key)
        if isinstance(value, dict):  # an AddedToken saved whole
            value = value.get("content")
        if isinstance(value, str):
            specials[key] = value
    missing = [piece for piece in specials.values() if piece not in table]
    if missing:
        raise UserInputError(f"{path}: lacks the special pieces {missing}.")
    return pieces, specials


def _tokenizer_config(directory):
    """`tokenizer_config.json`'s object, or {} where the folder has none."""
    path = os.path.join(directory, TOKENIZER_CONFIG_FILE)
    return read_json_object(path, "") if os.path.isfile(path) else {}


def split_language_code(text):
    """`(code, rest)`: a leading target-language token (`>>fra<<`) cut off a source text, as Marian's tokenizer does.

    A multi-target OPUS-MT model (opus-mt-en-ROMANCE, en-mul, ...) reads
    which language to write from such a token, which `vocab.json` holds
    as one piece; the rest of the text goes through `source.spm`.

    Example:

    >>> split_language_code(">>fra<< Hello.")
    ('>>fra<<', ' Hello.')
    >>> split_language_code("Hello >>fra<<")
    ('', 'Hello >>fra<<')
    """
    end = text.find("<<") if text.startswith(">>") else -1
    return (text[:end + 2], text[end + 2:]) if end != -1 else ("", text)


class MarianTokenizer:
    """Strings to this package's ids and back, as Hugging Face's `MarianTokenizer` does.

    A source string is cut into pieces by `source.spm`; each piece takes
    its id from `vocab.json` (a piece not in it is `<unk>`), then `</s>` is
    appended, as Marian's encoder expects. A target-language token at the
    start (`>>fra<<`, `split_language_code`) is one piece, not spelled out. Target ids become pieces
    through the same table and a string through `target.spm`; `</s>`,
    `<unk>` and `<pad>` are dropped, as `decode(skip_special_tokens=True)`
    drops them. The ids are Marian's permuted by `marian_id_order`.

    The calls are those of `SentencePieceTokenizer` (`tokenize`,
    `detokenize`, `vocabulary_size`, `get_vocabulary`, `id_to_token`,
    `token_to_id`), so `TextTranslator` and `Translator` take either.

    A model whose target has a vocabulary of its own (`separate_vocabs`
    in `tokenizer_config.json`, as transformers reads it) numbers the
    target pieces with `target_vocab.json`. The id calls above then speak
    of the target side, what the decoder reads and writes, and
    `source_vocabulary_size`, `get_source_vocabulary`,
    `source_id_to_token` and `source_token_to_id` of the source; `marian_ids` and
    `target_marian_ids` are each side's permutation (one and the same
    where the table is shared).

    Args:
        directory: a folder with `source.spm`, `target.spm` and `vocab.json`
            (a Hugging Face Marian folder, or a run folder imported from one).

    Raises:
        UserInputError: a file is missing or is not what its name says.

    Example:

    >>> tokenizer = MarianTokenizer("runs/opus-mt-es-en")  # doctest: +SKIP
    >>> tokenizer.detokenize([tokenizer.tokenize("Hola.")])  # doctest: +SKIP
    ['Hola.']
    """

    def __init__(self, directory):
        self.directory = os.fspath(directory)
        self._processors = {}
        for name in (SOURCE_VOCABULARY_FILE, TARGET_VOCABULARY_FILE):
            path = os.path.join(self.directory, name)
            if not os.path.isfile(path):
                raise UserInputError(f"{path}: missing; a Marian folder holds source.spm, target.spm and vocab.json.")
            processor = sentencepiece.SentencePieceProcessor()
            try:
                processor.LoadFromSerializedProto(open(path, "rb").read())
            except (RuntimeError, OSError) as error:
                raise UserInputError(f"{path}: not a SentencePiece model ({error}).") from None
            self._processors[name] = processor
        pieces, self.specials = read_id_table(self.directory)
        self.marian_ids, self._source_pieces = self._ordered(pieces)
        self.separate_vocabularies = bool(_tokenizer_config(self.directory).get("separate_vocabs"))
        if self.separate_vocabularies:
            self.target_marian_ids, self._pieces = self._ordered(read_id_table(self.directory, TARGET_ID_TABLE_FILE)[0])
        else:
            self.target_marian_ids, self._pieces = self.marian_ids, self._source_pieces
        self._source_ids = {piece: i for i, piece in enumerate(self._source_pieces)}
        self._ids = {piece: i for i, piece in enumerate(self._pieces)}
        self._dropped = {self._ids[piece] for piece in self.specials.values()}
        self.language_codes = tuple(sorted(piece[2:-2] for piece in self._source_pieces
                                           if piece.startswith(">>") and piece.endswith("<<") and len(piece) > 4))

    def _ordered(self, pieces):
        """`(marian_ids, pieces)`: a table's permutation (`marian_id_order`) and its pieces in this package's ids."""
        order = marian_id_order(len(pieces), *(pieces.index(self.specials[key])
                                               for key in ("pad_token", "unk_token", "eos_token")))
        return order, [pieces[i] for i in order]

    @property
    def source_processor(self):
        """The `sentencepiece` processor of `source.spm`."""
        return self._processors[SOURCE_VOCABULARY_FILE]

    @property
    def target_processor(self):
        """The `sentencepiece` processor of `target.spm`."""
        return self._processors[TARGET_VOCABULARY_FILE]

    def vocabulary_size(self):
        """Number of target ids (the size of `vocab.json`, or of `target_vocab.json`)."""
        return len(self._pieces)

    def source_vocabulary_size(self):
        """Number of source ids (the size of `vocab.json`)."""
        return len(self._source_pieces)

    def source_id_to_token(self, id):
        """The source piece of one id."""
        return _piece(self._source_pieces, id)

    def source_token_to_id(self, token):
        """The source id of one piece (`UNK_ID` for a piece not in `vocab.json`)."""
        return self._source_ids.get(token, UNK_ID)

    def get_vocabulary(self):
        """The target pieces as a list of strings, indexed by this package's id."""
        return list(self._pieces)

    def get_source_vocabulary(self):
        """The source pieces as a list of strings, indexed by this package's id (`get_vocabulary`'s where shared)."""
        return list(self._source_pieces)

    def id_to_token(self, id):
        """The target piece of one id."""
        return _piece(self._pieces, id)

    def token_to_id(self, token):
        """The target id of one piece (`UNK_ID` for a piece not in the target's table)."""
        return self._ids.get(token, UNK_ID)

    def _encode(self, texts, name, end):
        processor = self._processors[name]
        codes = [""] * len(texts)
        if name == SOURCE_VOCABULARY_FILE:  # only the source may start with a target-language token
            codes, texts = zip(*map(split_language_code, texts)) if texts else ((), ())
        rows = processor.encode(list(texts), out_type=str)
        rows = [[code, *row] if code else row for code, row in zip(codes, rows)]
        ids = self._source_ids if name == SOURCE_VOCABULARY_FILE else self._ids
        return [[ids.get(piece, UNK_ID) for piece in row] + ([END_ID] if end else []) for row in rows]

    def tokenize(self, inputs):
        """Source ids of a string (int32 array) or of a list of strings (lists of ints), `</s>` appended."""
        texts, batched = _texts(inputs)
        ids = self._encode(texts, SOURCE_VOCABULARY_FILE, end=True)
        return ids if batched else np.array(ids[0], "int32")

    def tokenize_target(self, inputs):
        """Target ids (with `target.spm`), without `</s>`: a fine-tuning pipeline adds it to the labels."""
        texts, batched = _texts(inputs)
        ids = self._encode(texts, TARGET_VOCABULARY_FILE, end=False)
        return ids if batched else np.array(ids[0], "int32")

    def tokenize_flat(self, texts):
        """Source ids of many texts as `(values, offsets)`, as `SentencePieceTokenizer.tokenize_flat`."""
        return _flat(self.tokenize(list(texts)))

    def tokenize_target_flat(self, texts):
        """Target ids of many texts as `(values, offsets)` (`tokenize_target`'s, without `</s>`)."""
        return _flat(self.tokenize_target(list(texts)))

    def detokenize(self, inputs):
        """Strings of a list of target id sequences (or one string of one sequence)."""
        rows, batched = id_rows(inputs)
        processor = self._processors[TARGET_VOCABULARY_FILE]
        texts = []
        for row in rows:
            pieces = [self._pieces[i] for i in row if i not in self._dropped]
            texts.append(processor.decode_pieces(pieces).replace("\u2581", " ").strip())
        return texts if batched else texts[0]

    def __repr__(self):
        return f"<MarianTokenizer: {self.vocabulary_size()} ids, {self.directory}>"


def _piece(pieces, id):
    if not 0 <= id < len(pieces):
        raise ValueError(f"`id` must be in [0, {len(pieces)}), received id={id!r}")
    return pieces[int(id)]


def _flat(rows):
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    values = np.fromiter((i for row in rows for i in row), dtype=np.int32, count=int(lengths.sum()))
    return values, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _texts(inputs):
    """(list of str, batched) for a string, bytes or a list of them."""
    if isinstance(inputs, bytes):
        return [inputs.decode("utf-8")], False
    if isinstance(inputs, str):
        return [inputs], False
    return [text.decode("utf-8") if isinstance(text, bytes) else str(text) for text in inputs], True
