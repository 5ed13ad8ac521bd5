"""The attention kernel between the projections: masks, and which kernel runs.

Which keys each query may see (padding, explicit and causal masks merged);
what goes into the kernel (rows with no visible key and padded queries are
answered after it, never inside it); and the two kernels: Keras' fused
`dot_product_attention` and the explicit softmax path.
"""

import keras
from keras import ops

# Finite, so a fully masked row gives a uniform softmax instead of NaN; the
# layer then zeroes such rows explicitly.
MASKED_LOGIT = -1e9


def fused_kernel_is_wrong(query_length, key_length):
    """True where the backend's fused kernel is known to be wrong with a mask.

    cuDNN's fused attention (JAX on NVIDIA GPUs) returns NaN gradients when
    a mask tensor is passed and a sequence length is 64 mod 128, under JAX
    0.11, as `python -m benchmarks.gpu_check` found (see
    benchmarks/findings/gpu.md). `MultiHeadAttention` takes its explicit path there.

    Args:
        query_length, key_length: int (static), or None when unknown.

    Returns:
        bool.

    Example:

    >>> fused_kernel_is_wrong(72, 72)
    False
    """
    if keras.backend.backend() != "jax":
        return False
    return any(isinstance(n, int) and n % 128 == 64 for n in (query_length, key_length))


def _as_rank4(mask, axes):
    """Adds size-1 axes at `axes` of the result (expand_dims, not `x[:, None]`:
    LiteRT has no builtin strided slice with new axes, so indexing with None
    needs Flex ops)."""
    return ops.expand_dims(mask, axes)


def _positions(length):
    """0, 1, ..., length - 1 as int32; counted with a cumsum where `length` is symbolic
    (jax2onnx, exporting with a dynamic length, cannot take an arange of it)."""
    if isinstance(length, int):
        return ops.arange(length, dtype="int32")
    return ops.cumsum(ops.ones((length,), dtype="int32")) - 1


def heads_first(x):
    """`(batch, length, heads, head_dim)` <-> `(batch, heads, length, head_dim)` (its own inverse).

    The KV cache keeps heads before positions: the batched products of
    attention read `(batch, heads, positions, head_dim)`, so XLA multiplies
    the cache where it lies. A cache of `(batch, positions, heads,
    head_dim)` was transposed, whole, at every decoding step, a large share
    of a greedy step of the README's model (benchmarks/findings/decoding.md,
    "Where a decoding step's time goes").

    Example:

    >>> tuple(heads_first(keras.ops.zeros((2, 5, 4, 8))).shape)
    (2, 4, 5, 8)
    """
    return ops.transpose(x, (0, 2, 1, 3))


def attention_mask_as_rank4(attention_mask):
    """An explicit `attention_mask` in any shape Keras accepts, as bool rank 4.

    Keras' `MultiHeadAttention` broadcasts `(query, key)`, `(1 or batch,
    query, key)` and `(batch, num_heads, query, key)`; so does this layer.

    Example:

    >>> import numpy as np
    >>> tuple(attention_mask_as_rank4(np.ones((3, 4), bool)).shape)
    (1, 1, 3, 4)
    """
    mask = ops.cast(attention_mask, "bool")
    rank = len(mask.shape)
    if rank == 2:
        return _as_rank4(mask, (0, 1))
    if rank == 3:
        return _as_rank4(mask, (1,))
    if rank == 4:
        return mask
    raise ValueError(
        "attention_mask must have shape (query_length, key_length), (batch, query_length, "
        f"key_length) or (batch, num_heads, query_length, key_length), got shape {tuple(mask.shape)}."
    )


def merge_attention_masks(
    query_length,
    key_length,
    query_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask=False,
    cache_index=None,
    sliding_window=None,
):
    """Combines padding, explicit, causal and sliding-window masks into one boolean mask.

    Serves training and cached decoding alike: with `cache_index`, query i
    sits at absolute position `cache_index + i`, so the causal rule is
    "key j is visible if j <= cache_index + i", and cache slots not yet
    written (j >= cache_index + query_length) are hidden.

    Args:
        query_length: number of query positions.
        key_length: number of key positions.
        query_mask: bool `(batch, query_length)`, True for real queries.
        key_mask: bool `(batch, key_length)`, True for real keys.
        attention_mask: bool, any shape `attention_mask_as_rank4` takes.
        use_causal_mask: bool, hide keys after each query.
        cache_index: int or scalar tensor, position of the first query.
        sliding_window: int or None; key j is visible from query i only if
            `|i - j| < sliding_window` (with the causal mask: the query and
            the `sliding_window - 1` keys before it).

    Returns:
        Bool tensor broadcastable to `(batch, num_heads, query_length,
        key_length)`, True where attention is allowed, or None when nothing
        is masked.

    Example:

    >>> mask = merge_attention_masks(3, 3, use_causal_mask=True)
    >>> keras.ops.convert_to_numpy(mask)[0, 0].astype(int).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    masks = []
    if query_mask is not None:
        masks.append(_as_rank4(ops.cast(query_mask, "bool"), (1, 3)))
    if key_mask is not None:
        masks.append(_as_rank4(ops.cast(key_mask, "bool"), (1, 2)))
    if attention_mask is not None:
        masks.append(attention_mask_as_rank4(attention_mask))
    if use_causal_mask or cache_index is not None or sliding_window is not None:
        offset = 0 if cache_index is None else ops.cast(cache_index, "int32")
        query_positions = ops.expand_dims(_positions(query_length) + offset, 1)
        key_positions = ops.expand_dims(_positions(key_length), 0)
        if use_causal_mask:
            visible = key_positions <= query_positions
        else:
            visible = ops.broadcast_to(key_positions < offset + query_length, (query_length, key_length))
        if sliding_window is not None:
            visible = ops.logical_and(visible, ops.abs(query_positions - key_positions) < sliding_window)
        masks.append(_as_rank4(visible, (0, 1)))
    if not masks:
        return None
    merged = masks[0]
    for mask in masks[1:]:
        merged = ops.logical_and(merged, mask)
    return merged


def kernel_masks(query_length, key_length, query_mask, key_mask, attention_mask, use_causal_mask,
                 cache_index, sliding_window=None):
    """The mask the attention kernel gets, and the query rows that get an output.

    The query padding mask never enters the kernel's mask: a padded query
    would be a row with no visible key, which fused kernels have turned into
    NaN in some versions, and a NaN at a padded position reaches every real
    position of the next layer through its values. Padded queries attend
    like real ones and are zeroed afterwards. A row with no visible key (an
    empty source, an explicit mask) sees every key in the kernel, so it
    stays finite, and is then selected away: NaN * 0 would be NaN, `where`
    is not.

    Args:
        query_length, key_length, query_mask, key_mask, attention_mask,
        use_causal_mask, cache_index, sliding_window: as
        `merge_attention_masks`.

    Returns:
        `(mask, fast_causal, answered)`: the bool kernel mask
        `(batch or 1, num_heads or 1, query_length, key_length)` or None;
        True when the kernel can apply the causal mask itself (`is_causal`)
        and `mask` is None; bool `(batch or 1, num_heads or 1,
        query_length)` of the rows that get an output, or None for all.

    Example:

    >>> mask, fast_causal, answered = kernel_masks(2, 2, None, None, None, True, None)
    >>> mask is None, fast_causal, answered is None
    (True, True, True)
    """
    fast_causal = (use_causal_mask and cache_index is None and key_mask is None and attention_mask is None
                   and sliding_window is None)
    mask = None
    if not fast_causal:
        mask = merge_attention_masks(
            query_length,
            key_length,
            key_mask=key_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            cache_index=cache_index,
            sliding_window=sliding_window,
        )
    answered = None
    if mask is not None:
        has_key = ops.any(mask, axis=-1)
        mask = ops.logical_or(mask, ops.expand_dims(ops.logical_not(has_key), -1))
        answered = has_key
    if query_mask is not None:
        query_mask = ops.expand_dims(ops.cast(query_mask, "bool"), 1)
        answered = query_mask if answered is None else ops.logical_and(answered, query_mask)
    return mask, fast_causal, answered


def fused_attention(q, k, v, mask, causal, scale, flash_attention):
    """`keras.ops.dot_product_attention` on projected heads (flash where it can).

    Args:
        q, k, v: `(batch, length, num_heads, head_dim)`.
        mask: bool, broadcastable to `(batch, num_heads, query_length,
            key_length)`, of rank 4, or None.
        causal: bool, let the kernel apply the causal mask itself.
        scale: float on the logits.
        flash_attention: as `keras.ops.dot_product_attention`.

    Returns:
        `(batch, query_length, num_heads, head_dim)`.

    Example:

    >>> x = keras.ops.ones((1, 3, 2, 4))
    >>> tuple(fused_attention(x, x, x, None, True, 0.5, None).shape)
    (1, 3, 2, 4)
    """
    if mask is not None:
        # cuDNN takes a mask of the full (batch, heads or 1, query, key)
        # shape only; a broadcastable one makes JAX fall back to XLA.
        full = (ops.shape(q)[0], ops.shape(mask)[1], ops.shape(q)[1], ops.shape(k)[1])
        mask = ops.broadcast_to(mask, full)
    return ops.dot_product_attention(
        q, k, v, mask=mask, scale=scale, is_causal=causal, flash_attention=flash_attention
    )


def explicit_attention(q, k, v, mask, causal, scale, dropout):
    """Softmax attention written out, in float32: returns the weights too.

    Args:
        q, k, v, mask, causal, scale: as `fused_attention`.
        dropout: a function applied to the attention weights (identity
            when not training).

    Returns:
        `(outputs, scores)`: `(batch, query_length, num_heads, head_dim)`
        and the float32 weights `(batch, num_heads, query_length,
        key_length)` before dropout.

    Example:

    >>> x = keras.ops.ones((1, 3, 2, 4))
    >>> _, scores = explicit_attention(x, x, x, None, True, 0.5, lambda w: w)
    >>> keras.ops.convert_to_numpy(scores)[0, 0, 1].tolist()
    [0.5, 0.5, 0.0]
    """
    return _softmax_attention(q, k, v, mask, causal, scale, dropout, "bsnh")


def _softmax_attention(q, k, v, mask, causal, scale, dropout, key_axes):
    """`explicit_attention` over keys and values whose axes `key_axes` names (`"bsnh"` or `"bnsh"`)."""
    logits = ops.cast(ops.einsum(f"btnh,{key_axes}->bnts", q, k), "float32") * scale
    if causal:
        mask = merge_attention_masks(ops.shape(q)[1], ops.shape(k)[key_axes.index("s")], use_causal_mask=True)
    if mask is not None:
        logits = ops.where(mask, logits, MASKED_LOGIT)
    scores = ops.softmax(logits, axis=-1)
    outputs = ops.einsum(f"bnts,{key_axes}->btnh", ops.cast(dropout(scores), v.dtype), v)
    return outputs, scores


def attention_over_cache(q, keys, values, mask, causal, scale):
    """Softmax attention over a KV cache as it lies, heads before positions, in float32.

    A decoding step's attention read through `fused_attention` takes keys
    and values `(batch, positions, heads, head_dim)`: the cache transposed
    back, which XLA may copy whole at every step of a compiled loop (an
    NLLB-200-sized cross-attention cache is megabytes a layer). These
    products read the cache where it lies.

    Args:
        q: `(batch, query_length, num_heads, head_dim)`.
        keys, values: `(batch, num_heads, key_length, head_dim)`, a cache
            (`AttentionCache`).
        mask: bool, broadcastable to `(batch, num_heads, query_length,
            key_length)`, or None.
        causal: bool, also hide later keys (`kernel_masks`' `fast_causal`).
        scale: float, the logit scale.

    Returns:
        `(batch, query_length, num_heads, head_dim)`.

    Example:

    >>> x = keras.ops.ones((1, 3, 2, 4))
    >>> cached = attention_over_cache(x, heads_first(x), heads_first(x), None, True, 0.5)
    >>> bool(keras.ops.all(keras.ops.isclose(cached, fused_attention(x, x, x, None, True, 0.5, None))))
    True
    """
    return _softmax_attention(q, keys, values, mask, causal, scale, lambda weights: weights, "bnsh")[0]
