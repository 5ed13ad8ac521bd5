"""A Hugging Face NLLB-200 / M2M-100 folder read and checked whole (`read_nllb`), and built as a Keras model."""

import os
import typing

import numpy as np

from keras_transformer.checkpoints.hugging_face_files import read_weights
from keras_transformer.checkpoints.imported_model import built_model
from keras_transformer.checkpoints.imported_model import imported_run_config
from keras_transformer.checkpoints.nllb.config import NllbArchitecture
from keras_transformer.checkpoints.nllb.config import read_architecture
from keras_transformer.checkpoints.nllb.weights import nllb_weights
from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.m2m100_tokenizer import open_m2m100_tokenizer
from keras_transformer_runtime.nllb_tokenizer import NllbTokenizer


class NllbCheckpoint(typing.NamedTuple):
    """A Hugging Face NLLB-200 (or M2M-100) folder, read and checked.

    Attributes:
        directory: the folder.
        architecture: its `NllbArchitecture`.
        tokenizer: its `NllbTokenizer` (an `M2m100Tokenizer` for M2M-100's own).
        weights: the model's weights by variable path (`nllb_weights`).
    """

    directory: str
    architecture: NllbArchitecture
    tokenizer: NllbTokenizer
    weights: dict


def read_nllb(directory):
    """Reads and checks a Hugging Face NLLB-200 or M2M-100 folder: config, tokenizer and weights.

    Args:
        directory: an `M2M100ForConditionalGeneration` folder (`config.json`,
            `model.safetensors` or `pytorch_model.bin`, `tokenizer_config.json`)
            with an NLLB tokenizer (`tokenizer.json`) or M2M-100's
            (`sentencepiece.bpe.model`, `vocab.json`).

    Returns:
        An `NllbCheckpoint`.

    Raises:
        UserInputError: a file is missing, damaged or disagrees with
            another (the message names the file and what is wrong).
    """
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise UserInputError(f"{directory}: not a folder; pass a Hugging Face NLLB-200 or M2M-100 model folder.")
    architecture = read_architecture(directory)
    tokenizer = open_m2m100_tokenizer(directory, architecture.vocabulary_size)
    tokenizer_path = tokenizer.path
    pieces = tokenizer.piece_count()
    if pieces > architecture.vocabulary_size:
        raise UserInputError(f"{tokenizer_path}: {pieces} pieces, more than config.json's vocab_size "
                             f"{architecture.vocabulary_size}.")
    if not tokenizer.language_codes:
        raise UserInputError(f"{tokenizer_path}: names no language tokens (eng_Latn, ...); not an NLLB tokenizer.")
    for key, model_id in (("pad_token_id", architecture.pad_id), ("eos_token_id", architecture.eos_id)):
        piece = {"pad_token_id": "<pad>", "eos_token_id": "</s>"}[key]
        if tokenizer.model_id(piece) != model_id:
            raise UserInputError(f"{tokenizer_path}: {piece!r} has id {tokenizer.model_id(piece)}, "
                                 f"but config.json's {key} is {model_id}.")
    tensors, weights_path = read_weights(directory)
    weights = nllb_weights(architecture, tensors, tokenizer.model_ids, weights_path)
    return NllbCheckpoint(directory, architecture, tokenizer, weights)


def _start_id(checkpoint):
    """The decoder's start token in this package's ids."""
    return int(np.argsort(checkpoint.tokenizer.model_ids)[checkpoint.architecture.decoder_start_id])


def run_config(checkpoint):
    """The `config.json` of an imported run (`imported_model.imported_run_config`): what `train --from` reads."""
    return imported_run_config(checkpoint.architecture.builder_arguments(_start_id(checkpoint)))


def build_model(checkpoint):
    """The functional `transformer()` model of a checkpoint, with its weights.

    Returns:
        A `keras.Model`, as `keras_transformer.models.transformer` builds it.
    """
    return built_model(checkpoint.architecture.builder_arguments(_start_id(checkpoint)), checkpoint.weights,
                       "nllb", "NLLB")


def load_nllb(directory):
    """A Hugging Face NLLB-200 (or M2M-100) model as a Keras model and its tokenizer.

    The model is a `keras_transformer.models.transformer()` model (the
    package's layers: pre-LN with a final norm a stack, fairseq's
    sinusoids), so it trains with `fit`, decodes with `Translator` and
    saves as `.keras`.

    Args:
        directory: a local NLLB-200 or M2M-100 folder.

    Returns:
        `(model, tokenizer)`: the `keras.Model` and its `NllbTokenizer`
        (`M2m100Tokenizer` for M2M-100; `with_languages` sets the pair to translate).

    Raises:
        UserInputError: see `read_nllb`.

    Example:

    >>> import keras_transformer as kt  # doctest: +SKIP
    >>> model, tokenizer = kt.checkpoints.load_nllb("nllb-200-distilled-600M")  # doctest: +SKIP
    >>> kt.translation.Translator(model, tokenizer.with_languages("spa_Latn", "eng_Latn"))("Hola.")  # doctest: +SKIP
    'Hello.'
    """
    checkpoint = read_nllb(directory)
    return build_model(checkpoint), checkpoint.tokenizer
