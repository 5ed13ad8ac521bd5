"""The padding mask of a batch of token ids, as a layer."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class PaddingMask(keras.layers.Layer):
    """Maps token ids to a boolean mask, True for real tokens (id != 0).

    The model builders pass this mask to every layer explicitly rather than
    relying on Keras' implicit mask propagation, so a saved model carries
    its masking in its graph.

    A decoder's inputs open with a start token. Marian's decoders (every
    OPUS-MT model) start from their padding token, so a mask that knows
    the start (`start_id`) keeps position 0 real when the start is the
    padding id; the model's decoding reads the start from here
    (`keras_transformer.model_parts.TransformerParts.decoder_start_id`).

    Args:
        padding_id: int, the id of the padding token. Defaults to 0.
        start_id: int or None, the token id every sequence starts with
            (a decoder's mask), or None (an encoder's). Defaults to None.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    >>> import numpy as np
    >>> mask = PaddingMask()(np.array([[4, 2, 0]]))
    >>> keras.ops.convert_to_numpy(mask).tolist()
    [[True, True, False]]
    >>> keras.ops.convert_to_numpy(PaddingMask(start_id=0)(np.array([[0, 2, 0]]))).tolist()
    [[True, True, False]]
    """

    def __init__(self, padding_id=0, start_id=None, **kwargs):
        super().__init__(**kwargs)
        self.padding_id = padding_id
        self.start_id = None if start_id is None else int(start_id)

    def call(self, tokens):
        mask = ops.not_equal(tokens, self.padding_id)
        if self.start_id != self.padding_id:
            return mask
        first = ops.equal(ops.cumsum(ops.ones_like(tokens, dtype="int32"), axis=-1), 1)
        return ops.logical_or(mask, first)

    def compute_output_spec(self, tokens):
        return keras.KerasTensor(tokens.shape, dtype="bool")

    def get_config(self):
        config = super().get_config()
        config["padding_id"] = self.padding_id
        if self.start_id is not None:
            config["start_id"] = self.start_id
        return config
