"""What an import asks of Keras, done the short way: a model built from the checkpoint's values, written without detours.

Keras builds every weight from its random initializer, and its `.keras`
writer imports TensorFlow to ask whether it is installed, copies each
weight to write it and buffers the weights' HDF5 file in memory. An import
replaces every value and holds no TensorFlow object, so each of these costs
time or memory and changes nothing in the file (docs/pretrained.md, "What
an import costs"). The shortcuts reach into Keras' own modules where it has
no public switch, and fall back to Keras' way where those modules are not
as expected.
"""

import contextlib
import sys

from keras_transformer.model_file import save_model


@contextlib.contextmanager
def initial_values_from(values):
    """Every weight a layer adds inside starts at its value in `values` (by variable path), else at zeros.

    Keras builds every weight from its random initializer; an import then
    replaces each value. Drawing the random values is only time (a good
    part of the import's work, against zeros), and building each weight
    twice is memory: zeros, then the checkpoint's tensor and its copy, held
    at once. Here each weight is made once, from the tensor read for it,
    which is let go as soon as the variable holds its copy: with
    `save_imported_model`'s views, an import's peak memory falls markedly
    (benchmarks/findings/decoding.md, "What an import asks of Keras"). A
    weight whose path `values` lacks starts at zeros; the layers keep their
    initializers in their config (what the saved file says).

    Args:
        values: a dict from variable path to a function of no arguments
            returning the NumPy value (`layer_weights.take`).

    Yields:
        The set of paths whose variables were made from `values`: the
        others still need their values assigned.

    Example:

    >>> import keras, numpy as np
    >>> values = {"dense/kernel": lambda: np.ones((3, 2), "float32")}
    >>> with initial_values_from(values) as made:
    ...     layer = keras.layers.Dense(2, name="dense")
    ...     layer.build((None, 3))
    >>> sorted(made), float(keras.ops.sum(layer.kernel)), float(keras.ops.sum(layer.bias))
    (['dense/kernel'], 6.0, 0.0)
    """
    import keras
    import numpy as np

    try:
        from keras.src.backend.common.name_scope import current_path
    except ImportError:  # another Keras layout: zeros, and every value assigned after
        current_path = None
    add_weight = keras.layers.Layer.add_weight
    made = set()

    def add_from_values(self, *args, **kwargs):
        if "initializer" not in kwargs and len(args) < 2:
            return add_weight(self, *args, **kwargs)
        asked = []

        def initializer(shape, dtype=None):
            # Called inside the variable's own name scope: its path is this scope's, then its name.
            scope = current_path() if current_path is not None and kwargs.get("name") else None
            path = f"{scope}/{kwargs['name']}" if scope else kwargs.get("name")
            read = values.get(path)
            if read is None:
                return keras.ops.zeros(shape, dtype=dtype)
            value = read()
            if tuple(value.shape) != tuple(shape):
                return keras.ops.zeros(shape, dtype=dtype)
            asked.append(path)
            # In C order, as an assigned value lands: torch keeps a transposed view's strides, and its
            # matmuls then round differently from the saved model's (1.2e-6 in a logit).
            return np.ascontiguousarray(value.astype(dtype or value.dtype, copy=False))

        if "initializer" in kwargs:
            kwargs["initializer"] = initializer
        else:
            args = (args[0], initializer, *args[2:])
        variable = add_weight(self, *args, **kwargs)
        if asked and asked[0] == variable.path:
            made.add(variable.path)
        return variable

    keras.layers.Layer.add_weight = add_from_values
    try:
        yield made
    finally:
        keras.layers.Layer.add_weight = add_weight


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
