"""A run folder's tokenizer: the one SentencePiece vocabulary of a run trained here, or Marian's files.

A run trained here holds `vocabulary.spm`; a run imported from a Hugging
Face Marian model holds Marian's two SentencePiece models and its id table
instead (`run_files.MARIAN_VOCABULARY_FILES`). Everything that opens a
run's tokenizer asks here.
"""

import os

from keras_transformer_runtime.run_files import MARIAN_VOCABULARY_FILES
from keras_transformer_runtime.run_files import SOURCE_VOCABULARY_FILE
from keras_transformer_runtime.run_files import VOCABULARY_FILE


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
