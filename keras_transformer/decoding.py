"""Greedy and beam search on a key/value cache, and a string-to-string Translator.

Decoding logic lives apart from the model. A `CachedDecoder` turns a model
built by `keras_transformer.models.transformer` into one small closure,
`next_logits(tokens, index, state) -> (logits, state)`, that runs one new
position against the cache. Greedy and beam search only differ in how they
pick the next token from those logits.

Token bookkeeping (argmax, top-k, finished flags) runs on the host in NumPy,
the model work in `keras.ops` on the backend's device.
"""

import dataclasses

import keras
import numpy as np
from keras import ops

from keras_transformer.data.special_tokens import END_ID
from keras_transformer.data.special_tokens import PAD_ID
from keras_transformer.data.special_tokens import START_ID
from keras_transformer.layers.input_checks import is_concrete
from keras_transformer.layers.input_checks import token_id_error

_TRANSFORMER_INPUTS = {"encoder_tokens", "decoder_tokens"}
_TRANSFORMER_LAYERS = ("encoder_embedding", "encoder_padding_mask", "encoder_layer_0",
                       "decoder_embedding", "decoder_layer_0")


def compile_function(function):
    """`function` compiled by XLA on JAX and TensorFlow; unchanged on torch.

    Decoding steps are plain functions of tensors, outside `model.fit`, so
    they get no compilation unless asked; this is the one place that asks.

    Args:
        function: a function of tensors (and lists of tensors).

    Returns:
        The compiled function (`jax.jit` or `tf.function(jit_compile=True,
        reduce_retracing=True)`), or `function` itself on torch.

    Example:

    >>> double = compile_function(lambda x: x * 2)
    >>> float(keras.ops.convert_to_numpy(double(keras.ops.ones(()))))
    2.0
    """
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.jit(function)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function, jit_compile=True, reduce_retracing=True)
    return function


def _layers_named(model, prefix):
    layers = [layer for layer in model.layers if layer.name.startswith(prefix)]
    return sorted(layers, key=lambda layer: int(layer.name.rsplit("_", 1)[1]))


def _has_layer(model, name):
    return any(layer.name == name for layer in model.layers)


def check_transformer_model(model, what="`model`"):
    """Raises unless `model` is an encoder-decoder from `models.transformer`.

    Decoding reads the model's layers by name, so a model of another kind
    (a `language_model`, a model of one's own, a foreign `.keras` file)
    would otherwise fail deep inside with a missing-layer error.

    Args:
        model: the model to check.
        what: how the message refers to it, e.g. the file it came from.

    Raises:
        TypeError: `model` is not a `keras.Model`.
        ValueError: it lacks the inputs or layers of a `transformer()`.

    Example:

    >>> import keras_transformer as kt
    >>> check_transformer_model(kt.models.language_model(
    ...     20, num_layers=1, d_model=8, num_heads=2, ff_dim=16, max_length=8))
    Traceback (most recent call last):
    ...
    ValueError: `model` 'language_model' is not an encoder-decoder built by keras_transformer.models.transformer(): ...
    """
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"{what} must be a keras.Model built by keras_transformer.models.transformer(), "
            f"got {type(model).__name__}."
        )
    try:
        inputs = model.input
    except (AttributeError, ValueError):  # a subclassed model that was never called
        inputs = None
    if isinstance(inputs, dict):
        has_inputs = f"inputs {sorted(inputs)}"
    else:
        has_inputs = f"{len(keras.tree.flatten(inputs)) if inputs is not None else 'no'} unnamed input(s)"
    missing = [name for name in _TRANSFORMER_LAYERS if not _has_layer(model, name)]
    if not (isinstance(inputs, dict) and set(inputs) == _TRANSFORMER_INPUTS) or missing:
        raise ValueError(
            f"{what} {model.name!r} is not an encoder-decoder built by "
            f"keras_transformer.models.transformer(): it has {has_inputs} and lacks "
            f"the layers {missing}. Decoding needs the inputs "
            f"{sorted(_TRANSFORMER_INPUTS)} and the layers {list(_TRANSFORMER_LAYERS)}."
        )


def check_encoder_tokens(encoder_tokens, decoder, owner="decoding"):
    """Host-side checks of a batch of source ids; returns it as int32 NumPy.

    Decoding takes its source from the host, so unlike the layers (which see
    token values only when eager) these checks always run, on every backend,
    before any model work.

    Args:
        encoder_tokens: array-like `(batch, source_length)` of token ids.
        decoder: the `CachedDecoder` (or an object with the same interface)
            whose model the ids are for; its `source_vocabulary_size` and
            `source_max_length`, when present, bound the ids and length.
        owner: str, the function named in messages.

    Returns:
        An int32 NumPy array.

    Raises:
        TypeError: non-integer ids.
        ValueError: not a rectangular `(batch, source_length)` array, an
            empty batch or length, a length beyond the model's
            `max_length`, or ids outside the source vocabulary.

    Example:

    >>> check_encoder_tokens([[5, 6, 0]], decoder=None).dtype
    dtype('int32')
    """
    try:
        tokens = np.asarray(ops.convert_to_numpy(encoder_tokens) if ops.is_tensor(encoder_tokens) else encoder_tokens)
    except ValueError as error:  # ragged nested lists
        raise ValueError(
            f"{owner}: `encoder_tokens` must be a rectangular (batch, source_length) array "
            f"of token ids padded with 0 ({error})."
        ) from None
    if tokens.dtype.kind not in "iu":
        raise TypeError(
            f"{owner}: `encoder_tokens` must hold integer token ids, got dtype {tokens.dtype}. "
            "Tokenize the text first, or cast the ids with `.astype(\"int32\")`."
        )
    if tokens.ndim != 2:
        raise ValueError(
            f"{owner}: `encoder_tokens` must have shape (batch, source_length), got shape "
            f"{tokens.shape}. For one sentence pass a batch of one: [token_ids]."
        )
    if 0 in tokens.shape:
        raise ValueError(
            f"{owner}: `encoder_tokens` is empty (shape {tokens.shape}); pass at least one "
            "row with at least one position."
        )
    max_length = getattr(decoder, "source_max_length", None)
    if max_length is not None and tokens.shape[1] > max_length:
        raise ValueError(
            f"{owner}: `encoder_tokens` has source_length {tokens.shape[1]}, beyond the "
            f"model's max_length={max_length}. Truncate the rows (the Translator does, "
            "with a warning)."
        )
    vocabulary_size = getattr(decoder, "source_vocabulary_size", None)
    if vocabulary_size is not None:
        error = token_id_error(
            owner, "encoder_tokens", tokens, vocabulary_size,
            "Tokenize with the vocabulary the model was trained with.",
        )
        if error is not None:
            raise error
    return tokens.astype("int32")


def _check_decoder(decoder, owner):
    if not all(hasattr(decoder, name) for name in ("start", "next_logits", "max_length")):
        raise TypeError(
            f"{owner}: `decoder` must be a CachedDecoder, got {type(decoder).__name__}. "
            f"Wrap the model: {owner}(CachedDecoder(model), ...)."
        )


def _check_int(owner, name, value, low, high=None):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{owner}: `{name}` must be an int, got {name}={value!r}.")
    if value < low or (high is not None and value >= high):
        bounds = f">= {low}" if high is None else f"in [{low}, {high})"
        raise ValueError(f"{owner}: `{name}` must be {bounds}, got {name}={value}.")


@dataclasses.dataclass
class DecoderState:
    """What one batch of decoding carries from step to step.

    Attributes:
        caches: one self-attention cache per decoder layer.
        cross_caches: one read-only cross-attention cache per decoder layer.
        encoder_mask: bool `(batch, source_length)`.
    """

    caches: list
    cross_caches: list
    encoder_mask: object

    def select(self, rows):
        """Reorders the batch (for beam search) by the row indices `rows`."""
        rows = ops.convert_to_tensor(np.asarray(rows, "int32"))
        return DecoderState(
            caches=[ops.take(cache, rows, axis=0) for cache in self.caches],
            cross_caches=[ops.take(cache, rows, axis=0) for cache in self.cross_caches],
            encoder_mask=ops.take(self.encoder_mask, rows, axis=0),
        )


class CachedDecoder:
    """Runs a `transformer()` model one target position at a time on a KV cache.

    The source is encoded once; each step embeds the new token at its
    position, runs every `DecoderLayer.decode_step` against its cache and
    projects to logits. Earlier positions are never recomputed.

    Args:
        model: a model from `keras_transformer.models.transformer`.
        max_length: the longest target (cache size). Defaults to the
            model's positional `max_length`.
        jit_compile: compile the step with XLA (`jax.jit` on JAX,
            `tf.function(jit_compile=True)` on TensorFlow; torch runs eagerly
            either way). The cache has a fixed shape and the position is a
            tensor, so the step compiles once per batch size. Defaults to
            False.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> decoder = CachedDecoder(model)
    >>> state = decoder.start(np.array([[5, 6, 7, 0]]))
    >>> logits, state = decoder.next_logits(np.array([[START_ID]]), 0, state)
    >>> tuple(logits.shape)
    (1, 20)
    """

    def __init__(self, model, max_length=None, jit_compile=False):
        check_transformer_model(model)
        self.model = model
        self.embedding = model.get_layer("decoder_embedding")
        source_embedding = model.get_layer("encoder_embedding")
        self.source_vocabulary_size = source_embedding.vocabulary_size
        self.source_max_length = source_embedding.max_length
        self.decoder_layers = _layers_named(model, "decoder_layer_")
        self.final_norm = model.get_layer("decoder_final_norm") if _has_layer(model, "decoder_final_norm") else None
        self.output_projection = (
            model.get_layer("output_projection") if _has_layer(model, "output_projection") else None
        )
        self.max_length = max_length or self.embedding.max_length
        encoder_output = (
            model.get_layer("encoder_final_norm")
            if _has_layer(model, "encoder_final_norm")
            else _layers_named(model, "encoder_layer_")[-1]
        ).output
        self.encoder = keras.Model(
            model.input["encoder_tokens"],
            [encoder_output, model.get_layer("encoder_padding_mask").output],
            name="encoder",
        )
        self.jit_compile = jit_compile
        self._step = compile_function(self._step_tensors) if jit_compile else self._step_tensors
        self._greedy_loops = {}

    def start(self, encoder_tokens):
        """Encodes the source once and returns the initial `DecoderState`.

        Args:
            encoder_tokens: int `(batch, source_length)`, padded with 0;
                checked by `check_encoder_tokens` unless it is a traced
                tensor (the SavedModel export runs this in a `tf.function`).
        """
        if not ops.is_tensor(encoder_tokens) or is_concrete(encoder_tokens):
            encoder_tokens = check_encoder_tokens(encoder_tokens, self, "CachedDecoder.start")
        encoder_outputs, encoder_mask = self.encoder(ops.convert_to_tensor(encoder_tokens, "int32"))
        batch = ops.shape(encoder_outputs)[0]
        first = self.decoder_layers[0]
        shape = (batch, 2, self.max_length, first.num_heads, first.key_dim)
        return DecoderState(
            caches=[ops.zeros(shape, dtype=encoder_outputs.dtype) for _ in self.decoder_layers],
            cross_caches=[layer.cross_attention_cache(encoder_outputs) for layer in self.decoder_layers],
            encoder_mask=encoder_mask,
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
        logits, caches = self._step(tokens, index, state.caches, state.cross_caches, state.encoder_mask)
        return logits, dataclasses.replace(state, caches=list(caches))

    def _greedy_loop(self, max_new_tokens, stop_at_end):
        """The compiled (or eager) `greedy_search_on_device` loop, made once per setting."""
        key = (max_new_tokens, stop_at_end)
        if key not in self._greedy_loops:

            def loop(encoder_tokens):
                return self._greedy_tensors(encoder_tokens, max_new_tokens, stop_at_end)

            self._greedy_loops[key] = compile_function(loop) if self.jit_compile else loop
        return self._greedy_loops[key]

    def _greedy_tensors(self, encoder_tokens, max_new_tokens, stop_at_end):
        state = self.start(encoder_tokens)
        batch = ops.shape(encoder_tokens)[0]
        vocabulary = self.embedding.vocabulary_size
        never = ops.convert_to_tensor(np.isin(np.arange(vocabulary), [PAD_ID, START_ID]))
        columns = ops.arange(max_new_tokens, dtype="int32")

        def keep_going(index, tokens, finished, generated, caches):
            going = ops.less(index, max_new_tokens)
            if stop_at_end:
                going = ops.logical_and(going, ops.logical_not(ops.all(finished)))
            return going

        def step(index, tokens, finished, generated, caches):
            logits, caches = self._step_tensors(
                tokens, index, caches, state.cross_caches, state.encoder_mask
            )
            best = ops.cast(ops.argmax(ops.where(never[None, :], float("-inf"), logits), axis=-1), "int32")
            best = ops.where(finished, PAD_ID, best)
            generated = ops.where(ops.equal(columns[None, :], index), best[:, None], generated)
            if stop_at_end:
                finished = ops.logical_or(finished, ops.equal(best, END_ID))
            return index + 1, best[:, None], finished, generated, list(caches)

        index, _, _, generated, _ = ops.while_loop(
            keep_going,
            step,
            (
                ops.convert_to_tensor(0, "int32"),
                ops.full((batch, 1), START_ID, "int32"),
                ops.zeros((batch,), "bool"),
                ops.zeros((batch, max_new_tokens), "int32"),
                list(state.caches),
            ),
        )
        return generated, index

    def _step_tensors(self, tokens, index, caches, cross_caches, encoder_mask):
        """`next_logits` on plain tensors and lists, so XLA can compile it."""
        x = self.embedding(tokens, start_index=index)
        updated = []
        for layer, cache, cross_cache in zip(self.decoder_layers, caches, cross_caches):
            x, cache = layer.decode_step(
                x, cache, index, cross_attention_cache=cross_cache, encoder_mask=encoder_mask
            )
            updated.append(cache)
        if self.final_norm is not None:
            x = self.final_norm(x)
        if self.output_projection is None:
            logits = self.embedding.project_to_vocabulary(x)
        else:
            logits = self.output_projection(x)
        return ops.cast(logits[:, -1], "float32"), updated


def _next_token_scores(logits):
    """Logits as float64 NumPy, with the tokens a decoder must never emit removed.

    A generated PAD_ID would be masked as padding when the prefix is re-read,
    and START_ID only opens a sequence.
    """
    scores = ops.convert_to_numpy(logits).astype("float64")
    scores[:, [PAD_ID, START_ID]] = -np.inf
    return scores


def _check_budget(max_new_tokens, max_length):
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
        raise TypeError(f"`max_new_tokens` must be an int, got max_new_tokens={max_new_tokens!r}.")
    if not 1 <= max_new_tokens < max_length:
        raise ValueError(
            f"max_new_tokens={max_new_tokens} must be in [1, max_length={max_length}): "
            "the start token takes one position."
        )


def greedy_search(decoder, encoder_tokens, max_new_tokens=None, stop_at_end=True):
    """Greedy decoding on the KV cache, batched.

    Args:
        decoder: a `CachedDecoder`.
        encoder_tokens: int `(batch, source_length)`, padded with 0.
        max_new_tokens: tokens to generate at most. Defaults to the cache
            size minus one.
        stop_at_end: stop a sequence at `END_ID` (then it is padded with 0);
            False generates exactly `max_new_tokens` (for benchmarks).

    Returns:
        int NumPy `(batch, steps)` of generated tokens, without the start
        token; finished sequences end with `END_ID` and are padded with 0.

    Raises:
        TypeError: `decoder` is not a `CachedDecoder`, or ids or
            `max_new_tokens` are not ints.
        ValueError: `encoder_tokens` fails `check_encoder_tokens`, or
            `max_new_tokens` does not fit the cache.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> greedy_search(CachedDecoder(model), np.array([[5, 6, 0]]),
    ...               max_new_tokens=4).shape[0]
    1
    """
    _check_decoder(decoder, "greedy_search")
    encoder_tokens = check_encoder_tokens(encoder_tokens, decoder, "greedy_search")
    max_new_tokens = max_new_tokens or decoder.max_length - 1
    _check_budget(max_new_tokens, decoder.max_length)
    state = decoder.start(encoder_tokens)
    batch = len(encoder_tokens)
    tokens = np.full((batch, 1), START_ID, "int32")
    finished = np.zeros(batch, bool)
    generated = []
    for index in range(max_new_tokens):
        logits, state = decoder.next_logits(tokens, index, state)
        best = np.argmax(_next_token_scores(logits), axis=-1).astype("int32")
        best = np.where(finished, PAD_ID, best)
        generated.append(best)
        if stop_at_end:
            finished |= best == END_ID
            if finished.all():
                break
        tokens = best[:, None]
    return np.stack(generated, axis=1)


def greedy_search_on_device(decoder, encoder_tokens, max_new_tokens=None, stop_at_end=True):
    """Greedy decoding as one loop on the device: no host round trip per token.

    The same search as `greedy_search` (token for token), written with
    `keras.ops.while_loop` so that the whole loop, encoder included, is one
    compiled program when `decoder` was built with `jit_compile=True`
    (`jax.jit` / XLA on TensorFlow; torch runs the loop eagerly). The host
    loop of `greedy_search` copies each step's logits to NumPy, which costs
    a device sync per token; this one copies the tokens once at the end.
    A compiled loop is kept per `(max_new_tokens, stop_at_end)` and
    retraced per batch size and source length.

    Args:
        decoder: a `CachedDecoder`.
        encoder_tokens: int `(batch, source_length)`, padded with 0.
        max_new_tokens: as in `greedy_search`.
        stop_at_end: as in `greedy_search`; the loop ends when every
            sequence has produced `END_ID`.

    Returns:
        int NumPy `(batch, steps)`, as `greedy_search`.

    Raises:
        TypeError, ValueError: as `greedy_search`.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> decoder = CachedDecoder(model)
    >>> source = np.array([[5, 6, 0], [7, 8, 9]])
    >>> bool((greedy_search_on_device(decoder, source, max_new_tokens=5)
    ...       == greedy_search(decoder, source, max_new_tokens=5)).all())
    True
    """
    if not isinstance(decoder, CachedDecoder):
        raise TypeError(
            f"greedy_search_on_device: `decoder` must be a CachedDecoder, got {type(decoder).__name__}."
        )
    encoder_tokens = check_encoder_tokens(encoder_tokens, decoder, "greedy_search_on_device")
    max_new_tokens = max_new_tokens or decoder.max_length - 1
    _check_budget(max_new_tokens, decoder.max_length)
    generated, steps = decoder._greedy_loop(max_new_tokens, stop_at_end)(
        ops.convert_to_tensor(encoder_tokens, "int32")
    )
    return ops.convert_to_numpy(generated)[:, : int(ops.convert_to_numpy(steps))]


def greedy_search_uncached(model, encoder_tokens, max_new_tokens, stop_at_end=True):
    """The tutorial-style baseline: re-runs the whole model on the prefix each step.

    Quadratic in the output length; kept as the reference that cached
    decoding must match token for token, and as the speed baseline.

    Args:
        model: a `transformer()` model.
        encoder_tokens: int `(batch, source_length)`.
        max_new_tokens: tokens to generate at most.
        stop_at_end: as in `greedy_search`.

    Returns:
        int NumPy `(batch, steps)`, as `greedy_search`.
    """
    batch = len(encoder_tokens)
    prefix = np.full((batch, 1), START_ID, "int32")
    finished = np.zeros(batch, bool)
    for _ in range(max_new_tokens):
        logits = model({"encoder_tokens": encoder_tokens, "decoder_tokens": prefix}, training=False)
        best = np.argmax(_next_token_scores(logits[:, -1]), axis=-1).astype("int32")
        best = np.where(finished, PAD_ID, best)
        prefix = np.concatenate([prefix, best[:, None]], axis=1)
        if stop_at_end:
            finished |= best == END_ID
            if finished.all():
                break
    return prefix[:, 1:]


def _logsumexp(scores):
    peak = np.max(scores, axis=-1, keepdims=True)
    return peak + np.log(np.sum(np.exp(scores - peak), axis=-1, keepdims=True))


def _length_penalty(lengths, alpha):
    # Wu et al. (2016), as used by the paper's beam search (alpha = 0.6).
    return ((5.0 + lengths) / 6.0) ** alpha


def beam_search(decoder, encoder_tokens, beam_width=4, length_penalty=0.6, max_new_tokens=None):
    """Beam search on the KV cache, batched, with a length penalty.

    Keeps `beam_width` hypotheses per source; a hypothesis that produced
    `END_ID` is finished and only extended with padding at no cost. The
    best hypothesis is picked by log-probability divided by
    `((5 + length) / 6) ** length_penalty`. With `beam_width=1` this is
    greedy search.

    Args:
        decoder: a `CachedDecoder`.
        encoder_tokens: int `(batch, source_length)`, padded with 0.
        beam_width: int >= 1. Defaults to 4.
        length_penalty: float alpha; 0 ranks by raw log-probability.
        max_new_tokens: as in `greedy_search`.

    Returns:
        int NumPy `(batch, steps)`, as `greedy_search`.

    Raises:
        TypeError, ValueError: as `greedy_search`, and for a `beam_width`
            that is not an int >= 1.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> decoder = CachedDecoder(model)
    >>> source = np.array([[5, 6, 0], [7, 0, 0]])
    >>> bool((beam_search(decoder, source, beam_width=1, max_new_tokens=5)
    ...       == greedy_search(decoder, source, max_new_tokens=5)).all())
    True
    """
    _check_decoder(decoder, "beam_search")
    _check_int("beam_search", "beam_width", beam_width, 1)
    encoder_tokens = check_encoder_tokens(encoder_tokens, decoder, "beam_search")
    max_new_tokens = max_new_tokens or decoder.max_length - 1
    _check_budget(max_new_tokens, decoder.max_length)
    batch, width = len(encoder_tokens), beam_width
    state = decoder.start(np.repeat(encoder_tokens, width, axis=0))
    scores = np.tile(np.array([0.0] + [-np.inf] * (width - 1)), batch)  # (batch * width,)
    sequences = np.zeros((batch * width, 0), "int32")
    finished = np.zeros(batch * width, bool)
    lengths = np.zeros(batch * width)
    tokens = np.full((batch * width, 1), START_ID, "int32")
    for index in range(max_new_tokens):
        logits, state = decoder.next_logits(tokens, index, state)
        scores_now = _next_token_scores(logits)
        log_probs = scores_now - _logsumexp(scores_now)
        # Finished hypotheses continue with padding only, at no cost.
        log_probs[finished] = -np.inf
        log_probs[finished, PAD_ID] = 0.0
        vocabulary = log_probs.shape[-1]
        candidates = (scores[:, None] + log_probs).reshape(batch, width * vocabulary)
        # Stable sort: ties go to the lower beam and token id, as argmax does.
        top = np.argsort(-candidates, axis=-1, kind="stable")[:, :width]
        beams, next_tokens = top // vocabulary, (top % vocabulary).astype("int32")
        rows = (np.arange(batch)[:, None] * width + beams).reshape(-1)
        scores = np.take_along_axis(candidates, top, axis=-1).reshape(-1)
        next_tokens = next_tokens.reshape(-1)
        sequences = np.concatenate([sequences[rows], next_tokens[:, None]], axis=1)
        lengths = lengths[rows] + ~finished[rows]
        finished = finished[rows] | (next_tokens == END_ID)
        state = state.select(rows)
        if finished.all():
            break
        tokens = next_tokens[:, None]
    normalized = (scores / _length_penalty(lengths, length_penalty)).reshape(batch, width)
    # Unfinished hypotheses still compete; a finished one wins ties.
    best = np.argmax(normalized, axis=-1)
    return sequences.reshape(batch, width, -1)[np.arange(batch), best]
