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
# A run trained here: its `TrainConfig` (`keras_transformer.training.run_folder.CONFIG_FILE`).
TRAIN_CONFIG_FILE = "config.json"
# The language of the corpus that ships with the package (Spanish -> English), which a run trained on
# it (`"corpus": null`) reads.
EMBEDDED_CORPUS_SOURCE_LANGUAGE = "es"


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


def sentence_settings(run_directory):
    """How a run's translator splits texts: its `source_language` and `sentence_tokens` (`TextTranslator`'s).

    A run trained here cuts sentences longer than
    `documents.sentences.TRAINED_RUN_SENTENCE_TOKENS` at their clauses; an
    imported run only those longer than its positions (None).

    Example:

    >>> import tempfile
    >>> sentence_settings(tempfile.mkdtemp())
    {'source_language': None, 'sentence_tokens': None}
    """
    from keras_transformer_runtime.documents.sentences import TRAINED_RUN_SENTENCE_TOKENS

    return {"source_language": run_source_language(run_directory),
            "sentence_tokens": TRAINED_RUN_SENTENCE_TOKENS if is_trained_here(run_directory) else None}


def run_source_language(run_directory):
    """The language a run trained here reads, as its config names it (`"de"`), or None when it names none.

    A run trained on the embedded corpus reads Spanish. An imported run's
    tokenizer knows its own (NLLB-200, M2M-100) or none (OPUS-MT).

    Example:

    >>> import tempfile
    >>> run_source_language(tempfile.mkdtemp()) is None
    True
    """
    config = _train_config(run_directory)
    if config.get("source_language"):
        return str(config["source_language"])
    if "corpus" in config and config["corpus"] is None:
        return EMBEDDED_CORPUS_SOURCE_LANGUAGE
    return None


def is_trained_here(run_directory):
    """Whether a run folder was trained by this package (its `config.json` is a `TrainConfig`), not imported.

    Example:

    >>> import tempfile
    >>> is_trained_here(tempfile.mkdtemp())
    False
    """
    config = _train_config(run_directory)
    return "corpus" in config and "preset" in config


def _train_config(run_directory):
    """A run's `config.json` as a dict; empty when it has none (or an unreadable one)."""
    try:
        with open(os.path.join(run_directory, TRAIN_CONFIG_FILE), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}
