"""The projections of `MultiHeadAttention`: W_Q, W_K, W_V (or a fused QKV), a gate and W_O as Keras `Dense` layers.

How they are made (each with its own initializer and seed), applied to
inputs and split into heads, read out as matrices for exporters, and given
LoRA adapters. A mixin of `keras_transformer.layers.MultiHeadAttention`,
which holds the attention itself.
"""

import keras
import numpy as np
from keras import ops

from keras_transformer.initializers import FAIRSEQ_QKV_GAIN
from keras_transformer.initializers import FusedQKV
from keras_transformer.initializers import with_seed_offset
from keras_transformer.layers.sublayer_call import call_sublayer


class AttentionProjections:
    """W_Q, W_K, W_V, the gate and W_O of `MultiHeadAttention` (a mixin; see the module).

    Example:

    >>> import numpy as np
    >>> from keras_transformer.layers import MultiHeadAttention
    >>> mha = MultiHeadAttention(num_heads=2, key_dim=4, fused_qkv=True)
    >>> _ = mha(np.zeros((1, 3, 8), "float32"), np.zeros((1, 3, 8), "float32"))
    >>> sorted(mha.projections)
    ['output', 'qkv']
    """

    @property
    def query_dense(self):
        """W_Q as a Keras `Dense`, kernel `(query_width, num_heads * key_dim)`; None if fused."""
        return self._query_dense

    @property
    def key_dense(self):
        """W_K as a Keras `Dense`, kernel `(key_width, num_heads * key_dim)`; None if fused."""
        return self._key_dense

    @property
    def value_dense(self):
        """W_V as a Keras `Dense`, kernel `(value_width, num_heads * value_dim)`; None if fused."""
        return self._value_dense

    @property
    def qkv_dense(self):
        """The fused W_Q, W_K, W_V: a `Dense` with kernel `(width, 3 * num_heads * key_dim)`, or None."""
        return self._qkv_dense

    @property
    def output_dense(self):
        """W_O as a Keras `Dense`, kernel `(num_heads * value_dim, output_width)`."""
        return self._output_dense

    @property
    def projections(self):
        """The projection sublayers by name: "query", "key", "value" (or "qkv"), "gate", "output"."""
        named = (("query", self._query_dense), ("key", self._key_dense), ("value", self._value_dense),
                 ("qkv", self._qkv_dense), ("gate", self._gate_dense), ("output", self._output_dense))
        return {name: layer for name, layer in named if layer is not None}

    def _fused_initializer(self):
        if self.qkv_initializer is None or self.qkv_initializer == "fairseq":
            return FusedQKV(
                [self.query_initializer, self.key_initializer, self.value_initializer],
                gain=FAIRSEQ_QKV_GAIN if self.qkv_initializer else 1.0,
            )
        return self.qkv_initializer

    def _projection(self, name, units, initializer, seed_offset=None, activation=None):
        if seed_offset is not None:
            initializer = with_seed_offset(initializer, seed_offset)
        return keras.layers.Dense(
            units,
            activation=activation,
            use_bias=self.use_bias,
            kernel_initializer=initializer,
            bias_initializer=self.bias_initializer.__class__.from_config(self.bias_initializer.get_config()),
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            kernel_constraint=self.kernel_constraint,
            bias_constraint=self.bias_constraint,
            dtype=self.dtype_policy,
            name=name,
        )


    def _build_gate(self, query_shape):
        if self.use_gate:
            # Keras' gated attention: sigmoid(query W_G) scales each head's output.
            self._gate_dense = self._projection(
                "gate", self.num_heads * self.value_dim, self.query_initializer, 4, activation="sigmoid"
            )
            self._gate_dense.build(query_shape)


    def _heads(self, dense, inputs, head_dim, apply):
        """`apply(dense, inputs)`, split into heads: `(batch, length, num_heads, head_dim)`."""
        # The shape comes from the projection's input: tf2onnx gets the
        # shape of a Dense output on a 3-D input wrong (its 2-D matmul).
        return ops.reshape(apply(dense, inputs), tuple(ops.shape(inputs)[:-1]) + (self.num_heads, head_dim))

    def _split_qkv(self, inputs, apply):
        """The fused projection of `inputs`, as Q, K and V heads."""
        qkv = apply(self._qkv_dense, inputs)
        heads_shape = tuple(ops.shape(inputs)[:-1]) + (self.num_heads, self.key_dim)
        # The kernel is laid out [Q | K | V]: split before the head reshape.
        return [ops.reshape(part, heads_shape) for part in ops.split(qkv, 3, axis=-1)]

    def _project_qkv(self, query, key, value, project_kv, apply=call_sublayer):
        """Q, K and V heads (K and V None unless `project_kv`).

        `apply(layer, x)` calls a projection: `call_sublayer` inside `call`
        (already in this layer's autocast scope), `_through_call` outside it.
        """
        if not self.fused_qkv:
            q = self._heads(self._query_dense, query, self.key_dim, apply)
            if not project_kv:
                return q, None, None
            return (q, self._heads(self._key_dense, key, self.key_dim, apply),
                    self._heads(self._value_dense, value, self.value_dim, apply))
        # A fused kernel projects an input to all three at once; different
        # inputs (cross-attention) each take the part they need.
        q, k, v = self._split_qkv(query, apply)
        if not project_kv:
            return q, None, None
        if key is not query:
            _, k, v = self._split_qkv(key, apply)
        if value is not key:
            v = self._split_qkv(value, apply)[2]
        return q, k, v


    def projection_weights(self):
        """W_Q, W_K, W_V, W_O and their biases as NumPy matrices, as the layer computes with them.

        The matrix layout every other toolkit uses (`x @ kernel + bias`):
        Q, K and V kernels `(input_width, num_heads * head_dim)`, the output
        kernel `(num_heads * value_dim, output_width)`; a fused kernel is
        split into its three slices, and LoRA adapters are merged in. For
        exporters (CTranslate2) and diagnostics.

        Returns:
            dict from "query", "key", "value", "output" (and "gate" with
            `use_gate`) to `(kernel, bias)` float NumPy arrays, `bias` None
            without biases.

        Raises:
            ValueError: the layer is quantized (its kernels are integers).

        Example:

        >>> import numpy as np

        >>> from keras_transformer.layers import MultiHeadAttention
        >>> mha = MultiHeadAttention(num_heads=2, key_dim=4)
        >>> _ = mha(np.zeros((1, 3, 8), "float32"), np.zeros((1, 3, 8), "float32"))
        >>> {name: kernel.shape for name, (kernel, _) in mha.projection_weights().items()}
        {'query': (8, 8), 'key': (8, 8), 'value': (8, 8), 'output': (8, 8)}
        """
        weights = {}
        for name, layer in self.projections.items():
            if layer.quantization_mode is not None:
                raise ValueError(
                    f"MultiHeadAttention {self.name!r} is quantized ({layer.quantization_mode}): its "
                    "kernels are integers. Read the weights before `quantize`, or from the float model."
                )
            kernel = ops.convert_to_numpy(layer.kernel).astype("float32")
            bias = None if layer.bias is None else ops.convert_to_numpy(layer.bias).astype("float32")
            weights[name] = (kernel, bias)
        if self.fused_qkv:
            kernel, bias = weights.pop("qkv")
            kernels, biases = np.split(kernel, 3, axis=-1), (None,) * 3 if bias is None else np.split(bias, 3)
            weights = {**dict(zip(("query", "key", "value"), zip(kernels, biases))), **weights}
        return {name: weights[name] for name in ("query", "key", "value", "gate", "output") if name in weights}

    def enable_lora(self, rank, lora_alpha=None, targets=("query", "value"), a_initializer="he_uniform",
                    b_initializer="zeros"):
        """Adds low-rank adapters (Keras' `Dense.enable_lora`) to some projections.

        Each chosen projection's kernel W is frozen and `W + (lora_alpha /
        rank) * A @ B` trains instead (the rest of the layer is left as it
        is; `keras_transformer.lora.enable_lora` freezes a whole model) (LoRA, Hu et al. 2021, applies it to
        W_Q and W_V, the default here as in KerasHub). With `fused_qkv`,
        asking for any of "query", "key", "value" adapts the fused kernel.
        A model saved with adapters stores the merged kernels, so it loads
        and translates as a plain model.

        Args:
            rank: int, the adapters' rank.
            lora_alpha: float, their scale numerator. Defaults to `rank`.
            targets: names among "query", "key", "value", "output" and
                "gate". Defaults to `("query", "value")`.
            a_initializer, b_initializer: initializers of A and B (B starts
                at zero, so the layer starts unchanged).

        Returns:
            The list of `Dense` layers given adapters.

        Example:

        >>> import numpy as np

        >>> from keras_transformer.layers import MultiHeadAttention
        >>> mha = MultiHeadAttention(num_heads=2, key_dim=4)
        >>> _ = mha(np.zeros((1, 3, 8), "float32"), np.zeros((1, 3, 8), "float32"))
        >>> [layer.name for layer in mha.enable_lora(2)]
        ['query', 'value']
        >>> len(mha.trainable_weights)  # W_Q, W_V frozen: their adapters, W_K, W_O, 4 biases
        10
        """
        if not self.built:
            raise ValueError(f"MultiHeadAttention {self.name!r} must be built (called once) before enable_lora.")
        targets = (targets,) if isinstance(targets, str) else tuple(targets)
        known = ("query", "key", "value", "output", "gate")
        unknown = [name for name in targets if name not in known]
        if unknown or not targets:
            raise ValueError(f"enable_lora targets must be some of {known}, got targets={targets!r}.")
        projections = self.projections
        if self.fused_qkv and {"query", "key", "value"} & set(targets):
            targets = ("qkv",) + tuple(name for name in targets if name not in ("query", "key", "value"))
        missing = [name for name in targets if name not in projections]
        if missing:
            raise ValueError(
                f"MultiHeadAttention {self.name!r} has no {missing[0]!r} projection (use_gate={self.use_gate})."
            )
        layers = [projections[name] for name in targets]
        for layer in layers:
            layer.enable_lora(rank, lora_alpha=lora_alpha, a_initializer=a_initializer,
                              b_initializer=b_initializer)
        return layers
