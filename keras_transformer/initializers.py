"""Initializers that know about fused projections and deep residual stacks.

Both wrap ordinary Keras initializers, so they work on every backend and in
any layer, not only in this package's attention.
"""

import keras
from keras import ops

_PACKAGE = "keras_transformer"

#: Gain fairseq applies to each slice of a fused Q/K/V projection.
FAIRSEQ_QKV_GAIN = 2**-0.5


def with_seed_offset(initializer, offset):
    """Returns a fresh copy of `initializer` whose seed is shifted by `offset`.

    Keras random initializers fix their seed when constructed, so one
    instance used for several weights of the same shape gives them identical
    values. Copying it with a distinct seed per weight keeps a user's seed
    reproducible while making the weights independent. An unseeded
    initializer gets a new random seed in the copy.

    Args:
        initializer: anything `keras.initializers.get` accepts.
        offset: int added to the initializer's seed when it has one.

    Returns:
        A new `keras.initializers.Initializer`.

    Example:

    >>> base = keras.initializers.GlorotUniform(seed=1)
    >>> q = with_seed_offset(base, 0)((4, 4))
    >>> k = with_seed_offset(base, 1)((4, 4))
    >>> bool(keras.ops.all(q == k))
    False
    """
    initializer = keras.initializers.get(initializer)
    config = initializer.get_config()
    if isinstance(config.get("seed"), int):
        config["seed"] += offset
    return initializer.__class__.from_config(config)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class FusedQKV(keras.initializers.Initializer):
    """Initializes a fused projection kernel one slice at a time.

    A fused Q/K/V kernel of shape `(d_model, 3 * heads * key_dim)` is three
    projections side by side. Glorot on the whole matrix would count the
    fan-out three times and give each projection too small a variance
    (std scaled by about sqrt(2 / (1 + 3)) for square projections). This
    initializer instead splits the last axis into equal slices and gives each
    slice its own initializer, called with the slice's own shape, so each
    projection has exactly the variance it would have had unfused.

    `gain` multiplies every slice; `gain=FAIRSEQ_QKV_GAIN` (1/sqrt(2)) is the
    fairseq variant, which keeps the attention logits smaller at init.

    Args:
        initializers: one initializer per slice (any value accepted by
            `keras.initializers.get`). Defaults to three Glorot uniform.
        gain: float multiplying each slice. Defaults to 1.0.

    Example:

    >>> init = FusedQKV()
    >>> kernel = init((512, 3 * 512))
    >>> round(float(keras.ops.std(kernel[:, :512])), 3)  # sqrt(2 / 1024)
    0.044
    """

    def __init__(self, initializers=None, gain=1.0):
        if initializers is None:
            initializers = ["glorot_uniform"] * 3
        if len(initializers) < 1:
            raise ValueError(
                "FusedQKV needs at least one slice initializer, got "
                f"initializers={initializers!r}."
            )
        self.initializers = [keras.initializers.get(i) for i in initializers]
        self.gain = float(gain)

    def __call__(self, shape, dtype=None):
        num_slices = len(self.initializers)
        if shape[-1] % num_slices:
            raise ValueError(
                f"FusedQKV cannot split a kernel of shape {tuple(shape)} into "
                f"{num_slices} equal slices along its last axis."
            )
        slice_shape = tuple(shape[:-1]) + (shape[-1] // num_slices,)
        # Slice i gets seed offset i, the offset a separate projection i
        # gets in MultiHeadAttention, so fused and unfused layers built with
        # the same seeded initializer start from the same weights.
        slices = [
            with_seed_offset(init, offset)(slice_shape, dtype=dtype)
            for offset, init in enumerate(self.initializers)
        ]
        return ops.concatenate(slices, axis=-1) * self.gain

    def get_config(self):
        return {
            "initializers": [
                keras.initializers.serialize(init)
                for init in self.initializers
            ],
            "gain": self.gain,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["initializers"] = [
            keras.initializers.deserialize(init)
            for init in config["initializers"]
        ]
        return cls(**config)


@keras.saving.register_keras_serializable(package=_PACKAGE)
class DepthScaled(keras.initializers.Initializer):
    """Scales an initializer down by sqrt(2 * num_layers), as GPT-2 does.

    Each residual block adds its output projection to the residual stream;
    with `num_layers` blocks of two sublayers each, the stream's variance
    grows with 2 * num_layers additions. Dividing the std of the projections
    that write into the stream by sqrt(2 * num_layers) keeps it O(1) at init.
    Use it as the `output_initializer` of attention and feed-forward layers.

    Args:
        num_layers: int, the number of residual blocks in the stack.
        initializer: the base initializer. Defaults to Glorot uniform.

    Example:

    >>> base = keras.initializers.GlorotUniform(seed=0)((512, 512))
    >>> scaled = DepthScaled(8, keras.initializers.GlorotUniform(seed=0))
    >>> bool(keras.ops.all(scaled((512, 512)) == base / 4.0))
    True
    """

    def __init__(self, num_layers, initializer="glorot_uniform"):
        if int(num_layers) < 1:
            raise ValueError(
                f"DepthScaled needs num_layers >= 1, got num_layers={num_layers}."
            )
        self.num_layers = int(num_layers)
        self.initializer = keras.initializers.get(initializer)

    @property
    def factor(self):
        """The multiplier applied to the base initializer."""
        return (2.0 * self.num_layers) ** -0.5

    def __call__(self, shape, dtype=None):
        return self.initializer(shape, dtype=dtype) * self.factor

    def get_config(self):
        return {
            "num_layers": self.num_layers,
            "initializer": keras.initializers.serialize(self.initializer),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["initializer"] = keras.initializers.deserialize(
            config["initializer"]
        )
        return cls(**config)
