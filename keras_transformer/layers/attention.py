"""Multi-head attention with per-projection initializers and a KV cache."""

import keras
from keras import ops

from keras_transformer.initializers import FAIRSEQ_QKV_GAIN
from keras_transformer.initializers import FusedQKV
from keras_transformer.initializers import with_seed_offset
from keras_transformer.layers.attention_arguments import check_arguments
from keras_transformer.layers.attention_arguments import check_build_shapes
from keras_transformer.layers.attention_arguments import check_call_inputs
from keras_transformer.layers.attention_arguments import get_qkv_initializer
from keras_transformer.layers.attention_arguments import logit_scale_value
from keras_transformer.layers.attention_arguments import output_shape_width
from keras_transformer.layers.attention_arguments import resolve_alias
from keras_transformer.layers.attention_arguments import serialize_qkv_initializer
from keras_transformer.layers.attention_kernel import explicit_attention
from keras_transformer.layers.attention_kernel import fused_attention
from keras_transformer.layers.attention_kernel import fused_kernel_is_wrong
from keras_transformer.layers.attention_kernel import kernel_masks

@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head scaled dot-product attention (section 3.2 of the paper).

    `softmax(Q K^T * logit_scale) V` over `num_heads` heads, with an output
    projection. Differences from `keras.layers.MultiHeadAttention` that this
    package exists for:

    - Each projection has its own initializer, applied to a 2-D kernel so
      the fans are the projection's own (`fan_in = d_model`,
      `fan_out = num_heads * key_dim` for Glorot). One seeded initializer
      passed for all projections is re-seeded per projection (offsets 0, 1,
      2, 3 for Q, K, V, O), so Q, K and V never start identical.
    - `fused_qkv=True` keeps Q, K and V in one kernel whose default
      initializer (`FusedQKV`) initializes each slice like the separate
      projection it replaces. `qkv_initializer="fairseq"` adds fairseq's
      1/sqrt(2) gain; which is better is contested, so both are offered.
    - `logit_scale` sets the factor on the logits: `"sqrt"` (1/sqrt(key_dim),
      the paper's), `"linear"` (1/key_dim, as in muP) or a float.
    - Attention-weight dropout (`attention_dropout`) is separate from any
      residual dropout. Without it, and without returned scores, the layer
      calls `keras.ops.dot_product_attention` (flash attention where the
      backend and device allow); otherwise it takes the explicit softmax
      path. Softmax runs in float32 under mixed precision on both paths.
    - A query row whose keys are all masked, and a padded query, give
      zeros, never NaN, whatever the kernel: such rows reach the kernel
      with keys to attend to and are selected away after it (fused kernels
      have returned NaN for such rows in some versions, and a NaN there
      would spread).

    As a drop-in for `keras.layers.MultiHeadAttention`, the layer accepts
    these Keras arguments by keyword, with Keras' meaning: `num_heads`,
    `key_dim`, `value_dim`, `dropout`, `use_bias`, `output_shape`,
    `kernel_initializer`, `bias_initializer`, `flash_attention` and `seed`,
    and Keras' call arguments. `dropout`, `output_shape` and
    `kernel_initializer` are stored as `attention_dropout`, `output_dim` and
    the four projection initializers, the names `get_config` uses. Not
    accepted: `attention_axes`, `sliding_window`, `use_gate` and the kernel
    and bias regularizers and constraints. Differences that remain: the
    positional order after `value_dim`, and a padded query or a query with
    no visible key gives zeros here where Keras averages all values.

    Args:
        num_heads: int, number of attention heads.
        key_dim: int, size of each head for queries and keys.
        value_dim: int, size of each head for values. Defaults to `key_dim`.
        output_dim: int, width of the output. Defaults to the query width.
        attention_dropout: float, dropout rate on the attention weights.
            Defaults to 0.
        use_bias: bool, whether projections have biases. Defaults to True.
        query_initializer: initializer of W_Q. Defaults to
            `kernel_initializer`.
        key_initializer: initializer of W_K. Defaults to `kernel_initializer`.
        value_initializer: initializer of W_V. Defaults to
            `kernel_initializer`.
        output_initializer: initializer of W_O. Defaults to
            `kernel_initializer`;
            `keras_transformer.initializers.DepthScaled` for deep stacks.
        bias_initializer: initializer of all biases. Defaults to zeros.
        fused_qkv: bool, one kernel for Q, K and V. Needs equal query, key
            and value widths and `value_dim == key_dim`. Defaults to False.
        qkv_initializer: initializer of the fused kernel. `None` (default)
            is `FusedQKV` of the query, key and value initializers;
            `"fairseq"` is the same with gain 1/sqrt(2); any Keras
            initializer is used as is (Glorot on the fused matrix then
            counts the fan-out three times: the mistake the tutorials show).
        logit_scale: `"sqrt"` (default), `"linear"` or a float.
        flash_attention: None (default) lets `keras.ops.dot_product_attention`
            pick the kernel (fused on GPUs); True asks it for flash attention;
            False takes the explicit float32-softmax path on every backend,
            the fallback if a fused kernel misbehaves on some device.
        seed: int, seed of the attention dropout. Defaults to None.
        dropout: Keras' name for `attention_dropout`. Giving both with
            different values raises a `ValueError`.
        output_shape: Keras' name for `output_dim`: an int or a tuple of one
            int (this layer's output keeps one feature axis). Giving both
            with different values raises a `ValueError`.
        kernel_initializer: initializer of the projections (W_Q, W_K, W_V,
            W_O) whose own initializer is not given, as in Keras. Defaults
            to Glorot uniform.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        query: `(batch, query_length, query_width)`.
        value: `(batch, key_length, value_width)`.
        key: `(batch, key_length, key_width)`; defaults to `value`.
        query_mask, value_mask, key_mask: bool padding masks, filled from
            the inputs' Keras masks when not passed.
        attention_mask: bool `(batch, query_length, key_length)`, True
            where attention is allowed.
        use_causal_mask: bool, each query sees only earlier keys.
        return_attention_scores: bool, also return the float32 weights
            `(batch, num_heads, query_length, key_length)`.
        training: bool, enables attention dropout.
        cache: for decoding, a tensor
            `(batch, 2, max_length, num_heads, key_dim)` of keys and values.
            With `cache_index`, the new keys and values are written at
            `cache_index` and attention covers the cache up to them; without
            it the cache is read only (precomputed cross-attention).
        cache_index: int or scalar int tensor, position of the first query.

    Returns:
        The output `(batch, query_length, output_dim)`; then the scores if
        `return_attention_scores`, then the updated cache if `cache` was
        passed.

    Example:

    >>> import numpy as np
    >>> mha = MultiHeadAttention(num_heads=2, key_dim=8)
    >>> x = np.random.rand(1, 5, 16).astype("float32")
    >>> tuple(mha(x, x, use_causal_mask=True).shape)
    (1, 5, 16)
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        output_dim=None,
        attention_dropout=None,
        use_bias=True,
        query_initializer=None,
        key_initializer=None,
        value_initializer=None,
        output_initializer=None,
        bias_initializer="zeros",
        fused_qkv=False,
        qkv_initializer=None,
        logit_scale="sqrt",
        flash_attention=None,
        seed=None,
        dropout=None,
        output_shape=None,
        kernel_initializer=None,
        **kwargs,
    ):
        # Keras' names are resolved to this layer's own before the base
        # class sees `kwargs`, so `get_config` only ever holds the latter.
        attention_dropout = resolve_alias(
            "attention_dropout", attention_dropout, "dropout", dropout, 0.0, float
        )
        output_dim = resolve_alias(
            "output_dim", output_dim, "output_shape", output_shape_width(output_shape), None, int
        )
        kernel_initializer = "glorot_uniform" if kernel_initializer is None else kernel_initializer
        query_initializer = kernel_initializer if query_initializer is None else query_initializer
        key_initializer = kernel_initializer if key_initializer is None else key_initializer
        value_initializer = kernel_initializer if value_initializer is None else value_initializer
        output_initializer = kernel_initializer if output_initializer is None else output_initializer
        super().__init__(**kwargs)
        value_dim = value_dim or key_dim
        check_arguments(num_heads, key_dim, value_dim, logit_scale, attention_dropout,
                        "attention_dropout" if dropout is None else "dropout", fused_qkv)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.output_dim = output_dim
        self.attention_dropout = float(attention_dropout)
        self.use_bias = use_bias
        self.query_initializer = keras.initializers.get(query_initializer)
        self.key_initializer = keras.initializers.get(key_initializer)
        self.value_initializer = keras.initializers.get(value_initializer)
        self.output_initializer = keras.initializers.get(output_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.fused_qkv = fused_qkv
        self.qkv_initializer = get_qkv_initializer(qkv_initializer)
        self.logit_scale = logit_scale
        self.flash_attention = flash_attention
        self.seed = seed
        self._dropout = keras.layers.Dropout(
            self.attention_dropout, seed=seed, dtype=self.dtype_policy
        )

    @property
    def dropout(self):
        """The attention-weight dropout rate, under Keras' name."""
        return self.attention_dropout

    @property
    def scale(self):
        """The float multiplying the attention logits."""
        return logit_scale_value(self.logit_scale, self.key_dim)

    def _fused_initializer(self):
        if self.qkv_initializer is None or self.qkv_initializer == "fairseq":
            return FusedQKV(
                [self.query_initializer, self.key_initializer, self.value_initializer],
                gain=FAIRSEQ_QKV_GAIN if self.qkv_initializer else 1.0,
            )
        return self.qkv_initializer

    def _add_projection(self, name, shape, initializer, seed_offset):
        kernel = self.add_weight(
            name=f"{name}_kernel",
            shape=shape,
            initializer=with_seed_offset(initializer, seed_offset),
        )
        bias = None
        if self.use_bias:
            bias = self.add_weight(
                name=f"{name}_bias",
                shape=shape[-1:],
                initializer=self.bias_initializer,
            )
        return kernel, bias

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        check_build_shapes(f"MultiHeadAttention {self.name!r}", query_shape, value_shape, key_shape)
        query_width, key_width = query_shape[-1], key_shape[-1]
        value_width = value_shape[-1]
        self._input_widths = (query_width, value_width, key_width)
        heads = self.num_heads
        if self.fused_qkv:
            if not query_width == key_width == value_width:
                raise ValueError(
                    "fused_qkv=True needs query, key and value of the same "
                    f"width, got {query_width}, {key_width}, {value_width}."
                )
            self.qkv_kernel = self.add_weight(
                name="qkv_kernel",
                shape=(query_width, 3 * heads * self.key_dim),
                initializer=self._fused_initializer(),
            )
            self.qkv_bias = None
            if self.use_bias:
                self.qkv_bias = self.add_weight(
                    name="qkv_bias",
                    shape=(3 * heads * self.key_dim,),
                    initializer=self.bias_initializer,
                )
        else:
            self.query_kernel, self.query_bias = self._add_projection(
                "query", (query_width, heads * self.key_dim), self.query_initializer, 0
            )
            self.key_kernel, self.key_bias = self._add_projection(
                "key", (key_width, heads * self.key_dim), self.key_initializer, 1
            )
            self.value_kernel, self.value_bias = self._add_projection(
                "value", (value_width, heads * self.value_dim), self.value_initializer, 2
            )
        self.output_kernel, self.output_bias = self._add_projection(
            "output",
            (heads * self.value_dim, self.output_dim or query_width),
            self.output_initializer,
            3,
        )
        self.built = True

    def _project(self, inputs, kernel, bias, head_dim):
        # Explicit casts: `key_value_cache` runs outside Keras' autocast scope.
        outputs = ops.matmul(inputs, ops.cast(kernel, inputs.dtype))
        if bias is not None:
            outputs = outputs + ops.cast(bias, inputs.dtype)
        return ops.reshape(
            outputs, tuple(ops.shape(inputs)[:-1]) + (self.num_heads, head_dim)
        )

    def _qkv_parts(self):
        """The (kernel, bias) pairs of Q, K and V, sliced from a fused kernel."""
        if not self.fused_qkv:
            return (
                (self.query_kernel, self.query_bias),
                (self.key_kernel, self.key_bias),
                (self.value_kernel, self.value_bias),
            )
        width = self.num_heads * self.key_dim
        kernel = ops.convert_to_tensor(self.qkv_kernel)
        bias = None if self.qkv_bias is None else ops.convert_to_tensor(self.qkv_bias)
        return tuple(
            (
                kernel[:, i * width : (i + 1) * width],
                None if bias is None else bias[i * width : (i + 1) * width],
            )
            for i in range(3)
        )

    def _project_qkv(self, query, key, value, project_kv):
        if self.fused_qkv and project_kv and query is key and key is value:
            # Self-attention: one matmul for all three projections. The
            # kernel is laid out [Q | K | V], so split before the head reshape.
            qkv = ops.matmul(query, self.qkv_kernel)
            if self.qkv_bias is not None:
                qkv = qkv + self.qkv_bias
            heads_shape = tuple(ops.shape(query)[:-1]) + (self.num_heads, self.key_dim)
            return tuple(ops.reshape(part, heads_shape) for part in ops.split(qkv, 3, axis=-1))
        (qk, qb), (kk, kb), (vk, vb) = self._qkv_parts()
        q = self._project(query, qk, qb, self.key_dim)
        if not project_kv:
            return q, None, None
        k = self._project(key, kk, kb, self.key_dim)
        v = self._project(value, vk, vb, self.value_dim)
        return q, k, v

    def key_value_cache(self, value, key=None):
        """Projects keys and values once, as a read-only cache.

        Cross-attention during decoding attends to the same encoder outputs
        at every step; pass this cache (without `cache_index`) instead of
        projecting them again each step.

        Args:
            value: `(batch, key_length, value_width)`.
            key: `(batch, key_length, key_width)`; defaults to `value`.

        Returns:
            `(batch, 2, key_length, num_heads, key_dim)`: keys, then values.

        Example:

        >>> import numpy as np
        >>> mha = MultiHeadAttention(num_heads=2, key_dim=4)
        >>> source = np.random.rand(1, 3, 8).astype("float32")
        >>> query = np.random.rand(1, 1, 8).astype("float32")
        >>> full = mha(query, source)
        >>> cached, _ = mha(query, source, cache=mha.key_value_cache(source))
        >>> to_numpy = keras.ops.convert_to_numpy
        >>> bool(np.allclose(to_numpy(full), to_numpy(cached), atol=1e-6))
        True
        """
        if self.value_dim != self.key_dim:
            raise ValueError("key_value_cache needs value_dim == key_dim.")
        key = value if key is None else key
        _, (key_kernel, key_bias), (value_kernel, value_bias) = self._qkv_parts()
        keys = self._project(key, key_kernel, key_bias, self.key_dim)
        values = self._project(value, value_kernel, value_bias, self.value_dim)
        return ops.stack([keys, values], axis=1)

    def attention_logits(self, query, key=None):
        """The logits the softmax sees, `logit_scale * q . k` per head, unmasked.

        For diagnostics and tutorials: the layer's own projections (a fused
        kernel's Q and K slices) and scale, in float32.

        Args:
            query: `(batch, query_length, query_width)`.
            key: `(batch, key_length, key_width)`; defaults to `query`
                (self-attention).

        Returns:
            float32 `(batch, num_heads, query_length, key_length)`.

        Example:

        >>> import numpy as np
        >>> mha = MultiHeadAttention(num_heads=2, key_dim=4)
        >>> x = np.random.rand(1, 3, 8).astype("float32")
        >>> _ = mha(x, x)
        >>> tuple(mha.attention_logits(x).shape)
        (1, 2, 3, 3)
        """
        query = ops.convert_to_tensor(query)
        key = query if key is None else ops.convert_to_tensor(key)
        (query_kernel, query_bias), (key_kernel, key_bias), _ = self._qkv_parts()
        q = self._project(query, query_kernel, query_bias, self.key_dim)
        k = self._project(key, key_kernel, key_bias, self.key_dim)
        return ops.cast(ops.einsum("btnh,bsnh->bnts", q, k), "float32") * self.scale

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        cache=None,
        cache_index=None,
    ):
        masks = {
            "query_mask": query_mask,
            "value_mask": value_mask,
            "key_mask": key_mask,
            "attention_mask": attention_mask,
        }
        key = value if key is None else key
        check_call_inputs(f"MultiHeadAttention {self.name!r}", getattr(self, "_input_widths", None),
                          query, value, key, masks, cache)
        key_mask = value_mask if key_mask is None else key_mask
        read_only_cache = cache is not None and cache_index is None
        if cache is not None:
            cache = ops.convert_to_tensor(cache, dtype=self.compute_dtype)
        q, k, v = self._project_qkv(query, key, value, not read_only_cache)
        if cache is not None:
            if cache_index is not None:
                start = [0, 0, cache_index, 0, 0]
                cache = ops.slice_update(cache, start, ops.stack([k, v], axis=1))
            k, v = cache[:, 0], cache[:, 1]

        query_length, key_length = ops.shape(q)[1], ops.shape(k)[1]
        mask, fast_causal, answered = kernel_masks(
            query_length, key_length, query_mask, key_mask, attention_mask, use_causal_mask, cache_index
        )
        explicit = (
            return_attention_scores
            or self.flash_attention is False
            or (training and self.attention_dropout > 0.0)
            or (mask is not None and fused_kernel_is_wrong(query_length, key_length))
        )
        if explicit:
            outputs, scores = explicit_attention(
                q, k, v, mask, fast_causal, self.scale, lambda w: self._dropout(w, training=training)
            )
        else:
            outputs = fused_attention(q, k, v, mask, fast_causal, self.scale, self.flash_attention)
        if answered is not None:
            answered = ops.broadcast_to(answered, ops.shape(outputs)[:2])
            outputs = ops.where(answered[:, :, None, None], outputs, ops.zeros_like(outputs))
            if return_attention_scores:
                scores = ops.where(answered[:, None, :, None], scores, ops.zeros_like(scores))

        outputs = ops.reshape(
            outputs, tuple(ops.shape(outputs)[:2]) + (self.num_heads * self.value_dim,)
        )
        outputs = ops.matmul(outputs, self.output_kernel)
        if self.output_bias is not None:
            outputs = outputs + self.output_bias
        results = (outputs,)
        if return_attention_scores:
            results += (scores,)
        if cache is not None:
            results += (cache,)
        return results[0] if len(results) == 1 else results

    def compute_mask(self, inputs, mask=None):
        return mask

    def get_config(self):
        config = super().get_config()
        plain = ("num_heads", "key_dim", "value_dim", "output_dim", "attention_dropout", "use_bias", "fused_qkv",
                 "logit_scale", "flash_attention", "seed")
        initializers = ("query_initializer", "key_initializer", "value_initializer", "output_initializer",
                        "bias_initializer")
        config.update({name: getattr(self, name) for name in plain})
        config.update({name: keras.initializers.serialize(getattr(self, name)) for name in initializers})
        config["qkv_initializer"] = serialize_qkv_initializer(self.qkv_initializer)
        return config
