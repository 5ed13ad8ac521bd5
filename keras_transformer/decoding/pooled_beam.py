"""Beam search that sets finished hypotheses aside: Hugging Face's (and fairseq's) way, as a choice.

`choices.BeamChoice` keeps a finished hypothesis in its beam, where it
takes a slot. `PooledBeamChoice` keeps `width` open hypotheses at every
step and moves each finished one to a pool of the `width` best, scored
`log-probability / length ** length_penalty` (`length` counts the
generated tokens, `END_ID` included), as `transformers`' `generate(num_beams=...)`
does: each step takes the `2 * width` best continuations, pools those of
the first `width` that end, and continues the best `width` that do not.
A source is done when its pool is full and its best open hypothesis,
divided by its present length's penalty, no longer beats the worst pooled
one (`early_stopping=False`), or as soon as the pool is full
(`early_stopping=True`). After the loop's last step the open hypotheses
are pooled, so every source returns a hypothesis: as if they ended there
(`end_at_limit`, `generate`'s `forced_eos_token_id` at `max_length`:
Marian's), their length counting that `</s>`, or as they stand
(`end_at_limit=False`: a model without `forced_eos_token_id`, NLLB-200's).

With `n` the choice returns each source's `n` best pooled hypotheses with
their scores (an n-best list: `search.n_best_search(...,
beam_search="pooled")`), and the pool also keeps each hypothesis' token
scores; where the loop records the cross-attention, the pool keeps each
hypothesis' copy too (`pick`), so alignments come with the pooled search.

With the same logits, a model imported from Marian translates exactly as
`MarianMTModel.generate(num_beams=width, length_penalty=...,
early_stopping=..., max_length=max_new_tokens + 2)` with its OPUS-MT
generation settings (`bad_words_ids` = padding, `renormalize_logits`):
tests/test_marian.py and tests/test_pooled_search.py check it.
"""

import dataclasses
import typing

from keras import ops

from keras_transformer.decoding.top_k import top_k_by_chunks
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID

# transformers' stand-in for minus infinity in beam scores; the same value keeps ties and sums alike.
_NEVER = -1.0e9


class Pool(typing.NamedTuple):
    """Each source's pooled hypotheses, `(groups, width, ...)` each; `()` for what is not kept.

    Attributes:
        scores: float32, log-probability / length ** length_penalty (`_NEVER` where empty).
        flags: bool, which entries hold a hypothesis.
        tokens: int32 `(..., max_new_tokens)`, padded with `PAD_ID`.
        raw: float32, the log-probability (an n-best list's `scores`).
        token_scores: float32 `(..., max_new_tokens)`, each token's log-probability.
        values: per-row values recorded by the loop (the cross-attention).
    """

    scores: object
    flags: object
    tokens: object
    raw: object = ()
    token_scores: object = ()
    values: object = ()


class PooledState(typing.NamedTuple):
    """What `PooledBeamChoice` carries from step to step (a named tuple: every backend's loop carries it).

    Attributes:
        running: float32 `(rows,)`, each open hypothesis' log-probability.
        history: int32 `(rows, max_new_tokens)`, each open hypothesis' tokens.
        history_scores: float32 `(rows, max_new_tokens)`, their token scores (with `n` only, else `()`).
        pool: the `Pool`.
        done: bool `(groups,)`, sources that take no more hypotheses.
        forced: bool `(groups,)`, sources whose open hypotheses are pooled after the last step.
        step: int32 scalar, the step about to be chosen.
    """

    running: object
    history: object
    history_scores: object
    pool: Pool
    done: object
    forced: object
    step: object


def _grouped(values, groups):
    return ops.reshape(values, (groups, -1) + tuple(ops.shape(values)[1:]))


def _along(index, values):
    """`index` `(groups, m)` shaped to pick along axis 1 of `values` `(groups, ?, ...)`."""
    return index[(slice(None), slice(None)) + (None,) * (len(values.shape) - 2)]


@dataclasses.dataclass(frozen=True)
class PooledBeamChoice:
    """`width` open hypotheses per source, finished ones pooled (transformers' beam search).

    Args:
        width: int, open hypotheses per source (`num_beams`).
        length_penalty: float, the exponent of the length a finished
            hypothesis' log-probability is divided by. Defaults to 1.0,
            `generate`'s.
        early_stopping: bool, stop a source as soon as `width` hypotheses
            have finished. Defaults to False, `generate`'s.
        max_new_tokens: int, the loop's steps: after the last, the open
            hypotheses are pooled.
        end_at_limit: bool, the length penalty of a hypothesis pooled after
            the last step counts a closing `</s>` (`max_new_tokens + 1`),
            as `generate` with a `forced_eos_token_id`; False counts
            `max_new_tokens`, as `generate` without one. Defaults to True.
        n: int; 0 (the default) returns each source's best tokens, as
            `beam_search`; from 1 to `width`, the `n` best pooled
            hypotheses with their scores, as `n_best.NBestChoice`.

    Example:

    >>> choice = PooledBeamChoice(width=2, max_new_tokens=3)
    >>> state = choice.initial_state(2)
    >>> ops.convert_to_numpy(state.running).tolist(), tuple(state.pool.tokens.shape)
    ([0.0, -1000000000.0], (1, 2, 3))
    """

    width: int = 4
    length_penalty: float = 1.0
    early_stopping: bool = False
    max_new_tokens: int = 1
    n: int = 0
    end_at_limit: bool = True

    # The loop hands `choose` the rows' recorded values (the cross-attention), which the pool copies.
    pools_row_values = True

    def initial_state(self, rows, row_values=()):
        """The `PooledState` of `rows` rows; `row_values` (per-row, e.g. the recorded cross-attention) or `()`."""
        groups = rows // self.width
        first = ops.equal(ops.mod(ops.arange(rows, dtype="int32"), self.width), 0)
        scored = self.n > 0
        shape = (groups, self.width, self.max_new_tokens)
        pool = Pool(
            ops.full((groups, self.width), _NEVER, "float32"),
            ops.zeros((groups, self.width), "bool"),
            ops.full(shape, PAD_ID, "int32"),
            ops.full((groups, self.width), _NEVER, "float32") if scored else (),
            ops.zeros(shape, "float32") if scored else (),
            () if isinstance(row_values, tuple) else ops.zeros_like(_grouped(row_values, groups)),
        )
        return PooledState(
            ops.where(first, 0.0, _NEVER),
            ops.full((rows, self.max_new_tokens), PAD_ID, "int32"),
            ops.zeros((rows, self.max_new_tokens), "float32") if scored else (),
            pool,
            ops.zeros((groups,), "bool"),
            ops.zeros((groups,), "bool"),
            ops.convert_to_tensor(0, "int32"),
        )

    def choose(self, logits, finished, state, row_values=()):
        """The `width` best open continuations of each source; finished ones go to the pool."""
        k, columns = self.width, self.max_new_tokens
        rows, vocabulary = ops.shape(logits)[0], logits.shape[-1]
        groups = rows // k
        token_log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
        log_probs = ops.reshape(token_log_probs + state.running[:, None], (groups, k * vocabulary))
        # XLA's CPU TopK sorts all `k * vocabulary` candidates: through chunk maxima (as `BeamChoice`).
        top_scores, top = top_k_by_chunks(log_probs, 2 * k)
        beam, token = ops.floor_divide(top, vocabulary), ops.mod(top, vocabulary)  # (groups, 2k)
        sources = ops.arange(groups, dtype="int32")[:, None] * k + beam  # the row each candidate extends
        at_step = ops.equal(ops.arange(columns, dtype="int32")[None, :], state.step)

        def extended(history, new):
            """Each candidate's row history with `new` at this step's column: `(groups, 2k, columns)`."""
            taken = ops.take(history, ops.reshape(sources, (-1,)), axis=0)
            return ops.reshape(ops.where(at_step, ops.reshape(new, (-1, 1)), taken), (groups, 2 * k, columns))

        candidates = extended(state.history, token)
        scored = self.n > 0
        candidate_scores = extended(state.history_scores, ops.take_along_axis(
            ops.reshape(token_log_probs, (groups, k * vocabulary)), top, axis=1)) if scored else ()

        # The open hypotheses: the best k candidates that did not end.
        ends = ops.equal(token, END_ID)
        next_open, kept = ops.top_k(top_scores + ops.cast(ends, "float32") * _NEVER, k)
        kept = ops.cast(kept, "int32")
        parents = ops.reshape(ops.take_along_axis(sources, kept, axis=1), (-1,))
        next_tokens = ops.reshape(ops.take_along_axis(token, kept, axis=1), (-1,))

        def survivors(values):
            return ops.reshape(ops.take_along_axis(values, kept[:, :, None], axis=1), (rows, columns))

        # The pool: candidates among the first k that ended (unless the source is closed).
        penalty = ops.power(ops.cast(state.step + 1, "float32"), self.length_penalty)
        ended = ops.logical_and(ends[:, :k], self._open_sources(state.done, state.pool.flags)[:, None])
        values = () if isinstance(state.pool.values, tuple) else _grouped(
            ops.take(row_values, ops.reshape(sources[:, :k], (-1,)), axis=0), groups)
        pool = self._merge(state.pool, Pool(top_scores[:, :k] / penalty, ended, candidates[:, :k],
                                            top_scores[:, :k] if scored else (),
                                            candidate_scores[:, :k] if scored else (), values))
        # Done: no open hypothesis can beat the worst pooled one any more (transformers' heuristic).
        full = ops.all(pool.flags, axis=1)
        done = ops.logical_or(state.done, ops.logical_and(
            full, ops.less_equal(next_open[:, 0] / penalty, ops.min(pool.scores, axis=1))))
        # After the last step the open hypotheses end, as `generate` forces `</s>` at its max_length.
        last_step = ops.equal(state.step, columns - 1)
        forced = ops.logical_and(last_step, self._open_sources(done, pool.flags))
        done = ops.logical_or(ops.logical_or(done, last_step), ops.logical_and(full, self.early_stopping))
        # A done source's rows end here: the loop then pads them and stops once every source is done.
        next_tokens = ops.where(ops.repeat(done, k, axis=0), END_ID, next_tokens)
        state = PooledState(ops.reshape(next_open, (-1,)), survivors(candidates),
                            survivors(candidate_scores) if scored else (), pool, done, forced, state.step + 1)
        return next_tokens, parents, state

    def _open_sources(self, done, pooled):
        """Sources whose pool still takes hypotheses: not done, and not full under `early_stopping`."""
        return ops.logical_not(ops.logical_or(done, ops.logical_and(ops.all(pooled, axis=1), self.early_stopping)))

    def _merge(self, pool, new):
        """The `width` best of a `Pool` and new hypotheses (a `Pool` of those flagged only)."""
        merged_scores = ops.concatenate([pool.scores, ops.where(new.flags, new.scores, _NEVER)], axis=1)
        kept_scores, best = ops.top_k(merged_scores, self.width)
        best = ops.cast(best, "int32")

        def kept(old, fresh):
            if isinstance(old, tuple):
                return old
            merged = ops.concatenate([old, ops.cast(fresh, old.dtype)], axis=1)
            return ops.take_along_axis(merged, _along(best, merged), axis=1)

        return Pool(kept_scores, *(kept(old, fresh) for old, fresh in zip(pool[1:], new[1:])))

    def final_pool(self, state, row_values=()):
        """The pool once the sources still open after the last step have pooled their open hypotheses.

        Args:
            state: the `PooledState` after the loop.
            row_values: the rows' recorded values after the loop (what
                `pick` is given), or `()`.

        Returns:
            A `Pool`, each source's entries best first.
        """
        groups = ops.shape(state.done)[0]
        open_scores = _grouped(state.running, groups)
        pool = state.pool
        if isinstance(row_values, tuple):  # the tokens and scores only
            pool = pool._replace(values=())
        values = () if isinstance(pool.values, tuple) else _grouped(row_values, groups)
        forced = ops.logical_and(state.forced[:, None], ops.ones_like(open_scores, dtype="bool"))
        return self._merge(pool, Pool(
            open_scores / float(self.max_new_tokens + bool(self.end_at_limit)) ** self.length_penalty, forced,
            _grouped(state.history, groups), open_scores if self.n else (),
            _grouped(state.history_scores, groups) if self.n else (), values))

    def _order(self, scores):
        """`(groups, n)` pool entries, best first: the first is `argmax`'s (what `best` gives without `n`)."""
        order = ops.cast(ops.argmax(scores, axis=1), "int32")[:, None]
        if self.n > 1:
            rest = ops.where(ops.equal(ops.arange(self.width, dtype="int32")[None, :], order), float("-inf"), scores)
            order = ops.concatenate([order, ops.cast(ops.top_k(rest, self.n - 1)[1], "int32")], axis=1)
        return order

    def best(self, generated, state):
        """Each source's best pooled tokens, int32 `(sources, max_new_tokens)`; with `n`, its `n` best:
        `(tokens, scores, normalized_scores, token_scores)`, `(sources, n, ...)` each, an empty entry's
        scores `-inf`."""
        pool = self.final_pool(state)
        if not self.n:
            return self._picked(pool.tokens, pool.scores)[:, 0]
        never = float("-inf")
        return (self._picked(pool.tokens, pool.scores), self._picked(ops.where(pool.flags, pool.raw, never), pool.scores),
                self._picked(ops.where(pool.flags, pool.scores, never), pool.scores),
                self._picked(pool.token_scores, pool.scores))

    def pick(self, values, state):
        """The pooled copies of per-row `values` (the recorded cross-attention), as `best` orders its tokens."""
        pool = self.final_pool(state, values)
        if isinstance(pool.values, tuple):
            raise ValueError("PooledBeamChoice pools the values the loop records: record the cross-attention.")
        picked = self._picked(pool.values, pool.scores)
        return picked if self.n else picked[:, 0]

    def _picked(self, values, scores):
        return ops.take_along_axis(values, _along(self._order(scores), values), axis=1)
