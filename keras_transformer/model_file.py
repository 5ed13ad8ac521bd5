"""A trained model's file (`model.keras` of a run): checked, then loaded with one-line errors.

Both halves of the package read it: training to fine-tune from a run, and
translation, export and serving to decode with it.
"""

import os

import keras

from keras_transformer.errors import UserInputError


def check_model_archive(path):
    """Raises `UserInputError` unless `path` is a complete `.keras` archive.

    A `.keras` file is a zip archive whose directory sits at its end, so a
    file cut short by a full disk or an interrupted copy loses it first;
    Keras then reports the file as "not found". This says what it is.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "model.keras")
    >>> _ = open(path, "wb").write(b"PK not really")
    >>> check_model_archive(path)
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: ... is damaged: 13 bytes, not a complete .keras archive ...
    """
    import zipfile

    if not zipfile.is_zipfile(path):
        raise UserInputError(
            f"{path!r} is damaged: {os.path.getsize(path):,} bytes, not a complete .keras archive "
            "(cut short or overwritten). Copy it again from the training run, or train again."
        )


def load_model(path, compile=True):
    """Loads a trained `model.keras`, with one-line errors for unusable files.

    Args:
        path: the `.keras` file.
        compile: also restore the loss, metrics and optimizer.

    Returns:
        The `keras.Model`.

    Raises:
        UserInputError: the file is missing, damaged, or holds layers this
            package does not define.

    Example:

    >>> load_model("/no/such/run/model.keras")
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: No trained model at '/no/such/run/model.keras': ...
    """
    # The layers must be registered; with `compile=True` the loss, metric and
    # schedule too, which `keras_transformer/__init__` does by importing
    # `keras_transformer.training` before any of its modules runs.
    import keras_transformer.models  # noqa: F401

    if not os.path.isfile(path):
        raise UserInputError(
            f"No trained model at {path!r}: pass the --output folder of a finished `keras-transformer train` run."
        )
    check_model_archive(path)
    try:
        return keras.saving.load_model(path, compile=compile)
    except Exception as error:  # BadZipFile, ValueError, TypeError, KeyError, OSError...
        reason = str(error).strip().splitlines()[0] if str(error).strip() else "no details"
        raise UserInputError(
            f"{path!r} ({os.path.getsize(path):,} bytes) is a zip archive but not a model this package can "
            f"read ({type(error).__name__}: {reason[:200]}). It may be damaged inside, or hold layers this "
            "package does not define: copy it again from the training run, or train again."
        ) from error
