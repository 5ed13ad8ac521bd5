"""`keras-transformer import` of an NLLB-200 or M2M-100 model (a folder or a hub id), written as a run folder."""

import json
import os
import shutil

from keras_transformer.checkpoints.hugging_face_files import CONFIG_FILE
from keras_transformer.checkpoints.hugging_face_files import GENERATION_CONFIG_FILE
from keras_transformer.checkpoints.hugging_face_files import PYTORCH_FILE
from keras_transformer.checkpoints.hugging_face_files import SAFETENSORS_FILE
from keras_transformer.checkpoints.hugging_face_files import check_output
from keras_transformer.checkpoints.hugging_face_files import fetch_folder
from keras_transformer.checkpoints.hugging_face_files import write_run_folder
from keras_transformer.checkpoints.keras_shortcuts import save_imported_model
from keras_transformer.checkpoints.nllb.checkpoint import build_model
from keras_transformer.checkpoints.nllb.checkpoint import read_nllb
from keras_transformer.checkpoints.nllb.checkpoint import run_config
from keras_transformer_runtime.m2m100_tokenizer import M2M100_TOKENIZER_FILES
from keras_transformer_runtime.m2m100_tokenizer import M2m100Tokenizer
from keras_transformer_runtime.m2m100_tokenizer import m2m100_tokenizer_files
from keras_transformer_runtime.nllb_tokenizer import TOKENIZER_FILE
from keras_transformer_runtime.run_files import TOKENIZER_CONFIG_FILE
from keras_transformer_runtime.run_tokenizer import NLLB_CONFIG_FILE
from keras_transformer_runtime.search_defaults import write_generation_file

# What `import_nllb` fetches of a hub model: the files an NLLB-200 or M2M-100 folder needs, no others.
HUB_FILES = (CONFIG_FILE, GENERATION_CONFIG_FILE, SAFETENSORS_FILE, PYTORCH_FILE, TOKENIZER_FILE,
             TOKENIZER_CONFIG_FILE, *M2M100_TOKENIZER_FILES)
IMPORTED_FILE = "imported.json"


def copy_tokenizer_files(source, destination):
    """Copies an NLLB-200 or M2M-100 run's tokenizer and Hugging Face files (what a fine-tuned run keeps) elsewhere."""
    for name in (*m2m100_tokenizer_files(source), GENERATION_CONFIG_FILE, NLLB_CONFIG_FILE):
        if os.path.isfile(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(destination, name))


def import_nllb(source, output, overwrite=False):
    """Writes a run folder from a Hugging Face NLLB-200 or M2M-100 model, which every verb then takes as a trained run.

    The folder holds `model.keras` (a `transformer()` model with NLLB's
    settings and weights), the tokenizer's files (NLLB's `tokenizer.json`,
    or M2M-100's `sentencepiece.bpe.model`, `vocab.json` and the files that
    name its language tokens: `m2m100_tokenizer_files`) and
    `tokenizer_config.json`, the Hugging Face config (`nllb_config.json`),
    its `generation_config.json` where it has one, the run's own
    `config.json` (`run_config`: what `train --from` reads),
    `generation.json` (`generate()`'s search settings, the run's defaults)
    and `imported.json` (where it came from, and the tokenizer's family: `nllb` or `m2m100`). It is written beside `output`
    and moved there whole, so a failure leaves nothing in `output`.

    Args:
        source: a local NLLB-200 or M2M-100 folder, or a hub id
            (`facebook/nllb-200-distilled-600M`, `facebook/m2m100_418M`), fetched where the network is.
        output: the run folder to write.
        overwrite: replace a run folder that exists.

    Returns:
        The `NllbCheckpoint` that was imported.

    Raises:
        UserInputError: see `read_nllb`; `output` exists and is not empty.

    Example:

    >>> import_nllb("facebook/nllb-200-distilled-600M", "runs/nllb")  # doctest: +SKIP
    """
    check_output(output, overwrite)  # before the long read
    checkpoint = read_nllb(fetch_folder(source, HUB_FILES))
    model = build_model(checkpoint)
    checkpoint = checkpoint._replace(weights={})  # its file's pages go before Keras buffers the model's to save it

    def write(folder):
        save_imported_model(model, os.path.join(folder, "model.keras"))
        for name in (*m2m100_tokenizer_files(checkpoint.directory), GENERATION_CONFIG_FILE):
            if os.path.isfile(os.path.join(checkpoint.directory, name)):
                shutil.copyfile(os.path.join(checkpoint.directory, name), os.path.join(folder, name))
        shutil.copyfile(os.path.join(checkpoint.directory, CONFIG_FILE), os.path.join(folder, NLLB_CONFIG_FILE))
        with open(os.path.join(folder, CONFIG_FILE), "w") as f:  # the run's own: what `train --from` reads
            json.dump(run_config(checkpoint), f, indent=2)
        write_generation_file(checkpoint.directory, folder)  # `generate()`'s search: the run's default
        with open(os.path.join(folder, IMPORTED_FILE), "w") as f:
            family = "m2m100" if isinstance(checkpoint.tokenizer, M2m100Tokenizer) else "nllb"
            json.dump({"format": family, "source": os.fspath(source), "parameters": int(model.count_params())},
                      f, indent=2)

    write_run_folder(output, overwrite, write)
    return checkpoint
