"""The `k` largest of many values, found through the largest of each chunk: beam search's choice.

Beam search picks, each step, the `width` best of `width x vocabulary`
candidates per source. XLA's CPU `TopK` partially sorts every row, a
noticeable share of a beam step of the README's model. The `k` largest lie
in the `k` chunks with the largest maxima, so one max over chunks and a
`top_k` over `k` chunks give the same values and indices, several times
faster (benchmarks/findings/decoding.md, "The compiled engine on a CPU").
"""

from keras import ops

# Values per chunk: 32 and 64 were the fastest on a CPU (the same section).
CHUNK = 32


def top_k_by_chunks(values, k, chunk=CHUNK):
    """`ops.top_k(values, k)` over the last axis, through the maxima of chunks of it.

    The same values and indices as `keras.ops.top_k` (sorted, ties to the
    lower index, as XLA's and TensorFlow's; torch orders ties as its
    `topk` does), for any values: the `k`
    largest are in the `k` chunks whose maxima are largest (a chunk that
    ties with a later one comes first, and so does its maximum), so only
    those `k * chunk` values are sorted. A row shorter than `4 * k * chunk`
    goes to `ops.top_k` directly.

    Args:
        values: float `(rows, n)`, `n` known when traced.
        k: int, how many to keep per row.
        chunk: int, values per chunk.

    Returns:
        `(top_values, indices)`: `(rows, k)`, largest first, and their
        int32 indices into the last axis.

    Example:

    >>> values = ops.convert_to_tensor([[float(i * 7 % 1000) for i in range(1000)]])
    >>> top, indices = top_k_by_chunks(values, 3, chunk=8)
    >>> ops.convert_to_numpy(top).tolist(), ops.convert_to_numpy(indices).tolist()
    ([[999.0, 998.0, 997.0]], [[857, 714, 571]])
    """
    n = values.shape[-1]
    if n is None or n < 4 * k * chunk:
        top_values, indices = ops.top_k(values, k)
        return top_values, ops.cast(indices, "int32")
    chunks = -(-n // chunk)
    if chunks * chunk != n:  # the padding comes last, so it loses every tie
        values = ops.pad(values, [[0, 0], [0, chunks * chunk - n]], constant_values=float("-inf"))
    maxima = ops.max(ops.reshape(values, (-1, chunks, chunk)), axis=-1)
    _, best_chunks = ops.top_k(maxima, k)
    # In index order, so that a tie between chunks goes to the lower index, as in ops.top_k.
    best_chunks = ops.sort(ops.cast(best_chunks, "int32"), axis=-1)
    candidate_indices = ops.reshape(
        best_chunks[:, :, None] * chunk + ops.arange(chunk, dtype="int32")[None, None, :], (-1, k * chunk)
    )
    candidates = ops.take_along_axis(values, candidate_indices, axis=-1)
    top_values, best = ops.top_k(candidates, k)
    return top_values, ops.take_along_axis(candidate_indices, ops.cast(best, "int32"), axis=-1)
