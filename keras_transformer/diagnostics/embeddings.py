"""Embeddings: scaled tokens next to positions, and the subspace positions use.

How large the scaled token vectors are next to the positional encodings,
and how much of the learned token embeddings lies in the subspace the
positions use.
"""

import numpy as np

from keras_transformer.diagnostics.arrays import to_float64
from keras_transformer.layers.positional_embedding import PositionalEmbedding


def embedding_position_ratio(layer):
    """Mean norm of the scaled token vectors over that of the position vectors.

    With the default init (token std `d_model ** -0.5`) a token vector has
    norm about 1 and a sinusoidal position vector `sqrt(d_model / 2)`:
    without the `sqrt(d_model)` factor positions drown the tokens (ratio
    `sqrt(2 / d_model)`), with it the two are comparable (about `sqrt(2)`).

    Args:
        layer: a built `kt.layers.PositionalEmbedding`.

    Returns:
        A float.

    Example:

    >>> import keras_transformer as kt
    >>> layer = kt.layers.PositionalEmbedding(1000, 512, max_length=64)
    >>> layer.build()
    >>> round(embedding_position_ratio(layer), 1)
    1.4
    """
    tokens = to_float64(layer.embeddings) * layer.scale_factor
    positions = to_float64(layer.position_table())
    token_norm = np.linalg.norm(tokens, axis=-1).mean()
    return float(token_norm / np.linalg.norm(positions, axis=-1).mean())


def _orthonormal_basis(matrix, rank):
    """The top-`rank` right singular vectors of `matrix`, `(width, rank)`."""
    _, _, vt = np.linalg.svd(matrix, full_matrices=False)
    return vt[:rank].T


def principal_angles(a, b):
    """Principal angles (radians, ascending) between the column spans of a and b.

    Example:

    >>> a = np.eye(4)[:, :2]
    >>> np.round(principal_angles(a, np.eye(4)[:, 1:3]), 4).tolist()
    [0.0, 1.5708]
    """
    qa, _ = np.linalg.qr(to_float64(a))
    qb, _ = np.linalg.qr(to_float64(b))
    cosines = np.linalg.svd(qa.T @ qb, compute_uv=False)
    return np.arccos(np.clip(cosines, -1.0, 1.0))


def positional_subspace_energy(layer, rank=None):
    """Share of the token embeddings' energy inside the positions' subspace.

    The position table (`max_length` rows) spans a subspace of the
    `d_model`-wide space; with `merge="add"` the tokens share that space.
    This is the fraction of the (mean-centred) scaled token vectors' squared
    norm that lies in the top-`rank` principal subspace of the position
    vectors. A random subspace of that rank would hold `rank / d_model`.

    Args:
        layer: a built `kt.layers.PositionalEmbedding` with `merge="add"`.
        rank: dimension of the position subspace; defaults to the number of
            singular values that carry 99% of the positions' energy.

    Returns:
        A dict with `energy`, `chance` (`rank / d_model`) and `rank`.

    Example:

    >>> import keras_transformer as kt
    >>> layer = kt.layers.PositionalEmbedding(500, 64, max_length=32)
    >>> layer.build()
    >>> result = positional_subspace_energy(layer, rank=16)
    >>> result["chance"], abs(result["energy"] - 0.25) < 0.1
    (0.25, True)
    """
    if layer.merge != "add":
        raise ValueError(
            "positional_subspace_energy needs merge='add': with 'concat' "
            "tokens and positions occupy separate features by construction."
        )
    positions = to_float64(layer.position_table())
    if rank is None:
        singular = np.linalg.svd(positions, compute_uv=False) ** 2
        rank = int(np.searchsorted(np.cumsum(singular) / singular.sum(), 0.99) + 1)
    basis = _orthonormal_basis(positions, rank)
    tokens = to_float64(layer.embeddings) * layer.scale_factor
    tokens = tokens - tokens.mean(axis=0)
    inside = np.linalg.norm(tokens @ basis) ** 2
    return {
        "energy": float(inside / np.linalg.norm(tokens) ** 2),
        "chance": rank / layer.d_model,
        "rank": rank,
    }


def embedding_layers(model):
    """The `PositionalEmbedding` layers of a model, by name.

    Example:

    >>> import keras_transformer as kt
    >>> model = kt.models.transformer(50, 50, num_layers=1, d_model=16,
    ...                               num_heads=2, ff_dim=32, max_length=8)
    >>> sorted(embedding_layers(model))
    ['decoder_embedding', 'encoder_embedding']
    """
    return {
        layer.name: layer for layer in model.layers if isinstance(layer, PositionalEmbedding)
    }
