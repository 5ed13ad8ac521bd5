"""The padding mask of a batch of token ids, as a layer."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class PaddingMask(keras.layers.Layer):
    """Maps token ids to a boolean mask, True for real tokens (id != 0).

    The model builders pass this mask to every layer explicitly rather than
    relying on Keras' implicit mask propagation, so a saved model carries
    its masking in its graph.

    Args:
        padding_id: int, the id of the padding token. Defaults to 0.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    >>> import numpy as np
    >>> mask = PaddingMask()(np.array([[4, 2, 0]]))
    >>> keras.ops.convert_to_numpy(mask).tolist()
    [[True, True, False]]
    """

    def __init__(self, padding_id=0, **kwargs):
        super().__init__(**kwargs)
        self.padding_id = padding_id

    def call(self, tokens):
        return ops.not_equal(tokens, self.padding_id)

    def compute_output_spec(self, tokens):
        return keras.KerasTensor(tokens.shape, dtype="bool")

    def get_config(self):
        config = super().get_config()
        config["padding_id"] = self.padding_id
        return config
