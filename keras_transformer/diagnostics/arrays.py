"""Backend tensors to NumPy: diagnostics return NumPy floats and arrays."""

import keras
import numpy as np


def to_float64(x):
    """Any backend tensor, variable or array as a float64 NumPy array.

    Example:

    >>> to_float64(keras.ops.ones((2,))).dtype
    dtype('float64')
    """
    return np.asarray(keras.ops.convert_to_numpy(x), dtype="float64")
