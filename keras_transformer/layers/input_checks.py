"""Checks of what users pass to the layers: shapes, dtypes and token ids.

Each check raises a `ValueError` (wrong shape or value) or a `TypeError`
(wrong dtype) whose message names the layer, the argument, what it got and
what it expected.

Where each check runs, so that every layer stays traceable (`jax.jit`,
`tf.function` with XLA, `torch.compile`, symbolic `keras.KerasTensor`s):

- Shape, rank and dtype checks read the static shape and dtype only. They
  run on every call, traced or not; an axis whose size is unknown while
  tracing (`None`) is not compared. `jax.jit` always traces with known
  sizes; a TensorFlow graph may not (Keras retraces `predict` for any
  length after a few shapes), and a sequence past `max_length` then fails
  in TensorFlow's own slice ("Expected size[0] in [0, max_length]").
- Value checks (token ids inside the vocabulary) need concrete numbers, so
  they run only when `is_concrete` says the tensor holds them: eager calls
  on every backend, including torch's eager `fit` and `predict`. Traced
  code skips them. There the backends differ: JAX clamps out-of-range ids
  silently, TensorFlow raises `InvalidArgumentError` on CPU (and returns
  zeros on GPU), CUDA torch fails with a device-side assert. So the
  decoding functions and the `Translator` check their ids on the host
  before any model work, and data for `fit` should come from the
  vocabulary the model was built for.

`is_concrete` is the one place the layers ask a backend a question of its
own (is this a tracer?); it imports the active backend's module only.
"""

import keras
import numpy as np
from keras import ops


def static_shape(x):
    """The static shape of `x` as a tuple, `None` for unknown axes.

    Args:
        x: a tensor of any backend, a NumPy array or a `keras.KerasTensor`.

    Returns:
        A tuple of ints and Nones, or None when even the rank is unknown.

    Example:

    >>> static_shape(np.zeros((2, 3)))
    (2, 3)
    """
    try:
        return tuple(d if isinstance(d, (int, np.integer)) else None for d in x.shape)
    except (TypeError, ValueError):  # a TensorFlow tensor of unknown rank
        return None


def describe_axes(axes):
    """`(("batch", None), ("d_model", 8))` -> `"(batch, d_model=8)"`, for messages."""
    return "(" + ", ".join(name if size is None else f"{name}={size}" for name, size in axes) + ")"


def check_shape(owner, name, x, axes, hint=""):
    """Raises `ValueError` if the static shape of `x` cannot be `axes`.

    Args:
        owner: str, who is checking, e.g. `"EncoderLayer 'encoder_layer_0'"`.
        name: str, the argument's name.
        x: the argument.
        axes: sequence of `(axis_name, size)` pairs, one per expected axis;
            a size of None accepts any size.
        hint: str, what to do about it, appended to the message.

    Example:

    >>> check_shape("Layer", "inputs", np.zeros((2, 5)), (("batch", None), ("d_model", 8)))
    Traceback (most recent call last):
    ...
    ValueError: Layer expects `inputs` of shape (batch, d_model=8), got shape (2, 5).
    """
    shape = static_shape(x)
    if shape is None:
        return
    fits = len(shape) == len(axes) and all(
        size is None or got is None or got == size for got, (_, size) in zip(shape, axes)
    )
    if not fits:
        raise ValueError(
            f"{owner} expects `{name}` of shape {describe_axes(axes)}, got shape "
            f"{shape}." + (f" {hint}" if hint else "")
        )


def _dtype_name(x):
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return type(x).__name__
    try:
        return keras.backend.standardize_dtype(dtype)
    except (TypeError, ValueError):  # e.g. NumPy strings
        return str(dtype)


def check_dtype(owner, name, x, kind):
    """Raises `TypeError` unless `x` has a float (`kind="float"`) or int dtype.

    Example:

    >>> check_dtype("Layer", "tokens", np.zeros(3, "float32"), "int")
    Traceback (most recent call last):
    ...
    TypeError: Layer expects integer `tokens`, got dtype float32. Cast it, e.g. `tokens.astype("int32")`.
    """
    dtype = _dtype_name(x)
    is_kind = keras.backend.is_float_dtype if kind == "float" else keras.backend.is_int_dtype
    try:
        fits = is_kind(dtype)
    except (TypeError, ValueError):  # not a dtype Keras knows, e.g. NumPy strings
        fits = False
    wanted, cast = ("floating-point", "float32") if kind == "float" else ("integer", "int32")
    if not fits:
        raise TypeError(
            f"{owner} expects {wanted} `{name}`, got dtype {dtype}. Cast it, e.g. "
            f'`{name}.astype("{cast}")`.'
        )


def is_concrete(x):
    """True when `x` holds values (eager), False while it is being traced.

    Traced means: a symbolic `keras.KerasTensor`, a tensor inside
    `tf.function` or `tf.data`, a JAX tracer (`jax.jit`, `grad`, `vmap`),
    or torch code being compiled by `torch.compile`.

    Example:

    >>> is_concrete(keras.ops.ones((2,)))
    True
    >>> is_concrete(keras.KerasTensor((None, 2)))
    False
    """
    if keras.backend.is_keras_tensor(x):
        return False
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.executing_eagerly()
    if backend == "jax":
        import jax

        return not isinstance(x, jax.core.Tracer)
    if backend == "torch":
        import torch

        compiling = getattr(torch.compiler, "is_compiling", lambda: False)
        return not (compiling() or torch.jit.is_tracing())
    return backend == "numpy"


def token_id_error(owner, name, ids, vocabulary_size, hint):
    """The `ValueError` for NumPy `ids` outside `[0, vocabulary_size)`, or None.

    Example:

    >>> print(token_id_error("Model", "tokens", np.array([[1, 9, -2]]), 5, ""))
    Model got token ids outside [0, vocabulary_size=5) in `tokens`: -2, 9.
    """
    ids = np.asarray(ids)
    outside = (ids < 0) | (ids >= vocabulary_size)
    if not outside.any():
        return None
    values = np.unique(ids[outside])
    listed = ", ".join(str(v) for v in values[:5]) + (f" and {len(values) - 5} more" if len(values) > 5 else "")
    return ValueError(
        f"{owner} got token ids outside [0, vocabulary_size={vocabulary_size}) in "
        f"`{name}`: {listed}." + (f" {hint}" if hint else "")
    )


def check_token_ids(owner, name, ids, vocabulary_size, hint=""):
    """Raises `ValueError` for ids outside `[0, vocabulary_size)`; eager tensors only.

    Under tracing the values are unknown and nothing is checked (see the
    module docstring for what each backend does then). Costs one reduction
    and a one-element copy to the host per call.
    """
    if not is_concrete(ids):
        return
    outside = ops.logical_or(ops.less(ids, 0), ops.greater_equal(ids, vocabulary_size))
    if bool(ops.convert_to_numpy(ops.any(outside))):
        raise token_id_error(owner, name, ops.convert_to_numpy(ids), vocabulary_size, hint)
