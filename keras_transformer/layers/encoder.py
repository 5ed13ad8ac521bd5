"""One Transformer encoder layer (section 3.1 of the paper)."""

import keras

from keras_transformer.layers.residual_block import ResidualBlock


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(ResidualBlock):
    """Self-attention then a feed-forward network, each with a residual.

    `norm_first=False` is the paper's post-LN:
    `x = LayerNorm(x + Dropout(SelfAttention(x)))`, then the same with the
    feed-forward network. `norm_first=True` is pre-LN:
    `x = x + Dropout(SelfAttention(LayerNorm(x)))`, which trains deep stacks
    without warm-up but needs a final LayerNorm after the stack (the model
    builders add it). Each head has `d_model // num_heads` features.

    Args:
        d_model: int, width of the inputs and outputs.
        num_heads: int, number of attention heads; must divide `d_model`.
        ff_dim: int, hidden width of the feed-forward network.
        dropout: float, residual dropout on each sublayer's output
            (0.1 in the paper). Defaults to 0.1.
        attention_dropout: float, dropout on the attention weights. Any
            value > 0 moves training off the fused attention kernel.
            Defaults to 0.
        activation: feed-forward activation. Defaults to "relu".
        norm_first: bool, pre-LN if True, post-LN (the paper's) if False.
        layer_norm_epsilon: float. Defaults to 1e-5.
        use_bias: bool, biases in all projections. Defaults to True.
        kernel_initializer: initializer of the feed-forward's first kernel.
        query_initializer, key_initializer, value_initializer: initializers
            of W_Q, W_K, W_V (see `MultiHeadAttention`).
        output_initializer: initializer of W_O and of the feed-forward's
            output kernel, the two projections that write into the residual
            stream.
        bias_initializer: initializer of all biases. Defaults to zeros.
        fused_qkv, qkv_initializer, logit_scale, flash_attention: see
            `MultiHeadAttention`.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        inputs: float tensor `(batch, length, d_model)`.
        mask: bool `(batch, length)`, True for real tokens. Filled from the
            Keras mask of `inputs` when `inputs` is the only tensor passed.
        attention_mask: bool `(batch, length, length)`, True where
            attention is allowed.
        training: bool, enables dropout.

    Returns:
        A tensor of the inputs' shape. Padded positions carry values that
        later layers must ignore through the mask.

    Raises:
        TypeError: `inputs` that are not floating-point.
        ValueError: `inputs` not `(batch, length, d_model)`, or masks whose
            shape does not match them.

    Example:

    >>> import numpy as np
    >>> layer = EncoderLayer(d_model=16, num_heads=2, ff_dim=32)
    >>> x = np.random.rand(2, 5, 16).astype("float32")
    >>> mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    >>> tuple(layer(x, mask=mask).shape)
    (2, 5, 16)
    """

    def build(self, inputs_shape):
        self._check_width(inputs_shape)
        super().build(inputs_shape)
        self.self_attention = self._attention("self_attention")
        self.self_attention.build(inputs_shape, inputs_shape)
        self.self_attention_norm = self._norm("self_attention_norm", inputs_shape)
        self.feed_forward = self._feed_forward(inputs_shape)
        self.feed_forward_norm = self._norm("feed_forward_norm", inputs_shape)
        self.built = True

    def call(self, inputs, mask=None, attention_mask=None, training=None):
        batch, length = self._check_sequence("inputs", inputs)
        self._check_mask("mask", mask, (("batch", batch), ("length", length)))
        self._check_mask(
            "attention_mask", attention_mask, (("batch", batch), ("length", length), ("length", length))
        )

        def attend(x):
            return self.self_attention(
                x,
                x,
                query_mask=mask,
                value_mask=mask,
                attention_mask=attention_mask,
                training=training,
            )

        x = self._residual(inputs, attend, self.self_attention_norm, training)
        return self._residual(x, self.feed_forward, self.feed_forward_norm, training)
