"""Token embedding scaled by sqrt(d_model), combined with position encodings."""

import math

import keras
from keras import ops

from keras_transformer.layers import input_checks
from keras_transformer.layers import legacy_weights
from keras_transformer.layers import quantized_policies
from keras_transformer.layers.sinusoidal_encoding import LAYOUTS
from keras_transformer.layers.sinusoidal_encoding import sinusoidal_encoding
from keras_transformer.layers.sublayer_call import call_sublayer
from keras_transformer_runtime.cpu_compiler_options import YNNPACK_FREE_WIDTH

_SCALES = ("sqrt",)
_POSITIONS = ("sinusoidal", "learned")
_MERGES = ("add", "concat")


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionalEmbedding(keras.layers.Layer):
    """Token embedding times a scale, combined with position encodings.

    Computes `scale * E[token] + P[position]` (section 3.4 and 3.5 of
    "Attention Is All You Need"). The paper multiplies the embeddings by
    sqrt(d_model) because the same matrix E is reused, transposed, as the
    output projection to vocabulary logits, where it wants a small init
    (std d_model^-0.5 here). The factor brings the token vectors back to unit
    scale, comparable to the sinusoid values in [-1, 1], so neither signal
    drowns the other. Call the layer with `reverse=True` (or use
    `project_to_vocabulary`) for that tied output projection.

    The token matrix lives in a Keras `ReversibleEmbedding` sublayer
    (`token_embedding`), so Keras' tooling reaches it: `quantize` ("int8",
    "int4", ...) quantizes it, tied output projection included, and
    `token_embedding.enable_lora(rank)` (or `enable_lora` here) adds
    low-rank adapters to it.

    With `merge="concat"` the position encoding is concatenated instead of
    added: the token part then has `d_model - position_dim` features, so the
    output is still `d_model` wide.

    Token ids must be integers in `[0, vocabulary_size)`. The dtype, rank and
    length are checked on every call; the id values only on eager calls
    (traced code cannot see them, see `keras_transformer.layers.input_checks`).

    Args:
        vocabulary_size: int, number of token ids.
        d_model: int, width of the output vectors.
        max_length: int, the longest sequence (counting `start_index`) the
            layer accepts; longer inputs raise a `ValueError`.
        scale: `"sqrt"` (default) multiplies token vectors by the square
            root of the token embedding width (d_model when
            `merge="add"`), `None` leaves them unscaled, a float multiplies
            by that float.
        positions: `"sinusoidal"` (default, fixed) or `"learned"`.
        sinusoid_layout: `"interleaved"` (default, the paper's: sine and
            cosine of each frequency side by side) or `"halves"` (all sines,
            then all cosines, as Marian and Hugging Face's OPUS-MT models
            have them) or `"fairseq"` (M2M-100's and NLLB-200's); see `sinusoidal_encoding`.
        merge: `"add"` (default) or `"concat"`.
        position_dim: int, width of the position part when
            `merge="concat"`. Required then, unused otherwise.
        mask_zero: bool. If True, token id 0 is padding and the layer
            returns a Keras mask. Defaults to False.
        output_bias: bool. If True, the tied output projection adds a
            learned bias over the vocabulary (`hidden @ E^T + b`, Marian's
            `final_logits_bias`). Defaults to False.
        embeddings_initializer: initializer of the token matrix. Defaults to
            normal with std `token_dim ** -0.5`.
        positions_initializer: initializer of learned positions. Defaults to
            normal with std `2 ** -0.5`, the root-mean-square of the
            sinusoid table.
        quantization_config: the Keras `QuantizationConfig` of the token
            matrix. `quantize` sets it and `get_config` saves it, so a
            quantized layer reloads computing as before; leave it None.
        **kwargs: other `keras.layers.Layer` arguments (`name`, `dtype`).

    Example:

    >>> import numpy as np
    >>> embed = PositionalEmbedding(vocabulary_size=100, d_model=16,
    ...                             max_length=32, mask_zero=True)
    >>> tokens = np.array([[5, 7, 9, 0]])
    >>> tuple(embed(tokens).shape)
    (1, 4, 16)
    >>> tuple(embed.project_to_vocabulary(embed(tokens)).shape)
    (1, 4, 100)
    """

    def __init__(
        self,
        vocabulary_size,
        d_model,
        max_length,
        scale="sqrt",
        positions="sinusoidal",
        merge="add",
        position_dim=None,
        mask_zero=False,
        sinusoid_layout="interleaved",
        output_bias=False,
        embeddings_initializer=None,
        positions_initializer=None,
        quantization_config=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, value in (
            ("vocabulary_size", vocabulary_size),
            ("d_model", d_model),
            ("max_length", max_length),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"PositionalEmbedding needs a positive int {name}, got {name}={value!r}.")
        if positions not in _POSITIONS:
            raise ValueError(f"positions must be one of {_POSITIONS}, got positions={positions!r}.")
        if sinusoid_layout not in LAYOUTS:
            raise ValueError(f"sinusoid_layout must be one of {LAYOUTS}, got sinusoid_layout={sinusoid_layout!r}.")
        if output_bias and merge == "concat":
            raise ValueError("output_bias needs merge='add': the tied output projection needs the whole width.")
        if merge not in _MERGES:
            raise ValueError(f"merge must be one of {_MERGES}, got merge={merge!r}.")
        if merge == "concat":
            if not isinstance(position_dim, int) or not 0 < position_dim < d_model:
                raise ValueError(
                    "merge='concat' needs an int position_dim with "
                    f"0 < position_dim < d_model={d_model}, got "
                    f"position_dim={position_dim!r}."
                )
        else:
            position_dim = None
        if not (scale is None or scale in _SCALES or isinstance(scale, (int, float))):
            raise ValueError(
                "scale must be 'sqrt', None or a number, got "
                f"scale={scale!r}."
            )
        self.vocabulary_size = vocabulary_size
        self.d_model = d_model
        self.max_length = max_length
        self.scale = float(scale) if isinstance(scale, (int, float)) else scale
        self.positions = positions
        self.merge = merge
        self.position_dim = position_dim
        self.mask_zero = mask_zero
        self.sinusoid_layout = sinusoid_layout
        self.output_bias = bool(output_bias)
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer
            or keras.initializers.RandomNormal(stddev=self.token_dim**-0.5)
        )
        self.positions_initializer = keras.initializers.get(
            positions_initializer
            or keras.initializers.RandomNormal(stddev=2**-0.5)
        )
        self._sinusoids = (
            sinusoidal_encoding(max_length, self.encoding_dim, layout=sinusoid_layout)
            if positions == "sinusoidal"
            else None
        )
        self.token_embedding = keras.layers.ReversibleEmbedding(
            vocabulary_size,
            self.token_dim,
            tie_weights=True,
            embeddings_initializer=self.embeddings_initializer,
            quantization_config=keras.saving.deserialize_keras_object(quantization_config),
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        # Hidden states reach the tied projection with their padding mask;
        # this layer computes its own mask, so the sublayer may ignore it.
        self.token_embedding.supports_masking = True

    @property
    def embeddings(self):
        """The token matrix E, `(vocabulary_size, token_dim)` (LoRA adapters merged in)."""
        return self.token_embedding.embeddings

    def enable_lora(self, rank, lora_alpha=None, a_initializer="he_uniform", b_initializer="zeros"):
        """Adds low-rank adapters to the token matrix (Keras' `Embedding.enable_lora`).

        The matrix is frozen and `E + (lora_alpha / rank) * A @ B` trains
        instead, in the lookup and in the tied output projection alike.

        Args:
            rank: int, the adapters' rank.
            lora_alpha: float, their scale numerator. Defaults to `rank`.
            a_initializer, b_initializer: initializers of A and B (B starts
                at zero, so the layer starts unchanged).

        Example:

        >>> import numpy as np
        >>> embed = PositionalEmbedding(100, 16, max_length=8)
        >>> _ = embed(np.array([[1, 2]]))
        >>> embed.enable_lora(4)
        >>> [tuple(w.shape) for w in embed.trainable_weights]
        [(100, 4), (4, 16)]
        """
        self.token_embedding.enable_lora(
            rank, lora_alpha=lora_alpha, a_initializer=a_initializer, b_initializer=b_initializer
        )

    @property
    def token_dim(self):
        """Width of the token embedding part of the output."""
        if self.merge == "concat":
            return self.d_model - self.position_dim
        return self.d_model

    @property
    def encoding_dim(self):
        """Width of the position encoding part of the output."""
        return self.position_dim if self.merge == "concat" else self.d_model

    @property
    def scale_factor(self):
        """The float the token vectors are multiplied by."""
        if self.scale == "sqrt":
            return math.sqrt(self.token_dim)
        return 1.0 if self.scale is None else self.scale

    def build(self, inputs_shape=None):
        self.token_embedding.build()
        if self.positions == "learned":
            self.position_embeddings = self.add_weight(
                name="position_embeddings",
                shape=(self.max_length, self.encoding_dim),
                initializer=self.positions_initializer,
            )
        if self.output_bias:
            self.logits_bias = self.add_weight(
                name="logits_bias", shape=(self.vocabulary_size,), initializer="zeros"
            )
        self.built = True

    def call(self, inputs, start_index=0, reverse=False):
        """Embeds token ids, or with `reverse=True` maps hidden states to logits.

        Args:
            inputs: int tensor `(batch, length)` of token ids, or with
                `reverse=True` a float tensor `(..., d_model)`.
            start_index: position of the first token (int or scalar
                tensor), for one-token-at-a-time decoding; or int
                `(batch,)`, each row's own (a decoding loop whose rows
                start at different steps). Defaults to 0.
            reverse: bool, use the layer as the tied output projection.

        Raises:
            TypeError: token ids that are not integers, or hidden states
                (`reverse=True`) that are not floats.
            ValueError: `inputs` not of rank 2, longer than `max_length`
                from `start_index`, or (eager calls only) holding ids
                outside `[0, vocabulary_size)`; hidden states whose last
                axis is not `d_model`.
        """
        owner = f"PositionalEmbedding {self.name!r}"
        if reverse:
            if self.merge == "concat":
                raise ValueError(
                    "The tied output projection needs merge='add': with "
                    "merge='concat' the embedding matrix is narrower than "
                    "d_model."
                )
            input_checks.check_dtype(owner, "hidden", inputs, "float")
            width = input_checks.static_shape(inputs)
            if width and width[-1] is not None and width[-1] != self.d_model:
                raise ValueError(
                    f"{owner}: the tied output projection expects `hidden` whose last "
                    f"axis is d_model={self.d_model}, got shape {width}."
                )
            return self._add_output_bias(call_sublayer(self.token_embedding, inputs, reverse=True))
        input_checks.check_dtype(owner, "inputs", inputs, "int")
        input_checks.check_shape(owner, "inputs", inputs, (("batch", None), ("length", None)))
        if isinstance(start_index, int) and start_index < 0:
            raise ValueError(f"{owner} needs start_index >= 0, got start_index={start_index}.")
        length = inputs.shape[-1]
        if (
            isinstance(length, int)
            and isinstance(start_index, int)
            and start_index + length > self.max_length
        ):
            raise ValueError(
                f"{owner} got `inputs` of length {length} "
                f"starting at position {start_index}, beyond "
                f"max_length={self.max_length}. Truncate the input or build "
                "the layer with a larger max_length."
            )
        input_checks.check_token_ids(
            owner,
            "inputs",
            inputs,
            self.vocabulary_size,
            "Tokenize with the vocabulary the model was built for, or build it "
            "with a larger vocabulary_size.",
        )
        tokens = call_sublayer(self.token_embedding, ops.cast(inputs, "int32"))
        tokens = tokens * ops.cast(self.scale_factor, tokens.dtype)
        encoding = self._position_encoding(inputs, start_index)
        encoding = ops.cast(encoding, tokens.dtype)
        if self.merge == "add":
            return tokens + encoding
        encoding = ops.broadcast_to(
            encoding, tuple(ops.shape(tokens)[:-1]) + (self.encoding_dim,)
        )
        return ops.concatenate([tokens, encoding], axis=-1)

    def position_table(self):
        """Every position's encoding: `(max_length, encoding_dim)`.

        The learned position embeddings as a tensor, or the fixed sinusoids
        as a float32 NumPy array (the same values every call).

        Example:

        >>> layer = PositionalEmbedding(100, 8, max_length=16)
        >>> tuple(layer.position_table().shape)
        (16, 8)
        """
        if self.positions == "learned":
            return ops.convert_to_tensor(self.position_embeddings)
        return self._sinusoids

    def _position_encoding(self, inputs, start_index):
        table = self.position_table()
        length = inputs.shape[-1]
        per_row = ops.is_tensor(start_index) and len(start_index.shape) == 1  # rows at different steps (`refill`)
        if isinstance(start_index, int) and isinstance(length, int):
            return table[start_index : start_index + length]
        if isinstance(length, int) and not per_row:  # one decoding step: a start known only at run time
            return ops.slice(ops.convert_to_tensor(table), (start_index, 0), (length, self.encoding_dim))
        # A gather at positions counted from the tokens themselves, not a
        # slice or an arange of symbolic size: exporters with a dynamic
        # length (JAX's jax2tf and jax2onnx) can neither prove
        # `start + length <= max_length` nor take a symbolic arange.
        # (A sum over the batch, not `inputs[0]`: a batch may be empty.)
        offsets = ops.cumsum(ops.ones_like(ops.sum(inputs, axis=0), dtype="int32")) - 1
        start = ops.cast(start_index, "int32")
        positions = start[:, None] + offsets[None, :] if per_row else offsets + start
        return ops.take(ops.convert_to_tensor(table), positions, axis=0)

    def project_to_vocabulary(self, hidden, kernel=None):
        """Tied output projection: `hidden @ E^T`, logits over the vocabulary.

        Args:
            hidden: float tensor whose last axis is `d_model`.
            kernel: `vocabulary_kernel()`, read once for many calls (a
                decoding loop), or None to run Keras' reverse embedding at
                this call.

        Returns:
            Logits with last axis `vocabulary_size`.

        Example:

        >>> import numpy as np
        >>> layer = PositionalEmbedding(10, 4, max_length=6)
        >>> _ = layer(np.array([[1, 2]]))
        >>> hidden = np.random.rand(2, 4).astype("float32")
        >>> once = layer.project_to_vocabulary(hidden, kernel=layer.vocabulary_kernel())
        >>> to_numpy = keras.ops.convert_to_numpy
        >>> bool(np.allclose(to_numpy(once), to_numpy(layer.project_to_vocabulary(hidden)), atol=1e-6))
        True
        """
        if kernel is None:
            return self(hidden, reverse=True)
        embedding = self.token_embedding
        if embedding.reverse_dtype is not None:
            hidden = ops.cast(hidden, embedding.reverse_dtype)
        logits = ops.einsum("...d,dv->...v" if self._projects_transposed() else "...d,vd->...v", hidden, kernel)
        if embedding.logit_soft_cap is not None:
            logits = ops.multiply(ops.tanh(ops.divide(logits, embedding.logit_soft_cap)), embedding.logit_soft_cap)
        return self._add_output_bias(logits)

    def _add_output_bias(self, logits):
        if not self.output_bias:
            return logits
        return logits + ops.cast(self.logits_bias, logits.dtype)

    def vocabulary_kernel(self):
        """The tied projection's matrix, read once for a decoding loop's steps, or None.

        Keras' reverse embedding transposes the token matrix at every call:
        a copy as large as the matrix (a gigabyte at NLLB-200's 256,206
        rows) that a compiled decoding loop would hold or make at every
        step. `CachedDecoder` reads this once per batch instead (cast to the
        projection's dtype where that differs) and passes it to
        `project_to_vocabulary`: for a model wider than
        `YNNPACK_FREE_WIDTH`, the matrix as it lies, `(vocabulary_size,
        d_model)`, contracted on its last axis with no copy; for a narrower
        one, transposed once, `(d_model, vocabulary_size)`, as XLA's own CPU
        code (which runs such models' programs on some CPUs) multiplies
        several rows by it far faster (benchmarks/findings/decoding.md,
        "The output projection as the token matrix lies"; "On a CPU without
        AVX-512"). None where Keras' quantized projection must run instead
        (a quantized token matrix).

        Returns:
            A tensor in the projection's dtype, or None.

        Example:

        >>> narrow, wide = PositionalEmbedding(10, 4, max_length=6), PositionalEmbedding(10, 512, max_length=6)
        >>> narrow.build((1, 2)); wide.build((1, 2))
        >>> tuple(narrow.vocabulary_kernel().shape), tuple(wide.vocabulary_kernel().shape)
        ((4, 10), (10, 512))
        """
        embedding = self.token_embedding
        if embedding.quantization_mode is not None or self.merge == "concat":
            return None
        kernel = ops.convert_to_tensor(embedding.embeddings)
        if self._projects_transposed():
            kernel = ops.transpose(kernel)
        if embedding.reverse_dtype is not None:
            kernel = ops.cast(kernel, embedding.reverse_dtype)
        return kernel

    def _projects_transposed(self):
        return self.token_embedding.embeddings.shape[-1] <= YNNPACK_FREE_WIDTH

    def compute_output_spec(self, inputs, start_index=0, reverse=False):
        # Declared rather than traced: tracing would feed placeholder
        # lengths to the max_length check.
        if reverse:
            shape = tuple(inputs.shape[:-1]) + (self.vocabulary_size,)
        else:
            shape = tuple(inputs.shape) + (self.d_model,)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def load_own_variables(self, store):
        own = self._trainable_variables + self._non_trainable_variables
        if len(store.keys()) == len(own) + 1:
            # The layout written up to 1bfd57a (see `legacy_weights`): the
            # token matrix first, as this layer's own weight.
            arrays = legacy_weights.stored_arrays(store)
            legacy_weights.assign_to_sublayers(f"PositionalEmbedding {self.name!r}", arrays[:1],
                                               [self.token_embedding])
            for variable, array in zip(own, arrays[1:]):
                variable.assign(array)
            return
        super().load_own_variables(store)

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        if "int" not in keras.backend.standardize_dtype(inputs.dtype):
            return mask  # reverse mode: keep whatever mask the states carry
        return ops.not_equal(inputs, 0)

    def get_config(self):
        config = super().get_config()
        config["dtype"] = quantized_policies.config_dtype(self)
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "d_model": self.d_model,
                "max_length": self.max_length,
                "scale": self.scale,
                "positions": self.positions,
                "merge": self.merge,
                "position_dim": self.position_dim,
                "mask_zero": self.mask_zero,
                "sinusoid_layout": self.sinusoid_layout,
                "output_bias": self.output_bias,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
                "positions_initializer": keras.initializers.serialize(
                    self.positions_initializer
                ),
            }
        )
        if self.token_embedding.quantization_config is not None:
            config["quantization_config"] = keras.saving.serialize_keras_object(
                self.token_embedding.quantization_config
            )
        return config
