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

#: The modes the command line offers (`--quantize`).
MODES = ("int8", "int4")


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
        model.quantize(mode)
    return model


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
