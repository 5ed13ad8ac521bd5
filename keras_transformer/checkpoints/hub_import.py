"""`keras-transformer import`: whichever Hugging Face translator a folder or hub id holds, by its `config.json`.

`model_type` "marian" (OPUS-MT) goes to `marian.import_marian`; "m2m_100"
(NLLB-200, or M2M-100 with its own tokenizer) to `nllb.import_nllb`; any
other is refused in one line.
"""

import os

from keras_transformer.checkpoints.hugging_face_files import CONFIG_FILE
from keras_transformer.checkpoints.hugging_face_files import fetch_folder
from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.marian_tokenizer import read_json_object

FAMILIES = {"marian": "Marian (OPUS-MT)", "m2m_100": "NLLB-200 or M2M-100"}


def model_family(folder):
    """The `model_type` of a Hugging Face folder's `config.json`, checked to be one this package imports.

    Raises:
        UserInputError: no readable `config.json`, or another model type.

    Example:

    >>> import json, tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "config.json"), "w") as f:
    ...     json.dump({"model_type": "t5"}, f)
    >>> model_family(folder)
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: ...config.json: model_type 't5' is not one this package imports: ...
    """
    path = os.path.join(folder, CONFIG_FILE)
    model_type = read_json_object(path, "a Hugging Face model folder holds config.json.").get("model_type")
    if model_type not in FAMILIES:
        raise UserInputError(f"{path}: model_type {model_type!r} is not one this package imports: "
                             + ", ".join(f"{key} ({name})" for key, name in FAMILIES.items()) + ".")
    return model_type


def import_hugging_face(source, output, overwrite=False):
    """Writes a run folder from a Hugging Face Marian, NLLB-200 or M2M-100 model (a folder, or a hub id fetched).

    Args:
        source: a local folder or a hub id.
        output: the run folder to write.
        overwrite: replace a run folder that exists.

    Returns:
        `(family, checkpoint)`: the `model_type` and the `MarianCheckpoint`
        or `NllbCheckpoint` imported.

    Raises:
        UserInputError: see `model_family`, `marian.read_marian` and `nllb.read_nllb`.

    Example:

    >>> import_hugging_face("facebook/nllb-200-distilled-600M", "runs/nllb")  # doctest: +SKIP
    """
    from keras_transformer.checkpoints.marian import import_marian
    from keras_transformer.checkpoints.marian.run_import import _HUB_FILES as MARIAN_FILES
    from keras_transformer.checkpoints.nllb import import_nllb
    from keras_transformer.checkpoints.nllb.run_import import HUB_FILES as NLLB_FILES

    folder = fetch_folder(source, sorted(set(MARIAN_FILES) | set(NLLB_FILES)))
    family = model_family(folder)
    if family == "marian":
        return family, import_marian(folder, output, overwrite=overwrite)
    return family, import_nllb(folder, output, overwrite=overwrite)
