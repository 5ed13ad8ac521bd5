"""One target position at a time on a key/value cache: `CachedDecoder`.

The source is encoded once; each step embeds the new token at its position,
runs every `DecoderLayer.decode_step` against its cache and projects to
logits. Earlier positions are never recomputed.
"""

import typing

import keras
from keras import ops

from keras_transformer.decoding.checks import check_encoder_tokens
from keras_transformer.decoding.output_limit import end_at_output_limit
from keras_transformer.decoding.output_limit import output_limits
from keras_transformer.decoding.sampler import compile_function
from keras_transformer.layers.input_checks import is_concrete
from keras_transformer.model_parts import ENCODER_TOKENS
from keras_transformer.model_parts import transformer_parts


class DecoderState(typing.NamedTuple):
    """What one batch of cached decoding carries from step to step.

    A named tuple, so that `keras.ops.while_loop` carries it on every
    backend.

    Attributes:
        caches: one self-attention cache per decoder layer, each a pair
            `(keys, values)` of `(batch, num_heads, max_length, key_dim)`.
        cross_caches: one read-only cross-attention cache per decoder
            layer, pairs of the same layout over the source positions.
        encoder_mask: bool `(batch, source_length)`.
        output_kernel: the tied output projection's matrix, read once per
            batch (`PositionalEmbedding.vocabulary_kernel`), or `()` when the
            model has its own output projection or a quantized one.
        cross_attention: float32 `(batch, num_layers, attention_length,
            source_length)`, each decoder layer's cross-attention weights
            (the mean of its heads) for every step so far, step `i` in
            column `i`; or `()` when not recorded (`start`'s
            `attention_length`).
    """

    caches: list
    cross_caches: list
    encoder_mask: object
    output_kernel: object = ()
    cross_attention: object = ()


class CachedDecoder:
    """Runs a `transformer()` model one target position at a time on a KV cache.

    Args:
        model: a model from `keras_transformer.models.transformer`.
        max_length: the longest target (cache size). Defaults to the
            model's positional `max_length`.
        jit_compile: compile with XLA (`jax.jit` on JAX,
            `tf.function(jit_compile=True)` on TensorFlow; torch runs eagerly
            either way): both `next_logits` and the decoding loops of
            `greedy_search` and `beam_search`. The cache has a fixed shape
            and the position is a tensor, so a step compiles once per batch
            size. The compiled programs are kept and read the weights as
            they are at each call (`sampler.compile_function`), so they
            serve a model that is still training. Defaults to False.
        max_output_ratio: float; above 0, each row writes at most
            `floor(ratio * its source's ids) + OUTPUT_SLACK` tokens, the end
            token forced there (`output_limit`), in every search on this
            decoder. 0 (the default): only the length limit stops a row.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> from keras_transformer_runtime.special_tokens import START_ID
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> decoder = CachedDecoder(model)
    >>> state = decoder.start(np.array([[5, 6, 7, 0]]))
    >>> logits, state = decoder.next_logits(np.array([[START_ID]]), 0, state)
    >>> tuple(logits.shape)
    (1, 20)
    """

    # `start(..., attention_length=N)` records the cross-attention (`search_tensors` asks).
    records_cross_attention = True

    def __init__(self, model, max_length=None, jit_compile=False, max_output_ratio=0.0):
        parts = transformer_parts(model)
        self.max_output_ratio = float(max_output_ratio)
        self.model = model
        self.embedding = parts.decoder_embedding
        self.source_vocabulary_size = parts.encoder_embedding.vocabulary_size
        self.source_max_length = parts.encoder_embedding.max_length
        self.decoder_layers = parts.decoder_layers
        self.final_norm = parts.decoder_final_norm
        self.output_projection = parts.output_projection
        self.start_id = parts.decoder_start_id
        self.max_length = max_length or self.embedding.max_length
        self.encoder = keras.Model(
            model.input[ENCODER_TOKENS],
            [parts.encoder_output.output, parts.encoder_padding_mask.output],
            name="encoder",
        )
        self.jit_compile = jit_compile
        self._step = compile_function(self._step_tensors, model.variables) if jit_compile else self._step_tensors

    def start(self, encoder_tokens, cache_length=None, copies=1, attention_length=0):
        """Encodes the source once and returns the initial `DecoderState`.

        Args:
            encoder_tokens: int `(batch, source_length)`, padded with 0;
                checked by `check_encoder_tokens` unless it is a traced
                tensor (inside a compiled loop or the SavedModel export).
            cache_length: int, the positions the self-attention caches
                hold at first (`grow` lengthens them). Defaults to
                `max_length`.
            copies: int, rows per source: each source's state is repeated
                `copies` times in a row (beam search's hypotheses), but
                encoded once.
            attention_length: int; above 0, the state records the
                cross-attention of this many steps (`DecoderState.cross_attention`).

        Returns:
            A `DecoderState` with empty self-attention caches, of
            `batch * copies` rows.
        """
        if not ops.is_tensor(encoder_tokens) or is_concrete(encoder_tokens):
            encoder_tokens = check_encoder_tokens(encoder_tokens, self, "CachedDecoder.start")
        encoder_outputs, encoder_mask = self.encoder(ops.convert_to_tensor(encoder_tokens, "int32"))
        cross_caches = [layer.cross_attention_cache(encoder_outputs) for layer in self.decoder_layers]
        if copies > 1:
            cross_caches = [tuple(ops.repeat(part, copies, axis=0) for part in cache) for cache in cross_caches]
            encoder_mask = ops.repeat(encoder_mask, copies, axis=0)
        batch = ops.shape(encoder_mask)[0]
        output_kernel = self.output_kernel()
        return DecoderState(
            caches=[layer.empty_cache(batch, cache_length or self.max_length) for layer in self.decoder_layers],
            cross_caches=cross_caches,
            encoder_mask=encoder_mask,
            output_kernel=output_kernel,
            cross_attention=ops.zeros(
                (batch, len(self.decoder_layers), attention_length, ops.shape(encoder_mask)[1]), "float32"
            ) if attention_length else (),
        )

    def next_logits(self, tokens, index, state):
        """Logits for the position after `tokens` (the token at `index`).

        Args:
            tokens: int `(batch, 1)`, the token at position `index`.
            index: int, its position.
            state: `DecoderState`.

        Returns:
            `(logits, state)`: float32 `(batch, vocabulary)` and the state
            with the caches updated.
        """
        tokens = ops.convert_to_tensor(tokens, "int32")
        index = ops.convert_to_tensor(index, "int32")
        logits, caches, cross_attention = self._step(
            tokens, index, state.caches, state.cross_caches, state.encoder_mask, state.output_kernel,
            state.cross_attention,
        )
        if self.max_output_ratio:
            logits = end_at_output_limit(logits, index, output_limits(state.encoder_mask, self.max_output_ratio))
        return logits, state._replace(caches=list(caches), cross_attention=cross_attention)

    def ring_logits(self, tokens, column, positions, self_attention_mask, caches, cross_caches, encoder_mask,
                    output_kernel=()):
        """`next_logits` for rows at positions of their own, whose self-attention caches are rings.

        The refilling loop (`refill.refill_search_tensors`) decodes rows
        that started their sentences at different steps: each row's token
        sits at its own position (`positions`), every row writes its keys
        and values at ring column `column`, and attends to the columns
        `self_attention_mask` allows (`refill.ring_mask`). The cap on
        run-away output applies at each row's position.

        Args:
            tokens: int32 `(rows, 1)`, each row's last token.
            column: int32 scalar tensor, the ring column written this step.
            positions: int32 `(rows,)`, each token's position in its sentence.
            self_attention_mask: bool `(rows, 1, ring)`, the columns each row attends to.
            caches: the rings: per decoder layer, `(keys, values)` of `(rows, heads, ring, head_size)`.
            cross_caches: per decoder layer, the rows' cross-attention caches.
            encoder_mask: `(rows, source_length)`, the rows' source masks.
            output_kernel: `output_kernel()`, read once outside the loop.

        Returns:
            `(logits, caches)`: float32 `(rows, vocabulary)` and the rings written at `column`.
        """
        logits, caches, _ = self._step_tensors(tokens, column, caches, cross_caches, encoder_mask, output_kernel, (),
                                               positions=positions, self_attention_mask=self_attention_mask)
        if self.max_output_ratio:
            logits = end_at_output_limit(logits, positions, output_limits(encoder_mask, self.max_output_ratio))
        return logits, caches

    def output_kernel(self):
        """The tied output kernel a step projects with, read once a loop; `()` where a step projects otherwise.

        Returns:
            The embedding's vocabulary kernel, or `()` where the model has
            an output projection of its own or its token matrix is quantized
            (Keras' quantized projection runs then).
        """
        kernel = None if self.output_projection is not None else self.embedding.vocabulary_kernel()
        return () if kernel is None else kernel

    def grow(self, state, cache_length):
        """The state with its self-attention caches lengthened to `cache_length` positions.

        Every step reads its whole cache, and beam search copies it, so
        beam search's loop starts with short caches and lengthens them as
        the sequences grow (`sampler.search_tensors`): the early steps,
        where most sentences spend their time, move a fraction of the
        memory.

        Args:
            state: `DecoderState`.
            cache_length: int, at least the caches' present length.

        Returns:
            The `DecoderState` with the caches padded with zeros.
        """
        def longer(part):
            return ops.pad(part, [[0, 0], [0, 0], [0, cache_length - part.shape[2]], [0, 0]])

        return state._replace(caches=[tuple(longer(part) for part in cache) for cache in state.caches])

    def reorder(self, state, rows):
        """The state of the rows `rows` (beam search's surviving hypotheses).

        Only the self-attention caches (and the recorded cross-attention)
        move: beam search keeps each row in its source's group, whose
        cross-attention caches and mask are the same.

        Args:
            state: `DecoderState`.
            rows: int `(batch,)`, for each row the row it continues.

        Returns:
            The reordered `DecoderState`.
        """
        state = state._replace(caches=[tuple(ops.take(part, rows, axis=0) for part in cache)
                                       for cache in state.caches])
        if isinstance(state.cross_attention, tuple):
            return state
        return state._replace(cross_attention=ops.take(state.cross_attention, rows, axis=0))

    def _step_tensors(self, tokens, index, caches, cross_caches, encoder_mask, output_kernel=(), cross_attention=(),
                      positions=None, self_attention_mask=None):
        """`next_logits` on plain tensors and lists, so XLA can compile it.

        With `positions` (int `(batch,)`, each row's position) and
        `self_attention_mask`, the caches are rings written at column
        `index` (`DecoderLayer.decode_step`; `refill.refill_search_tensors`).
        """
        x = self.embedding(tokens, start_index=index if positions is None else positions)
        record = not isinstance(cross_attention, tuple)
        updated, weights = [], []
        for layer, cache, cross_cache in zip(self.decoder_layers, caches, cross_caches):
            x, cache, *layer_weights = layer.decode_step(
                x, cache, index, cross_attention_cache=cross_cache, encoder_mask=encoder_mask,
                return_cross_attention=record, self_attention_mask=self_attention_mask,
            )
            updated.append(tuple(cache))
            if record:
                weights.append(ops.mean(layer_weights[0][:, :, -1], axis=1))  # (batch, source_length)
        if record:
            cross_attention = ops.slice_update(cross_attention, [0, 0, index, 0],
                                               ops.stack(weights, axis=1)[:, :, None, :])
        if self.final_norm is not None:
            x = self.final_norm(x)
        if self.output_projection is None:
            kernel = None if isinstance(output_kernel, tuple) else output_kernel
            logits = self.embedding.project_to_vocabulary(x, kernel=kernel)
        else:
            logits = self.output_projection(x)
        return ops.cast(logits[:, -1], "float32"), updated, cross_attention
