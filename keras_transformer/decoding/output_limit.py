"""A cap on run-away output: each row's translation ends once it is too long for its source.

A model that loops (writes one phrase again and again, as NLLB-200 is
known to) runs to the length limit. With a ratio `r`, a row whose source
holds `n` ids (its end token and any language token counted) writes at
most `floor(r * n) + OUTPUT_SLACK` tokens: at that position the end token
is the only choice left (`end_at_output_limit`). A ratio of 0 turns the cap
off. `CachedDecoder(max_output_ratio=r)` applies it to every search that
runs on it, the compiled engine's included.
"""

from keras import ops

from keras_transformer_runtime.search_defaults import OUTPUT_SLACK
from keras_transformer_runtime.special_tokens import END_ID


def output_limits(encoder_mask, ratio):
    """The most tokens each row may write: `floor(ratio * source ids) + OUTPUT_SLACK`, int32 `(rows,)`.

    Args:
        encoder_mask: bool `(rows, source_length)`, True at each source id (not padding).
        ratio: float > 0.

    Example:

    >>> import numpy as np
    >>> ops.convert_to_numpy(output_limits(np.array([[True, True, False], [True, True, True]]), 1.5)).tolist()
    [13, 14]
    """
    lengths = ops.sum(ops.cast(encoder_mask, "float32"), axis=-1)
    return ops.cast(ops.floor(lengths * ratio), "int32") + OUTPUT_SLACK


def end_at_output_limit(logits, positions, limits):
    """`logits` with the end token the only choice of each row at or past its limit.

    Args:
        logits: float `(rows, vocabulary)`, the next token's.
        positions: int, the step's position (a scalar), or each row's `(rows,)`.
        limits: int `(rows,)`, `output_limits`.

    Example:

    >>> import numpy as np
    >>> logits = ops.convert_to_numpy(end_at_output_limit(np.zeros((2, 6), "float32"), 3, np.array([3, 5])))
    >>> logits[0].tolist() == [float("-inf")] * END_ID + [0.0] + [float("-inf")] * 2, logits[1].tolist()
    (True, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    """
    logits = ops.convert_to_tensor(logits)
    over = ops.greater_equal(ops.convert_to_tensor(positions, "int32"), limits)
    only_end = ops.where(ops.equal(ops.arange(ops.shape(logits)[-1], dtype="int32"), END_ID), 0.0, float("-inf"))
    return ops.where(over[:, None], ops.cast(only_end, logits.dtype)[None, :], logits)
