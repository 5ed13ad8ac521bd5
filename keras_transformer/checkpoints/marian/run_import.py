"""`keras-transformer import`: a Hugging Face Marian model (a folder or a hub id) written as a run folder."""

import json
import os

from keras_transformer.checkpoints.keras_shortcuts import save_imported_model
from keras_transformer.checkpoints.marian.checkpoint import build_model
from keras_transformer.checkpoints.marian.checkpoint import read_marian
from keras_transformer.checkpoints.marian.checkpoint import run_config
from keras_transformer.checkpoints.hugging_face_files import CONFIG_FILE
from keras_transformer.checkpoints.hugging_face_files import PYTORCH_FILE
from keras_transformer.checkpoints.hugging_face_files import SAFETENSORS_FILE
from keras_transformer.checkpoints.hugging_face_files import check_output
from keras_transformer.checkpoints.hugging_face_files import fetch_folder
from keras_transformer.checkpoints.hugging_face_files import write_run_folder
from keras_transformer_runtime.marian_tokenizer import MARIAN_VOCABULARY_FILES
from keras_transformer_runtime.search_defaults import write_generation_file

def copy_vocabulary_files(source, destination):
    """Copies a Marian tokenizer's files (`MARIAN_VOCABULARY_FILES`, `tokenizer_config.json`) between folders."""
    import shutil

    from keras_transformer_runtime.marian_tokenizer import TOKENIZER_CONFIG_FILE
    from keras_transformer_runtime.run_files import TARGET_ID_TABLE_FILE

    for name in (*MARIAN_VOCABULARY_FILES, TARGET_ID_TABLE_FILE, TOKENIZER_CONFIG_FILE):
        if os.path.isfile(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(destination, name))


# What `import_marian` fetches of a hub model: the files a Marian folder needs, no others.
_HUB_FILES = [CONFIG_FILE, "generation_config.json", SAFETENSORS_FILE, PYTORCH_FILE, *MARIAN_VOCABULARY_FILES,
              "target_vocab.json", "tokenizer_config.json"]
# The Hugging Face config, kept beside the imported model (the run's own config.json is a training config).
MARIAN_CONFIG_FILE = "marian_config.json"
IMPORTED_FILE = "imported.json"


def fetch_marian(source):
    """A local folder for `source`: the folder itself, or a hub id (`Helsinki-NLP/opus-mt-es-en`) downloaded.

    `hugging_face_files.fetch_folder` with the files a Marian folder needs.

    Raises:
        UserInputError: neither a folder nor a hub id that can be fetched.

    Example:

    >>> fetch_marian("no such folder")
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: no such folder: no such folder, and not a hub id ...
    """
    return fetch_folder(source, _HUB_FILES)


def import_marian(source, output, overwrite=False):
    """Writes a run folder from a Hugging Face Marian model, which every verb then takes as a trained run.

    The folder holds `model.keras` (a `transformer()` model with Marian's
    settings and weights), Marian's tokenizer files (`source.spm`,
    `target.spm`, `vocab.json`, `tokenizer_config.json`), its Hugging Face
    config (`marian_config.json`), the run's own `config.json` (`run_config`:
    what `train --from` reads), `generation.json` (`generate()`'s search
    settings, the run's defaults) and `imported.json` (where it came from). It is written beside `output` and moved there whole, so a
    failure leaves nothing in `output`.

    Args:
        source: a `MarianMTModel` folder, or a hub id (`fetch_marian`).
        output: the run folder to write.
        overwrite: replace a run folder that exists; otherwise an
            existing, non-empty `output` is refused.

    Returns:
        The `MarianCheckpoint` that was imported.

    Raises:
        UserInputError: see `read_marian`; `output` exists and is not empty.

    Example:

    >>> import_marian("opus-mt-es-en", "runs/opus-mt-es-en")  # doctest: +SKIP
    """
    import shutil

    check_output(output, overwrite)  # before the long read
    checkpoint = read_marian(fetch_marian(source))
    model = build_model(checkpoint)
    checkpoint = checkpoint._replace(weights={})  # its file's pages go before Keras buffers the model's to save it

    def write(staging):
        save_imported_model(model, os.path.join(staging, "model.keras"))
        copy_vocabulary_files(checkpoint.directory, staging)
        shutil.copyfile(os.path.join(checkpoint.directory, CONFIG_FILE), os.path.join(staging, MARIAN_CONFIG_FILE))
        with open(os.path.join(staging, CONFIG_FILE), "w") as f:  # the run's own: what `train --from` reads
            json.dump(run_config(checkpoint), f, indent=2)
        write_generation_file(checkpoint.directory, staging)  # `generate()`'s search: the run's default
        with open(os.path.join(staging, IMPORTED_FILE), "w") as f:
            json.dump({"format": "marian", "source": os.fspath(source), "parameters": int(model.count_params())},
                      f, indent=2)

    write_run_folder(output, overwrite, write)
    return checkpoint
