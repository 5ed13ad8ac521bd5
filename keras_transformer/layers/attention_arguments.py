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


def output_shape_width(output_shape):
    """Keras' `output_shape` (an int or a tuple of one int) as an int, or None.

    Example:

    >>> output_shape_width((16,))
    16
    """
    if output_shape is None:
        return None
    width = output_shape
    if isinstance(output_shape, (tuple, list)) and len(output_shape) == 1:
        (width,) = output_shape
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(
            "MultiHeadAttention's output projection maps each position to a "
            "vector, so `output_shape` must be a positive int or a tuple of "
            f"one positive int (or use output_dim), got output_shape={output_shape!r}."
        )
    return width


def check_arguments(num_heads, key_dim, value_dim, logit_scale, attention_dropout, dropout_name, fused_qkv):
    """Raises `ValueError` for constructor arguments the layer cannot use.

    Args:
        num_heads, key_dim, value_dim, logit_scale, attention_dropout,
        fused_qkv: as `MultiHeadAttention`.
        dropout_name: the name the dropout rate was given under
            (`"attention_dropout"` or Keras' `"dropout"`), for the message.

    Example:

    >>> check_arguments(8, 0, 0, "sqrt", 0.0, "dropout", False)
    Traceback (most recent call last):
    ...
    ValueError: MultiHeadAttention needs a positive int key_dim, got key_dim=0.
    """
    for name, value in (("num_heads", num_heads), ("key_dim", key_dim)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(
                f"MultiHeadAttention needs a positive int {name}, got "
                f"{name}={value!r}."
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
    if fused_qkv and value_dim != key_dim:
        raise ValueError(
            "fused_qkv=True needs value_dim == key_dim, got "
            f"key_dim={key_dim}, value_dim={value_dim}."
        )


def check_build_shapes(owner, query_shape, value_shape, key_shape):
    """Raises unless each input is `(batch, length, width)` with a known width.

    Example:

    >>> check_build_shapes("MultiHeadAttention 'mha'", (1, 2, 8), (1, 3), (1, 3, 8))
    Traceback (most recent call last):
    ...
    ValueError: MultiHeadAttention 'mha' expects `value` of shape (batch, length, width) with a known width, got shape (1, 3).
    """
    for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
        if len(shape) != 3 or shape[-1] is None:
            raise ValueError(
                f"{owner} expects `{name}` of shape (batch, length, width) with a "
                f"known width, got shape {tuple(shape)}."
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
        cache_shape = input_checks.static_shape(cache)
        key_length = cache_shape[2] if cache_shape and len(cache_shape) == 5 else None
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
        "attention_mask": (("batch", batch), ("query_length", query_length), ("key_length", key_length)),
    }
    for name, mask in masks.items():
        if mask is not None:
            input_checks.check_shape(owner, name, mask, expected[name])
