"""N-best lists: each source's best hypotheses of a beam search, with their scores.

`NBestChoice` is a `BeamChoice` that also keeps, for every hypothesis, the
log-probability of each token it chose; `search.n_best_search` runs the
one decoding loop with it and returns the `n` best hypotheses of each
source, best first (an `NBest`). The first is exactly `beam_search`'s output for the same
settings.

A score is a log-probability under the distribution the search draws
from: the model's, without the tokens no output may hold (padding and the
start token, `sampler.mask_forbidden_tokens`, and under the loop guard a
token that would repeat an n-gram). A hypothesis' `score` is the sum of its
token scores (`END_ID` included, the padding after it at no cost); its
`normalized_score` is what the beam ranks by, `score / ((5 + length) / 6)
** length_penalty` (`BeamChoice`).
"""

import dataclasses

from keras import ops

from keras_transformer.decoding.choices import BeamChoice
from keras_transformer_runtime.hypotheses import NBest  # noqa: F401 (what n_best_search returns, importable here)

@dataclasses.dataclass(frozen=True)
class NBestChoice(BeamChoice):
    """A `BeamChoice` that keeps each hypothesis' token scores and returns the `n` best.

    Args:
        width: int, hypotheses per source.
        length_penalty: float alpha; 0 ranks by raw log-probability.
        n: int in `[1, width]`, hypotheses returned per source.
        max_new_tokens: int, the decoding loop's columns.

    Example:

    >>> choice = NBestChoice(width=2, n=2, max_new_tokens=3)
    >>> scores, lengths, token_scores, index = choice.initial_state(2)
    >>> tuple(token_scores.shape)
    (2, 3)
    """

    n: int = 1
    max_new_tokens: int = 1

    def initial_state(self, rows):
        """`(scores, lengths, token_scores, index)`: `BeamChoice`'s, the token scores so far and the step."""
        return (*super().initial_state(rows), ops.zeros((rows, self.max_new_tokens), "float32"),
                ops.convert_to_tensor(0, "int32"))

    def choose(self, logits, finished, state):
        """`BeamChoice.choose`, writing each kept hypothesis' new token score at this step's column."""
        scores, lengths, token_scores, index = state
        next_tokens, parents, (new_scores, new_lengths) = super().choose(logits, finished, (scores, lengths))
        # A dead hypothesis (fewer live ones than `width`) stays at -inf, not -inf - -inf.
        step_scores = ops.where(
            ops.isfinite(new_scores), new_scores - ops.take(scores, parents, axis=0), float("-inf")
        )
        columns = ops.arange(self.max_new_tokens, dtype="int32")
        token_scores = ops.where(
            ops.equal(columns[None, :], index), step_scores[:, None], ops.take(token_scores, parents, axis=0)
        )
        return next_tokens, parents, (new_scores, new_lengths, token_scores, index + 1)

    def best(self, generated, state):
        """`(tokens, scores, normalized_scores, token_scores)` of each group's `n` best rows, best first.

        The first is `BeamChoice.best`'s row (the lowest of tied rows), the
        others follow by normalized score.
        """
        scores, lengths, token_scores, _ = state
        normalized = scores / ops.power((5.0 + lengths) / 6.0, self.length_penalty)
        return tuple(self.pick(values, state) for values in (generated, scores, normalized, token_scores))

    def pick(self, values, state):
        """`(groups, n, ...)`: the rows of `values` (per-row tensors) of each group's `n` best, best first."""
        scores, lengths, _, _ = state
        penalty = ops.power((5.0 + lengths) / 6.0, self.length_penalty)
        normalized = ops.reshape(scores / penalty, (-1, self.width))
        order = ops.cast(ops.argmax(normalized, axis=-1), "int32")[:, None]
        if self.n > 1:
            rest = ops.where(ops.equal(ops.arange(self.width, dtype="int32")[None, :], order), float("-inf"),
                             normalized)
            order = ops.concatenate([order, ops.cast(ops.top_k(rest, self.n - 1)[1], "int32")], axis=1)
        groups = ops.shape(normalized)[0]
        rows = ops.reshape(ops.arange(groups, dtype="int32")[:, None] * self.width + order, (-1,))
        picked = ops.take(values, rows, axis=0)
        return ops.reshape(picked, (groups, self.n, *picked.shape[1:]))
