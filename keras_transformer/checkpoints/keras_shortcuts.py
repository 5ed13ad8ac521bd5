"""What an import asks of Keras, done the short way: a model built without random values, written without detours.

Keras builds every weight from its random initializer, and its `.keras`
writer imports TensorFlow to ask whether it is installed and buffers the
weights' HDF5 file in memory. An import replaces every value and holds no
TensorFlow object, so each of these costs time or memory and changes
nothing in the file (docs/pretrained.md, "What an import costs"). The
shortcuts reach into Keras' own modules where it has no public switch,
and fall back to Keras' way where those modules are not as expected.
"""

import contextlib
import sys


@contextlib.contextmanager
def zeros_for_initial_values():
    """Every weight a layer adds inside starts at zeros, not at its initializer's random values.

    `imported_model.built_model` replaces every value at once (a variable the
    checkpoint has no value for is an error), so drawing random ones is only
    time and memory: the import's work went from 6.0 to 4.3 s at opus-mt's
    shape, and from 50.1 to 36.2 s at NLLB-200-600M's (2026-11-28,
    benchmarks/results/cpu-nllb-import). The layers keep their initializers
    in their config (what the saved file says); only the first values differ.

    Example:

    >>> import keras
    >>> with zeros_for_initial_values():
    ...     layer = keras.layers.Dense(2)
    ...     layer.build((None, 3))
    >>> float(keras.ops.sum(keras.ops.abs(layer.kernel)))
    0.0
    """
    import keras

    add_weight = keras.layers.Layer.add_weight

    def add_zeros(self, *args, **kwargs):
        if "initializer" in kwargs:
            kwargs["initializer"] = "zeros"
        return add_weight(self, *args, **kwargs)

    keras.layers.Layer.add_weight = add_zeros
    try:
        yield
    finally:
        keras.layers.Layer.add_weight = add_weight


def save_imported_model(model, path):
    """`model.save(path)`, without importing TensorFlow where this process has not.

    Keras' serialization asks whether TensorFlow is installed (to convert its
    shapes and dtypes), and asking imports it: 4.9 s of a 10.9 s import
    under torch at opus-mt's shape (cProfile, 2026-11-28). A process that
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
    with _tensorflow_unasked(), _weights_through_a_file():
        model.save(path)


@contextlib.contextmanager
def _weights_through_a_file():
    """Keras writes the weights' HDF5 file to a temporary file beside the `.keras`, not to memory.

    Where it finds the memory, Keras builds the HDF5 file in memory and then
    copies it into the zip: twice the weights' size at once, on top of the
    model's own copy.
    """
    try:
        from keras.src.saving import saving_lib
    except ImportError:
        yield
        return
    if not callable(getattr(saving_lib, "is_memory_sufficient", None)):
        yield
        return
    in_memory = saving_lib.is_memory_sufficient
    saving_lib.is_memory_sufficient = lambda model: False
    try:
        yield
    finally:
        saving_lib.is_memory_sufficient = in_memory


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
