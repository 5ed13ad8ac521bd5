"""What every layer of the package must do, checked in one place.

Each layer's own test file calls `check_layer_contract` and then only tests
what is special about that layer.
"""

import keras
import numpy as np

from conftest import to_numpy


def _outputs(model, inputs):
    return [to_numpy(y) for y in keras.tree.flatten(model(inputs, training=False))]


def check_layer_contract(make_layer, make_model, inputs, tmp_path):
    """Config round-trip, `.keras` save/load and mixed precision.

    Args:
        make_layer: zero-argument callable returning a fresh layer.
        make_model: callable `layer -> keras.Model` wrapping the layer in a
            functional model fed by `inputs`.
        inputs: NumPy inputs of that model.
        tmp_path: pytest's tmp_path.
    """
    layer = make_layer()
    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config, "get_config() does not round-trip"

    model = make_model(layer)
    expected = _outputs(model, inputs)
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    for got, want in zip(_outputs(reloaded, inputs), expected):
        np.testing.assert_array_equal(got, want)

    for policy in ("mixed_float16", "mixed_bfloat16"):
        keras.config.set_dtype_policy(policy)
        try:
            outputs = _outputs(make_model(make_layer()), inputs)
        finally:
            keras.config.set_dtype_policy("float32")
        for output in outputs:
            if output.dtype.kind == "f":
                assert np.all(np.isfinite(output.astype("float32"))), policy
