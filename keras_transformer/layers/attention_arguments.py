"""The arguments of `MultiHeadAttention`: its own, Keras' names for them, and call inputs."""

import math

import keras

from keras_transformer.layers import input_checks

LOGIT_SCALES = ("sqrt", "linear")


def get_qkv_initializer(identifier):
    """Resolves a fused-QKV initializer argument: None, "fairseq" or any initializer.

    Example:

    >>> get_qkv_initializer("fairseq")
    'fairseq'
    """
    if identifier is None or identifier == "fairseq":
        return identifier
    return keras.initializers.get(identifier)


def serialize_qkv_initializer(initializer):
    """Inverse of `get_qkv_initializer`, for `get_config`.

    Example:

    >>> serialize_qkv_initializer(None) is None
    True
    """
    if initializer is None or initializer == "fairseq":
        return initializer
    return keras.initializers.serialize(initializer)


def logit_scale_value(logit_scale, key_dim):
    """The float that multiplies the logits: `"sqrt"`, `"linear"` or a number.

    Example:

    >>> logit_scale_value("sqrt", 64)
    0.125
    """
    if logit_scale == "sqrt":
        return 1.0 / math.sqrt(key_dim)
    if logit_scale == "linear":
        return 1.0 / key_dim
    return float(logit_scale)


def resolve_alias(name, value, keras_name, keras_value, default, kind):
    """One value from an argument and its Keras alias; refuses two that differ.

    Example:

    >>> resolve_alias("attention_dropout", None, "dropout", 0.1, 0.0, float)
    0.1
    """
    if keras_value is None:
        return default if value is None else value
    if value is not None and kind(value) != kind(keras_value):
        raise ValueError(
            f"MultiHeadAttention got {name}={value!r} and {keras_name}="
            f"{keras_value!r}; `{keras_name}` is Keras' name for `{name}`, so "
            "pass one of them (or equal values)."
        )
    return keras_value


def parse_output_shape(output_shape):
    """Keras' `output_shape` (an int, or a tuple of ints) as a tuple of ints, or None.

    Example:

    >>> parse_output_shape(16), parse_output_shape([2, 8])
    ((16,), (2, 8))
    """
    if output_shape is None:
        return None
    axes = (output_shape,) if isinstance(output_shape, int) else output_shape
    if not isinstance(axes, (tuple, list)) or not axes or any(
        isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in axes
    ):
        raise ValueError(
            f"Invalid `output_shape`, got output_shape={output_shape!r}: it must be a positive int or "
            "a tuple of positive ints, the shape of each query position's output (or use output_dim)."
        )
    return tuple(axes)


def check_positive_int(name, value, optional=False):
    """Raises `ValueError` unless `value` is a positive int (or None if `optional`).

    The message names "the argument `name`", as Keras' own layer does.

    Example:

    >>> check_positive_int("value_dim", 1.5, optional=True)
    Traceback (most recent call last):
    ...
    ValueError: MultiHeadAttention needs a positive int for the argument `value_dim`, got value_dim=1.5.
    """
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"MultiHeadAttention needs a positive int for the argument `{name}`, got {name}={value!r}."
        )


def check_attention_axes(attention_axes):
    """Accepts Keras' `attention_axes` only where it means this layer's one sequence axis.

    Example:

    >>> check_attention_axes((1,))
    >>> check_attention_axes((1, 2))
    Traceback (most recent call last):
    ...
    ValueError: This MultiHeadAttention attends over the one sequence axis of (batch, length, width) inputs, so attention_axes must be None or that axis (1 or -2), got attention_axes=(1, 2). Use keras.layers.MultiHeadAttention for attention over other axes.
    """
    axes = (attention_axes,) if isinstance(attention_axes, int) else attention_axes
    if axes is None or tuple(axes) in ((1,), (-2,)):
        return
    raise ValueError(
        "This MultiHeadAttention attends over the one sequence axis of (batch, length, width) "
        "inputs, so attention_axes must be None or that axis (1 or -2), got "
        f"attention_axes={attention_axes!r}. Use keras.layers.MultiHeadAttention for attention "
        "over other axes."
    )


def check_arguments(num_heads, key_dim, value_dim, logit_scale, attention_dropout, dropout_name, fused_qkv,
                    flash_attention=None, sliding_window=None):
    """Raises `ValueError` for constructor arguments the layer cannot use.

    Args:
        num_heads, key_dim, value_dim, logit_scale, attention_dropout,
        fused_qkv, flash_attention, sliding_window: as `MultiHeadAttention`.
        dropout_name: the name the dropout rate was given under
            (`"attention_dropout"` or Keras' `"dropout"`), for the message.

    Example:

    >>> check_arguments(8, 0, 0, "sqrt", 0.0, "dropout", False)
    Traceback (most recent call last):
    ...
    ValueError: MultiHeadAttention needs a positive int for the argument `key_dim`, got key_dim=0.
    """
    check_positive_int("num_heads", num_heads)
    check_positive_int("key_dim", key_dim)
    check_positive_int("value_dim", value_dim, optional=True)
    if sliding_window is not None and (
        isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 1
    ):
        raise ValueError(
            f"`sliding_window` must be None or a positive int, got sliding_window={sliding_window!r}."
        )
    if not (
        logit_scale in LOGIT_SCALES or isinstance(logit_scale, (int, float))
    ):
        raise ValueError(
            "logit_scale must be 'sqrt', 'linear' or a float, got "
            f"logit_scale={logit_scale!r}."
        )
    if not 0.0 <= attention_dropout < 1.0:
        raise ValueError(
            f"{dropout_name} (attention-weight dropout) must be in [0, 1), got "
            f"{dropout_name}={attention_dropout!r}."
        )
    if flash_attention and attention_dropout > 0.0:
        # Keras' message: flash kernels have no attention-weight dropout.
        raise ValueError(
            "Dropout is not supported when flash attention is enabled. Please set dropout to 0.0 "
            f"to use flash attention (got flash_attention=True and {dropout_name}={attention_dropout})."
        )
    if fused_qkv and value_dim is not None and value_dim != key_dim:
        raise ValueError(
            "fused_qkv=True needs value_dim == key_dim, got "
            f"key_dim={key_dim}, value_dim={value_dim}."
        )


def check_build_shapes(owner, query_shape, value_shape, key_shape):
    """Raises unless each input is `(batch, length, width)` with a known width.

    Key and value are compared first, with Keras' message ("must be equal").

    Example:

    >>> check_build_shapes("MultiHeadAttention 'mha'", (1, 2, 8), (1, 3), (1, 3))
    Traceback (most recent call last):
    ...
    ValueError: MultiHeadAttention 'mha' expects `value` of shape (batch, length, width) with a known width, got shape (1, 3).
    """
    if tuple(value_shape[1:-1]) != tuple(key_shape[1:-1]):
        raise ValueError(
            f"{owner}: all dimensions of `value` and `key`, except the last one, must be equal. "
            f"Received: value_shape={tuple(value_shape)} and key_shape={tuple(key_shape)}."
        )
    for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
        if len(shape) != 3 or shape[-1] is None:
            raise ValueError(
                f"{owner} expects `{name}` of shape (batch, length, width) with a "
                f"known width, got shape {tuple(shape)}."
            )


def check_cache(owner, cache):
    """A KV cache is a pair `(keys, values)` of rank-4 tensors; anything else is a clear error.

    Example:

    >>> import numpy as np
    >>> check_cache("MultiHeadAttention 'mha'", np.zeros((1, 2, 3, 2, 4)))
    Traceback (most recent call last):
    ...
    ValueError: MultiHeadAttention 'mha' expects `cache` as a pair (keys, values) of shapes (batch, num_heads, length, key_dim) and (batch, num_heads, length, value_dim), got an array of shape (1, 2, 3, 2, 4). ...
    """
    if isinstance(cache, (tuple, list)) and len(cache) == 2:
        for name, part in zip(("keys", "values"), cache):
            shape = input_checks.static_shape(part)
            if shape is not None and len(shape) != 4:
                raise ValueError(
                    f"{owner} expects the cache's {name} of shape (batch, num_heads, length, head_dim), "
                    f"got shape {tuple(shape)}."
                )
        return
    shape = input_checks.static_shape(cache) if hasattr(cache, "shape") else None
    got = f"an array of shape {tuple(shape)}" if shape is not None else f"{type(cache).__name__}"
    raise ValueError(
        f"{owner} expects `cache` as a pair (keys, values) of shapes (batch, num_heads, length, key_dim) "
        f"and (batch, num_heads, length, value_dim), got {got}. The stacked (batch, 2, length, "
        "num_heads, key_dim) cache of earlier versions is no longer taken: make one with "
        "`empty_cache(batch, length)` (or `key_value_cache` for cross-attention)."
    )


def check_call_inputs(owner, built_widths, query, value, key, masks, cache):
    """Static shape and dtype checks of a call: clear errors, and still traceable.

    Args:
        owner: str, the layer named in messages.
        built_widths: `(query, value, key)` widths the layer was built
            with, or None before it is built.
        query, value, key: the call's inputs.
        masks: dict of the call's masks by argument name (None when absent).
        cache: the call's cache, or None.

    Example:

    >>> import numpy as np
    >>> check_call_inputs("MultiHeadAttention 'mha'", (8, 8, 8), np.zeros((1, 2, 8), "float32"),
    ...                   np.zeros((1, 3, 4), "float32"), np.zeros((1, 3, 8), "float32"), {}, None)
    Traceback (most recent call last):
    ...
    ValueError: MultiHeadAttention 'mha' expects `value` of shape (batch, length, width=8), got shape (1, 3, 4). ...
    """
    widths = dict(zip(("query", "value", "key"), built_widths or (None,) * 3))
    for name, x in (("query", query), ("value", value), ("key", key)):
        input_checks.check_dtype(owner, name, x, "float")
        input_checks.check_shape(
            owner, name, x, (("batch", None), ("length", None), ("width", widths[name])),
            "Pass the width the layer was built with." if widths[name] else "",
        )
    batch, query_length = (input_checks.static_shape(query) or (None, None))[:2]
    key_length = (input_checks.static_shape(key) or (None, None))[1]
    if cache is not None:  # keys and values come from the cache
        check_cache(owner, cache)
        cache_shape = input_checks.static_shape(cache[0])
        key_length = cache_shape[2] if cache_shape and len(cache_shape) == 4 else None
    else:
        for name, x in (("value", value), ("key", key)):
            input_checks.check_shape(
                owner, name, x, (("batch", batch), ("key_length", key_length), ("width", None)),
                "query, key and value need the same batch size, key and value the "
                "same length.",
            )
    expected = {
        "query_mask": (("batch", batch), ("query_length", query_length)),
        "value_mask": (("batch", batch), ("key_length", key_length)),
        "key_mask": (("batch", batch), ("key_length", key_length)),
    }
    for name, mask in masks.items():
        if mask is not None and name != "attention_mask":
            input_checks.check_shape(owner, name, mask, expected[name])
    _check_attention_mask(owner, masks.get("attention_mask"), batch, query_length, key_length)


def _check_attention_mask(owner, mask, batch, query_length, key_length):
    """An explicit mask of any shape Keras broadcasts: `(q, k)`, `(1 or b, q, k)`, `(b, heads, q, k)`."""
    shape = None if mask is None else input_checks.static_shape(mask)
    if shape is None:
        return
    ends = shape[-2:] if len(shape) >= 2 else ()
    lengths_fit = len(ends) == 2 and all(
        got is None or want is None or got == want for got, want in zip(ends, (query_length, key_length))
    )
    batch_fits = len(shape) == 2 or shape[0] in (None, 1, batch) or batch is None
    if len(shape) not in (2, 3, 4) or not lengths_fit or not batch_fits:
        raise ValueError(
            f"{owner} expects `attention_mask` of shape (query_length, key_length), (batch or 1, "
            "query_length, key_length) or (batch or 1, num_heads or 1, query_length, key_length) "
            f"with query_length={query_length}, key_length={key_length}, batch={batch}; got shape {shape}."
        )
