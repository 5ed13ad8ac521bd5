"""What makes `MultiHeadAttention` a drop-in for `keras.layers.MultiHeadAttention` beyond its arguments.

Keras' property names, output shapes and specs, masks, Keras' weight
layout in `set_weights`, and the files written before the projections were
sublayers. A mixin of `keras_transformer.layers.MultiHeadAttention`; the
arguments Keras' layer takes are checked in `attention_arguments`.
"""

import keras
import numpy as np

from keras_transformer.layers import legacy_weights
from keras_transformer.layers.attention_arguments import check_build_shapes


class KerasAttentionCompatibility:
    """Keras' `MultiHeadAttention` interface beyond `call` (a mixin; see the module).

    Example:

    >>> from keras_transformer.layers import MultiHeadAttention
    >>> mha = MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.1)
    >>> mha.dropout, mha.flash_attention, mha.sliding_window
    (0.1, None, None)
    """

    @property
    def dropout(self):
        """The attention-weight dropout rate, under Keras' name."""
        return self.attention_dropout

    @property
    def flash_attention(self):
        """None (the backend picks), True (flash kernels) or False (explicit softmax)."""
        return self._flash_attention

    @property
    def sliding_window(self):
        """None, or how far apart (exclusive) a query and a key it sees may be."""
        return self._sliding_window


    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        """`(batch, query_length, output width)`; Keras' value/key check first.

        Example:

        >>> from keras_transformer.layers import MultiHeadAttention
        >>> MultiHeadAttention(num_heads=2, key_dim=2, output_shape=5).compute_output_shape((7, 4, 8), (7, 2, 8))
        (7, 4, 5)
        """
        key_shape = value_shape if key_shape is None else key_shape
        check_build_shapes(f"MultiHeadAttention {self.name!r}", query_shape, value_shape, key_shape)
        if self._output_axes is not None:
            return tuple(query_shape[:-1]) + self._output_axes
        return tuple(query_shape[:-1]) + (self.output_dim or query_shape[-1],)

    def compute_output_spec(self, query, value, key=None, query_mask=None, value_mask=None, key_mask=None,
                            attention_mask=None, use_causal_mask=False, return_attention_scores=False,
                            training=None, cache=None, cache_index=None):
        key_shape = None if key is None else key.shape
        shape = self.compute_output_shape(query.shape, value.shape, key_shape)
        results = (keras.KerasTensor(shape, dtype=self.compute_dtype),)
        key_length = value.shape[1] if cache is None else cache[0].shape[2]
        if return_attention_scores:
            scores = (query.shape[0], self.num_heads, query.shape[1], key_length)
            results += (keras.KerasTensor(scores, dtype="float32"),)
        if cache is not None:
            results += (tuple(keras.KerasTensor(part.shape, dtype=self.compute_dtype) for part in cache),)
        return results[0] if len(results) == 1 else results

    def compute_mask(self, inputs, previous_mask=None):
        # Keras passes the query and its mask: the output keeps the query's.
        return previous_mask

    def set_weights(self, weights):
        """Sets the weights; Keras' `MultiHeadAttention` layout is reshaped to this layer's.

        Keras' layer keeps `(width, heads, head_dim)` kernels and
        `(heads, head_dim)` biases, and `(heads, head_dim, width)` for the
        output; this layer the same numbers as matrices. An array of the
        right size in the other layout is reshaped, so
        `ours.set_weights(keras_layer.get_weights())` works.

        Args:
            weights: a list of arrays, in `self.weights` order.
        """
        weights = [np.asarray(w) for w in weights]
        if len(weights) == len(self.weights):
            weights = [
                np.reshape(w, v.shape) if w.shape != tuple(v.shape) and w.size == np.prod(v.shape) else w
                for w, v in zip(weights, self.weights)
            ]
        super().set_weights(weights)

    def load_own_variables(self, store):
        # The layout written up to 1bfd57a: the projections as this layer's
        # own weights (see `legacy_weights`). Now it has none of its own.
        if len(store.keys()):
            legacy_weights.assign_to_sublayers(
                f"MultiHeadAttention {self.name!r}",
                legacy_weights.stored_arrays(store),
                [layer for name, layer in self.projections.items() if name != "gate"],
            )
