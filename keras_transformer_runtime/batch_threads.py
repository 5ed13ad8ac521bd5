"""Batches decoded side by side, one a thread: how a compiled engine fills a CPU's cores.

XLA's CPU code for one decoding step of a small model is a chain of small
operations that mostly run on one core: on the README's model a beam-4
pass over the test split kept little more than one core busy. Batches on
threads of their own, one a core, ran it much faster, the tokens
unchanged. A batch more than the cores helps too, likely by filling the
moments a core waits on the host (Python between batches); more than that
did not (benchmarks/findings/decoding.md, "The compiled engine on a CPU").
`in_order` runs them so and gives the results back in order.
"""

import collections
import concurrent.futures
import itertools
import os

# "auto": one batch a core on a CPU (plus `spare`); on a GPU or TPU one program fills the device.
DEFAULT_PARALLEL_BATCHES = "auto"
# The compiled engine's spare batch on a CPU (see the module's docstring).
ENGINE_SPARE_BATCHES = 1
# Above this many bytes of weights a call of one batch stays whole: each part reads every weight each
# step, and a step of a wide float32 model is bound by reading them (`batch_cores`).
BATCH_A_CORE_MAX_WEIGHT_BYTES = 128 * 2**20


def usable_cores():
    """The CPU cores this process may run on (its affinity), at least 1.

    Example:

    >>> usable_cores() >= 1
    True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def resolve_parallel_batches(parallel_batches, has_accelerator, spare=0):
    """`parallel_batches` as an int: `"auto"` is a batch a usable core (plus `spare`) on a CPU, 1 on an accelerator.

    Args:
        parallel_batches: `"auto"` or an int >= 1.
        has_accelerator: callable returning whether a GPU or TPU runs the
            program (asked only for `"auto"`).
        spare: int, batches beyond one a core for `"auto"` on a CPU.

    Raises:
        ValueError: neither `"auto"` nor an int >= 1.

    Example:

    >>> resolve_parallel_batches("auto", lambda: True), resolve_parallel_batches(3, None)
    (1, 3)
    """
    if parallel_batches == "auto":
        return 1 if has_accelerator() else usable_cores() + spare
    if isinstance(parallel_batches, bool) or not isinstance(parallel_batches, int) or parallel_batches < 1:
        raise ValueError(f'parallel_batches must be "auto" or an int >= 1, got parallel_batches={parallel_batches!r}.')
    return parallel_batches


def in_order(function, items, threads):
    """`map(function, items)` with up to `threads` calls at a time, results in the order of `items`.

    At most `2 * threads` calls are started ahead of the result being read,
    so a long list holds few results at once. When the caller stops early
    (an error, Ctrl-C, a closed generator), the calls not started are
    cancelled and the running ones are waited for: no thread outlives it.

    Args:
        function: callable of one item; it must be safe to call from
            several threads (a compiled JAX program is).
        items: a sequence.
        threads: int >= 1; 1 (or a single item) calls `function` in this
            thread, one item after the other.

    Yields:
        `function(item)` for each item, in order; an exception raised by a
        call is raised here, at its item.

    Example:

    >>> list(in_order(lambda x: x * x, [1, 2, 3], threads=2))
    [1, 4, 9]
    """
    if threads <= 1 or len(items) <= 1:
        yield from map(function, items)
        return
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(threads, len(items)),
                                                 thread_name_prefix="decode")
    queue = iter(items)
    try:
        pending = collections.deque(pool.submit(function, item) for item in itertools.islice(queue, 2 * threads))
        while pending:
            result = pending.popleft().result()
            for item in itertools.islice(queue, 1):  # one started for each one read
                pending.append(pool.submit(function, item))
            yield result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def batch_cores(weight_bytes, parallel_batches):
    """The cores a compiled engine on a CPU splits a call of one batch's sentences over (`parts_a_core`).

    One a usable core, up to `parallel_batches`, where the weights take at
    most `BATCH_A_CORE_MAX_WEIGHT_BYTES`; else 1, the call whole. Calls of
    a batch's sentences ran faster split on the README's model, on `small`
    and at opus-mt-es-en's shape in int8, and slower at that shape in
    float32, whose step is bound by reading its weights
    (benchmarks/findings/decoding.md, "A call of a few sentences").

    Args:
        weight_bytes: int, the bytes of the program's weights.
        parallel_batches: int, the batches the engine decodes at a time.

    Returns:
        int >= 1.

    Example:

    >>> batch_cores(8 * 2**20, 3) == min(usable_cores(), 3), batch_cores(296 * 2**20, 3)
    (True, 1)
    """
    if weight_bytes > BATCH_A_CORE_MAX_WEIGHT_BYTES:
        return 1
    return min(usable_cores(), parallel_batches)


def parts_a_core(count, batch_size, cores):
    """How a call of `count` sentences, one batch's worth or fewer, is split into a batch a core.

    One batch would run on one thread, its products spread over the cores
    by XLA; parts side by side on their own threads keep each core on its
    own rows: at opus-mt-es-en's shape in int8 a step of the parts took
    less time than one of the whole batch, greedy and beam 4
    (benchmarks/findings/decoding.md, "On a CPU with AVX-512 and AMX").

    Args:
        count: int, the call's sentences (after blank ones are left out).
        batch_size: int, the translator's batch size.
        cores: int, the batches it may decode at a time on cores of their own.

    Returns:
        `(sizes, rows)`: each part's number of sentences, in order, and
        the rows each part is padded to (None where each part is a lone
        sentence, which gets the translator's `lone_sentence_rows`);
        `([count], None)` where the call is not split (more than a batch,
        one core, one sentence).

    Example:

    >>> parts_a_core(8, 8, 2), parts_a_core(5, 8, 2), parts_a_core(2, 4, 2)
    (([4, 4], 4), ([3, 2], 4), ([1, 1], None))
    >>> parts_a_core(9, 8, 2), parts_a_core(8, 8, 1), parts_a_core(1, 8, 2)
    (([9], None), ([8], None), ([1], None))
    """
    parts = min(cores, count)
    if parts < 2 or count > batch_size:
        return [count], None
    size = -(-count // parts)
    sizes = [size] * (count // size) + ([count % size] if count % size else [])
    return sizes, (-(-batch_size // cores) if size > 1 else None)


def queue_parts(count, batch_size, queue_size, threads):
    """How a call of `count` sentences is split into queues of a refilling engine (`decoding.refill`).

    As few queues as hold `queue_size` sentences each, but no fewer than
    the threads that `count` sentences in batches of `batch_size` would
    keep busy; near-equal queues of consecutive (sorted) sentences, each
    padded to the rows of the smallest power of two above `batch_size`
    that holds the largest (rows of zeros, which the program does not decode).

    Args:
        count: int, the call's sentences.
        batch_size: int, the rows a refilling program decodes at a time.
        queue_size: int, the most sentences a queue holds.
        threads: int, the queues decoded at a time.

    Returns:
        `(sizes, rows)`.

    Example:

    >>> queue_parts(605, 8, 64, 3), queue_parts(20, 8, 64, 3), queue_parts(9, 8, 64, 3)
    (([61, 61, 61, 61, 61, 60, 60, 60, 60, 60], 64), ([7, 7, 6], 16), ([5, 4], 16))
    """
    queues = max(-(-count // queue_size), min(threads, -(-count // batch_size)))
    sizes = [count // queues + (1 if part < count % queues else 0) for part in range(queues)]
    rows = 2 * batch_size
    while rows < sizes[0]:
        rows *= 2
    return sizes, rows


def call_parts(count, batch_size, cores, queue_size=None, threads=1):
    """`(sizes, rows, queued)`: how a call of `count` sentences is split, and padded, for its engine.

    More than a batch goes in batches of `batch_size` (the rows of the
    first for all), or in queues (`queue_parts`) where the engine refills
    (`queue_size`; `queued` True: pad with rows of zeros); a batch's worth
    or fewer in a batch a core (`parts_a_core`).

    Example:

    >>> call_parts(20, 8, 2), call_parts(20, 8, 2, queue_size=64, threads=3)[1:], call_parts(5, 8, 2)
    (([8, 8, 8], 8, False), (16, True), ([3, 2], 4, False))
    """
    if count > batch_size and queue_size:
        return (*queue_parts(count, batch_size, queue_size, threads), True)
    if count > batch_size:  # several batches: each as many rows as the first, one shape fewer
        return [batch_size] * -(-count // batch_size), batch_size, False
    return (*parts_a_core(count, batch_size, cores), False)
