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
(`early_stopping=True`). The loop's last step also pools the open
hypotheses as if they ended there (`generate`'s `forced_eos_token_id` at
`max_length`), so every source returns a hypothesis.

With the same logits, a model imported from Marian translates exactly as
`MarianMTModel.generate(num_beams=width, length_penalty=...,
early_stopping=..., max_length=max_new_tokens + 2)` with its OPUS-MT
generation settings (`bad_words_ids` = padding, `renormalize_logits`):
tests/test_marian.py checks it.
"""

import dataclasses

from keras import ops

from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID

# transformers' stand-in for minus infinity in beam scores; the same value keeps ties and sums alike.
_NEVER = -1.0e9


def _grouped(values, groups):
    return ops.reshape(values, (groups, -1) + tuple(values.shape[1:]))


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
        max_new_tokens: int, the loop's steps: the last one pools the open
            hypotheses.

    Example:

    >>> choice = PooledBeamChoice(width=2, max_new_tokens=3)
    >>> running, pool_tokens, pool_scores, pooled, done, history, step = choice.initial_state(2)
    >>> ops.convert_to_numpy(running).tolist(), tuple(pool_tokens.shape)
    ([0.0, -1000000000.0], (1, 2, 3))
    """

    width: int = 4
    length_penalty: float = 1.0
    early_stopping: bool = False
    max_new_tokens: int = 1

    def initial_state(self, rows):
        """`(running scores, pool tokens, pool scores, pooled flags, done, history, step)`."""
        groups = rows // self.width
        first = ops.equal(ops.mod(ops.arange(rows, dtype="int32"), self.width), 0)
        return (
            ops.where(first, 0.0, _NEVER),
            ops.full((groups, self.width, self.max_new_tokens), PAD_ID, "int32"),
            ops.full((groups, self.width), _NEVER, "float32"),
            ops.zeros((groups, self.width), "bool"),
            ops.zeros((groups,), "bool"),
            ops.full((rows, self.max_new_tokens), PAD_ID, "int32"),
            ops.convert_to_tensor(0, "int32"),
        )

    def choose(self, logits, finished, state):
        """The `width` best open continuations of each source; finished ones go to the pool."""
        running, pool_tokens, pool_scores, pooled, done, history, step = state
        k = self.width
        rows, vocabulary = ops.shape(logits)[0], logits.shape[-1]
        groups = rows // k
        log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1) + running[:, None]
        top_scores, top = ops.top_k(ops.reshape(log_probs, (groups, k * vocabulary)), 2 * k)
        top = ops.cast(top, "int32")
        beam, token = ops.floor_divide(top, vocabulary), ops.mod(top, vocabulary)  # (groups, 2k)
        group_start = ops.arange(groups, dtype="int32")[:, None] * k
        last_step = ops.equal(step, self.max_new_tokens - 1)
        ends = ops.equal(token, END_ID)
        columns = ops.arange(self.max_new_tokens, dtype="int32")
        candidates = ops.take(history, ops.reshape(group_start + beam, (-1,)), axis=0)  # (groups * 2k, N)
        candidates = ops.where(ops.equal(columns[None, :], step), ops.reshape(token, (-1, 1)), candidates)
        candidates = ops.reshape(candidates, (groups, 2 * k, self.max_new_tokens))

        # The open hypotheses: the best k candidates that did not end.
        open_scores = top_scores + ops.cast(ends, "float32") * _NEVER
        next_open, kept = ops.top_k(open_scores, k)
        kept = ops.cast(kept, "int32")
        parents = ops.reshape(group_start + ops.take_along_axis(beam, kept, axis=1), (-1,))
        next_tokens = ops.reshape(ops.take_along_axis(token, kept, axis=1), (-1,))
        new_history = ops.reshape(ops.take_along_axis(candidates, kept[:, :, None], axis=1),
                                  (rows, self.max_new_tokens))

        # The pool: candidates among the first k that ended (unless the source is closed).
        length = ops.cast(step + 1, "float32")
        first_k = ops.less(ops.arange(2 * k, dtype="int32"), k)[None, :]
        ended = ops.logical_and(ops.logical_and(ends, first_k), self._open_sources(done, pooled)[:, None])
        pool = self._merge((pool_tokens, pool_scores, pooled),
                           (candidates, top_scores / ops.power(length, self.length_penalty), ended))
        # Done: no open hypothesis can beat the worst pooled one any more (transformers' heuristic).
        full = ops.all(pool[2], axis=1)
        best_open = next_open[:, 0] / ops.power(length, self.length_penalty)
        done = ops.logical_or(done, ops.logical_and(full, ops.less_equal(best_open, ops.min(pool[1], axis=1))))
        # The last step: the open hypotheses end there, as `generate` forces `</s>` at its max_length.
        forced = ops.logical_and(ops.logical_and(last_step, self._open_sources(done, pool[2]))[:, None],
                                 ops.ones_like(next_open, dtype="bool"))
        pool_tokens, pool_scores, pooled = self._merge(
            pool, (_grouped(new_history, groups), next_open / ops.power(length + 1.0, self.length_penalty), forced))
        done = ops.logical_or(ops.logical_or(done, last_step),
                              ops.logical_and(ops.all(pooled, axis=1), self.early_stopping))
        # A done source's rows end here: the loop then pads them and stops once every source is done.
        next_tokens = ops.where(ops.repeat(done, k, axis=0), END_ID, next_tokens)
        state = (ops.reshape(next_open, (-1,)), pool_tokens, pool_scores, pooled, done, new_history, step + 1)
        return next_tokens, parents, state

    def _open_sources(self, done, pooled):
        """Sources whose pool still takes hypotheses: not done, and not full under `early_stopping`."""
        return ops.logical_not(ops.logical_or(done, ops.logical_and(ops.all(pooled, axis=1), self.early_stopping)))

    def _merge(self, pool, new):
        """The `width` best of a pool `(tokens, scores, pooled)` and new hypotheses (those flagged only)."""
        tokens, scores, flags = new
        scores = ops.where(flags, scores, _NEVER)
        merged_scores = ops.concatenate([pool[1], scores], axis=1)
        kept_scores, best = ops.top_k(merged_scores, self.width)
        best = ops.cast(best, "int32")
        kept_tokens = ops.take_along_axis(ops.concatenate([pool[0], tokens], axis=1), best[:, :, None], axis=1)
        kept_flags = ops.take_along_axis(ops.concatenate([pool[2], flags], axis=1), best, axis=1)
        return kept_tokens, kept_scores, kept_flags

    def best(self, generated, state):
        """Each source's best pooled hypothesis: int32 `(sources, max_new_tokens)`."""
        _, pool_tokens, pool_scores, _, _, _, _ = state
        best = ops.cast(ops.argmax(pool_scores, axis=1), "int32")
        return ops.take_along_axis(pool_tokens, best[:, None, None], axis=1)[:, 0]

    def pick(self, values, state):
        """Not kept: the pool holds tokens only, so the cross-attention of a pooled hypothesis is not at hand."""
        raise NotImplementedError("PooledBeamChoice keeps no per-row values of its pooled hypotheses.")
