"""The KV cache of `MultiHeadAttention` during decoding: an empty self-attention cache and a read-only cross-attention one.

A mixin of `keras_transformer.layers.MultiHeadAttention`; its `call` writes
and reads the cache (`cache`, `cache_index`).
"""

from keras import ops

from keras_transformer.layers.attention_kernel import heads_first
from keras_transformer.layers.sublayer_call import call_layer


class AttentionCache:
    """The key and value caches `MultiHeadAttention.call` takes (a mixin; see the module).

    Example:

    >>> from keras_transformer.layers import MultiHeadAttention
    >>> keys, values = MultiHeadAttention(num_heads=2, key_dim=4).empty_cache(1, 3)
    >>> tuple(keys.shape), tuple(values.shape)
    ((1, 2, 3, 4), (1, 2, 3, 4))
    """

    def key_value_cache(self, value, key=None):
        """Projects keys and values once, as a read-only cache.

        Cross-attention during decoding attends to the same encoder outputs
        at every step; pass this cache (without `cache_index`) instead of
        projecting them again each step.

        Args:
            value: `(batch, key_length, value_width)`.
            key: `(batch, key_length, key_width)`; defaults to `value`.

        Returns:
            `(keys, values)`: `(batch, num_heads, key_length, key_dim)` and
            `(batch, num_heads, key_length, value_dim)`.

        Example:

        >>> import numpy as np

        >>> from keras_transformer.layers import MultiHeadAttention
        >>> mha = MultiHeadAttention(num_heads=2, key_dim=4)
        >>> source = np.random.rand(1, 3, 8).astype("float32")
        >>> query = np.random.rand(1, 1, 8).astype("float32")
        >>> full = mha(query, source)
        >>> cached, _ = mha(query, source, cache=mha.key_value_cache(source))
        >>> from keras.ops import convert_to_numpy as to_numpy
        >>> bool(np.allclose(to_numpy(full), to_numpy(cached), atol=1e-6))
        True
        """
        value = ops.convert_to_tensor(value)
        key = value if key is None else ops.convert_to_tensor(key)
        if self.fused_qkv:
            _, keys, values = self._split_qkv(key, call_layer)
            if value is not key:
                values = self._split_qkv(value, call_layer)[2]
        else:
            keys = self._heads(self._key_dense, key, self.key_dim, call_layer)
            values = self._heads(self._value_dense, value, self.value_dim, call_layer)
        return heads_first(keys), heads_first(values)

    def empty_cache(self, batch, max_length):
        """A self-attention cache of zeros for `max_length` positions: `(keys, values)`.

        Args:
            batch: int (or scalar tensor), rows decoded together.
            max_length: int, positions the cache holds.

        Returns:
            `(keys, values)`: zeros `(batch, num_heads, max_length, key_dim)`
            and `(batch, num_heads, max_length, value_dim)`, in the
            layer's compute dtype.

        Example:

        >>> import numpy as np

        >>> from keras_transformer.layers import MultiHeadAttention
        >>> mha = MultiHeadAttention(num_heads=2, key_dim=4)
        >>> x = np.random.rand(1, 3, 8).astype("float32")
        >>> cache = mha.empty_cache(1, 3)
        >>> for i in range(3):
        ...     step, cache = mha(x[:, i:i + 1], x[:, i:i + 1], use_causal_mask=True,
        ...                       cache=cache, cache_index=i)
        >>> from keras.ops import convert_to_numpy as to_numpy
        >>> full = mha(x, x, use_causal_mask=True)
        >>> bool(np.allclose(to_numpy(step)[:, 0], to_numpy(full)[:, 2], atol=1e-6))
        True
        """
        keys = ops.zeros((batch, self.num_heads, max_length, self.key_dim), dtype=self.compute_dtype)
        values = ops.zeros((batch, self.num_heads, max_length, self.value_dim), dtype=self.compute_dtype)
        return keys, values
