"""What an import asks of Keras, done the short way: the imported model written without detours.

Keras' `.keras` writer imports TensorFlow to ask whether it is installed
and copies each weight to write it. An imported model (its weights built
from the checkpoint's values: `keras_transformer.initial_values`) holds no
TensorFlow object, so each of these costs time or memory and changes
nothing in the file (docs/pretrained.md, "What an import costs"). The
shortcuts reach into Keras' own modules where it has no public switch, and
fall back to Keras' way where those modules are not as expected.
"""

import contextlib
import sys

from keras_transformer.model_file import save_model


def save_imported_model(model, path):
    """`model_file.save_model(model, path)`, without importing TensorFlow where this process has not.

    Keras' serialization asks whether TensorFlow is installed (to convert its
    shapes and dtypes), and asking imports it: a large part of an import
    under torch (benchmarks/findings/decoding.md, "What an import asks of Keras"). A process that
    never imported TensorFlow holds none of its objects, so the answer
    changes nothing in the file.

    Args:
        model: the `keras.Model` to write.
        path: the `.keras` file.

    Example:

    >>> import keras, os, tempfile
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> save_imported_model(model, os.path.join(tempfile.mkdtemp(), "m.keras"))
    """
    with _tensorflow_unasked(), _numpy_views_of_jax_arrays():
        save_model(model, path)


@contextlib.contextmanager
def _numpy_views_of_jax_arrays():
    """Keras' `convert_to_numpy` gives a read-only view of a JAX array on the CPU inside, not a copy.

    Keras' weights writer converts each variable with `np.array`, a copy: the
    largest weight, the token embedding, was then held twice at once, at the
    import's peak (benchmarks/findings/decoding.md, "What an import asks of Keras"). The writer only
    reads the array, and `np.asarray` of a JAX array on the CPU is its own
    buffer.
    """
    import keras

    if keras.backend.backend() != "jax":
        yield
        return
    import jax
    import numpy as np
    from keras.src import backend

    convert = backend.convert_to_numpy

    def view(x):
        x = x.value if isinstance(x, keras.Variable) else x
        if isinstance(x, jax.Array) and x.dtype != "bfloat16" and all(
                device.platform == "cpu" for device in x.devices()):
            return np.asarray(x)
        return convert(x)

    backend.convert_to_numpy = view
    try:
        yield
    finally:
        backend.convert_to_numpy = convert


@contextlib.contextmanager
def _tensorflow_unasked():
    """Keras' lazy `tensorflow` module says "not available" inside, where TensorFlow is not imported yet."""
    try:
        from keras.src.utils import module_utils
    except ImportError:  # another Keras layout: it may import TensorFlow, which costs time only
        yield
        return
    lazy = getattr(module_utils, "tensorflow", None)
    if "tensorflow" in sys.modules or getattr(lazy, "_available", False) is not None:
        yield
        return
    lazy._available = False
    try:
        yield
    finally:
        lazy._available = None
