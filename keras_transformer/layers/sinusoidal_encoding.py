"""The fixed sinusoidal position table of the paper, exact to float32 whatever the compute dtype."""

import numpy as np

# How the sines and cosines are laid out along the features.
LAYOUTS = ("interleaved", "halves", "fairseq")
# fairseq counts positions from its padding id + 1: the first token takes row 2.
FAIRSEQ_POSITION_OFFSET = 2


def sinusoidal_encoding(length, depth, layout="interleaved"):
    """The fixed sinusoidal position table of section 3.5 of the paper.

    P[pos, 2i] = sin(pos / 10000^(2i / depth)) and
    P[pos, 2i + 1] = cos(pos / 10000^(2i / depth)), sines and cosines
    interleaved as in the paper. Computed in float64 on the host and returned
    as float32, so it is exact to float32 precision whatever the layer's
    compute dtype (a table computed in bfloat16 is off by up to ~2.0 at
    large positions).

    With `layout="halves"` the same values are laid out as Marian (and so
    every OPUS-MT model on Hugging Face) has them: all the sines first,
    then all the cosines. It is a permutation of the features: P_halves[:, i]
    = P[:, 2i] for the first half, P_halves[:, half + i] = P[:, 2i + 1].

    With `layout="fairseq"` the table is fairseq's (and so M2M-100's and
    NLLB-200's on Hugging Face): sines then cosines, at the frequencies
    10000^(-i / (half - 1)) rather than 10000^(-i / half), and position
    `pos` takes fairseq's row `pos + FAIRSEQ_POSITION_OFFSET` (fairseq
    counts positions from its padding id, 1, plus one). An odd `depth`
    gets a last feature of zeros, as there.

    Args:
        length: int, number of positions.
        depth: int, number of features per position.
        layout: `"interleaved"` (default, the paper's), `"halves"` or `"fairseq"`.

    Returns:
        A float32 NumPy array of shape `(length, depth)`.

    Example:

    >>> table = sinusoidal_encoding(4, 6)
    >>> table.shape
    (4, 6)
    >>> float(table[0, 1])  # cos(0)
    1.0
    >>> halves = sinusoidal_encoding(4, 6, layout="halves")
    >>> bool((halves[:, 3] == table[:, 1]).all())  # the first cosine
    True
    >>> round(float(sinusoidal_encoding(1, 6, layout="fairseq")[0, 1]), 6)  # sin(2 * 10000 ** -0.5)
    0.019999
    """
    if length < 0 or depth < 1:
        raise ValueError(
            f"sinusoidal_encoding needs length >= 0 and depth >= 1, got "
            f"length={length}, depth={depth}."
        )
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got layout={layout!r}.")
    if layout == "fairseq":
        return _fairseq_table(length, depth)
    positions = np.arange(length, dtype=np.float64)[:, None]
    even_features = np.arange(0, depth, 2, dtype=np.float64)
    angles = positions / np.power(10000.0, even_features / depth)[None, :]
    table = np.empty((length, depth), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : depth // 2])
    if layout == "halves":
        table = np.concatenate([table[:, 0::2], table[:, 1::2]], axis=1)
    return table.astype(np.float32)


def _fairseq_table(length, depth):
    half = depth // 2
    frequencies = np.exp(np.arange(half, dtype=np.float64) * -(np.log(10000.0) / max(half - 1, 1)))
    angles = (np.arange(length, dtype=np.float64) + FAIRSEQ_POSITION_OFFSET)[:, None] * frequencies[None, :]
    table = np.concatenate([np.sin(angles), np.cos(angles), np.zeros((length, depth % 2))], axis=1)
    return table.astype(np.float32)
