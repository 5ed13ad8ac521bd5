"""Position-wise feed-forward network (section 3.3 of the paper)."""

import keras

from keras_transformer.layers import quantized_policies


@keras.saving.register_keras_serializable(package="keras_transformer")
class FeedForward(keras.layers.Layer):
    """Two dense layers with an activation between: `W2 act(W1 x + b1) + b2`.

    Applied to every position independently. The output has the input's
    width unless `output_dim` says otherwise.

    Args:
        ff_dim: int, width of the hidden layer (2048 in the paper's base).
        activation: activation of the hidden layer. Defaults to "relu".
        output_dim: int, width of the output. Defaults to the input width.
        use_bias: bool. Defaults to True.
        kernel_initializer: initializer of W1. Defaults to Glorot uniform.
        output_initializer: initializer of W2, the projection that writes
            into the residual stream. Defaults to Glorot uniform;
            `keras_transformer.initializers.DepthScaled` for deep stacks.
        bias_initializer: initializer of both biases. Defaults to zeros.
        **kwargs: other `keras.layers.Layer` arguments.

    Example:

    >>> import numpy as np
    >>> ff = FeedForward(ff_dim=64)
    >>> tuple(ff(np.zeros((2, 3, 16), "float32")).shape)
    (2, 3, 16)
    """

    def __init__(
        self,
        ff_dim,
        activation="relu",
        output_dim=None,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        output_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(ff_dim, int) or ff_dim < 1:
            raise ValueError(f"FeedForward needs a positive int ff_dim, got ff_dim={ff_dim!r}.")
        self.ff_dim = ff_dim
        self.activation = keras.activations.get(activation)
        self.output_dim = output_dim
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.output_initializer = keras.initializers.get(output_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, inputs_shape):
        common = dict(
            use_bias=self.use_bias,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
        )
        self.hidden_dense = keras.layers.Dense(
            self.ff_dim,
            activation=self.activation,
            kernel_initializer=self.kernel_initializer,
            name="hidden",
            **common,
        )
        self.hidden_dense.build(inputs_shape)
        self.output_dense = keras.layers.Dense(
            self.output_dim or inputs_shape[-1],
            kernel_initializer=self.output_initializer,
            name="output",
            **common,
        )
        self.output_dense.build(tuple(inputs_shape[:-1]) + (self.ff_dim,))
        self.built = True

    def call(self, inputs):
        return self.output_dense(self.hidden_dense(inputs))

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape[:-1]) + (self.output_dim or inputs_shape[-1],)

    def get_config(self):
        config = super().get_config()
        config["dtype"] = quantized_policies.config_dtype(self)
        config.update(
            {
                "ff_dim": self.ff_dim,
                "activation": keras.activations.serialize(self.activation),
                "output_dim": self.output_dim,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "output_initializer": keras.initializers.serialize(self.output_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
