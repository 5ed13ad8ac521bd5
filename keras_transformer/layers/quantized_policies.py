"""The dtype a composite layer writes to its config: its own, and its quantized sublayers'.

`model.quantize(mode)` quantizes the Keras `Dense` and `Embedding`
sublayers inside this package's layers by giving each a quantized dtype
policy. A functional model saved as `.keras` rebuilds each of its layers
from `get_config()` alone, so a layer whose config only held its own
float policy would rebuild float sublayers, and loading their quantized
weights would fail ("expected 2 variables, but received 3"). Keras'
answer is a `DTypePolicyMap`: passed as a layer's `dtype`, it gives each
sublayer the policy stored under its path (KerasHub's backbones save one
too). Our layers hand their own `dtype_policy` to their sublayers, so one
map in the config of the outermost layer reaches every sublayer.
"""

import keras


def config_dtype(layer):
    """What `get_config()["dtype"]` should hold for `layer`.

    Args:
        layer: a built layer of this package.

    Returns:
        The serialized dtype policy of `layer` when no sublayer is
        quantized; else a serialized `DTypePolicyMap` whose default is that
        policy and which maps each quantized sublayer's path to its policy.

    Example:

    >>> dense = keras.layers.Dense(2)
    >>> config_dtype(dense)["class_name"]
    'DTypePolicy'
    """
    own = layer.dtype_policy
    default = own.default_policy if isinstance(own, keras.dtype_policies.DTypePolicyMap) else own
    quantized = {}
    # Keras' own walk over nested sublayers (Model.quantize uses it too).
    for sublayer in layer._flatten_layers(include_self=False):
        policy = sublayer.dtype_policy
        if isinstance(policy, keras.dtype_policies.DTypePolicyMap):
            policy = policy[sublayer.path]
        if policy.quantization_mode is not None:
            quantized[sublayer.path] = policy
    if not quantized:
        return keras.dtype_policies.serialize(default)
    return keras.dtype_policies.serialize(keras.dtype_policies.DTypePolicyMap(default, quantized))
