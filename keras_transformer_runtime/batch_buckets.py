"""The few shapes a compiled loop's batches are padded into: source widths and batch rows.

A compiled decoding loop is one program per batch shape, and each costs
seconds to compile on a CPU (benchmarks/findings/decoding.md, "Decoding
speed"), so a stream of batches is padded into a few shapes: rows to 8,
16, 32, ... and sources to `SOURCE_BUCKET` tokens, to a power of two above
it, or to one and a half times one (`source_widths`). Every padded source
token costs the encoder's work and a share of every step's cross-attention;
the half steps pad a batch of long sources to at most half again its longest.
"""

# The narrowest padded source width: shorter sources are padded to it.
SOURCE_BUCKET = 32
# A batch of fewer sentences is filled up to the next of these sizes (or
# to `batch_size`), so that a stream of batches compiles a few programs.
SMALLEST_BATCH = 8


def next_bucket(size, smallest):
    """`smallest`, or the first power-of-two multiple of it that holds `size`.

    Args:
        size: int, what must fit (rows of a batch, say).
        smallest: int, the first bucket.

    Returns:
        int.

    Example:

    >>> [next_bucket(size, 8) for size in (1, 8, 9, 17)]
    [8, 8, 16, 32]
    """
    bucket = smallest
    while bucket < size:
        bucket *= 2
    return bucket


def source_widths(max_length):
    """Every width a bucketed batch of sources is padded to, ascending.

    `SOURCE_BUCKET`, then the powers of two above it and, from twice
    `SOURCE_BUCKET` on, one and a half times each; the last is
    `max_length`, which cuts the list (a model with fewer positions than
    `SOURCE_BUCKET` has only its own). A width within an eighth of
    `max_length` is left out: one program fewer for a few tokens more.

    Args:
        max_length: int, the model's source positions.

    Returns:
        list of int.

    Example:

    >>> source_widths(300)
    [32, 64, 96, 128, 192, 256, 300]
    >>> source_widths(100)
    [32, 64, 100]
    >>> source_widths(24)
    [24]
    """
    widths, power = [], SOURCE_BUCKET
    while not widths or widths[-1] < max_length:
        widths += [power] if power == SOURCE_BUCKET else [power, power * 3 // 2]
        power *= 2
    return [width for width in widths if width * 8 < max_length * 7] + [max_length]


def source_width(width, max_length):
    """The padded width of a batch whose longest source has `width` tokens: the first of `source_widths` that holds it.

    Args:
        width: int, the batch's longest source in tokens (at most `max_length`).
        max_length: int, the model's source positions.

    Returns:
        int.

    Example:

    >>> [source_width(width, 1024) for width in (1, 33, 65, 97, 129, 1000)]
    [32, 64, 96, 128, 192, 1024]
    """
    return next(bucket for bucket in source_widths(max_length) if bucket >= min(width, max_length))
