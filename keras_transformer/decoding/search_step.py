"""One step of every search: the rules a step's logits obey, and the tokens chosen from them.

The decoding loop (`sampler.search_tensors`) and the refilling loop
(`refill.refill_search_tensors`) differ in how their rows reach the logits
(a batch at one position; rows at positions of their own, in rings). From
the logits on, a step is the same and written once here
(`choose_next_tokens`): the tokens a decoder may never emit masked, the
forced first token, the loop guard, the choice (greedy or beam), the
bookkeeping of generated and finished rows.
"""

import keras
import numpy as np
from keras import ops

from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID
from keras_transformer_runtime.special_tokens import START_ID

# A generated PAD_ID would be masked as padding when the prefix is re-read,
# and START_ID only opens a sequence.
FORBIDDEN_TOKEN_IDS = (PAD_ID, START_ID)


def forbidden_token_ids(decoder):
    """The tokens `decoder` may never emit: padding, and the token its targets start with.

    A model imported from Marian starts from its padding token, so its
    `START_ID` is an ordinary piece it may emit; one imported from NLLB-200
    or M2M-100 starts from `END_ID`, which it must still be able to emit.

    Example:

    >>> forbidden_token_ids(object())  # a decoder that names no start: START_ID
    (0, 2)
    """
    start = decoder_start_id(decoder)
    return tuple(sorted({PAD_ID} | ({start} if start != END_ID else set())))


def decoder_start_id(decoder):
    """The token `decoder`'s targets start with (its `start_id`, else `START_ID`)."""
    return getattr(decoder, "start_id", START_ID)


def force_first_token(logits, index, token):
    """`logits` that give `token` log-probability 0 and every other token `-inf` at step 0; unchanged later.

    As transformers' `ForcedBOSTokenLogitsProcessor`: the forced token adds
    nothing to a hypothesis' score but counts in its length. NLLB-200 and
    M2M-100 write the target language's token there (`forced_bos_token_id`).

    Args:
        logits: float `(rows, vocabulary)`, for the token at column `index`.
        index: int scalar tensor, the column being chosen, or int
            `(rows,)`, each row's.
        token: int, or int32 scalar tensor, the forced token.

    Returns:
        The logits, forced at step 0.

    Example:

    >>> forced = force_first_token(keras.ops.ones((1, 4)), 0, 2)
    >>> keras.ops.convert_to_numpy(forced).tolist()
    [[-inf, -inf, 0.0, -inf]]
    """
    vocabulary = ops.arange(logits.shape[-1], dtype="int32")
    only = ops.where(ops.equal(vocabulary, ops.convert_to_tensor(token, "int32")), 0.0, float("-inf"))
    first = ops.equal(ops.convert_to_tensor(index, "int32"), 0)
    if len(first.shape) == 1:  # a column per row (`refill`)
        first = first[:, None]
    return ops.where(first, ops.cast(only, logits.dtype)[None, :], logits)


def mask_forbidden_tokens(logits, forbidden=FORBIDDEN_TOKEN_IDS):
    """`logits` with the tokens a decoder must never emit set to `-inf`.

    Args:
        logits: float `(rows, vocabulary)`.
        forbidden: the token ids to mask (`forbidden_token_ids` of the
            decoder). Defaults to `FORBIDDEN_TOKEN_IDS` (padding, start).

    Returns:
        The logits with `forbidden` at `-inf`.

    Example:

    >>> row = mask_forbidden_tokens(keras.ops.zeros((1, 5)))  # PAD_ID 0, START_ID 2
    >>> keras.ops.convert_to_numpy(row).tolist()
    [[-inf, 0.0, -inf, 0.0, 0.0]]
    """
    forbidden = np.isin(np.arange(logits.shape[-1]), forbidden)
    return ops.where(ops.convert_to_tensor(forbidden)[None, :], float("-inf"), logits)


def block_repeated_ngrams(logits, generated, index, size):
    """`logits` with `-inf` for every token that would repeat an n-gram.

    The guard against loops ("and good and good and good"): a token is
    blocked when, after the `size - 1` tokens generated last, it would
    complete an n-gram of `size` tokens that the row already holds
    (fairseq's and Hugging Face's `no_repeat_ngram_size`).

    Args:
        logits: float `(rows, vocabulary)`, for the token at column `index`.
        generated: int `(rows, length)`: the tokens so far in columns
            `[0, index)`.
        index: int scalar tensor, the column being chosen, or int
            `(rows,)`, each row's (rows at different steps: `refill`).
        size: int >= 1, the n-gram length.

    Returns:
        The logits with the blocked tokens at `-inf`.

    Example:

    >>> generated = keras.ops.convert_to_tensor([[5, 6, 7, 5, 6, 0]])
    >>> logits = block_repeated_ngrams(keras.ops.zeros((1, 9)), generated, 5, 3)
    >>> keras.ops.convert_to_numpy(logits)[0].tolist()  # 5 6 -> 7 again is blocked
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -inf, 0.0]
    """
    vocabulary = logits.shape[-1]
    windows = generated.shape[1] - size + 1
    if windows <= 0:
        return logits
    index = ops.convert_to_tensor(index, "int32")
    per_row = len(index.shape) == 1
    # Window j holds columns j .. j + size - 1; it counts once its last
    # column has been generated, and blocks that last column's token when
    # its first size - 1 columns equal the last size - 1 tokens.
    if per_row:
        match = ops.less_equal(ops.arange(windows, dtype="int32")[None, :], (index - size)[:, None])
    else:
        match = ops.less_equal(ops.arange(windows, dtype="int32"), index - size)[None, :]
    for k in range(size - 1):
        column = ops.maximum(index - size + 1 + k, 0)
        recent = (ops.take_along_axis(generated, column[:, None], axis=1)[:, 0] if per_row
                  else ops.take(generated, column, axis=1))
        match = ops.logical_and(match, ops.equal(generated[:, k : k + windows], recent[:, None]))
    # Tokens of windows that do not match go to a spare column, dropped below.
    blocked = ops.where(match, generated[:, size - 1 :], vocabulary)
    rows = ops.shape(generated)[0]
    row_ids = ops.broadcast_to(ops.arange(rows, dtype="int32")[:, None], ops.shape(blocked))
    indices = ops.stack([ops.reshape(row_ids, (-1,)), ops.reshape(blocked, (-1,))], axis=-1)
    hits = ops.scatter_update(
        ops.zeros((rows, vocabulary + 1), "int32"), indices, ops.ones((ops.shape(indices)[0],), "int32")
    )
    return ops.where(ops.greater(hits[:, :vocabulary], 0), float("-inf"), logits)


def choose_next_tokens(choice, logits, positions, generated, finished, choice_state, forbidden, forced_first=None,
                       no_repeat_ngram_size=0, stop_at_end=True, **choice_arguments):
    """One step after the logits: the rules applied, the tokens chosen and written, finished rows kept finished.

    Args:
        choice: a choice (`choices.GreedyChoice`, `choices.BeamChoice`, ...).
        logits: float32 `(rows, vocabulary)`, for the token at `positions`.
        positions: int32 scalar tensor, the column every row chooses, or
            int32 `(rows,)`, each row's own (`refill`).
        generated: int32 `(rows, max_new_tokens)`, the tokens so far.
        finished: bool `(rows,)`, rows that have written `END_ID`.
        choice_state: the choice's state.
        forbidden: the token ids never emitted (`forbidden_token_ids`).
        forced_first: as `sampler.search_tensors`' (None: not forced).
        no_repeat_ngram_size: int, the loop guard (0: off).
        stop_at_end: bool, a row that writes `END_ID` is finished.
        **choice_arguments: passed to `choice.choose` (a pooled beam's `row_values`).

    Returns:
        `(next_tokens, parents, generated, finished, choice_state)`:
        int32 `(rows,)` (`PAD_ID` for finished rows), the rows each row
        continues (None for greedy: the caller reorders its caches by
        them), and the updated tensors.

    Example:

    >>> from keras_transformer.decoding.choices import GreedyChoice
    >>> logits = keras.ops.convert_to_tensor([[0.0, 0.0, 0.0, 5.0], [0.0, 9.0, 0.0, 0.0]])
    >>> tokens, parents, generated, finished, _ = choose_next_tokens(
    ...     GreedyChoice(), logits, 0, keras.ops.zeros((2, 3), "int32"), keras.ops.zeros((2,), "bool"), (), (0, 2))
    >>> keras.ops.convert_to_numpy(tokens).tolist(), keras.ops.convert_to_numpy(finished).tolist()  # END_ID is 3
    ([3, 1], [True, False])
    """
    logits = mask_forbidden_tokens(logits, forbidden)
    if forced_first is not None:
        logits = force_first_token(logits, positions, forced_first)
    if no_repeat_ngram_size:
        logits = block_repeated_ngrams(logits, generated, positions, no_repeat_ngram_size)
    next_tokens, parents, choice_state = choice.choose(logits, finished, choice_state, **choice_arguments)
    if parents is not None:
        generated = ops.take(generated, parents, axis=0)
        finished = ops.take(finished, parents, axis=0)
    next_tokens = ops.where(finished, PAD_ID, next_tokens)
    columns = ops.arange(generated.shape[1], dtype="int32")
    positions = ops.reshape(ops.convert_to_tensor(positions, "int32"), (-1, 1))
    generated = ops.where(ops.equal(columns[None, :], positions), next_tokens[:, None], generated)
    if stop_at_end:
        finished = ops.logical_or(finished, ops.equal(next_tokens, END_ID))
    return next_tokens, parents, generated, finished, choice_state
