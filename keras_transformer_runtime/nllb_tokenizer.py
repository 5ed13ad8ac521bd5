"""The tokenizer of an NLLB-200 translator: Hugging Face's `tokenizer.json`, read with `tokenizers`.

An NLLB-200 model (`facebook/nllb-200-distilled-600M`, ...) is one model
for 200 languages. Its tokenizer cuts text into BPE pieces (the
`tokenizers` library reads `tokenizer.json`, so nothing of BPE is
re-implemented here) and marks the languages with tokens of their own,
`spa_Latn`, `eng_Latn`: the source starts with its language's token and
ends with `</s>`, and the decoder, which starts from `</s>`, must write
the target language's token first (transformers' `forced_bos_token_id`).
Its specials differ from this package's (`special_tokens`): `<s>` is 0,
`<pad>` 1, `</s>` 2, `<unk>` 3; an imported model keeps every row in the
order `marian_id_order` gives, so `<pad>`, `<unk>`, `<s>` and `</s>` sit at
this package's `PAD_ID`, `UNK_ID`, `START_ID` and `END_ID`.

Imports neither Keras, TensorFlow, torch nor transformers.
"""

import copy
import difflib
import os

import numpy as np

from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.marian_tokenizer import _flat
from keras_transformer_runtime.marian_tokenizer import _texts
from keras_transformer_runtime.marian_tokenizer import marian_id_order
from keras_transformer_runtime.marian_tokenizer import read_json_object
from keras_transformer_runtime.run_files import TOKENIZER_CONFIG_FILE
from keras_transformer_runtime.sentence_piece_tokenizer import id_rows
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import UNK_ID

TOKENIZER_FILE = "tokenizer.json"
_SPECIALS = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
_SHOWN = 12


class NllbTokenizer:
    """Strings to this package's ids and back, as transformers' `NllbTokenizer` does.

    A source string becomes `[source language] pieces </s>` (or, where
    `tokenizer_config.json` says `legacy_behaviour`, `pieces </s> [source
    language]`); target ids become a string without the specials and the
    language tokens (`decode(skip_special_tokens=True)`). The ids are the
    model's permuted by `marian_id_order`.

    The calls are those of `SentencePieceTokenizer` (`tokenize`,
    `detokenize`, `vocabulary_size`, `get_vocabulary`, `id_to_token`,
    `token_to_id`), so `TextTranslator` and `Translator` take it. A
    translator needs both languages: `with_languages` gives a copy that
    has them, and its `forced_first_id` is the target language's token,
    which the decoding writes first.

    Args:
        directory: a folder with `tokenizer.json` (a Hugging Face NLLB
            folder, or a run folder imported from one).
        vocabulary_size: the model's vocabulary, which may hold a few rows
            more than the tokenizer (NLLB-200's 256,206 against 256,204);
            defaults to the tokenizer's size.
        source_language, target_language: language codes (`spa_Latn`), or None.

    Attributes:
        path: the file of the pieces (`tokenizer.json`; M2M-100's `sentencepiece.bpe.model`).
        model_ids: for each id of this package, the model's id of the same piece.
        language_codes: the model's language codes, sorted.

    Raises:
        UserInputError: `tokenizer.json` is missing or unreadable, lacks a
            special, or a language code is not one of the model's.

    Example:

    >>> tokenizer = NllbTokenizer("runs/nllb-200-distilled-600M")  # doctest: +SKIP
    >>> tokenizer = tokenizer.with_languages("spa_Latn", "eng_Latn")  # doctest: +SKIP
    >>> tokenizer.detokenize(tokenizer.tokenize_target(["Hola."]))  # doctest: +SKIP
    ['Hola.']
    """

    def __init__(self, directory, vocabulary_size=None, source_language=None, target_language=None):
        self.directory = os.fspath(directory)
        config_path = os.path.join(self.directory, TOKENIZER_CONFIG_FILE)
        config = read_json_object(config_path, "") if os.path.isfile(config_path) else {}
        self._read_pieces(config)
        self.legacy_behaviour = bool(config.get("legacy_behaviour", False))
        self._size = int(vocabulary_size or self.piece_count())
        specials = {}
        for key, default in _SPECIALS.items():
            piece = config.get(key, default)
            piece = piece.get("content", default) if isinstance(piece, dict) else piece
            specials[key] = self.model_id(piece)
            if specials[key] is None:
                raise UserInputError(f"{self.path}: lacks the special piece {piece!r}.")
        self.model_ids = marian_id_order(self._size, specials["pad_token"], specials["unk_token"],
                                         specials["eos_token"])
        self._ids = np.argsort(self.model_ids)
        self.language_codes = self._read_language_codes(config, set(specials) | {"mask_token"})
        self.source_language = self.target_language = None
        if source_language is not None or target_language is not None:
            self.source_language, self.target_language = self._checked(source_language, target_language)

    def _read_pieces(self, config):
        """Reads the pieces' file (`tokenizer.json`); `M2m100Tokenizer` reads SentencePiece's and `vocab.json`."""
        self.path = os.path.join(self.directory, TOKENIZER_FILE)
        if not os.path.isfile(self.path):
            raise UserInputError(f"{self.path}: missing; an NLLB folder holds the tokenizer.json transformers saves.")
        from tokenizers import Tokenizer

        try:
            self._tokenizer = Tokenizer.from_file(self.path)
        except Exception as error:  # tokenizers raises a bare Exception for a file it cannot parse
            raise UserInputError(f"{self.path}: not a tokenizers file ({error}).") from None

    def _read_language_codes(self, config, special_keys):
        return _language_codes(config, self._tokenizer, special_keys)

    def _language_token(self, code):
        """The piece of a language code: NLLB's code is its token (`spa_Latn`)."""
        return code

    def _code(self, code):
        """A language code as the user typed it, in the form `language_codes` lists."""
        return code

    def _checked(self, source_language, target_language):
        source_language, target_language = (None if code is None else self._code(code)
                                            for code in (source_language, target_language))
        for flag, code in (("--source-language", source_language), ("--target-language", target_language)):
            if code is not None and code not in self.language_codes:
                close = difflib.get_close_matches(code, self.language_codes, n=5, cutoff=0.5)
                raise UserInputError(f"{flag} {code}: not one of this model's {len(self.language_codes)} "
                                     "languages" + (f"; close: {', '.join(close)}" if close else "")
                                     + f"; its codes: {_listed(self.language_codes)}")
        return source_language, target_language

    def with_languages(self, source_language=None, target_language=None):
        """A copy that translates from `source_language` into `target_language` (either kept where None).

        Raises:
            UserInputError: a code this model does not have (close ones named).

        Example:

        >>> tokenizer = NllbTokenizer("runs/nllb").with_languages("spa_Latn", "eng_Latn")  # doctest: +SKIP
        """
        copied = copy.copy(self)
        copied.source_language, copied.target_language = self._checked(
            source_language or self.source_language, target_language or self.target_language)
        return copied

    def _language_id(self, code, flag):
        if code is None:
            raise UserInputError(f"this model translates between {len(self.language_codes)} languages: pass "
                                 f"{flag} CODE (the server: \"{flag[2:].replace('-', '_')}\"); its codes: "
                                 + _listed(self.language_codes))
        return int(self._ids[self.model_id(self._language_token(code))])

    @property
    def forced_first_id(self):
        """The target language's token in this package's ids: the decoder's first word; None until it is set."""
        if self.target_language is None:
            return None
        return int(self._ids[self.model_id(self._language_token(self.target_language))])

    def vocabulary_size(self):
        """Number of ids: the model's vocabulary."""
        return self._size

    def piece_count(self):
        """Number of pieces `tokenizer.json` holds (at most `vocabulary_size()`)."""
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def model_id(self, piece):
        """The model's own id of a piece (`tokenizer.json`'s), or None for a piece it lacks."""
        return self._tokenizer.token_to_id(piece)

    def get_vocabulary(self):
        """The pieces as a list of strings, indexed by this package's id (`id_to_token`'s)."""
        return [self.id_to_token(i) for i in range(self._size)]

    def id_to_token(self, id):
        """The piece of one id; a model row the tokenizer lacks is named `<row N>` (its model id), and decodes to ""."""
        if not 0 <= id < self._size:
            raise ValueError(f"`id` must be in [0, {self._size}), received id={id!r}")
        model_id = int(self.model_ids[int(id)])
        return self._piece(model_id) or f"<row {model_id}>"

    def _piece(self, model_id):
        return self._tokenizer.id_to_token(model_id)

    def token_to_id(self, token):
        """The id of one piece (`UNK_ID` for a piece the tokenizer lacks)."""
        model_id = self.model_id(token)
        return UNK_ID if model_id is None or model_id >= self._size else int(self._ids[model_id])

    def check_languages(self):
        """Raises `UserInputError` (the codes listed) unless both languages are set."""
        self._language_id(self.source_language, "--source-language")
        self._language_id(self.target_language, "--target-language")

    def piece_ids(self, texts):
        """Each text's piece ids, without language tokens or `</s>`."""
        return [self._ids[np.asarray(row, np.int64)].tolist() for row in self._encode(list(texts))]

    def _encode(self, texts):
        """The model's ids of each text's pieces."""
        return [encoding.ids for encoding in self._tokenizer.encode_batch(texts, add_special_tokens=False)]

    def tokenize(self, inputs):
        """Source ids of a string (int32 array) or of a list of strings (lists of ints), language and `</s>` added.

        Raises:
            UserInputError: the source or the target language is not set.
        """
        texts, batched = _texts(inputs)
        language = self._language_id(self.source_language, "--source-language")
        self._language_id(self.target_language, "--target-language")  # a source without a target is no request
        if self.legacy_behaviour:
            rows = [row + [END_ID, language] for row in self.piece_ids(texts)]
        else:
            rows = [[language, *row, END_ID] for row in self.piece_ids(texts)]
        return rows if batched else np.array(rows[0], "int32")

    def tokenize_target(self, inputs):
        """Target ids, the target language's token first, without `</s>`: a fine-tuning pipeline adds it."""
        texts, batched = _texts(inputs)
        language = self._language_id(self.target_language, "--target-language")
        rows = [[language, *row] for row in self.piece_ids(texts)]
        return rows if batched else np.array(rows[0], "int32")

    def tokenize_flat(self, texts):
        """Source ids of many texts as `(values, offsets)`, as `SentencePieceTokenizer.tokenize_flat`."""
        return _flat(self.tokenize(list(texts)))

    def tokenize_target_flat(self, texts):
        """Target ids of many texts as `(values, offsets)` (`tokenize_target`'s)."""
        return _flat(self.tokenize_target(list(texts)))

    def detokenize(self, inputs):
        """Strings of a list of target id sequences (or one string of one sequence)."""
        rows, batched = id_rows(inputs)
        model_rows = [[int(self.model_ids[i]) for i in row if 0 <= i < self._size] for row in rows]
        texts = self._decode(model_rows)
        return texts if batched else texts[0]

    def _decode(self, model_rows):
        """Strings of rows of the model's ids, the specials and the language tokens skipped."""
        return self._tokenizer.decode_batch(model_rows, skip_special_tokens=True)

    def __repr__(self):
        languages = f", {self.source_language} to {self.target_language}" if self.target_language else ""
        return f"<{type(self).__name__}: {self._size} ids{languages}, {self.directory}>"


def _language_codes(config, tokenizer, special_keys):
    """The language tokens: the config's extra special tokens, else the added specials that are not the others."""
    listed = config.get("extra_special_tokens") or config.get("additional_special_tokens")
    if isinstance(listed, list) and listed:
        pieces = [piece.get("content") if isinstance(piece, dict) else piece for piece in listed]
    else:
        others = {config.get(key) for key in special_keys} | set(_SPECIALS.values()) | {"<mask>"}
        pieces = [token.content for token in tokenizer.get_added_tokens_decoder().values()
                  if token.special and token.content not in others]
    return tuple(sorted(piece for piece in pieces if isinstance(piece, str) and tokenizer.token_to_id(piece)
                        is not None))


def _listed(codes):
    return ", ".join(codes[:_SHOWN]) + (f" and {len(codes) - _SHOWN} more" if len(codes) > _SHOWN else "")

