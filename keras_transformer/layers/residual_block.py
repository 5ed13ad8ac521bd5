"""What encoder and decoder layers share: options, sublayers, residuals."""

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.attention_arguments import get_qkv_initializer
from keras_transformer.layers.attention_arguments import serialize_qkv_initializer
from keras_transformer.layers import input_checks
from keras_transformer.layers import quantized_policies
from keras_transformer.layers.feed_forward import FeedForward

_INITIALIZER_OPTIONS = (
    "kernel_initializer",
    "query_initializer",
    "key_initializer",
    "value_initializer",
    "output_initializer",
    "bias_initializer",
)


class ResidualBlock(keras.layers.Layer):
    """Base of `EncoderLayer` and `DecoderLayer`; not used on its own.

    Holds the constructor arguments both share, validates them, creates the
    attention, feed-forward, normalization and dropout sublayers, and applies
    a sublayer with its residual connection in post-LN (the paper's
    `LayerNorm(x + Dropout(f(x)))`) or pre-LN (`x + Dropout(f(LayerNorm(x)))`)
    order. Its arguments are documented on the subclasses.
    """

    def __init__(
        self,
        d_model,
        num_heads,
        ff_dim,
        dropout=0.1,
        attention_dropout=0.0,
        activation="relu",
        norm_first=False,
        layer_norm_epsilon=1e-5,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        query_initializer="glorot_uniform",
        key_initializer="glorot_uniform",
        value_initializer="glorot_uniform",
        output_initializer="glorot_uniform",
        bias_initializer="zeros",
        fused_qkv=False,
        qkv_initializer=None,
        logit_scale="sqrt",
        flash_attention=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value in (
            ("d_model", d_model),
            ("num_heads", num_heads),
            ("ff_dim", ff_dim),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"{type(self).__name__} needs a positive int {name}, got "
                    f"{name}={value!r}."
                )
        if d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}: "
                "each head gets d_model // num_heads features. Choose "
                "num_heads that divides d_model."
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got dropout={dropout!r}.")
        self.d_model = d_model
        self.num_heads = num_heads
        self.ff_dim = ff_dim
        self.dropout = float(dropout)
        self.attention_dropout = float(attention_dropout)
        self.activation = keras.activations.get(activation)
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.use_bias = use_bias
        for name in _INITIALIZER_OPTIONS:
            setattr(self, name, keras.initializers.get(locals()[name]))
        self.fused_qkv = fused_qkv
        self.qkv_initializer = get_qkv_initializer(qkv_initializer)
        self.logit_scale = logit_scale
        self.flash_attention = flash_attention

    @property
    def key_dim(self):
        """Size of each attention head: d_model // num_heads, as in the paper."""
        return self.d_model // self.num_heads

    @property
    def _owner(self):
        return f"{type(self).__name__} {self.name!r}"

    def _check_width(self, inputs_shape, name="inputs"):
        """Build-time check of a `(batch, length, d_model)` input shape."""
        if len(inputs_shape) != 3 or inputs_shape[-1] != self.d_model:
            raise ValueError(
                f"{self._owner} expects `{name}` of shape (batch, length, "
                f"d_model={self.d_model}), got shape {tuple(inputs_shape)}."
            )

    def _check_sequence(self, name, x, batch=None, hint=""):
        """Call-time dtype and static-shape check of a `(batch, length, d_model)` input.

        Returns:
            The static `(batch, length)` of `x` (Nones where unknown).
        """
        input_checks.check_dtype(self._owner, name, x, "float")
        input_checks.check_shape(
            self._owner, name, x, (("batch", batch), ("length", None), ("d_model", self.d_model)), hint
        )
        return tuple((input_checks.static_shape(x) or (None, None))[:2])

    def _check_mask(self, name, mask, axes):
        if mask is not None:
            input_checks.check_shape(self._owner, name, mask, axes)

    def _attention(self, name):
        return MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            attention_dropout=self.attention_dropout,
            use_bias=self.use_bias,
            query_initializer=self.query_initializer,
            key_initializer=self.key_initializer,
            value_initializer=self.value_initializer,
            output_initializer=self.output_initializer,
            bias_initializer=self.bias_initializer,
            fused_qkv=self.fused_qkv,
            qkv_initializer=self.qkv_initializer,
            logit_scale=self.logit_scale,
            flash_attention=self.flash_attention,
            dtype=self.dtype_policy,
            name=name,
        )

    def _feed_forward(self, inputs_shape):
        feed_forward = FeedForward(
            self.ff_dim,
            activation=self.activation,
            use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer,
            output_initializer=self.output_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="feed_forward",
        )
        feed_forward.build(inputs_shape)
        return feed_forward

    def _norm(self, name, inputs_shape):
        # Keras' LayerNormalization computes in float32 under mixed precision.
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(inputs_shape)
        return norm

    def _residual(self, inputs, sublayer, norm, training):
        """Applies `sublayer` with dropout, residual and norm in LN order."""
        if self.norm_first:
            return inputs + self._dropout_layer(sublayer(norm(inputs)), training=training)
        return norm(inputs + self._dropout_layer(sublayer(inputs), training=training))

    def build(self, inputs_shape):
        self._dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def compute_mask(self, inputs, mask=None):
        return mask

    def get_config(self):
        config = super().get_config()
        config["dtype"] = quantized_policies.config_dtype(self)
        config.update(
            {
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "ff_dim": self.ff_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "activation": keras.activations.serialize(self.activation),
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "use_bias": self.use_bias,
                "fused_qkv": self.fused_qkv,
                "qkv_initializer": serialize_qkv_initializer(self.qkv_initializer),
                "logit_scale": self.logit_scale,
                "flash_attention": self.flash_attention,
            }
        )
        for name in _INITIALIZER_OPTIONS:
            config[name] = keras.initializers.serialize(getattr(self, name))
        return config
