"""The choices of the decoding loop: which tokens each step keeps, and which rows it returns.

A choice is the one thing greedy and beam search do differently
(`sampler.search_tensors` runs the same loop for both): `initial_state(rows)`,
`choose(logits, finished, state) -> (next_tokens, parents, state)` (`parents`
None when no row changes place), `best(generated, state)` (what the search
returns) and `pick(values, state)` (the same rows of any per-row tensor,
e.g. the recorded cross-attention). `n_best.NBestChoice` is a third, and
`pooled_beam.PooledBeamChoice` (transformers' beam search) a fourth.
"""

import dataclasses

from keras import ops

from keras_transformer.decoding.top_k import top_k_by_chunks
from keras_transformer_runtime.special_tokens import PAD_ID


def first_max_index(logits):
    """Each row's index of its largest value, the lowest index on ties (`argmax`), as int32.

    Written as two plain reductions, a max and then a max over the negated
    indices where the row reaches it: XLA's CPU backend runs `argmax` (one
    reduction of value and index pairs) several times slower in a compiled
    loop (benchmarks/findings/decoding.md, "Where a decoding step's time
    goes"). The indices are exact in float32 up to
    2**24 entries.

    Args:
        logits: float `(rows, vocabulary)`.

    Returns:
        int32 `(rows,)`.

    Example:

    >>> ops.convert_to_numpy(first_max_index(ops.convert_to_tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]]))).tolist()
    [1, 0]
    """
    vocabulary = logits.shape[-1]
    if vocabulary is None or vocabulary > 2**24:
        return ops.cast(ops.argmax(logits, axis=-1), "int32")
    largest = ops.max(logits, axis=-1, keepdims=True)
    negated = -ops.arange(vocabulary, dtype="float32")
    at_largest = ops.where(ops.equal(logits, largest), negated[None, :], float("-inf"))
    return ops.cast(-ops.max(at_largest, axis=-1), "int32")


@dataclasses.dataclass(frozen=True)
class GreedyChoice:
    """Picks each row's most likely next token (argmax; ties go to the lower id).

    Example:

    >>> tokens, _, _ = GreedyChoice().choose(ops.eye(3), None, ())
    >>> ops.convert_to_numpy(tokens).tolist()
    [0, 1, 2]
    """

    width = 1

    def initial_state(self, rows):
        """What the choice carries from step to step: nothing."""
        return ()

    def choose(self, logits, finished, state):
        """`(next_tokens (rows,), None, state)`: no row changes place."""
        return first_max_index(logits), None, state

    def best(self, generated, state):
        """The sequences to return: every row's own."""
        return self.pick(generated, state)

    def pick(self, values, state):
        """The rows of `values` (per-row tensors) that `best` returns: all of them."""
        return values


@dataclasses.dataclass(frozen=True)
class BeamChoice:
    """Keeps the `width` best hypotheses per source, by total log-probability.

    A finished hypothesis continues with padding only, at no cost. At the
    end each source's best hypothesis is the one with the highest
    log-probability divided by `((5 + length) / 6) ** length_penalty`
    (Wu et al., 2016, as the paper's beam search), where `length` counts
    the tokens up to and with `END_ID`. Rows come in groups of `width`, one
    group per source; a choice never moves a row out of its group.

    Args:
        width: int, hypotheses per source.
        length_penalty: float alpha; 0 ranks by raw log-probability.

    Example:

    >>> beam = BeamChoice(width=2, length_penalty=0.6)
    >>> scores, lengths = beam.initial_state(2)
    >>> ops.convert_to_numpy(scores).tolist()
    [0.0, -inf]
    """

    width: int = 4
    length_penalty: float = 0.6

    def initial_state(self, rows):
        """`(scores, lengths)`, float32 `(rows,)`: only each group's first row is live."""
        first = ops.equal(ops.mod(ops.arange(rows, dtype="int32"), self.width), 0)
        return ops.where(first, 0.0, float("-inf")), ops.zeros((rows,), "float32")

    def choose(self, logits, finished, state):
        """The `width` best continuations of each group, and the rows they extend."""
        scores, lengths = state
        vocabulary = logits.shape[-1]
        log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
        only_padding = ops.where(ops.equal(ops.arange(vocabulary), PAD_ID), 0.0, float("-inf"))
        log_probs = ops.where(finished[:, None], only_padding[None, :], log_probs)
        candidates = ops.reshape(scores[:, None] + log_probs, (-1, self.width * vocabulary))
        top_scores, top = top_k_by_chunks(candidates, self.width)
        groups = ops.shape(candidates)[0]
        group_start = ops.arange(groups, dtype="int32")[:, None] * self.width
        parents = ops.reshape(group_start + ops.floor_divide(top, vocabulary), (-1,))
        grew = ops.cast(ops.logical_not(ops.take(finished, parents, axis=0)), "float32")
        lengths = ops.take(lengths, parents, axis=0) + grew
        next_tokens = ops.reshape(ops.mod(top, vocabulary), (-1,))
        return next_tokens, parents, (ops.reshape(top_scores, (-1,)), lengths)

    def best(self, generated, state):
        """Each group's best row by length-normalized score."""
        return self.pick(generated, state)

    def pick(self, values, state):
        """The rows of `values` (per-row tensors, e.g. the generated tokens) of each group's best hypothesis."""
        scores, lengths = state[:2]
        penalty = ops.power((5.0 + lengths) / 6.0, self.length_penalty)
        normalized = ops.reshape(scores / penalty, (-1, self.width))
        best = ops.cast(ops.argmax(normalized, axis=-1), "int32")
        rows = ops.arange(ops.shape(normalized)[0], dtype="int32") * self.width + best
        return ops.take(values, rows, axis=0)
