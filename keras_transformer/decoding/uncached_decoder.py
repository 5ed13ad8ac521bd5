"""The tutorial-style baseline behind a decoder's interface: `UncachedDecoder`.

Each step runs the whole model, encoder included, on the source and the
target prefix, and reads the logits at the new position. It is quadratic in
the output length; it is kept as the reference that `CachedDecoder` must
match token for token, and as the speed baseline. The prefix has a fixed
length (later positions hold padding, which the causal mask hides), so the
loop compiles once like the cached one.
"""

import typing

from keras import ops

from keras_transformer.decoding.checks import check_encoder_tokens
from keras_transformer.layers.input_checks import is_concrete
from keras_transformer.model_parts import DECODER_TOKENS
from keras_transformer.model_parts import ENCODER_TOKENS
from keras_transformer.model_parts import transformer_parts


class UncachedState(typing.NamedTuple):
    """What `UncachedDecoder` carries: the source and the target prefix so far.

    Attributes:
        encoder_tokens: int `(batch, source_length)`.
        prefix: int `(batch, max_length - 1)`, padded with 0.
    """

    encoder_tokens: object
    prefix: object


class UncachedDecoder:
    """Re-runs a whole `transformer()` model on the prefix at every step.

    Args:
        model: a model from `keras_transformer.models.transformer`.
        max_length: the longest target, start token included (so at most
            `max_length - 1` new tokens). Defaults to the model's
            positional `max_length`.
        jit_compile: compile the decoding loop with XLA, as `CachedDecoder`.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> from keras_transformer.decoding import CachedDecoder, greedy_search
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> source = np.array([[5, 6, 0]])
    >>> bool((greedy_search(UncachedDecoder(model), source, 6)
    ...       == greedy_search(CachedDecoder(model), source, 6)).all())
    True
    """

    def __init__(self, model, max_length=None, jit_compile=False):
        parts = transformer_parts(model)
        self.model = model
        self.source_vocabulary_size = parts.encoder_embedding.vocabulary_size
        self.source_max_length = parts.encoder_embedding.max_length
        self.max_length = max_length or parts.decoder_embedding.max_length
        self.start_id = parts.decoder_start_id
        self.jit_compile = jit_compile

    def start(self, encoder_tokens):
        """The initial `UncachedState`: the source, and an empty prefix."""
        if not ops.is_tensor(encoder_tokens) or is_concrete(encoder_tokens):
            encoder_tokens = check_encoder_tokens(encoder_tokens, self, "UncachedDecoder.start")
        encoder_tokens = ops.convert_to_tensor(encoder_tokens, "int32")
        prefix = ops.zeros((ops.shape(encoder_tokens)[0], self.max_length - 1), "int32")
        return UncachedState(encoder_tokens, prefix)

    def next_logits(self, tokens, index, state):
        """Writes `tokens` at `index` into the prefix and runs the whole model.

        Returns:
            `(logits, state)`: float32 `(batch, vocabulary)` at `index`, and
            the state with the longer prefix.
        """
        tokens = ops.convert_to_tensor(tokens, "int32")
        index = ops.convert_to_tensor(index, "int32")
        positions = ops.arange(ops.shape(state.prefix)[1], dtype="int32")
        prefix = ops.where(ops.equal(positions[None, :], index), tokens, state.prefix)
        logits = self.model({ENCODER_TOKENS: state.encoder_tokens, DECODER_TOKENS: prefix}, training=False)
        logits = ops.take(logits, index, axis=1)
        return ops.cast(logits, "float32"), state._replace(prefix=prefix)

    def reorder(self, state, rows):
        """The state of the rows `rows`, as `CachedDecoder.reorder`."""
        return state._replace(prefix=ops.take(state.prefix, rows, axis=0))
