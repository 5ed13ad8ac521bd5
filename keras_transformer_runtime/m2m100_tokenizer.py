"""The tokenizer of an M2M-100 translator: SentencePiece's `sentencepiece.bpe.model` and the id table `vocab.json`.

M2M-100 (`facebook/m2m100_418M`, `facebook/m2m100_1.2B`) is NLLB-200's
model (`M2M100ForConditionalGeneration`) with a tokenizer of its own,
transformers' `M2M100Tokenizer`: `sentencepiece` cuts the text into BPE
pieces (nothing of BPE is re-implemented here), `vocab.json` numbers them
(fairseq's dictionary: `<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3; a piece it
lacks is `<unk>`), and a token a language, `__es__`, `__fr__`, numbered
after the table, marks the languages as NLLB's `spa_Latn` does: the source
is `[__es__] pieces </s>`, and the decoder, which starts from `</s>`,
writes the target language's token first (`forced_bos_token_id`).

The language tokens' ids are the folder's: the ids transformers'
`save_pretrained` writes (`tokenizer_config.json`'s `added_tokens_decoder`,
or `added_tokens.json`), else, as `M2M100Tokenizer` numbers them, the
table's size plus the token's place in the folder's list of language
tokens (`additional_special_tokens` or `extra_special_tokens` in
`tokenizer_config.json`, or in `special_tokens_map.json`). A folder that
names no language token is refused: its ids would be a guess.

`open_m2m100_tokenizer` opens either tokenizer of an M2M-100 model's folder
(or of a run imported from one): NLLB-200's `tokenizer.json`
(`NllbTokenizer`) or M2M-100's files (`M2m100Tokenizer`).

Imports neither Keras, TensorFlow, torch nor transformers.
"""

import os
import re

from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.marian_tokenizer import read_json_object
from keras_transformer_runtime.nllb_tokenizer import TOKENIZER_FILE
from keras_transformer_runtime.nllb_tokenizer import NllbTokenizer
from keras_transformer_runtime.run_files import ID_TABLE_FILE
from keras_transformer_runtime.run_files import TOKENIZER_CONFIG_FILE

SENTENCE_PIECE_FILE = "sentencepiece.bpe.model"
SPECIAL_TOKENS_MAP_FILE = "special_tokens_map.json"
ADDED_TOKENS_FILE = "added_tokens.json"
# An M2M-100 tokenizer's files, tokenizer_config.json aside: the first two always, the others where the folder has them.
M2M100_TOKENIZER_FILES = (SENTENCE_PIECE_FILE, ID_TABLE_FILE, SPECIAL_TOKENS_MAP_FILE, ADDED_TOKENS_FILE)
_NAMED_SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
                   "sep_token": "</s>"}
_LANGUAGE_TOKEN = re.compile(r"__(\S+?)__")
# What transformers' decode(clean_up_tokenization_spaces=True) replaces, in its order.
_CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
             (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


class M2m100Tokenizer(NllbTokenizer):
    """Strings to this package's ids and back, as transformers' `M2M100Tokenizer` does.

    A source string becomes `[__es__] pieces </s>`; target ids become a
    string without the specials and the language tokens
    (`decode(skip_special_tokens=True)`). The language codes are M2M-100's
    (`es`, `fr`; the token form `__es__` is taken too). Every call is
    `NllbTokenizer`'s (`tokenize`, `tokenize_target`, `detokenize`,
    `with_languages`, `forced_first_id`, `language_codes`, ...), so
    `TextTranslator`, `Translator`, training and serving take it alike.

    Args:
        directory: a folder with `sentencepiece.bpe.model`, `vocab.json`
            and `tokenizer_config.json` (a Hugging Face M2M-100 folder, or a
            run folder imported from one).
        vocabulary_size: the model's vocabulary, which may hold rows the
            tokenizer lacks (M2M-100's 8 "made-up words": 128,112 rows
            against 128,104 pieces); defaults to the tokenizer's size.
        source_language, target_language: language codes (`es`), or None.

    Raises:
        UserInputError: a file is missing or unreadable, lacks a special,
            names no language token, or a language code is not one of the model's.

    Example:

    >>> tokenizer = M2m100Tokenizer("runs/m2m100_418M", source_language="es", target_language="fr")  # doctest: +SKIP
    >>> tokenizer.detokenize(tokenizer.tokenize_target(["Hola."]))  # doctest: +SKIP
    ['Hola.']
    """

    def _read_pieces(self, config):
        import sentencepiece

        self.path = os.path.join(self.directory, SENTENCE_PIECE_FILE)
        if not os.path.isfile(self.path):
            raise UserInputError(f"{self.path}: missing; an M2M-100 folder holds sentencepiece.bpe.model and "
                                 "vocab.json.")
        self._processor = sentencepiece.SentencePieceProcessor()
        try:
            with open(self.path, "rb") as f:
                self._processor.LoadFromSerializedProto(f.read())
        except (RuntimeError, OSError) as error:
            raise UserInputError(f"{self.path}: not a SentencePiece model ({error}).") from None
        table_path = os.path.join(self.directory, ID_TABLE_FILE)
        self._table = read_json_object(table_path, "an M2M-100 folder numbers its pieces in vocab.json.")
        if not all(isinstance(i, int) and i >= 0 for i in self._table.values()):
            raise UserInputError(f"{table_path}: not a map of pieces to ids (ints from 0).")
        added, special = _added_tokens(self.directory, config)
        languages = _language_ids(self.directory, config, added, len(self._table))
        named = {_content(config.get(key), default) for key, default in _NAMED_SPECIALS.items()}
        # Matched whole in the text, before SentencePiece: the specials, the tokens saved with ids, the languages.
        self._added = {**{piece: self._table[piece] for piece in named if piece in self._table}, **added, **languages}
        self._pieces = {i: piece for piece, i in self._table.items()}
        self._pieces.update({i: piece for piece, i in self._added.items()})
        self._languages = {_LANGUAGE_TOKEN.fullmatch(token).group(1): token for token in languages}
        self._special_pieces = named | special | set(languages)
        self._special_ids = {self.model_id(piece) for piece in self._special_pieces} - {None}
        self._unk_piece = _content(config.get("unk_token"), "<unk>")
        self._clean_up = config.get("clean_up_tokenization_spaces") is True
        ordered = sorted(self._added, key=len, reverse=True)  # the longest first, as transformers' trie
        self._split = re.compile("(" + "|".join(map(re.escape, ordered)) + ")").split

    def _read_language_codes(self, config, special_keys):
        return tuple(sorted(self._languages))

    def _language_token(self, code):
        return self._languages[code]

    def _code(self, code):
        match = _LANGUAGE_TOKEN.fullmatch(code)
        return match.group(1) if match and match.group(1) in self._languages else code

    def piece_count(self):
        """Number of ids the tokenizer gives (`vocab.json`'s and the language tokens'), at most `vocabulary_size()`."""
        return max(self._pieces) + 1

    def model_id(self, piece):
        """The model's own id of a piece (a language token's, or `vocab.json`'s), or None for a piece it lacks."""
        return self._added.get(piece, self._table.get(piece))

    def _piece(self, model_id):
        return self._pieces.get(model_id)

    def _encode(self, texts):
        parts = [self._split(text) for text in texts]  # text, special, text, ...: specials stay whole
        plain = [part for split in parts for part in split[::2]]
        pieces = iter(self._processor.encode(plain, out_type=str))
        unknown = self.model_id(self._unk_piece)
        rows = []
        for split in parts:
            row = []
            for i, part in enumerate(split):
                if i % 2:
                    row.append(self._added[part])
                else:
                    row.extend(self._table.get(piece, unknown) for piece in next(pieces))
            rows.append(row)
        return rows

    def _decode(self, model_rows):
        texts = []
        for row in model_rows:
            text, chunk = "", []
            for model_id in row:
                if model_id in self._special_ids:
                    continue
                piece = self._pieces.get(model_id, self._unk_piece)  # transformers writes an id it lacks as <unk>
                if piece in self._special_pieces:  # as transformers: no SentencePiece decoding across a special
                    text, chunk = text + self._processor.decode(chunk) + piece, []
                else:
                    chunk.append(piece)
            text = (text + self._processor.decode(chunk)).strip()
            for old, new in _CLEAN_UP if self._clean_up else ():
                text = text.replace(old, new)
            texts.append(text)
        return texts


def _content(token, default=None):
    """The string of a token written as a string or as an `AddedToken`'s dict."""
    token = token.get("content") if isinstance(token, dict) else token
    return token if isinstance(token, str) else default


def _added_tokens(directory, config):
    """`({piece: id}, {special pieces})` of the tokens transformers saved with their ids.

    `tokenizer_config.json`'s `added_tokens_decoder` (transformers 4.34 and
    later), else `added_tokens.json` (older, and beside it in later ones).
    """
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict) and decoder:
        added, special = {}, set()
        for key, token in decoder.items():
            if _content(token) is not None and str(key).isdigit():
                added[_content(token)] = int(key)
                if isinstance(token, dict) and token.get("special"):
                    special.add(_content(token))
        return added, special
    path = os.path.join(directory, ADDED_TOKENS_FILE)
    table = read_json_object(path, "") if os.path.isfile(path) else {}
    return {piece: i for piece, i in table.items() if isinstance(i, int) and i >= 0}, set()


def _language_ids(directory, config, added, table_size):
    """`{language token: model id}`: the ids saved (`added`), else `table_size` + the token's place in the list."""
    listed = config.get("extra_special_tokens") or config.get("additional_special_tokens")
    path = os.path.join(directory, SPECIAL_TOKENS_MAP_FILE)
    if not (isinstance(listed, list) and listed) and os.path.isfile(path):
        listed = read_json_object(path, "").get("additional_special_tokens")
    tokens = [_content(token) for token in listed] if isinstance(listed, list) and listed else list(added)
    tokens = [token for token in tokens if token is not None and _LANGUAGE_TOKEN.fullmatch(token)]
    if not tokens:
        raise UserInputError(
            f"{os.path.join(directory, TOKENIZER_CONFIG_FILE)}: names no language token (__en__, ...), so their ids "
            "are unknown; re-save the tokenizer with transformers, naming them: t = M2M100Tokenizer.from_pretrained("
            "FOLDER); M2M100Tokenizer.from_pretrained(FOLDER, additional_special_tokens=list(t.lang_token_to_id))"
            ".save_pretrained(FOLDER)")
    return {token: added.get(token, table_size + i) for i, token in enumerate(tokens)}


def m2m100_tokenizer_files(directory):
    """The names of the tokenizer files an M2M-100 model's folder holds: NLLB-200's or M2M-100's.

    Args:
        directory: a Hugging Face NLLB-200 or M2M-100 folder, or a run imported from one.

    Returns:
        A tuple of file names: `tokenizer.json` (NLLB-200), else those of
        `M2M100_TOKENIZER_FILES` the folder has, and `tokenizer_config.json`
        where it has one; () for a folder with neither tokenizer.

    Example:

    >>> import tempfile
    >>> m2m100_tokenizer_files(tempfile.mkdtemp())
    ()
    """
    def present(names):
        return tuple(name for name in names if os.path.isfile(os.path.join(directory, name)))

    if present((TOKENIZER_FILE,)):
        names = (TOKENIZER_FILE,)
    elif len(present(M2M100_TOKENIZER_FILES[:2])) == 2:
        names = present(M2M100_TOKENIZER_FILES)
    else:
        return ()
    return names + present((TOKENIZER_CONFIG_FILE,))


def open_m2m100_tokenizer(directory, vocabulary_size=None, source_language=None, target_language=None):
    """The tokenizer of an M2M-100 model's folder: `NllbTokenizer` for `tokenizer.json`, else `M2m100Tokenizer`.

    Args:
        directory: a Hugging Face NLLB-200 or M2M-100 folder, or a run imported from one.
        vocabulary_size, source_language, target_language: as `NllbTokenizer`'s.

    Returns:
        An `NllbTokenizer` (or its subclass `M2m100Tokenizer`).

    Raises:
        UserInputError: neither tokenizer is there, or see `NllbTokenizer` and `M2m100Tokenizer`.

    Example:

    >>> import tempfile
    >>> open_m2m100_tokenizer(tempfile.mkdtemp())
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: ...: no tokenizer.json (NLLB-200), nor sentencepiece.bpe.model ...
    """
    directory = os.fspath(directory)
    names = m2m100_tokenizer_files(directory)
    if not names:
        raise UserInputError(f"{directory}: no tokenizer.json (NLLB-200), nor sentencepiece.bpe.model and vocab.json "
                             "(M2M-100); an M2M-100 model's folder holds one of its tokenizers.")
    kind = NllbTokenizer if TOKENIZER_FILE in names else M2m100Tokenizer
    return kind(directory, vocabulary_size, source_language, target_language)
