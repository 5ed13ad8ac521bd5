"""A run folder's tokenizer: the SentencePiece vocabulary of a run trained here, or Marian's, NLLB's, M2M-100's files.

A run trained here holds `vocabulary.spm`; a run imported from a Hugging
Face Marian model holds Marian's two SentencePiece models and its id table
instead (`run_files.MARIAN_VOCABULARY_FILES`); one imported from NLLB-200
holds its `tokenizer.json`, and one from M2M-100 its `sentencepiece.bpe.model`
and `vocab.json` (`m2m100_tokenizer`). Everything that opens a run's
tokenizer asks here.
"""

import json
import os

from keras_transformer_runtime.run_files import MARIAN_VOCABULARY_FILES
from keras_transformer_runtime.run_files import SOURCE_VOCABULARY_FILE
from keras_transformer_runtime.run_files import TARGET_ID_TABLE_FILE
from keras_transformer_runtime.run_files import TOKENIZER_CONFIG_FILE
from keras_transformer_runtime.run_files import VOCABULARY_FILE


# An imported NLLB-200 / M2M-100 run: its tokenizer's files (NLLB's tokenizer.json, or M2M-100's
# sentencepiece.bpe.model and vocab.json: `m2m100_tokenizer.m2m100_tokenizer_files`), and the model's
# Hugging Face config.
NLLB_TOKENIZER_FILE = "tokenizer.json"
NLLB_CONFIG_FILE = "nllb_config.json"


def is_nllb_run(run_directory):
    """Whether a run folder was imported from NLLB-200 or M2M-100 (its tokenizer's files beside `nllb_config.json`).

    Example:

    >>> import tempfile
    >>> is_nllb_run(tempfile.mkdtemp())
    False
    """
    from keras_transformer_runtime.m2m100_tokenizer import m2m100_tokenizer_files

    return os.path.isfile(os.path.join(run_directory, NLLB_CONFIG_FILE)) and bool(m2m100_tokenizer_files(run_directory))


def is_marian_run(run_directory):
    """Whether a run folder holds a Marian tokenizer (`source.spm` and the rest) rather than `vocabulary.spm`.

    Example:

    >>> import tempfile
    >>> is_marian_run(tempfile.mkdtemp())
    False
    """
    return os.path.isfile(os.path.join(run_directory, SOURCE_VOCABULARY_FILE))


def has_target_vocabulary_of_its_own(run_directory):
    """Whether a Marian run numbers its target pieces with a table of their own (`separate_vocabs`).

    Example:

    >>> import tempfile
    >>> has_target_vocabulary_of_its_own(tempfile.mkdtemp())
    False
    """
    path = os.path.join(run_directory, TOKENIZER_CONFIG_FILE)
    if not is_marian_run(run_directory) or not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            return bool(json.load(f).get("separate_vocabs"))
    except (ValueError, AttributeError):  # MarianTokenizer says what is wrong with the file
        return False


def vocabulary_files(run_directory):
    """The names of the files that define a run's tokenizer.

    Example:

    >>> import tempfile
    >>> vocabulary_files(tempfile.mkdtemp())
    ('vocabulary.spm',)
    """
    if is_nllb_run(run_directory):
        from keras_transformer_runtime.m2m100_tokenizer import m2m100_tokenizer_files

        return (*m2m100_tokenizer_files(run_directory), NLLB_CONFIG_FILE)
    if not is_marian_run(run_directory):
        return (VOCABULARY_FILE,)
    separate = has_target_vocabulary_of_its_own(run_directory)
    return (*MARIAN_VOCABULARY_FILES, *((TARGET_ID_TABLE_FILE,) if separate else ()))


def load_run_tokenizer(run_directory, source_language=None, target_language=None):
    """The tokenizer of a run folder: `SentencePieceTokenizer`, or an imported run's (`MarianTokenizer`, ...).

    Args:
        run_directory: a run folder.
        source_language, target_language: the languages of an NLLB-200 or
            M2M-100 run (`NllbTokenizer.with_languages`); others take theirs from the text.

    Returns:
        A tokenizer with `tokenize`, `detokenize`, `vocabulary_size`, `get_vocabulary`:
        `SentencePieceTokenizer`, or `MarianTokenizer`, `NllbTokenizer` or
        `M2m100Tokenizer` for a run imported from Marian, NLLB-200 or M2M-100.

    Raises:
        FileNotFoundError: the vocabulary file is missing.
        ValueError: it is not a SentencePiece model (`UserInputError` for a Marian file).

    Example:

    >>> import tempfile
    >>> load_run_tokenizer(tempfile.mkdtemp())
    Traceback (most recent call last):
    ...
    FileNotFoundError: ...
    """
    if is_nllb_run(run_directory):
        from keras_transformer_runtime.marian_tokenizer import read_json_object
        from keras_transformer_runtime.m2m100_tokenizer import open_m2m100_tokenizer

        config = read_json_object(os.path.join(run_directory, NLLB_CONFIG_FILE), "an imported NLLB run holds it.")
        return open_m2m100_tokenizer(run_directory, config.get("vocab_size"), source_language, target_language)
    if is_marian_run(run_directory):
        from keras_transformer_runtime.marian_tokenizer import MarianTokenizer

        return MarianTokenizer(run_directory)
    from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer

    return SentencePieceTokenizer(os.path.join(run_directory, VOCABULARY_FILE))
