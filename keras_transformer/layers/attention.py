"""Multi-head attention with per-projection initializers and a KV cache.

The layer's parts a reader would look for apart live beside it: its
projections and their LoRA adapters (`attention_projections`), its KV cache
(`attention_cache`), its Keras-compatibility surface
(`attention_keras_compatibility`), its argument checks
(`attention_arguments`) and the attention kernels (`attention_kernel`).
"""

import keras
import numpy as np
from keras import ops

from keras_transformer.layers import quantized_policies
from keras_transformer.layers.attention_arguments import check_arguments
from keras_transformer.layers.attention_arguments import check_attention_axes
from keras_transformer.layers.attention_arguments import check_build_shapes
from keras_transformer.layers.attention_arguments import check_call_inputs
from keras_transformer.layers.attention_arguments import get_qkv_initializer
from keras_transformer.layers.attention_arguments import logit_scale_value
from keras_transformer.layers.attention_arguments import parse_output_shape
from keras_transformer.layers.attention_arguments import resolve_alias
from keras_transformer.layers.attention_arguments import serialize_qkv_initializer
from keras_transformer.layers.attention_cache import AttentionCache
from keras_transformer.layers.attention_keras_compatibility import KerasAttentionCompatibility
from keras_transformer.layers.attention_kernel import attention_mask_as_rank4
from keras_transformer.layers.attention_kernel import attention_over_cache
from keras_transformer.layers.attention_kernel import explicit_attention
from keras_transformer.layers.attention_kernel import fused_attention
from keras_transformer.layers.attention_kernel import fused_kernel_is_wrong
from keras_transformer.layers.attention_kernel import heads_first
from keras_transformer.layers.attention_kernel import kernel_masks
from keras_transformer.layers.attention_kernel import merge_attention_masks
from keras_transformer.layers.attention_projections import AttentionProjections
from keras_transformer.layers.sublayer_call import call_layer
from keras_transformer.layers.sublayer_call import call_sublayer


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(AttentionProjections, AttentionCache, KerasAttentionCompatibility, keras.layers.Layer):
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

    The projections are Keras `Dense` layers (`query_dense`, `key_dense`,
    `value_dense` or `qkv_dense`, `output_dense`, named "query", "key",
    "value", "qkv", "attention_output" as in Keras), so Keras' tooling
    reaches them: `model.quantize(mode)` quantizes each, `enable_lora`
    (here, on the model with `keras_transformer.lora.enable_lora`, or on
    a projection) adds adapters, dtype policies and `DTypePolicyMap`s apply
    per projection.

    A drop-in for `keras.layers.MultiHeadAttention`: it takes Keras'
    arguments by keyword with Keras' meaning (`num_heads`, `key_dim`,
    `value_dim`, `dropout`, `use_bias`, `output_shape`, `attention_axes`,
    `sliding_window`, `flash_attention`, `kernel_initializer`,
    `bias_initializer`, the kernel and bias regularizers and constraints,
    `use_gate`, `seed`), Keras' call arguments and mask shapes, a Keras
    layer's `get_config()` and its `get_weights()` (its `(width, heads,
    head_dim)` kernels are reshaped). `dropout`, `output_shape` (of one
    axis) and `kernel_initializer` are stored as `attention_dropout`,
    `output_dim` and the four projection initializers, the names
    `get_config` uses; the gate's kernel is initialized like W_Q's (with
    its own seed). Keras' own test file for its layer passes against this
    one (`tests/test_keras_mha_suite.py`) except where it meets the
    documented differences:

    - Inputs are `(batch, length, width)` and attention runs over the
      length axis: `attention_axes` accepts only that axis, and inputs of
      rank 4 or more are refused (Keras attends over any axes). This
      layer's masks, KV cache and kernel choice are written for sequences.
    - Kernels are the `(width, num_heads * head_dim)` matrices the
      projections are (Keras keeps `(width, heads, head_dim)`), so each
      initializer sees the projection's own fans and a fused QKV kernel
      splits into three such matrices; `set_weights` reshapes Keras'
      layout, and files of either package are not interchangeable.
    - A padded query, or a query with no visible key, gives zeros here
      where Keras averages all values (a NaN-proof rule, above).
    - Positional arguments after `value_dim` are in this layer's order.

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
            int (then giving both with different values raises a
            `ValueError`), or a tuple of several ints, the shape each
            query position's output is reshaped to.
        kernel_initializer: initializer of the projections (W_Q, W_K, W_V,
            W_O) whose own initializer is not given, as in Keras. Defaults
            to Glorot uniform.
        use_gate: bool, Keras' gated attention: each head's output is
            multiplied by `sigmoid(query W_G)` before W_O. Defaults to False.
        sliding_window: int or None: a query sees keys less than this many
            positions away (with the causal mask: itself and the
            `sliding_window - 1` before it). Defaults to None.
        kernel_regularizer, bias_regularizer, kernel_constraint, bias_constraint: passed to every
            projection, as in Keras.
        attention_axes: Keras' argument; only None or the sequence axis
            (1 or -2) is accepted.
        **kwargs: other `keras.layers.Layer` arguments.

    Call arguments:
        query: `(batch, query_length, query_width)`.
        value: `(batch, key_length, value_width)`.
        key: `(batch, key_length, key_width)`; defaults to `value`.
        query_mask, value_mask, key_mask: bool padding masks, filled from
            the inputs' Keras masks when not passed.
        attention_mask: bool, True where attention is allowed, of shape
            `(query_length, key_length)`, `(batch or 1, query_length,
            key_length)` or `(batch or 1, num_heads or 1, query_length,
            key_length)` (per head).
        use_causal_mask: bool, each query sees only earlier keys.
        return_attention_scores: bool, also return the float32 weights
            `(batch, num_heads, query_length, key_length)`.
        training: bool, enables attention dropout.
        cache: for decoding, a pair `(keys, values)` of tensors
            `(batch, num_heads, max_length, key_dim)` and `(batch,
            num_heads, max_length, value_dim)` (`empty_cache` makes one).
            With `cache_index`, the new keys and values are written at
            `cache_index` and attention covers the cache up to them; without
            it the cache is read only (precomputed cross-attention,
            `key_value_cache`). Heads come before positions, the layout
            the attention products read (`attention_over_cache`).
        cache_index: int or scalar int tensor, position of the first query.

    Returns:
        The output `(batch, query_length, output_dim)`; then the scores if
        `return_attention_scores`, then the updated `(keys, values)` if
        `cache` was passed.

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
        use_gate=False,
        sliding_window=None,
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        dropout=None,
        output_shape=None,
        kernel_initializer=None,
        attention_axes=None,
        **kwargs,
    ):
        # Keras' names are resolved to this layer's own before the base
        # class sees `kwargs`, so `get_config` only ever holds the latter.
        attention_dropout = resolve_alias(
            "attention_dropout", attention_dropout, "dropout", dropout, 0.0, float
        )
        output_axes = parse_output_shape(output_shape)
        if output_axes is not None and len(output_axes) > 1:
            if output_dim is not None:
                raise ValueError(
                    f"MultiHeadAttention got output_dim={output_dim!r} and output_shape={output_shape!r}; "
                    "pass one of them."
                )
            output_shape = output_axes
        else:
            output_dim = resolve_alias(
                "output_dim", output_dim, "output_shape", output_axes and output_axes[0], None, int
            )
            output_shape = None
        check_attention_axes(attention_axes)
        kernel_initializer = "glorot_uniform" if kernel_initializer is None else kernel_initializer
        query_initializer = kernel_initializer if query_initializer is None else query_initializer
        key_initializer = kernel_initializer if key_initializer is None else key_initializer
        value_initializer = kernel_initializer if value_initializer is None else value_initializer
        output_initializer = kernel_initializer if output_initializer is None else output_initializer
        check_arguments(num_heads, key_dim, value_dim, logit_scale, attention_dropout,
                        "attention_dropout" if dropout is None else "dropout", fused_qkv,
                        flash_attention, sliding_window)
        super().__init__(**kwargs)
        self.supports_masking = True
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = key_dim if value_dim is None else value_dim
        self.output_dim = output_dim
        self._output_axes = output_shape  # several output axes (Keras' tuple output_shape), or None
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
        self._flash_attention = flash_attention
        self.seed = seed
        self.use_gate = use_gate
        self._sliding_window = sliding_window
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self._dropout = keras.layers.Dropout(
            self.attention_dropout, seed=seed, dtype=self.dtype_policy
        )
        self._query_dense = self._key_dense = self._value_dense = None
        self._qkv_dense = self._gate_dense = self._output_dense = None

    @property
    def scale(self):
        """The float multiplying the attention logits."""
        return logit_scale_value(self.logit_scale, self.key_dim)

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        check_build_shapes(f"MultiHeadAttention {self.name!r}", query_shape, value_shape, key_shape)
        query_width, key_width = query_shape[-1], key_shape[-1]
        value_width = value_shape[-1]
        self._input_widths = (query_width, value_width, key_width)
        heads = self.num_heads
        # Kernels are the (width, heads * head_dim) matrices the projections
        # are, so an initializer's fans are the projection's own.
        if self.fused_qkv:
            if not query_width == key_width == value_width:
                raise ValueError(
                    "fused_qkv=True needs query, key and value of the same "
                    f"width, got {query_width}, {key_width}, {value_width}."
                )
            self._qkv_dense = self._projection("qkv", 3 * heads * self.key_dim, self._fused_initializer())
            self._qkv_dense.build(query_shape)
        else:
            self._query_dense = self._projection("query", heads * self.key_dim, self.query_initializer, 0)
            self._query_dense.build(query_shape)
            self._key_dense = self._projection("key", heads * self.key_dim, self.key_initializer, 1)
            self._key_dense.build(key_shape)
        self._build_gate(query_shape)  # after W_K, as in Keras, so the weights come in Keras' order
        if not self.fused_qkv:
            self._value_dense = self._projection("value", heads * self.value_dim, self.value_initializer, 2)
            self._value_dense.build(value_shape)
        self._output_dense = self._projection(
            "attention_output", self._output_width(query_width), self.output_initializer, 3
        )
        self._output_dense.build(tuple(query_shape[:2]) + (heads * self.value_dim,))
        self.built = True

    def _output_width(self, query_width):
        if self._output_axes is not None:
            return int(np.prod(self._output_axes))
        return self.output_dim or query_width

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
        q, k, _ = self._project_qkv(query, key, key, True, apply=call_layer)
        return ops.cast(ops.einsum("btnh,bsnh->bnts", q, k), "float32") * self.scale

    def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                           return_attention_scores=False, use_causal_mask=False):
        """Attention over projected heads, as Keras' layer's override point of that name.

        Args:
            query, key, value: projected heads `(batch, length, num_heads,
                head_dim)`.
            attention_mask: bool mask of any shape `attention_mask_as_rank4`
                takes, or None.
            training: bool, enables attention dropout.
            return_attention_scores: bool, also compute the float32 weights.
            use_causal_mask: bool, add the causal mask.

        Returns:
            `(outputs, scores)`: `(batch, query_length, num_heads,
            value_dim)` and the weights `(batch, num_heads, query_length,
            key_length)`, or None when not asked for.
        """
        query_length, key_length = ops.shape(query)[1], ops.shape(key)[1]
        mask = None if attention_mask is None else attention_mask_as_rank4(attention_mask)
        causal = use_causal_mask and mask is None
        if use_causal_mask and mask is not None:
            mask = ops.logical_and(mask, merge_attention_masks(query_length, key_length, use_causal_mask=True))
        explicit = (
            return_attention_scores
            or self._flash_attention is False
            or (training and self.attention_dropout > 0.0)
            or (mask is not None and fused_kernel_is_wrong(query_length, key_length))
            # JAX's fused kernel assumes one head size for keys and values.
            or (self.value_dim != self.key_dim and keras.backend.backend() == "jax")
        )
        if explicit:
            return explicit_attention(
                query, key, value, mask, causal, self.scale, lambda w: self._dropout(w, training=training)
            )
        return fused_attention(query, key, value, mask, causal, self.scale, self._flash_attention), None

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
        masks = {"query_mask": query_mask, "value_mask": value_mask, "key_mask": key_mask,
                 "attention_mask": attention_mask}
        key = value if key is None else key
        check_call_inputs(f"MultiHeadAttention {self.name!r}", getattr(self, "_input_widths", None),
                          query, value, key, masks, cache)
        if return_attention_scores and self._flash_attention:
            raise ValueError(
                "Returning attention scores is not supported when flash attention is enabled. Please "
                "disable flash attention to access attention scores."
            )
        key_mask = value_mask if key_mask is None else key_mask
        read_only_cache = cache is not None and cache_index is None
        if cache is not None:
            cache = tuple(ops.convert_to_tensor(part, dtype=self.compute_dtype) for part in cache)
        q, k, v = self._project_qkv(query, key, value, not read_only_cache)
        over_cache = (cache is not None and not return_attention_scores and not (training and self.attention_dropout)
                      and type(self)._compute_attention is MultiHeadAttention._compute_attention)
        if cache is not None:
            if cache_index is not None:
                start = [0, 0, cache_index, 0]
                cache = tuple(ops.slice_update(part, start, heads_first(new)) for part, new in zip(cache, (k, v)))
            # Read as it lies (`attention_over_cache`): the kernel's layout would copy a decoding loop's
            # cross-attention cache, transposed, at every step.
            k, v = cache if over_cache else (heads_first(part) for part in cache)
        query_length, key_length = ops.shape(q)[1], ops.shape(k)[2 if over_cache else 1]
        mask, fast_causal, answered = kernel_masks(
            query_length, key_length, query_mask, key_mask, attention_mask, use_causal_mask, cache_index,
            self._sliding_window,
        )
        if fast_causal and type(self)._compute_attention is not MultiHeadAttention._compute_attention:
            # As in Keras: a subclass overriding `_compute_attention` (maybe
            # with Keras' older signature) gets the causal mask as a tensor.
            mask, fast_causal = merge_attention_masks(query_length, key_length, use_causal_mask=True), False
        extra = {"use_causal_mask": True} if fast_causal else {}
        if over_cache:
            outputs, scores = attention_over_cache(q, k, v, mask, fast_causal, self.scale), None
        else:
            outputs, scores = self._compute_attention(
                q, k, v, attention_mask=mask, training=training, return_attention_scores=return_attention_scores,
                **extra)
        if answered is not None:
            rows = ops.expand_dims(ops.transpose(answered, (0, 2, 1)), -1)  # (batch, query, heads, 1)
            outputs = ops.where(rows, outputs, ops.zeros_like(outputs))
            if return_attention_scores:
                scores = ops.where(ops.expand_dims(answered, -1), scores, ops.zeros_like(scores))
        if self._gate_dense is not None:
            outputs = outputs * self._heads(self._gate_dense, query, self.value_dim, call_sublayer)
        outputs = ops.reshape(outputs, tuple(ops.shape(outputs)[:2]) + (self.num_heads * self.value_dim,))
        outputs = call_sublayer(self._output_dense, outputs)
        if self._output_axes is not None:
            outputs = ops.reshape(outputs, tuple(ops.shape(outputs)[:2]) + self._output_axes)
        results = (outputs,)
        if return_attention_scores:
            results += (scores,)
        if cache is not None:
            results += (cache,)
        return results[0] if len(results) == 1 else results

    def get_config(self):
        config = super().get_config()
        config["dtype"] = quantized_policies.config_dtype(self)
        plain = ("num_heads", "key_dim", "value_dim", "output_dim", "attention_dropout", "use_bias", "fused_qkv",
                 "logit_scale", "flash_attention", "seed", "use_gate", "sliding_window")
        initializers = ("query_initializer", "key_initializer", "value_initializer", "output_initializer",
                        "bias_initializer")
        config.update({name: getattr(self, name) for name in plain})
        config.update({name: keras.initializers.serialize(getattr(self, name)) for name in initializers})
        config["qkv_initializer"] = serialize_qkv_initializer(self.qkv_initializer)
        if self._output_axes is not None:
            config["output_shape"] = list(self._output_axes)
        config.update({
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
            "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
            "bias_constraint": keras.constraints.serialize(self.bias_constraint),
        })
        return config
