"""The names of the files a training run leaves that translating reads, and its tokenizer.

`keras_transformer.run_folder` describes the whole folder; these are here
so that code which runs without Keras names them the same way. A run
trained here holds one SentencePiece vocabulary (`vocabulary.spm`); a run
imported from a Hugging Face Marian model holds Marian's two SentencePiece
models and its id table instead
(`MARIAN_VOCABULARY_FILES`).
"""

import os

MODEL_FILE = "model.keras"
VOCABULARY_FILE = "vocabulary.spm"
# A Marian run's tokenizer: Hugging Face's names (`keras_transformer_runtime.marian_tokenizer`).
SOURCE_VOCABULARY_FILE = "source.spm"
TARGET_VOCABULARY_FILE = "target.spm"
ID_TABLE_FILE = "vocab.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
MARIAN_VOCABULARY_FILES = (SOURCE_VOCABULARY_FILE, TARGET_VOCABULARY_FILE, ID_TABLE_FILE)


def is_marian_run(run_directory):
    """Whether a run folder holds a Marian tokenizer (`source.spm` and the rest) rather than `vocabulary.spm`.

    Example:

    >>> import tempfile
    >>> is_marian_run(tempfile.mkdtemp())
    False
    """
    return os.path.isfile(os.path.join(run_directory, SOURCE_VOCABULARY_FILE))


def vocabulary_files(run_directory):
    """The names of the files that define a run's tokenizer.

    Example:

    >>> import tempfile
    >>> vocabulary_files(tempfile.mkdtemp())
    ('vocabulary.spm',)
    """
    return MARIAN_VOCABULARY_FILES if is_marian_run(run_directory) else (VOCABULARY_FILE,)


def load_run_tokenizer(run_directory):
    """The tokenizer of a run folder: `SentencePieceTokenizer`, or `MarianTokenizer` for an imported Marian run.

    Args:
        run_directory: a run folder.

    Returns:
        A tokenizer with `tokenize`, `detokenize`, `vocabulary_size`, `get_vocabulary`.

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
    if is_marian_run(run_directory):
        from keras_transformer_runtime.marian_tokenizer import MarianTokenizer

        return MarianTokenizer(run_directory)
    from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer

    return SentencePieceTokenizer(os.path.join(run_directory, VOCABULARY_FILE))
