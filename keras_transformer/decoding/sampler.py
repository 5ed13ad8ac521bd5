"""The one decoding loop: a `keras.ops.while_loop` over a decoder's steps.

Greedy and beam search differ only in a *choice*: the object that picks the
next tokens from one step's logits (`choices`). The loop, the stopping rule and the
reordering of the caches for beams are written once, here, and what a step
does from its logits on in `search_step` (shared with `refill`), in `keras.ops`,
so the same loop runs eagerly, compiled by XLA, and inside the SavedModel
export's `tf.function`.

A decoder is any object with `start(encoder_tokens) -> state`,
`next_logits(tokens, index, state) -> (logits, state)` and, for beams,
`reorder(state, rows) -> state`, where `state` is a structure of tensors
(`CachedDecoder`, `UncachedDecoder`).
"""

import weakref

import keras
import numpy as np
from keras import ops

from keras_transformer.decoding.search_step import choose_next_tokens
from keras_transformer.decoding.search_step import decoder_start_id
from keras_transformer.decoding.search_step import forbidden_token_ids

def compile_function(function, variables=None):
    """`function` compiled by XLA on JAX and TensorFlow; unchanged on torch.

    Decoding runs outside `model.fit`, so it gets no compilation unless
    asked; this is the one place that asks. A TensorFlow program reads its
    variables as they are at each call. A `jax.jit` program would hold the
    arrays it was traced with, so on JAX the values of `variables` are
    passed in at each call instead (through a `keras.StatelessScope`): one
    program serves weights that change, e.g. during training.

    Args:
        function: a function of tensors (and structures of tensors).
        variables: the Keras variables `function` reads (JAX only); None
            when it reads none.

    Returns:
        The compiled function (`jax.jit` or `tf.function(jit_compile=True,
        reduce_retracing=True)`), or `function` itself on torch.

    Example:

    >>> scale = keras.Variable(2.0)
    >>> times = compile_function(lambda x: x * scale, variables=[scale])
    >>> float(keras.ops.convert_to_numpy(times(keras.ops.ones(()))))
    2.0
    >>> _ = scale.assign(3.0)
    >>> float(keras.ops.convert_to_numpy(times(keras.ops.ones(()))))
    3.0
    """
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        if not variables:
            return jax.jit(function)
        variables = list(variables)
        compiled = jax.jit(with_variable_values(function, variables))
        return lambda *args, **kwargs: compiled([variable.value for variable in variables], *args, **kwargs)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function, jit_compile=True, reduce_retracing=True)
    return function


def with_variable_values(function, variables):
    """`function` with the values of `variables` as its first argument: a pure function (JAX).

    Inside, `variables` read the values passed (a `keras.StatelessScope`),
    so the function can be `jax.jit`-compiled or `jax.export`-ed once and
    called with any weights of the same shapes.

    Args:
        function: a function of tensors that reads `variables`.
        variables: a list of Keras variables.

    Returns:
        `with_values(values, *args, **kwargs)`.

    Example:

    >>> scale = keras.Variable(2.0)
    >>> times = with_variable_values(lambda x: x * scale, [scale])
    >>> float(keras.ops.convert_to_numpy(times([keras.ops.ones(()) * 5.0], keras.ops.ones(()))))
    5.0
    """
    variables = list(variables)

    def with_values(values, *args, **kwargs):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return function(*args, **kwargs)

    return with_values


def search_tensors(decoder, encoder_tokens, choice, max_new_tokens, stop_at_end=True, no_repeat_ngram_size=0,
                   return_cross_attention=False, grow_caches=None, forced_first=None):
    """The decoding loop on tensors: what `run_search` runs, and the export traces.

    Args:
        decoder: a `CachedDecoder` (or an object with its interface).
        encoder_tokens: int tensor `(batch, source_length)`, padded with 0.
        choice: `GreedyChoice()`, a `BeamChoice`, or another choice
            (`n_best.NBestChoice`, `pooled_beam.PooledBeamChoice`).
        max_new_tokens: int, the most tokens to generate.
        stop_at_end: stop a row at `END_ID` (then it is padded with 0), and
            the loop when every row has stopped; False generates exactly
            `max_new_tokens` (for benchmarks).
        no_repeat_ngram_size: int; above 0, no row repeats an n-gram of
            this many tokens (`block_repeated_ngrams`). 0 turns the guard off.
        return_cross_attention: bool, also return the cross-attention
            weights of the returned rows (a `CachedDecoder` only; see
            `DecoderState.cross_attention`).
        grow_caches: bool or None, the self-attention caches start at
            `FIRST_CACHE_LENGTH` positions and double between loops
            (`cache_phases`), where a decoder can grow them; None (the
            default): for beams only. Greedy search then runs a little
            faster but compiles longer (benchmarks/findings/decoding.md,
            "The compiled engine on a CPU"): the compiled engine, whose
            compiled code is kept, asks for it; training's dev BLEU does not.
        forced_first: int32 scalar tensor (or int), the token every row's
            first step must write (`force_first_token`), an input of the
            loop so that one compiled loop serves every target language;
            None: the model chooses.

    Returns:
        `(generated, steps)`: int32 `(batch, max_new_tokens)`, of which the
        first `steps` (an int32 scalar tensor) columns were generated;
        `choice.best`'s structure for beams. With `return_cross_attention`,
        `(generated, steps, weights)`, the weights `choice.pick`'s rows of
        float32 `(rows, num_layers, max_new_tokens, source_length)`: each
        decoder layer's head-averaged cross-attention at the step that
        chose each token.
    """
    recording = {"attention_length": max_new_tokens} if return_cross_attention else {}
    if return_cross_attention and not getattr(decoder, "records_cross_attention", False):
        raise ValueError(f"{type(decoder).__name__} does not record cross-attention: use a CachedDecoder.")
    rows = ops.shape(encoder_tokens)[0] * choice.width
    # Beam search copies its caches every step: it starts them short.
    if grow_caches is None:
        grow_caches = choice.width > 1
    phased = bool(grow_caches) and hasattr(decoder, "grow")
    phases = cache_phases(max_new_tokens) if phased else (max_new_tokens,)
    # Caches as long as the search, not the model's positions: every step reads its caches whole.
    if phased:
        # A CachedDecoder encodes each source once for its `width` hypotheses.
        decoder_state = decoder.start(encoder_tokens, cache_length=phases[0], copies=choice.width, **recording)
    else:
        if choice.width > 1:
            encoder_tokens = ops.repeat(encoder_tokens, choice.width, axis=0)
        sized = {"cache_length": max_new_tokens} if hasattr(decoder, "grow") else {}
        decoder_state = decoder.start(encoder_tokens, **sized, **recording)
    forbidden = forbidden_token_ids(decoder)
    pools_row_values = getattr(choice, "pools_row_values", False)

    def keep_going_until(end):
        def keep_going(index, tokens, finished, generated, decoder_state, choice_state):
            going = ops.less(index, end)
            if stop_at_end:
                going = ops.logical_and(going, ops.logical_not(ops.all(finished)))
            return going

        return keep_going

    def step(index, tokens, finished, generated, decoder_state, choice_state):
        logits, decoder_state = decoder.next_logits(tokens, index, decoder_state)
        # A pooled beam copies the rows' recorded cross-attention into its pool of finished hypotheses.
        pooled = {"row_values": getattr(decoder_state, "cross_attention", ())} if pools_row_values else {}
        next_tokens, parents, generated, finished, choice_state = choose_next_tokens(
            choice, logits, index, generated, finished, choice_state, forbidden, forced_first, no_repeat_ngram_size,
            stop_at_end, **pooled)
        if parents is not None:
            decoder_state = decoder.reorder(decoder_state, parents)
        return index + 1, next_tokens[:, None], finished, generated, decoder_state, choice_state

    loop_state = (
        ops.convert_to_tensor(0, "int32"),
        ops.full((rows, 1), decoder_start_id(decoder), "int32"),
        ops.zeros((rows,), "bool"),
        ops.zeros((rows, max_new_tokens), "int32"),
        decoder_state,
        choice.initial_state(rows, getattr(decoder_state, "cross_attention", ())) if pools_row_values
        else choice.initial_state(rows),
    )
    # One loop per cache length: a loop's shapes are fixed, so the caches
    # grow between loops, and a loop whose rows have all finished runs no step.
    for number, end in enumerate(phases):
        if number:
            loop_state = (*loop_state[:4], decoder.grow(loop_state[4], end), loop_state[5])
        loop_state = ops.while_loop(keep_going_until(end), step, loop_state)
    steps, _, _, generated, decoder_state, choice_state = loop_state
    if return_cross_attention:
        return choice.best(generated, choice_state), steps, choice.pick(decoder_state.cross_attention, choice_state)
    return choice.best(generated, choice_state), steps


# The first cache length of the decoding loop; each later loop doubles it.
# 32 rather than 16: one loop fewer, which makes a one-sentence `translate`
# faster to load its program, for a few percent of beam 4's speed over the
# test split, the same translations (benchmarks/findings/decoding.md, "The
# compiled engine on a CPU").
FIRST_CACHE_LENGTH = 32


def cache_phases(max_new_tokens):
    """The cache lengths of the decoding loop's successive loops: 32, 64, ... up to `max_new_tokens`.

    The token of step `i` is written at cache position `i`, so the loop
    that ends before step `end` needs caches of `end` positions.

    Example:

    >>> cache_phases(127)
    (32, 64, 127)
    >>> cache_phases(10)
    (10,)
    """
    phases, length = [], FIRST_CACHE_LENGTH
    while length < max_new_tokens:
        phases.append(length)
        length *= 2
    return (*phases, max_new_tokens)


# The compiled loops of each decoder, by (choice, max_new_tokens, stop_at_end,
# no_repeat_ngram_size, return_cross_attention, whether a first token is forced);
# jax.jit and tf.function retrace them per batch size and source length.
_compiled_loops = weakref.WeakKeyDictionary()


def compiles_loop(decoder):
    """Whether `run_search` compiles its loop for `decoder`.

    True when the decoder was built with `jit_compile=True`, and always on
    JAX, where `lax.while_loop` compiles its body whatever is asked. The
    compiled loops are kept per decoder and reused; they read the weights
    as they are at each call (`compile_function`).

    Example:

    >>> compiles_loop(object()) == (keras.backend.backend() == "jax")
    True
    """
    return bool(getattr(decoder, "jit_compile", False)) or keras.backend.backend() == "jax"


def search_loop(decoder, choice, max_new_tokens, stop_at_end=True, no_repeat_ngram_size=0,
                return_cross_attention=False, forces_first=False):
    """`search_tensors` for `decoder` and these settings, compiled (and kept) where `compiles_loop`.

    Args:
        forces_first: the loop takes the forced first token as its second
            argument (`loop_inputs`); the rest as `search_tensors`.

    Returns:
        A function of the int32 encoder tokens (and, with `forces_first`,
        of that token as an int32 scalar tensor), returning what
        `search_tensors` returns.
    """
    def run(encoder_tokens, forced_first=None):
        return search_tensors(decoder, encoder_tokens, choice=choice, max_new_tokens=max_new_tokens,
                              stop_at_end=stop_at_end, no_repeat_ngram_size=no_repeat_ngram_size,
                              return_cross_attention=return_cross_attention, forced_first=forced_first)

    if not compiles_loop(decoder):
        return run
    loops = _compiled_loops.setdefault(decoder, {})
    key = (choice, max_new_tokens, stop_at_end, no_repeat_ngram_size, return_cross_attention, bool(forces_first))
    if key not in loops:
        loops[key] = compile_function(run, variables=decoder.model.variables)
    return loops[key]


def run_search(decoder, encoder_tokens, choice, max_new_tokens, stop_at_end=True, no_repeat_ngram_size=0,
               return_cross_attention=False, forced_first_id=None):
    """Runs the decoding loop on a batch and copies the tokens to the host once.

    The loop is compiled (once per decoder and setting, then reused) when
    `decoder` was built with `jit_compile=True`, and on JAX always; on
    torch it runs eagerly. Arguments are not checked here: `greedy_search` and
    `beam_search` check them.

    Args:
        decoder, choice, max_new_tokens, stop_at_end, no_repeat_ngram_size, return_cross_attention:
            as `search_tensors`.
        forced_first_id: int or None, the token every target's first step
            writes (`force_first_token`).
        encoder_tokens: int `(batch, source_length)`, padded with 0.

    Returns:
        int NumPy `(batch, steps)` of generated tokens, without the start
        token; finished rows end with `END_ID` and are padded with 0. With
        `return_cross_attention`, `(tokens, weights)`, the weights float32
        NumPy `(batch, num_layers, steps, source_length)`.

    Example:

    >>> import keras_transformer as kt
    >>> from keras_transformer.decoding import CachedDecoder
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=12)
    >>> from keras_transformer.decoding.choices import GreedyChoice
    >>> run_search(CachedDecoder(model), np.array([[5, 6, 0]]), GreedyChoice(),
    ...            max_new_tokens=4, stop_at_end=False).shape
    (1, 4)
    """
    loop = search_loop(decoder, choice, max_new_tokens, stop_at_end, int(no_repeat_ngram_size),
                       bool(return_cross_attention), forces_first=forced_first_id is not None)
    generated, steps, *weights = loop(*loop_inputs(encoder_tokens, forced_first_id))
    steps = int(ops.convert_to_numpy(steps))
    tokens = ops.convert_to_numpy(generated)[:, :steps]
    if return_cross_attention:
        return tokens, ops.convert_to_numpy(weights[0])[:, :, :steps]
    return tokens


def loop_inputs(encoder_tokens, forced_first_id=None):
    """The arguments of a `search_loop` loop: the int32 tokens, and the forced first token where there is one.

    Example:

    >>> len(loop_inputs(np.array([[5, 6]]))), len(loop_inputs(np.array([[5, 6]]), 9))
    (1, 2)
    """
    tokens = ops.convert_to_tensor(encoder_tokens, "int32")
    return (tokens,) if forced_first_id is None else (tokens, ops.convert_to_tensor(int(forced_first_id), "int32"))
