"""Greedy and beam search, and n-best lists: checked entry points to the one decoding loop."""

from keras import ops

from keras_transformer.decoding.checks import check_decoder
from keras_transformer.decoding.checks import check_encoder_tokens
from keras_transformer.decoding.checks import check_int
from keras_transformer.decoding.checks import check_max_new_tokens
from keras_transformer.decoding.choices import BeamChoice
from keras_transformer.decoding.pooled_beam import PooledBeamChoice
from keras_transformer.decoding.choices import GreedyChoice
from keras_transformer.decoding.n_best import NBest
from keras_transformer.decoding.n_best import NBestChoice
from keras_transformer.decoding.sampler import loop_inputs
from keras_transformer.decoding.sampler import run_search
from keras_transformer.decoding.sampler import search_loop
from keras_transformer.decoding.uncached_decoder import UncachedDecoder


def _checked(owner, decoder, encoder_tokens, max_new_tokens):
    check_decoder(decoder, owner)
    encoder_tokens = check_encoder_tokens(encoder_tokens, decoder, owner)
    max_new_tokens = max_new_tokens or decoder.max_length - 1
    check_max_new_tokens(max_new_tokens, decoder.max_length)
    return encoder_tokens, max_new_tokens


def greedy_search(decoder, encoder_tokens, max_new_tokens=None, stop_at_end=True, no_repeat_ngram_size=0,
                  return_cross_attention=False, forced_first_id=None):
    """Greedy decoding on the KV cache, batched, in one loop on the device.

    The tokens are copied to the host once, at the end. With a decoder
    built with `jit_compile=True` (and always on JAX) the whole loop,
    encoder included, is one compiled program, kept per
    `(max_new_tokens, stop_at_end)` and retraced per batch size and source
    length.

    Args:
        decoder: a `CachedDecoder` (or `UncachedDecoder`).
        encoder_tokens: int `(batch, source_length)`, padded with 0.
        max_new_tokens: tokens to generate at most. Defaults to the cache
            size minus one.
        stop_at_end: stop a sequence at `END_ID` (then it is padded with 0);
            False generates exactly `max_new_tokens` (for benchmarks).
        no_repeat_ngram_size: int; above 0, no sequence repeats an n-gram
            of this many tokens (a guard against loops). Defaults to 0, off.
        return_cross_attention: bool, also return the cross-attention
            weights that chose each token (a `CachedDecoder` only).
        forced_first_id: int or None, the token every target's first step
            writes with log-probability 0 (NLLB-200's target language:
            transformers' `forced_bos_token_id`). The other searches take it too.

    Returns:
        int NumPy `(batch, steps)` of generated tokens, without the start
        token; finished sequences end with `END_ID` and are padded with 0.
        With `return_cross_attention`, `(tokens, weights)`: the weights
        float32 NumPy `(batch, num_layers, steps, source_length)`, each
        decoder layer's cross-attention (the mean of its heads) at the step
        that chose each token.

    Raises:
        TypeError: `decoder` is not a `CachedDecoder`, or ids or
            `max_new_tokens` are not ints.
        ValueError: `encoder_tokens` fails `check_encoder_tokens`, or
            `max_new_tokens` does not fit the cache.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> from keras_transformer.decoding import CachedDecoder
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> greedy_search(CachedDecoder(model), np.array([[5, 6, 0]]),
    ...               max_new_tokens=4).shape[0]
    1
    """
    encoder_tokens, max_new_tokens = _checked("greedy_search", decoder, encoder_tokens, max_new_tokens)
    check_int("greedy_search", "no_repeat_ngram_size", no_repeat_ngram_size, 0)
    return run_search(decoder, encoder_tokens, GreedyChoice(), max_new_tokens, stop_at_end, no_repeat_ngram_size,
                      return_cross_attention, forced_first_id)


def beam_search(decoder, encoder_tokens, beam_width=4, length_penalty=0.6, max_new_tokens=None,
                no_repeat_ngram_size=0, return_cross_attention=False, forced_first_id=None):
    """Beam search on the KV cache, batched, with a length penalty.

    The same loop as `greedy_search`, with a `BeamChoice`: `beam_width`
    hypotheses per source, on the device. With `beam_width=1` this is greedy
    search.

    Args:
        decoder: a `CachedDecoder`.
        encoder_tokens: int `(batch, source_length)`, padded with 0.
        beam_width: int >= 1. Defaults to 4.
        length_penalty: float alpha; 0 ranks by raw log-probability.
        max_new_tokens: as in `greedy_search`.
        no_repeat_ngram_size: as in `greedy_search`, for every hypothesis.
        return_cross_attention: as in `greedy_search`: the weights of each
            source's chosen hypothesis.

    Returns:
        int NumPy `(batch, steps)`, as `greedy_search` (with the weights
        when asked).

    Raises:
        TypeError, ValueError: as `greedy_search`, and for a `beam_width`
            that is not an int >= 1.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> from keras_transformer.decoding import CachedDecoder
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> decoder = CachedDecoder(model)
    >>> source = np.array([[5, 6, 0], [7, 0, 0]])
    >>> bool((beam_search(decoder, source, beam_width=1, max_new_tokens=5)
    ...       == greedy_search(decoder, source, max_new_tokens=5)).all())
    True
    """
    check_decoder(decoder, "beam_search")
    check_int("beam_search", "beam_width", beam_width, 1)
    check_int("beam_search", "no_repeat_ngram_size", no_repeat_ngram_size, 0)
    encoder_tokens, max_new_tokens = _checked("beam_search", decoder, encoder_tokens, max_new_tokens)
    choice = BeamChoice(width=beam_width, length_penalty=float(length_penalty))
    return run_search(decoder, encoder_tokens, choice, max_new_tokens, no_repeat_ngram_size=no_repeat_ngram_size,
                      return_cross_attention=return_cross_attention, forced_first_id=forced_first_id)


def pooled_beam_search(decoder, encoder_tokens, beam_width=4, length_penalty=1.0, max_new_tokens=None,
                       early_stopping=False, no_repeat_ngram_size=0, return_cross_attention=False,
                       forced_first_id=None, end_at_limit=True):
    """Beam search with finished hypotheses set aside, as `transformers`' `generate(num_beams=...)`.

    `pooled_beam.PooledBeamChoice` in the same loop: `beam_width` open
    hypotheses at every step, the finished ones pooled and ranked by
    log-probability / length ** `length_penalty`. A model imported from
    Marian gives `MarianMTModel.generate`'s tokens (its `max_length` is
    `max_new_tokens + 2`: it counts the start token and forces `</s>`).

    Args:
        decoder: a `CachedDecoder`.
        encoder_tokens: int `(batch, source_length)`, padded with 0.
        beam_width: int >= 1 (`num_beams`). Defaults to 4.
        length_penalty: float, the length's exponent. Defaults to 1.0.
        max_new_tokens: as in `greedy_search`.
        early_stopping: bool, stop a source once `beam_width` hypotheses finished.
        no_repeat_ngram_size: as in `greedy_search`.
        return_cross_attention: as in `greedy_search`: the weights of each
            source's chosen hypothesis, copied when it was pooled.
        end_at_limit: bool, as `PooledBeamChoice`'s: a hypothesis still
            open at the limit counts a closing `</s>` in its length (True,
            Marian's `generate`) or not (NLLB-200's).

    Returns:
        int NumPy `(batch, steps)`, as `greedy_search` (with the weights
        when asked).

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> from keras_transformer.decoding import CachedDecoder
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> pooled_beam_search(CachedDecoder(model), np.array([[5, 6, 0]]), beam_width=2, max_new_tokens=5).shape[0]
    1
    """
    check_decoder(decoder, "pooled_beam_search")
    check_int("pooled_beam_search", "beam_width", beam_width, 1)
    check_int("pooled_beam_search", "no_repeat_ngram_size", no_repeat_ngram_size, 0)
    encoder_tokens, max_new_tokens = _checked("pooled_beam_search", decoder, encoder_tokens, max_new_tokens)
    choice = PooledBeamChoice(width=beam_width, length_penalty=float(length_penalty),
                              early_stopping=bool(early_stopping), max_new_tokens=max_new_tokens,
                              end_at_limit=bool(end_at_limit))
    return run_search(decoder, encoder_tokens, choice, max_new_tokens, no_repeat_ngram_size=no_repeat_ngram_size,
                      return_cross_attention=return_cross_attention, forced_first_id=forced_first_id)


def n_best_search(decoder, encoder_tokens, n, beam_width=4, length_penalty=None, max_new_tokens=None,
                  no_repeat_ngram_size=0, return_cross_attention=False, beam_search="kept", early_stopping=False,
                  forced_first_id=None, end_at_limit=True):
    """The `n` best hypotheses of each source, with their scores, from beam search on the KV cache.

    The same loop as `beam_search` (with an `NBestChoice`) or as
    `pooled_beam_search` (`beam_search="pooled"`: a `PooledBeamChoice`
    with `n`, the `n` best of its pool); the first hypothesis of each
    source is that search's output.

    Args:
        decoder: a `CachedDecoder`.
        encoder_tokens: int `(batch, source_length)`, padded with 0.
        n: int in `[1, beam_width]`, hypotheses per source.
        beam_width, max_new_tokens, no_repeat_ngram_size: as `beam_search`.
        length_penalty: float alpha. Defaults to 0.6 for `"kept"` and 1.0
            (`generate`'s) for `"pooled"`.
        return_cross_attention: bool, fill `NBest.cross_attention` (as
            `greedy_search`'s, for each hypothesis).
        beam_search: `"kept"` (the default; `normalized_scores` are
            `score / ((5 + length) / 6) ** length_penalty`) or `"pooled"`
            (`score / length ** length_penalty`).
        early_stopping, end_at_limit: bool, with `"pooled"`: as `pooled_beam_search`'s.

    Returns:
        An `NBest` of NumPy arrays. A pooled search whose pool holds fewer
        than `n` hypotheses scores the missing ones `-inf`.

    Raises:
        TypeError, ValueError: as `beam_search`, and for an `n` that is not
            an int in `[1, beam_width]` or an unknown `beam_search`.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> from keras_transformer.decoding import CachedDecoder
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> decoder, source = CachedDecoder(model), np.array([[5, 6, 0], [7, 0, 0]])
    >>> best = n_best_search(decoder, source, n=3, beam_width=3, max_new_tokens=5)
    >>> best.tokens.shape[:2], best.scores.shape
    ((2, 3), (2, 3))
    >>> bool((best.tokens[:, 0] == beam_search(decoder, source, beam_width=3, max_new_tokens=5)).all())
    True
    >>> pooled = n_best_search(decoder, source, n=2, beam_width=3, max_new_tokens=5, beam_search="pooled")
    >>> bool((pooled.tokens[:, 0] == pooled_beam_search(decoder, source, beam_width=3, max_new_tokens=5)).all())
    True
    """
    check_int("n_best_search", "beam_width", beam_width, 1)
    check_int("n_best_search", "n", n, 1)
    check_int("n_best_search", "no_repeat_ngram_size", no_repeat_ngram_size, 0)
    if n > beam_width:
        raise ValueError(f"n_best_search keeps beam_width={beam_width} hypotheses per source: n={n} is more.")
    if beam_search not in ("kept", "pooled"):
        raise ValueError(f'beam_search must be "kept" or "pooled", got beam_search={beam_search!r}.')
    encoder_tokens, max_new_tokens = _checked("n_best_search", decoder, encoder_tokens, max_new_tokens)
    if beam_search == "pooled":
        choice = PooledBeamChoice(width=beam_width, length_penalty=float(1.0 if length_penalty is None else
                                                                          length_penalty),
                                  early_stopping=bool(early_stopping), max_new_tokens=max_new_tokens, n=int(n),
                                  end_at_limit=bool(end_at_limit))
    else:
        choice = NBestChoice(width=beam_width, length_penalty=float(0.6 if length_penalty is None else length_penalty),
                             n=int(n), max_new_tokens=max_new_tokens)
    loop = search_loop(decoder, choice, max_new_tokens, no_repeat_ngram_size=int(no_repeat_ngram_size),
                       return_cross_attention=bool(return_cross_attention), forces_first=forced_first_id is not None)
    (tokens, scores, normalized, token_scores), steps, *weights = loop(*loop_inputs(encoder_tokens, forced_first_id))
    steps = int(ops.convert_to_numpy(steps))
    return NBest(
        ops.convert_to_numpy(tokens)[:, :, :steps], ops.convert_to_numpy(scores),
        ops.convert_to_numpy(normalized), ops.convert_to_numpy(token_scores)[:, :, :steps],
        ops.convert_to_numpy(weights[0])[:, :, :, :steps] if weights else None,
    )


def greedy_search_uncached(model, encoder_tokens, max_new_tokens, stop_at_end=True, jit_compile=False):
    """Greedy search that re-runs the whole model on the prefix each step.

    `greedy_search` on an `UncachedDecoder` sized for `max_new_tokens`:
    the reference that cached decoding must match token for token, and the
    speed baseline. A compiled loop belongs to its decoder, so to time
    repeated calls build one `UncachedDecoder` and call `greedy_search`.

    Args:
        model: a `transformer()` model.
        encoder_tokens: int `(batch, source_length)`.
        max_new_tokens: tokens to generate at most.
        stop_at_end: as in `greedy_search`.
        jit_compile: compile the loop, as `CachedDecoder`.

    Returns:
        int NumPy `(batch, steps)`, as `greedy_search`.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> greedy_search_uncached(model, np.array([[5, 6, 0]]), 3, stop_at_end=False).shape
    (1, 3)
    """
    decoder = UncachedDecoder(model, max_length=max_new_tokens + 1, jit_compile=jit_compile)
    return greedy_search(decoder, encoder_tokens, max_new_tokens, stop_at_end)
