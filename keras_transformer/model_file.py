"""A trained model's file (`model.keras` of a run): written with its weights aligned, checked, loaded.

Both halves of the package read it: training to fine-tune from a run, and
translation, export and serving to decode with it. Training and imports
write it with `save_model`, which lays every weight at a 64-byte-aligned
offset of the file, so a translation program maps the run's weights where
they lie instead of reading them into memory
(`keras_transformer_runtime.weights_file`).
"""

import contextlib
import os
import shutil
import struct
import zipfile

import keras

from keras_transformer.errors import UserInputError
from keras_transformer.initial_values import initial_values_from
from keras_transformer_runtime.keras_file_arrays import WEIGHTS_MEMBER
from keras_transformer_runtime.weights_file import ALIGNMENT

# A zip local header is 30 bytes before its name; ZIP64's extra field 20; an extra field's own header 4.
_LOCAL_HEADER_BYTES, _ZIP64_EXTRA_BYTES, _EXTRA_HEADER_BYTES = 30, 20, 4
# The extra field Android's zipalign pads with; readers skip an extra field they do not know.
_PADDING_FIELD_ID = 0xD935


def save_model(model, path):
    """`model.save(path)`, with each weight's bytes at a 64-byte-aligned offset of the `.keras` file.

    The weights' HDF5 file is written with HDF5's own alignment and stored
    in the zip with its data padded to the same alignment (as zipalign
    does), so each weight lies aligned in the file itself. Keras reads the
    file as any other. Where Keras' saver is not the one this knows, the
    file is written as Keras writes it: readers then copy instead of
    mapping, nothing else changes.

    Args:
        model: the `keras.Model` to write.
        path: the `.keras` file.

    Example:

    >>> import tempfile
    >>> from keras_transformer_runtime.keras_file_arrays import stored_arrays
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(5)])
    >>> path = os.path.join(tempfile.mkdtemp(), "model.keras")
    >>> save_model(model, path)
    >>> [offset % 64 for offset, _, _ in stored_arrays(path)]
    [0, 0]
    """
    with _aligned_weights():
        model.save(path)


@contextlib.contextmanager
def _aligned_weights():
    """Within it, Keras' saver writes the weights to a file (not memory), aligned in HDF5 and in the zip."""
    try:
        from keras.src.saving import saving_lib
    except ImportError:
        yield
        return
    names = ("is_memory_sufficient", "zipfile", "h5py")
    if not all(hasattr(saving_lib, name) for name in names):
        yield
        return
    saved = {name: getattr(saving_lib, name) for name in names}
    # Only weights written to a temporary file reach the zip through `ZipFile.write`, where the padding goes;
    # written in memory, they would also be held twice at once, beside the model's own copy.
    saving_lib.is_memory_sufficient = lambda model: False
    saving_lib.zipfile = _Namespace(zipfile, ZipFile=_AlignedZipFile)
    saving_lib.h5py = _Namespace(saved["h5py"], File=_aligned_h5_file_class())
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(saving_lib, name, value)


class _Namespace:
    """A module seen through, with some of its names replaced."""

    def __init__(self, module, **replaced):
        self._module, self._replaced = module, replaced

    def __getattr__(self, name):
        return self._replaced[name] if name in self._replaced else getattr(self._module, name)


def _aligned_h5_file_class():
    import h5py

    class AlignedFile(h5py.File):
        """`h5py.File` that, writing, places every object at a multiple of `ALIGNMENT` bytes."""

        def __init__(self, name, mode="r", **options):
            if mode == "w":
                options.setdefault("alignment_threshold", 1)
                options.setdefault("alignment_interval", ALIGNMENT)
            super().__init__(name, mode, **options)

    return AlignedFile


class _AlignedZipFile(zipfile.ZipFile):
    """`zipfile.ZipFile` whose weights member is stored with its data starting at a multiple of `ALIGNMENT`."""

    def write(self, filename, arcname=None, compress_type=None, compresslevel=None):
        if arcname != WEIGHTS_MEMBER:
            return super().write(filename, arcname, compress_type, compresslevel)
        info = zipfile.ZipInfo.from_file(filename, arcname)
        info.compress_type = zipfile.ZIP_STORED
        zip64 = info.file_size * 1.05 > zipfile.ZIP64_LIMIT  # as `ZipFile.open` decides
        header = (_LOCAL_HEADER_BYTES + len(info.filename.encode()) + _EXTRA_HEADER_BYTES
                  + (_ZIP64_EXTRA_BYTES if zip64 else 0))
        padding = -(self.start_dir + header) % ALIGNMENT
        info.extra = struct.pack("<HH", _PADDING_FIELD_ID, padding) + bytes(padding)
        with open(filename, "rb") as source, self.open(info, "w", force_zip64=zip64) as target:
            shutil.copyfileobj(source, target, 1 << 24)


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
        # The file assigns every weight: drawing random initial values first would be only time (half the
        # load of a large model) and memory.
        with initial_values_from({}):
            return keras.saving.load_model(path, compile=compile)
    except Exception as error:  # BadZipFile, ValueError, TypeError, KeyError, OSError...
        reason = str(error).strip().splitlines()[0] if str(error).strip() else "no details"
        raise UserInputError(
            f"{path!r} ({os.path.getsize(path):,} bytes) is a zip archive but not a model this package can "
            f"read ({type(error).__name__}: {reason[:200]}). It may be damaged inside, or hold layers this "
            "package does not define: copy it again from the training run, or train again."
        ) from error
