"""Weights built from values already at hand instead of drawn from their initializers.

An import builds a model from a checkpoint's tensors, and a load from a
file that assigns every weight next: in both, Keras' random initial values
are only time and memory.
"""

import contextlib


@contextlib.contextmanager
def initial_values_from(values):
    """Every weight a layer adds inside starts at its value in `values` (by variable path), else at zeros.

    Keras builds every weight from its random initializer; an import then
    replaces each value. Drawing the random values is only time (a good
    part of the import's work, against zeros), and building each weight
    twice is memory: zeros, then the checkpoint's tensor and its copy, held
    at once. Here each weight is made once, from the tensor read for it,
    which is let go as soon as the variable holds its copy: with
    `keras_shortcuts.save_imported_model`'s views, an import's peak memory
    falls markedly (benchmarks/findings/decoding.md, "What an import asks of
    Keras"). A weight whose path `values` lacks starts at zeros (with no
    values, every weight: a model whose values a file assigns next); the
    layers keep their initializers in their config (what the saved file
    says).

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
