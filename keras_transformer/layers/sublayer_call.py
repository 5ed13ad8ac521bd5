"""Calling a Keras sublayer from inside a layer's own `call`, without `Layer.__call__` where it adds nothing.

`Layer.__call__` does bookkeeping around `call` (argument checks, masks,
name scopes, autocast, dispatch to a quantized call). Traced code (XLA on
TensorFlow and JAX) pays it once; eager torch pays it on every call, and a
decoding step calls the attention projections about 20 times: on the
default model that made greedy decoding in eager torch slower than when the
projections were raw weights (benchmarks/findings/decoding.md, "The layers on
Keras' Dense and ReversibleEmbedding").
Inside our own layer's `call`, already in that layer's autocast scope and
with the sublayer sharing its dtype policy, a float sublayer's `call`
computes exactly what `__call__` would. A quantized sublayer takes Keras'
quantized call, so it still goes through `__call__`.
"""


def call_sublayer(layer, *args, **kwargs):
    """`layer(*args, **kwargs)`, through `layer.call` when that is the same computation.

    Args:
        layer: a built Keras layer owned by the calling layer (a `Dense` or
            an `Embedding`), called from within the owner's `call`.
        *args, **kwargs: the call's arguments.

    Returns:
        What `layer(*args, **kwargs)` returns.

    Example:

    >>> import keras, numpy as np
    >>> dense = keras.layers.Dense(2, kernel_initializer="ones")
    >>> dense.build((None, 3))
    >>> keras.ops.convert_to_numpy(call_sublayer(dense, np.ones((1, 3), "float32"))).tolist()
    [[3.0, 3.0]]
    """
    if layer.quantization_mode is None:
        return layer.call(*args, **kwargs)
    return layer(*args, **kwargs)


def call_layer(layer, inputs):
    """`layer(inputs)`: Keras' whole `__call__`, for a sublayer used outside its owner's `call`.

    Outside the owner's `call` (a cache made before decoding, diagnostics)
    there is no autocast scope to rely on, so `call_sublayer`'s shortcut
    does not apply.

    Args:
        layer: a built Keras layer.
        inputs: its input.

    Returns:
        `layer(inputs)`.

    Example:

    >>> import keras, numpy as np
    >>> dense = keras.layers.Dense(2, kernel_initializer="ones")
    >>> keras.ops.convert_to_numpy(call_layer(dense, np.ones((1, 3), "float32"))).tolist()
    [[3.0, 3.0]]
    """
    return layer(inputs)
