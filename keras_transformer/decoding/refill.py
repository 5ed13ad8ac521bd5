"""Search that gives the rows of a finished sentence the next source: `refill_greedy_search`, `refill_beam_search`.

A batch of the one decoding loop (`sampler.search_tensors`) decodes until
its longest output ends, so the rows whose sentence ended decode padding:
a good share of greedy's row-steps, and a smaller one of beam 4's, whose
source ends with its last hypothesis (benchmarks/findings/decoding.md,
"Greedy search refilling finished rows"). Here a call's sources wait in
a queue, `slots` sources decode (a row each for greedy, `width` for a
beam), and the rows of a sentence that ended start the next source at the
next step. Rows then sit at different positions of their sentences, so
each row has its own position and the self-attention caches are rings: at
step `t` every row writes its keys and values at column `t % R` and
attends to the columns written since its sentence began (`ring_mask`).
Attention does not depend on the order of its keys, so a sentence gets
the tokens the one loop gives it, up to the order of float32 sums.
"""

import weakref

from keras import ops

from keras_transformer.decoding.checks import check_decoder
from keras_transformer.decoding.checks import check_encoder_tokens
from keras_transformer.decoding.checks import check_int
from keras_transformer.decoding.checks import check_max_new_tokens
from keras_transformer.decoding.choices import BeamChoice
from keras_transformer.decoding.choices import GreedyChoice
from keras_transformer.decoding.sampler import FIRST_CACHE_LENGTH
from keras_transformer.decoding.sampler import compile_function
from keras_transformer.decoding.sampler import compiles_loop
from keras_transformer.decoding.sampler import loop_inputs
from keras_transformer.decoding.search_step import choose_next_tokens
from keras_transformer.decoding.search_step import decoder_start_id
from keras_transformer.decoding.search_step import forbidden_token_ids


def ring_mask(column, positions, length):
    """The ring columns each row attends to: those written in its last `position + 1` steps.

    Args:
        column: int scalar (tensor), the column written at this step.
        positions: int `(rows,)`, each row's position in its sentence
            (0 at the step that reads its start token).
        length: int, the ring's columns.

    Returns:
        bool `(rows, length)`.

    Example:

    >>> mask = ring_mask(1, ops.convert_to_tensor([0, 2]), 4)
    >>> ops.convert_to_numpy(mask).astype(int).tolist()
    [[0, 1, 0, 0], [1, 1, 0, 1]]
    """
    age = ops.mod(ops.convert_to_tensor(column, "int32") - ops.arange(length, dtype="int32"), length)
    return ops.less_equal(age[None, :], ops.convert_to_tensor(positions, "int32")[:, None])


def ring_phases(max_new_tokens):
    """The ring sizes the loop moves between: 32, 64, ... up to the first power of two that holds a sentence.

    A step attends to its whole ring, so while every live sentence is short
    the rings are short, as the one loop's caches grow (`sampler.cache_phases`).

    Example:

    >>> ring_phases(127), ring_phases(64), ring_phases(10)
    ((32, 64, 128), (32, 64), (10,))
    """
    if max_new_tokens <= FIRST_CACHE_LENGTH:
        return (max_new_tokens,)
    phases = [FIRST_CACHE_LENGTH]
    while phases[-1] < max_new_tokens:
        phases.append(phases[-1] * 2)
    return tuple(phases)


def narrower_ring(part, size, step):
    """A ring `(rows, heads, longest, width)` as one of `size` columns, where no row spans more than `size` steps.

    The key written `a` steps before `step` sits at column `(step - a) % longest`,
    and must sit at `(step - a) % size`: of the columns congruent modulo `size`,
    the one whose age is below `size`.

    Example:

    >>> ring = ops.reshape(ops.arange(8, dtype="float32"), (1, 1, 8, 1))  # column c written at step c
    >>> ops.convert_to_numpy(narrower_ring(ring, 4, 6))[0, 0, :, 0].tolist()  # before step 6: steps 3-5, and 6's
    [4.0, 5.0, 6.0, 3.0]
    """
    longest = part.shape[2]
    folds = longest // size
    columns = ops.reshape(ops.arange(longest, dtype="int32"), (folds, size))
    recent = ops.less(ops.mod(ops.convert_to_tensor(step, "int32") - columns, longest), size)
    folded = ops.reshape(part, (-1, part.shape[1], folds, size, part.shape[3]))
    return ops.sum(ops.where(recent[None, None, :, :, None], folded, ops.zeros_like(folded)), axis=2)


def wider_ring(part, longest):
    """A ring of `size` columns as one of `longest` (a multiple): column `c` holds column `c % size`'s key.

    Example:

    >>> ring = ops.reshape(ops.arange(2, dtype="float32"), (1, 1, 2, 1))
    >>> ops.convert_to_numpy(wider_ring(ring, 4))[0, 0, :, 0].tolist()
    [0.0, 1.0, 0.0, 1.0]
    """
    return ops.tile(part, (1, 1, longest // part.shape[2], 1))


def refill_search_tensors(decoder, encoder_tokens, slots, max_new_tokens, no_repeat_ngram_size=0,
                          forced_first=None, choice=GreedyChoice()):
    """The refilling loop on tensors: what `refill_greedy_search` and `refill_beam_search` compile.

    Args:
        decoder: a `CachedDecoder`.
        encoder_tokens: int32 `(rows, source_length)`, padded with 0;
            the queue, decoded in its order. Rows of zeros after the last
            source are not decoded (a queue padded to a few shapes).
        slots: int, sources decoded at a time, each in `choice.width` rows.
        max_new_tokens: int, the most tokens of a sentence.
        no_repeat_ngram_size: int, as `sampler.search_tensors`'.
        forced_first: as `sampler.search_tensors`'.
        choice: a `GreedyChoice` or a `BeamChoice`. A source's `width`
            rows end together, when every one has ended (a beam's
            hypotheses), and take the next source together.

    Returns:
        `(generated, steps, loop_steps)`: int32 `(rows, max_new_tokens)`,
        each sentence's tokens (`choice.best`'s) up to and with `END_ID`,
        then 0; the longest sentence's steps (an int32 scalar); and the
        steps the loop ran (each of `slots * choice.width` rows).
    """
    if not isinstance(choice, (GreedyChoice, BeamChoice)):
        raise TypeError(f"The refilling loop takes a GreedyChoice or a BeamChoice, not {type(choice).__name__}.")
    width = choice.width
    rows = ops.shape(encoder_tokens)[0]
    real = ops.any(ops.not_equal(encoder_tokens, 0), axis=1)
    # The sources: up to the last row that holds a token.
    sources = ops.max(ops.where(real, ops.arange(rows, dtype="int32") + 1, 0))
    encoder_outputs, encoder_mask = decoder.encoder(encoder_tokens)
    queued_caches = [layer.cross_attention_cache(encoder_outputs) for layer in decoder.decoder_layers]
    forbidden = forbidden_token_ids(decoder)
    start_id = decoder_start_id(decoder)
    output_kernel = decoder.output_kernel()
    phases = ring_phases(max_new_tokens)

    # What a refilled row's search starts from: made once, outside the loop (it depends on shapes only).
    fresh_choice_state = tuple(choice.initial_state(slots * width))

    def each_row(per_source):
        """A value of each slot as one of each of its `width` rows."""
        return per_source if width == 1 else ops.repeat(per_source, width, axis=0)

    def sources_of(picked):
        """The cross-attention caches and source mask of the slots' sources `picked` (the last source for none)."""
        picked = each_row(ops.minimum(picked, ops.maximum(sources - 1, 0)))
        caches = [tuple(ops.take(part, picked, axis=0) for part in cache) for cache in queued_caches]
        return caches, ops.take(encoder_mask, picked, axis=0)

    def live_positions(step, source, start):
        live = ops.less(source, sources)
        return live, ops.where(live, step - start, 0)

    def ring_needed(state):
        """The index in `phases` of the smallest ring that holds every live sentence's next step."""
        step, source, start = state[:3]
        longest = ops.max(live_positions(step, source, start)[1])
        return ops.sum(ops.cast(ops.greater_equal(longest, ops.convert_to_tensor(phases[:-1], "int32")), "int32"))

    def decode(ring, step, source, start, tokens, generated, caches, cross_caches, source_mask, output, longest,
               queued, finished, choice_state):
        live, slot_positions = live_positions(step, source, start)
        positions = each_row(slot_positions)
        column = ops.mod(step, ring)
        logits, caches = decoder.ring_logits(tokens, column, positions, ring_mask(column, positions, ring), caches,
                                             cross_caches, source_mask, output_kernel)
        next_tokens, parents, generated, finished, choice_state = choose_next_tokens(
            choice, logits, positions, generated, finished, choice_state, forbidden, forced_first, no_repeat_ngram_size)
        if parents is not None:  # a beam's rows continue hypotheses of their own source
            caches = [tuple(ops.take(part, parents, axis=0) for part in cache) for cache in caches]
        all_finished = ops.all(ops.reshape(finished, (-1, width)), axis=1)
        ended = ops.logical_and(live, ops.logical_or(all_finished,
                                                     ops.greater_equal(slot_positions + 1, max_new_tokens)))
        # An ended source writes its sentence; the others write the spare last row.
        written = ops.where(ended, source, rows)
        output = ops.cond(ops.any(ended),
                          lambda: ops.scatter_update(output, written[:, None], choice.best(generated, choice_state)),
                          lambda: output)
        longest = ops.maximum(longest, ops.max(ops.where(ended, slot_positions + 1, 0)))
        free = ops.logical_or(ended, ops.logical_not(live))
        candidate = queued + ops.cumsum(ops.cast(free, "int32")) - 1
        refilled = ops.logical_and(free, ops.less(candidate, sources))
        source = ops.where(free, ops.where(refilled, candidate, rows), source)
        queued = queued + ops.sum(ops.cast(refilled, "int32"))
        start = ops.where(refilled, step + 1, start)
        refilled_rows = each_row(refilled)
        tokens = ops.where(refilled_rows, start_id, next_tokens)[:, None]
        generated = ops.where(refilled_rows[:, None], 0, generated)
        finished = ops.logical_and(finished, ops.logical_not(refilled_rows))
        choice_state = tuple(ops.where(refilled_rows, fresh, kept)
                             for fresh, kept in zip(fresh_choice_state, choice_state))

        def refill():
            new_caches, new_mask = sources_of(source)
            return ([tuple(ops.where(refilled_rows[:, None, None, None], new, old) for new, old in zip(fresh, kept))
                     for fresh, kept in zip(new_caches, cross_caches)],
                    ops.where(refilled_rows[:, None], new_mask, source_mask))

        # Most steps start no sentence: they leave the cross-attention caches as they are.
        cross_caches, source_mask = ops.cond(ops.any(refilled), refill, lambda: (cross_caches, source_mask))
        return (step + 1, source, start, tokens, generated, caches, cross_caches, source_mask, output, longest,
                queued, finished, choice_state)

    def any_live(*state):
        return ops.any(ops.less(state[1], sources))

    def in_ring(number):
        """The loop in rings of `phases[number]` columns, while that is the ring `ring_needed` names."""
        ring = phases[number]

        def keep_going(*state):
            return ops.logical_and(any_live(*state), ops.equal(ring_needed(state), number))

        def run(state):
            step, caches = state[0], state[5]
            state = (*state[:5], [tuple(narrower_ring(part, ring, step) for part in cache) for cache in caches],
                     *state[6:])
            state = ops.while_loop(keep_going, lambda *state: decode(ring, *state), state)
            caches = [tuple(wider_ring(part, phases[-1]) for part in cache) for cache in state[5]]
            return (*state[:5], caches, *state[6:])

        return run

    source = ops.arange(slots, dtype="int32")
    source = ops.where(ops.less(source, sources), source, rows)
    cross_caches, source_mask = sources_of(source)
    state = (
        ops.convert_to_tensor(0, "int32"),
        source,
        ops.zeros((slots,), "int32"),
        ops.full((slots * width, 1), start_id, "int32"),
        ops.zeros((slots * width, max_new_tokens), "int32"),
        [layer.empty_cache(slots * width, phases[-1]) for layer in decoder.decoder_layers],
        cross_caches,
        source_mask,
        ops.zeros((rows + 1, max_new_tokens), "int32"),
        ops.convert_to_tensor(0, "int32"),
        ops.minimum(ops.convert_to_tensor(slots, "int32"), sources),
        ops.zeros((slots * width,), "bool"),
        fresh_choice_state,
    )
    if len(phases) == 1:
        state = ops.while_loop(any_live, lambda *state: decode(phases[0], *state), state)
    else:
        # Each turn runs the ring the live sentences need until they need another (a sentence grows past it,
        # or the last long one ends).
        branches = [in_ring(number) for number in range(len(phases))]
        state = ops.while_loop(any_live, lambda *state: ops.switch(ring_needed(state), branches, state), state)
    return state[8][:-1], state[9], state[0]


# The compiled refilling loops of each decoder, by their settings.
_compiled_loops = weakref.WeakKeyDictionary()


def refill_greedy_search(decoder, encoder_tokens, slots=8, max_new_tokens=None, no_repeat_ngram_size=0,
                         forced_first_id=None, return_loop_steps=False):
    """Greedy search over a queue of sources, `slots` rows at a time, a finished row refilled at once.

    The tokens of `greedy_search` (up to the order of float32 sums), in
    fewer row-steps where outputs differ in length: no row decodes padding
    while a source waits. Compiled as `greedy_search` is (`sampler.compiles_loop`).

    Args:
        decoder: a `CachedDecoder`.
        encoder_tokens: int `(sources, source_length)`, padded with 0.
        slots: int >= 1, rows decoded together.
        max_new_tokens: as `greedy_search`'s.
        no_repeat_ngram_size: as `greedy_search`'s.
        forced_first_id: as `greedy_search`'s.
        return_loop_steps: bool, also return the steps the loop ran.

    Returns:
        int NumPy `(sources, steps)`, as `greedy_search`; with
        `return_loop_steps`, `(tokens, loop_steps)`.

    Raises:
        TypeError, ValueError: as `greedy_search`, and for `slots` that is
            not an int >= 1.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> from keras_transformer.decoding import CachedDecoder, greedy_search
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> decoder, source = CachedDecoder(model), np.array([[5, 6, 0], [7, 0, 0], [9, 4, 3]])
    >>> refilled = refill_greedy_search(decoder, source, slots=2, max_new_tokens=6)
    >>> each = [greedy_search(decoder, row[None], max_new_tokens=6)[0] for row in source]
    >>> all((refilled[i, :len(tokens)] == tokens).all() for i, tokens in enumerate(each))
    True
    """
    return _refill_search("refill_greedy_search", decoder, encoder_tokens, GreedyChoice(), slots, max_new_tokens,
                          no_repeat_ngram_size, forced_first_id, return_loop_steps)


def refill_beam_search(decoder, encoder_tokens, slots=4, beam_width=4, length_penalty=0.6, max_new_tokens=None,
                       no_repeat_ngram_size=0, forced_first_id=None, return_loop_steps=False):
    """Beam search over a queue of sources, `slots` sources at a time, a finished source's rows refilled at once.

    Each source's best hypothesis as `beam_search` gives it (up to the
    order of float32 sums): a source's `beam_width` rows decode until every
    hypothesis has ended, as they do in `beam_search`'s batch, then take
    the next source together, so no row decodes padding while a source
    waits. Compiled as `beam_search` is (`sampler.compiles_loop`).

    Args:
        decoder: a `CachedDecoder`.
        encoder_tokens: int `(sources, source_length)`, padded with 0.
        slots: int >= 1, sources decoded together (`slots * beam_width` rows).
        beam_width, length_penalty: as `beam_search`'s.
        max_new_tokens, no_repeat_ngram_size, forced_first_id: as `beam_search`'s.
        return_loop_steps: bool, also return the steps the loop ran.

    Returns:
        int NumPy `(sources, steps)`, as `beam_search`; with
        `return_loop_steps`, `(tokens, loop_steps)`.

    Raises:
        TypeError, ValueError: as `beam_search`, and for `slots` that is
            not an int >= 1.

    Example:

    >>> import numpy as np
    >>> import keras_transformer as kt
    >>> from keras_transformer.decoding import CachedDecoder, beam_search
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> decoder, source = CachedDecoder(model), np.array([[5, 6, 0], [7, 0, 0], [9, 4, 3]])
    >>> refilled = refill_beam_search(decoder, source, slots=2, beam_width=3, max_new_tokens=6)
    >>> each = [beam_search(decoder, row[None], beam_width=3, max_new_tokens=6)[0] for row in source]
    >>> all((refilled[i, :len(tokens)] == tokens).all() for i, tokens in enumerate(each))
    True
    """
    check_int("refill_beam_search", "beam_width", beam_width, 1)
    choice = BeamChoice(width=beam_width, length_penalty=float(length_penalty))
    return _refill_search("refill_beam_search", decoder, encoder_tokens, choice, slots, max_new_tokens,
                          no_repeat_ngram_size, forced_first_id, return_loop_steps)


def _refill_search(owner, decoder, encoder_tokens, choice, slots, max_new_tokens, no_repeat_ngram_size,
                   forced_first_id, return_loop_steps):
    """Checks the arguments, runs the (kept, compiled) refilling loop and copies its tokens to the host."""
    check_decoder(decoder, owner)
    check_int(owner, "slots", slots, 1)
    check_int(owner, "no_repeat_ngram_size", no_repeat_ngram_size, 0)
    encoder_tokens = check_encoder_tokens(encoder_tokens, decoder, owner)
    max_new_tokens = max_new_tokens or decoder.max_length - 1
    check_max_new_tokens(max_new_tokens, decoder.max_length)

    def run(tokens, forced_first=None):
        return refill_search_tensors(decoder, tokens, slots, max_new_tokens, no_repeat_ngram_size, forced_first,
                                     choice)

    if compiles_loop(decoder):
        loops = _compiled_loops.setdefault(decoder, {})
        key = (choice, slots, max_new_tokens, no_repeat_ngram_size, forced_first_id is not None)
        if key not in loops:
            loops[key] = compile_function(run, variables=decoder.model.variables)
        run = loops[key]
    generated, steps, loop_steps = run(*loop_inputs(encoder_tokens, forced_first_id))
    tokens = ops.convert_to_numpy(generated)[:, :int(ops.convert_to_numpy(steps))]
    return (tokens, int(ops.convert_to_numpy(loop_steps))) if return_loop_steps else tokens
