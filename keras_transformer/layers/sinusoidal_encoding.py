"""The fixed sinusoidal position table of the paper, exact to float32 whatever the compute dtype."""

import numpy as np


def sinusoidal_encoding(length, depth):
    """The fixed sinusoidal position table of section 3.5 of the paper.

    P[pos, 2i] = sin(pos / 10000^(2i / depth)) and
    P[pos, 2i + 1] = cos(pos / 10000^(2i / depth)), sines and cosines
    interleaved as in the paper. Computed in float64 on the host and returned
    as float32, so it is exact to float32 precision whatever the layer's
    compute dtype (a table computed in bfloat16 is off by up to ~2.0 at
    large positions).

    Args:
        length: int, number of positions.
        depth: int, number of features per position.

    Returns:
        A float32 NumPy array of shape `(length, depth)`.

    Example:

    >>> table = sinusoidal_encoding(4, 6)
    >>> table.shape
    (4, 6)
    >>> float(table[0, 1])  # cos(0)
    1.0
    """
    if length < 0 or depth < 1:
        raise ValueError(
            f"sinusoidal_encoding needs length >= 0 and depth >= 1, got "
            f"length={length}, depth={depth}."
        )
    positions = np.arange(length, dtype=np.float64)[:, None]
    even_features = np.arange(0, depth, 2, dtype=np.float64)
    angles = positions / np.power(10000.0, even_features / depth)[None, :]
    table = np.empty((length, depth), dtype=np.float64)
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : depth // 2])
    return table.astype(np.float32)
