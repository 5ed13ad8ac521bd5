"""A Hugging Face Marian folder read and checked whole (`read_marian`), and built as a Keras model."""

import os
import typing

import numpy as np

from keras_transformer.checkpoints.hugging_face_files import read_weights
from keras_transformer.checkpoints.imported_model import built_model
from keras_transformer.checkpoints.imported_model import imported_run_config
from keras_transformer.checkpoints.marian.config import MarianArchitecture
from keras_transformer.checkpoints.marian.config import read_architecture
from keras_transformer.checkpoints.marian.weights import marian_weights
from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.marian_tokenizer import MarianTokenizer
from keras_transformer_runtime.run_files import ID_TABLE_FILE
from keras_transformer_runtime.run_files import TARGET_ID_TABLE_FILE
from keras_transformer_runtime.run_files import TOKENIZER_CONFIG_FILE

class MarianCheckpoint(typing.NamedTuple):
    """A Hugging Face Marian folder, read and checked.

    Attributes:
        directory: the folder.
        architecture: its `MarianArchitecture`.
        tokenizer: its `MarianTokenizer`.
        weights: the model's weights by variable path (`marian_weights`).
    """

    directory: str
    architecture: MarianArchitecture
    tokenizer: MarianTokenizer
    weights: dict


def read_marian(directory):
    """Reads and checks a Hugging Face Marian folder: config, tokenizer and weights.

    Args:
        directory: a `MarianMTModel` folder (`config.json`,
            `model.safetensors` or `pytorch_model.bin`, `source.spm`,
            `target.spm`, `vocab.json`, `tokenizer_config.json`).

    Returns:
        A `MarianCheckpoint`.

    Raises:
        UserInputError: a file is missing, damaged or disagrees with
            another (the message names the file and what is wrong).
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise UserInputError(f"{directory}: not a folder; pass a Hugging Face Marian model folder.")
    architecture = read_architecture(directory)
    tokenizer = MarianTokenizer(directory)
    target_table = os.path.join(directory, TARGET_ID_TABLE_FILE if tokenizer.separate_vocabularies else ID_TABLE_FILE)
    if tokenizer.separate_vocabularies and architecture.share_embeddings:
        raise UserInputError(f"{os.path.join(directory, TOKENIZER_CONFIG_FILE)}: separate_vocabs=true, but "
                             "config.json's share_encoder_decoder_embeddings=true gives both sides one matrix.")
    for table, pieces, key, size in (
            (os.path.join(directory, ID_TABLE_FILE), tokenizer.source_vocabulary_size(), "vocab_size",
             architecture.vocabulary_size),
            (target_table, tokenizer.vocabulary_size(), "decoder_vocab_size",
             architecture.target_vocabulary_size or architecture.vocabulary_size)):
        if pieces != size:
            raise UserInputError(f"{table}: {pieces} pieces, but config.json's {key} is {size}.")
    for key, piece in (("pad_id", "pad_token"), ("eos_id", "eos_token")):  # the decoder's: its table's
        table_id = int(tokenizer.target_marian_ids[tokenizer.token_to_id(tokenizer.specials[piece])])
        if table_id != getattr(architecture, key):
            raise UserInputError(
                f"{target_table}: {tokenizer.specials[piece]!r} has id {table_id}, but "
                f"config.json's {key.replace('_id', '_token_id')} is {getattr(architecture, key)}."
            )
    tensors, weights_path = read_weights(directory)
    weights = marian_weights(architecture, tensors, tokenizer.marian_ids, weights_path, tokenizer.target_marian_ids)
    return MarianCheckpoint(directory, architecture, tokenizer, weights)


def _start_id(checkpoint):
    """The decoder's start token in this package's ids."""
    return int(np.argsort(checkpoint.tokenizer.target_marian_ids)[checkpoint.architecture.decoder_start_id])


def run_config(checkpoint):
    """The `config.json` of an imported run (`imported_model.imported_run_config`): what `train --from` reads."""
    return imported_run_config(checkpoint.architecture.builder_arguments(_start_id(checkpoint)))


def build_model(checkpoint):
    """The functional `transformer()` model of a checkpoint, with its weights.

    Returns:
        A `keras.Model`, as `keras_transformer.models.transformer` builds it.
    """
    return built_model(checkpoint.architecture.builder_arguments(_start_id(checkpoint)), checkpoint.weights,
                       "marian", "Marian")


def load_marian(directory):
    """A Hugging Face Marian (OPUS-MT) model as a Keras model and its tokenizer.

    The model is a `keras_transformer.models.transformer()` model (the
    package's layers) with Marian's settings, so it trains with `fit`,
    decodes with `Translator` and saves as `.keras`. Where the network is
    available, download a hub model first (`huggingface_hub.snapshot_download`
    or `keras-transformer import Helsinki-NLP/opus-mt-es-en`).

    Args:
        directory: a `MarianMTModel` folder.

    Returns:
        `(model, tokenizer)`: the `keras.Model` and its `MarianTokenizer`.

    Raises:
        UserInputError: see `read_marian`.

    Example:

    >>> import keras_transformer as kt  # doctest: +SKIP
    >>> model, tokenizer = kt.checkpoints.load_marian("opus-mt-es-en")  # doctest: +SKIP
    >>> kt.translation.Translator(model, tokenizer)("Hola, mundo.")  # doctest: +SKIP
    'Hello, world.'
    """
    checkpoint = read_marian(directory)
    return build_model(checkpoint), checkpoint.tokenizer
