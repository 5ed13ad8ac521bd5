"""Loading files written before the layers held Keras sublayers (up to commit 1bfd57a).

Until then `MultiHeadAttention` kept its projections as its own weights
(`query_kernel` of shape `(d_model, num_heads * key_dim)`, ...) and
`PositionalEmbedding` its token matrix as `embeddings`. Now they live in
Keras `EinsumDense` and `ReversibleEmbedding` sublayers, which Keras'
quantization, LoRA and dtype policies reach. A `.keras` or `.weights.h5`
file stores each layer's own weights under the layer's path and each
sublayer's under its own path, and Keras loads a layer before its
sublayers, so the layers convert old files themselves: a layer that finds
weights of its own where the new layout has none hands them, reshaped, to
its sublayers (`assign_to_sublayers`), and tells each of those sublayers to
skip the load that follows, since the file holds nothing under their paths
(`skip_next_load`).
"""

import numpy as np


def stored_arrays(store):
    """The arrays a weights store holds for one layer, in the order they were saved.

    Args:
        store: what Keras passes to `load_own_variables` (a mapping from
            "0", "1", ... to arrays).

    Returns:
        A list of NumPy arrays.

    Example:

    >>> [a.tolist() for a in stored_arrays({"1": [2.0], "0": [1.0]})]
    [[1.0], [2.0]]
    """
    return [np.asarray(store[str(i)]) for i in range(len(store.keys()))]


def assign_to_sublayers(owner, arrays, sublayers):
    """Assigns old weights, in order, to the variables of `sublayers`, reshaping each.

    Args:
        owner: str, the layer named in the error message.
        arrays: list of arrays, as `stored_arrays` returns them.
        sublayers: the sublayers whose variables (in `layer.weights` order)
            the arrays belong to, in the order the old layer held them.

    Raises:
        ValueError: the number of arrays or their sizes do not match.
    """
    variables = [variable for layer in sublayers for variable in layer.weights]
    sizes = [int(np.prod(v.shape)) for v in variables]
    if [a.size for a in arrays] != sizes:
        raise ValueError(
            f"{owner}: the file holds weights of sizes {[a.size for a in arrays]} in the layout "
            f"written before 1bfd57a; this layer needs {sizes}. The file was saved from a "
            "layer with other arguments."
        )
    for variable, array in zip(variables, arrays):
        variable.assign(np.reshape(array, tuple(variable.shape)))
    for layer in sublayers:
        skip_next_load(layer)


def skip_next_load(layer):
    """Makes the next `layer.load_own_variables(store)` a no-op, once.

    Example:

    >>> import keras
    >>> dense = keras.layers.Dense(2)
    >>> dense.build((None, 3))
    >>> skip_next_load(dense)
    >>> dense.load_own_variables({})  # would raise: 0 variables for 2
    >>> "load_own_variables" in vars(dense)
    False
    """

    def skip(store):
        del layer.load_own_variables  # back to the class's own method

    layer.load_own_variables = skip
