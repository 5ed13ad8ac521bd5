"""One Transformer decoder layer (section 3.1 of the paper)."""

import keras
from keras import ops

from keras_transformer.layers.residual_block import ResidualBlock


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(ResidualBlock):
    """Causal self-attention, cross-attention, feed-forward; each residual.

    The self-attention is causal: position i sees positions <= i only. The
    cross-attention attends over `encoder_outputs`; a layer built without
    them (a decoder-only language model) has no cross-attention. Post-LN
    (`norm_first=False`, the paper's) or pre-LN, as in `EncoderLayer`. Each
    head has `d_model // num_heads` features.

    Args:
        d_model: int, width of the inputs and outputs.
        num_heads: int, number of attention heads; must divide `d_model`.
        ff_dim: int, hidden width of the feed-forward network.
        dropout: float, residual dropout on each sublayer's output
            (0.1 in the paper). Defaults to 0.1.
        attention_dropout: float, dropout on the attention weights.
            Defaults to 0.
        activation: feed-forward activation. Defaults to "relu".
        norm_first: bool, pre-LN if True, post-LN (the paper's) if False.
        layer_norm_epsilon: float. Defaults to 1e-5.
        use_bias: bool, biases in all projections. Defaults to True.
        kernel_initializer: initializer of the feed-forward's first kernel.
        query_initializer, key_initializer, value_initializer: initializers
            of W_Q, W_K, W_V in both attentions.
        output_initializer: initializer of W_O and of the feed-forward's
            output kernel.
        bias_initializer: initializer of all biases. Defaults to zeros.
        fused_qkv, qkv_initializer, logit_scale, flash_attention: see
            `MultiHeadAttention`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float tensor `(batch, target_length, d_model)`.
        encoder_outputs: float tensor `(batch, source_length, d_model)`, or
            None for a decoder-only layer.
        mask: bool `(batch, target_length)`, True for real target tokens.
        encoder_mask: bool `(batch, source_length)`, True for real source
            tokens.
        attention_mask: bool `(batch, target_length, target_length)`,
            combined with the causal mask in self-attention.
        training: bool, enables dropout.
        return_cross_attention: bool, also return the cross-attention
            weights, float32 `(batch, num_heads, target_length,
            source_length)`.

    Returns:
        A tensor of the inputs' shape; with `return_cross_attention`, the
        pair `(outputs, weights)`.

    Raises:
        TypeError: `inputs` or `encoder_outputs` that are not floating-point.
        ValueError: `inputs` or `encoder_outputs` not `(batch, length,
            d_model)`, batch sizes that differ between them, or masks whose
            shape does not match.

    Example:

    >>> import numpy as np
    >>> layer = DecoderLayer(d_model=16, num_heads=2, ff_dim=32)
    >>> target = np.random.rand(2, 4, 16).astype("float32")
    >>> source = np.random.rand(2, 6, 16).astype("float32")
    >>> tuple(layer(target, source).shape)
    (2, 4, 16)
    """

    def build(self, inputs_shape, encoder_outputs_shape=None):
        self._check_width(inputs_shape)
        super().build(inputs_shape)
        self.self_attention = self._attention("self_attention")
        self.self_attention.build(inputs_shape, inputs_shape)
        self.self_attention_norm = self._norm("self_attention_norm", inputs_shape)
        self.cross_attention = None
        if encoder_outputs_shape is not None:
            self._check_width(encoder_outputs_shape, "encoder_outputs")
            self.cross_attention = self._attention("cross_attention")
            self.cross_attention.build(inputs_shape, encoder_outputs_shape)
            self.cross_attention_norm = self._norm("cross_attention_norm", inputs_shape)
        self.feed_forward = self._feed_forward(inputs_shape)
        self.feed_forward_norm = self._norm("feed_forward_norm", inputs_shape)
        self.built = True

    def call(
        self,
        inputs,
        encoder_outputs=None,
        mask=None,
        encoder_mask=None,
        attention_mask=None,
        training=None,
        return_cross_attention=False,
    ):
        if (encoder_outputs is None) != (self.cross_attention is None):
            raise ValueError(
                "DecoderLayer was built "
                + ("with" if self.cross_attention is not None else "without")
                + " encoder_outputs and must be called the same way."
            )
        batch, length = self._check_sequence("inputs", inputs)
        self._check_mask("mask", mask, (("batch", batch), ("length", length)))
        self._check_mask(
            "attention_mask", attention_mask, (("batch", batch), ("length", length), ("length", length))
        )
        if encoder_outputs is not None:
            _, source_length = self._check_sequence(
                "encoder_outputs",
                encoder_outputs,
                batch=batch,
                hint="inputs and encoder_outputs need the same batch size (in a "
                "transformer() model: as many rows of encoder_tokens as of "
                "decoder_tokens).",
            )
            self._check_mask("encoder_mask", encoder_mask, (("batch", batch), ("source_length", source_length)))

        def attend_to_self(x):
            return self.self_attention(
                x,
                x,
                query_mask=mask,
                value_mask=mask,
                attention_mask=attention_mask,
                use_causal_mask=True,
                training=training,
            )

        if return_cross_attention and self.cross_attention is None:
            raise ValueError("return_cross_attention needs a layer with cross-attention (built with encoder_outputs).")
        weights = {}

        def attend_to_source(x):
            results = self.cross_attention(
                x,
                encoder_outputs,
                query_mask=mask,
                value_mask=encoder_mask,
                training=training,
                return_attention_scores=return_cross_attention,
            )
            if return_cross_attention:
                weights["cross_attention"] = results[1]
                return results[0]
            return results

        x = self._residual(inputs, attend_to_self, self.self_attention_norm, training)
        if self.cross_attention is not None:
            x = self._residual(x, attend_to_source, self.cross_attention_norm, training)
        outputs = self._residual(x, self.feed_forward, self.feed_forward_norm, training)
        return (outputs, weights["cross_attention"]) if return_cross_attention else outputs

    def cross_attention_cache(self, encoder_outputs):
        """Keys and values of `encoder_outputs`, computed once per source.

        Args:
            encoder_outputs: `(batch, source_length, d_model)`.

        Returns:
            `(keys, values)`, each `(batch, num_heads, source_length,
            d_model // num_heads)`.
        """
        return self.cross_attention.key_value_cache(encoder_outputs)

    def empty_cache(self, batch, max_length):
        """A self-attention cache of zeros for `decode_step`: `(keys, values)`.

        Args:
            batch: int (or scalar tensor), rows decoded together.
            max_length: int, positions the cache holds.

        Returns:
            `(keys, values)`, each `(batch, num_heads, max_length, d_model // num_heads)`.
        """
        return self.self_attention.empty_cache(batch, max_length)

    def decode_step(self, inputs, cache, cache_index, cross_attention_cache=None, encoder_mask=None,
                    return_cross_attention=False, self_attention_mask=None):
        """Runs new positions against a key/value cache of the earlier ones.

        Each call attends to the cached keys and values, writes the new ones
        at `cache_index` and returns the updated cache, so no earlier
        position is recomputed. The cache has a fixed shape, so a compiled
        decoding loop never changes shape. Equal, to float tolerance, to
        `call` on the whole prefix.

        Args:
            inputs: `(batch, new_length, d_model)`, usually one position.
            cache: `(keys, values)`, each `(batch, num_heads, max_length,
                d_model // num_heads)`, the self-attention keys and values
                (`empty_cache` at first).
            cache_index: int or scalar int tensor, position of `inputs[:, 0]`.
            cross_attention_cache: from `cross_attention_cache`, for a layer
                with cross-attention.
            encoder_mask: bool `(batch, source_length)`, True for real
                source tokens.
            return_cross_attention: bool, also return the cross-attention
                weights (a layer with cross-attention only).
            self_attention_mask: None, or bool `(batch, max_length)`: the
                cache is a ring whose rows hold different sequences
                (`decoding.refill`). The new keys and values are written at
                column `cache_index` and each row attends to the columns its
                mask allows, in any order, instead of those before
                `cache_index`. One position at a time.

        Returns:
            `(outputs, cache)`: outputs of the new positions, updated cache;
            with `return_cross_attention`, `(outputs, cache, weights)`, the
            weights float32 `(batch, num_heads, new_length, source_length)`.

        Example:

        >>> import numpy as np
        >>> layer = DecoderLayer(d_model=8, num_heads=2, ff_dim=16)
        >>> x = np.random.rand(1, 3, 8).astype("float32")
        >>> full = layer(x)
        >>> cache = layer.empty_cache(1, 3)
        >>> for i in range(3):
        ...     step, cache = layer.decode_step(x[:, i:i + 1], cache, i)
        >>> to_numpy = keras.ops.convert_to_numpy
        >>> bool(np.allclose(to_numpy(step)[:, 0], to_numpy(full)[:, 2], atol=1e-5))
        True
        """
        if (cross_attention_cache is None) != (self.cross_attention is None):
            raise ValueError(
                "decode_step needs cross_attention_cache exactly when the layer has "
                "cross-attention (it was built with encoder_outputs)."
            )
        if return_cross_attention and self.cross_attention is None:
            raise ValueError("return_cross_attention needs a layer with cross-attention (built with encoder_outputs).")
        # Not a Keras __call__: inputs are not converted for us.
        inputs = ops.convert_to_tensor(inputs, dtype=self.compute_dtype)
        updated = {}

        def attend_to_self(x):
            if self_attention_mask is not None:
                # Written first, then read as a read-only cache under the ring's own mask: the causal rule
                # of `cache_index` would hide the columns a row wrote before the ring turned.
                start = [0, 0, cache_index, 0]
                updated["cache"] = tuple(
                    ops.slice_update(part, start, ops.cast(new, part.dtype))
                    for part, new in zip(cache, self.self_attention.key_value_cache(x)))
                return self.self_attention(x, x, attention_mask=self_attention_mask[:, None, :],
                                           cache=updated["cache"])[0]
            outputs, updated["cache"] = self.self_attention(
                x, x, use_causal_mask=True, cache=cache, cache_index=cache_index
            )
            return outputs

        def attend_to_source(x):
            # The cache holds the projected source; `x` only fills the
            # `value` argument, which a read-only cache does not use.
            results = self.cross_attention(
                x, x, value_mask=encoder_mask, cache=cross_attention_cache,
                return_attention_scores=return_cross_attention,
            )
            if return_cross_attention:
                updated["cross_attention"] = results[1]
            return results[0]

        x = self._residual(inputs, attend_to_self, self.self_attention_norm, False)
        if self.cross_attention is not None:
            x = self._residual(x, attend_to_source, self.cross_attention_norm, False)
        x = self._residual(x, self.feed_forward, self.feed_forward_norm, False)
        if return_cross_attention:
            return x, updated["cache"], updated["cross_attention"]
        return x, updated["cache"]
