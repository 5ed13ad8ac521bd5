"""Keras' post-training quantization of a trained translator, as the command line offers it.

`model.quantize(mode)` replaces the float kernels of every Keras `Dense`
and `Embedding` in the model (this package's projections and token
embeddings included) by integer ones with per-channel scales. Measured on
the README's default model (docs/keras-workflows.md, "Quantization"): int8
keeps the test BLEU, stores a quarter of the bytes and decodes faster
where the decoding loop is compiled (TensorFlow, JAX), but slower in eager
torch.
"""

import contextlib
import gc
import warnings

import keras
import numpy as np

#: The modes the command line offers (`--quantize`).
MODES = ("int8", "int4")
#: Rows of a token matrix `RowBlockAbsMaxQuantizer` quantizes at a time.
ROWS_PER_BLOCK = 16384


def quantize(model, mode):
    """Quantizes `model` in place with Keras' `model.quantize(mode)`.

    Keras warns once for every layer without weights to quantize (dropout,
    layer normalization, ...); those warnings are silenced here.

    Args:
        model: a built Keras model.
        mode: a Keras quantization mode: "int8", "int4" or "float8".

    Returns:
        `model`.

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(30, 30, num_layers=1, d_model=8, num_heads=2, ff_dim=16, max_length=8)
    >>> quantize(model, "int8").get_layer("encoder_layer_0").self_attention.query_dense.quantization_mode
    'int8'
    """
    with warnings.catch_warnings(), collected_once():
        warnings.filterwarnings("ignore", message=r".*does not have a `quantize` method implemented")
        if mode != "int8":
            model.quantize(mode)
            return model
        model.quantize(mode, filters=lambda layer: not _quantized_by_rows(layer))
        rows = keras.quantizers.Int8QuantizationConfig(weight_quantizer=RowBlockAbsMaxQuantizer())
        model.quantize(mode, config=rows, filters=_quantized_by_rows)
    return model


def _quantized_by_rows(layer):
    # A token matrix (tied: no second matrix quantized over another axis with the same quantizer).
    return isinstance(layer, keras.layers.Embedding) and getattr(layer, "tie_weights", True)


@keras.saving.register_keras_serializable(package="keras_transformer")
class RowBlockAbsMaxQuantizer(keras.quantizers.AbsMaxQuantizer):
    """Keras' `AbsMaxQuantizer` of a matrix by rows, `ROWS_PER_BLOCK` rows at a time: the same values.

    Keras' NumPy path quantizes a whole matrix at once and holds four float
    copies of it meanwhile, beside the model's own float weights (gigabytes
    at NLLB-200's vocabulary); a block's copies are those of its rows.
    `quantize` gives it to token embeddings; other matrices are quantized
    over other axes, by Keras' own.

    Example:

    >>> matrix = np.random.default_rng(0).normal(size=(5, 3)).astype("float32")
    >>> ours = RowBlockAbsMaxQuantizer()(matrix, to_numpy=True)
    >>> keras_own = keras.quantizers.AbsMaxQuantizer(-1)(matrix, to_numpy=True)
    >>> [np.array_equal(*map(keras.ops.convert_to_numpy, pair)) for pair in zip(ours, keras_own)]
    [True, True]
    """

    def __init__(self, axis=-1, **options):
        super().__init__(axis=axis, **options)

    def __call__(self, x, axis=None, to_numpy=False):
        axis = self.axis if axis is None else (axis,) if isinstance(axis, int) else tuple(axis)
        if not to_numpy or len(x.shape) != 2 or axis not in ((-1,), (1,)):
            return super().__call__(x, axis=axis, to_numpy=to_numpy)
        low, high = self.value_range
        outputs, scales = np.empty(tuple(x.shape), self.output_dtype), []
        for start in range(0, x.shape[0], ROWS_PER_BLOCK):
            rows = keras.ops.convert_to_numpy(x[start : start + ROWS_PER_BLOCK])
            # As Keras' `abs_max_quantize(..., to_numpy=True)`, operation for operation, in its dtypes.
            scales.append(np.divide(high, np.add(np.max(np.abs(rows), axis=-1, keepdims=True), self.epsilon)))
            outputs[start : start + len(rows)] = np.clip(np.round(np.multiply(rows, scales[-1])), low, high)
        return keras.ops.convert_to_tensor(outputs), keras.ops.convert_to_tensor(np.concatenate(scales))


@contextlib.contextmanager
def collected_once():
    """Within it, `gc.collect()` is put off to one call as it ends.

    Keras' `Layer.__delattr__` collects garbage after every variable a layer
    drops, so that device buffers go at once; `quantize` drops each float
    kernel. With TensorFlow, JAX and torch imported each collection is slow
    (more so as a process grows), and they were nearly all the time that
    quantizing a one-layer model took (benchmarks/findings/decoding.md,
    "Keras' int8 and int4"). One collection at the end frees the
    same memory. Other threads' collections inside it are put off too.

    Example:

    >>> import gc
    >>> with collected_once():
    ...     gc.collect()
    0
    """
    collect = gc.collect
    gc.collect = lambda *args, **kwargs: 0
    try:
        yield
    finally:
        gc.collect = collect
        collect()
