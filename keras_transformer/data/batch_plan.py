"""Which pairs go into which batch, in which order: one NumPy plan for both pipelines.

The `tf.data` pipeline (`keras_transformer.data.pipeline`) and the
`keras.utils.PyDataset` one (`keras_transformer.data.python_pipeline`) only
assemble the batches that a `BatchPlan` lists, so for the same pairs and
arguments they yield the same batches by construction, and every iterator
over either yields the same stream (a resumed or distributed run trains on
the batches of an uninterrupted one-device run).

NumPy only: no TensorFlow.
"""

import threading

import numpy as np

# Padded lengths are multiples of this (and max_length): few distinct batch
# shapes, so JAX compiles a handful of programs, not one per length.
BUCKET_WIDTH = 8
# Pairs in a streamed pipeline's shuffle buffer (both streams); ~60 MB of
# token ids at 50 tokens a side.
SHUFFLE_BUFFER = 65_536


def padded_lengths(max_length, bucket_width=BUCKET_WIDTH):
    """The sequence lengths batches are padded to: multiples of `bucket_width`, then `max_length`.

    Args:
        max_length: int, the longest sequence.
        bucket_width: int, the step between padded lengths. Defaults to 8.
            Each length is one batch shape, so one compiled program on JAX
            (about a minute each for the base model on a GPU): 32 gives
            32/64/96/128 for `max_length=128`.

    Returns:
        A sorted list of ints ending with `max_length`.

    Example:

    >>> padded_lengths(30)
    [8, 16, 24, 30]
    >>> padded_lengths(128, bucket_width=32)
    [32, 64, 96, 128]
    """
    for name, value in (("max_length", max_length), ("bucket_width", bucket_width)):
        if not _is_int(value) or value < 1:
            raise ValueError(f"`{name}` must be a positive int; received {name}={value!r}")
    return list(range(bucket_width, max_length, bucket_width)) + [int(max_length)]


class BatchPlan:
    """The batches of a tokenized corpus: pair indices, rows and padded length of each.

    A pair's length is `max(len(source), len(target) + 1)`; every batch is
    padded to one length `L` from `padded_lengths(max_length, bucket_width)`.

    The pairs arrive pass after pass, each pass a permutation of all pairs
    (`np.random.default_rng([seed, pass])`, or corpus order without
    `shuffle`). With `bucket=True`, each arriving pair joins the bucket of
    its padded length `L`; a bucket that holds `batch_tokens // L` pairs
    (rounded down to a multiple of `batch_multiple`) is emitted as a batch.
    With `bucket=False`, arriving pairs are cut into batches of one fixed
    size, the mean batch size bucketing gives on these pairs (so both make
    the same number of steps per epoch), each padded to its longest pair
    rounded up to a multiple of `bucket_width` (at most `max_length`).

    With `repeat=True` the stream is endless: a bucket left half full at the
    end of a pass fills up in the next, so every batch has its bucket's full
    size and the batch shapes stay few. Without it, one pass is batched
    alone and the half-full buckets are emitted after the full batches,
    shortest length first.

    Args:
        pair_lengths: 1-D int array, the length of each pair (at most
            `max_length`).
        max_length: int, the longest sequence a batch will hold.
        batch_tokens: int, tokens per batch and tensor (batch size times
            padded length), at least `max_length`. Defaults to 4096.
        bucket: bool, batch pairs of similar length together. Defaults to
            True.
        shuffle: bool, a new permutation of the pairs every pass. Defaults
            to True.
        seed: int or None, the shuffle seed; None draws one for this plan.
            Defaults to 0.
        repeat: bool, an endless stream of passes. Defaults to False.
        batch_multiple: int, round every batch size down to a multiple of
            this (at least one multiple). Defaults to 1.
        bucket_width: int, the step between padded lengths. Defaults to 8.

    Example:

    >>> plan = BatchPlan([3, 2, 8, 7], max_length=16, batch_tokens=16,
    ...                  shuffle=False)
    >>> pairs, sizes, lengths = plan.pass_batches(0)
    >>> pairs.tolist(), sizes.tolist(), lengths.tolist()
    ([0, 1, 2, 3], [2, 2], [8, 8])
    >>> plan.num_batches
    2
    """

    def __init__(self, pair_lengths, max_length, *, batch_tokens=4096, bucket=True, shuffle=True, seed=0,
                 repeat=False, batch_multiple=1, bucket_width=BUCKET_WIDTH):
        self.lengths = padded_lengths(max_length, bucket_width)
        if not _is_int(batch_tokens) or batch_tokens < max_length:
            raise ValueError(
                f"`batch_tokens` must be an int >= max_length={max_length} so that a "
                f"batch holds the longest pair; received batch_tokens={batch_tokens!r}"
            )
        if not _is_int(batch_multiple) or batch_multiple < 1:
            raise ValueError(
                f"`batch_multiple` must be a positive int; received batch_multiple={batch_multiple!r}"
            )
        if seed is not None and not _is_int(seed):
            raise ValueError(f"`seed` must be an int or None; received seed={seed!r}")
        pair_lengths = np.asarray(pair_lengths, dtype=np.int64).reshape(-1)
        if not len(pair_lengths):
            raise ValueError("There are no pairs to batch; pass at least one.")
        if pair_lengths.max() > max_length:
            raise ValueError(
                f"A pair of length {pair_lengths.max()} is longer than max_length={max_length}; "
                "truncate the pairs first (tokenize_pairs does)."
            )
        self.max_length = int(max_length)
        self.bucket_width = int(bucket_width)
        self.bucket, self.shuffle, self.repeat = bool(bucket), bool(shuffle), bool(repeat)
        self.pair_lengths = pair_lengths
        self.num_pairs = len(pair_lengths)
        sizes = np.array(batch_sizes(self.lengths, batch_tokens, batch_multiple))
        buckets = np.searchsorted(self.lengths, pair_lengths)  # the first padded length >= the pair's
        if self.bucket:
            self._bucket_of, self.batch_sizes = buckets, sizes
        else:
            counts = np.bincount(buckets, minlength=len(self.lengths))
            num_batches = int(np.sum(-(-counts // sizes)))
            size = _round_down(max(1, round(self.num_pairs / num_batches)), batch_multiple)
            self._bucket_of, self.batch_sizes = np.zeros_like(buckets), np.array([size])
        self._counts = np.bincount(self._bucket_of, minlength=len(self.batch_sizes))
        self._starts = np.concatenate([[0], np.cumsum(self._counts)])
        # seed=None: a seed drawn once, so the passes of this plan stay consistent.
        self.seed = int(np.random.SeedSequence().entropy) if seed is None else int(seed)
        self._lock = threading.Lock()
        self._grouped_cache = {}
        self._members_cache = {}

    @property
    def num_batches(self):
        """Batches per pass, or None with `repeat=True` (an endless stream)."""
        if self.repeat:
            return None
        full = self._counts // self.batch_sizes
        return int(np.sum(full) + np.sum(self._counts % self.batch_sizes > 0))

    def pass_order(self, pass_index):
        """The order in which pass `pass_index` visits the pairs: a permutation."""
        if not self.shuffle:
            return np.arange(self.num_pairs)
        # SeedSequence takes non-negative ints: a negative seed wraps to 64 bits.
        rng = np.random.default_rng([self.seed % 2**64, int(pass_index)])
        return rng.permutation(self.num_pairs)

    def batches_before(self, pass_index):
        """Batches emitted by the passes before `pass_index` (`repeat=True`)."""
        return int(np.sum((int(pass_index) * self._counts) // self.batch_sizes))

    def locate(self, index):
        """(pass, batch within that pass) of batch `index` of the endless stream (`repeat=True`)."""
        if not self.repeat:
            raise ValueError("locate() needs a plan with repeat=True; a single pass has pass_batches(0).")
        per_pass = float(np.sum(self._counts / self.batch_sizes))
        pass_index = max(0, int(index // per_pass) - 1)
        while self.batches_before(pass_index + 1) <= index:
            pass_index += 1
        while pass_index > 0 and self.batches_before(pass_index) > index:
            pass_index -= 1
        return pass_index, int(index - self.batches_before(pass_index))

    def pass_batches(self, pass_index):
        """The batches pass `pass_index` emits, in order.

        Returns:
            `(pairs, sizes, lengths)`, int64 arrays: the pair indices of all
            batches one after the other, the number of rows of each batch,
            and the padded length of each batch.
        """
        pass_index = int(pass_index)
        with self._lock:
            emitted, rows = [], []
            for bucket in np.flatnonzero(self._counts):
                bucket_emitted, bucket_rows = self._bucket_batches(pass_index, bucket)
                emitted.append(bucket_emitted)
                rows.extend(bucket_rows)
            self._forget_before(pass_index)
        order = np.argsort(np.concatenate(emitted), kind="stable")
        rows = [rows[i] for i in order]
        pairs = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        sizes = np.array([len(r) for r in rows], np.int64)
        if self.bucket:
            lengths = np.array([self.lengths[self._bucket_of[r[0]]] for r in rows], np.int64)
        else:
            longest = np.array([self.pair_lengths[r].max() for r in rows], np.int64)
            lengths = np.minimum(-(-longest // self.bucket_width) * self.bucket_width, self.max_length)
        return pairs.astype(np.int64), sizes, lengths

    def _bucket_batches(self, pass_index, bucket):
        """(emission positions, list of row arrays) of one bucket's batches in a pass."""
        count, size = int(self._counts[bucket]), int(self.batch_sizes[bucket])
        members, positions = self._members(pass_index, bucket)
        if not self.repeat:
            full = count // size
            rows = list(members[: full * size].reshape(full, size))
            emitted = positions[(np.arange(full) + 1) * size - 1]
            if count % size:  # half full at the end of the pass: after every full batch
                rows.append(members[full * size:])
                emitted = np.append(emitted, self.num_pairs + bucket)
            return emitted, rows
        # The bucket's k-th pair of the endless stream is pair k % count of
        # its pass k // count; batch m holds pairs m*size .. (m+1)*size - 1
        # and is emitted when its last pair arrives.
        first, end = pass_index * count, (pass_index + 1) * count
        batches = np.arange(first // size, end // size)
        if not len(batches):
            return np.zeros(0, np.int64), []
        earliest = batches[0] * size // count
        stream = np.concatenate([self._members(p, bucket)[0] for p in range(earliest, pass_index + 1)])
        taken = stream[batches[0] * size - earliest * count: (batches[-1] + 1) * size - earliest * count]
        emitted = positions[(batches + 1) * size - 1 - first]
        return emitted, list(taken.reshape(len(batches), size))

    def _members(self, pass_index, bucket):
        """A bucket's pairs in pass order, and their positions in the pass."""
        key = (pass_index, bucket)
        if key not in self._members_cache:
            if pass_index not in self._grouped_cache:
                order = self.pass_order(pass_index)
                positions = np.argsort(self._bucket_of[order], kind="stable")
                self._grouped_cache = {pass_index: (order[positions], positions)}
            members, positions = self._grouped_cache[pass_index]
            part = slice(self._starts[bucket], self._starts[bucket + 1])
            self._members_cache[key] = (members[part].copy(), positions[part].copy())
        return self._members_cache[key]

    def _forget_before(self, pass_index):
        # Keep what a batch that reaches back from this pass or the next needs.
        lookback = {b: int(-(-self.batch_sizes[b] // max(c, 1))) + 1 for b, c in enumerate(self._counts)}
        for key in [k for k in self._members_cache if k[0] < pass_index - lookback[k[1]]]:
            del self._members_cache[key]


def batch_sizes(lengths, batch_tokens, batch_multiple=1):
    """Pairs a batch of each padded length: `batch_tokens // L`, rounded down to a multiple of `batch_multiple`.

    At least one multiple. The streamed pipelines' bucket sizes; a
    bucketed `BatchPlan` uses the same.

    Example:

    >>> batch_sizes([8, 16, 24], 100, batch_multiple=4)
    [12, 4, 4]
    """
    return [_round_down(batch_tokens // length, batch_multiple) for length in lengths]


def expected_batch_tokens(source_lengths, target_lengths, max_length, *, batch_tokens=4096, batch_multiple=1,
                          bucket_width=BUCKET_WIDTH):
    """Real tokens per streamed batch, and the padding fraction, expected from a sample of pairs.

    A streamed corpus is never counted; its dev split, a hash sample of
    the same pairs, tells what its batches hold: a pair of bucket `L`
    fills `1 / size(L)` of a batch, so the expected real tokens (source +
    target + END, as the trainer counts them) per batch are the sample's
    tokens over its fractional number of batches.

    Args:
        source_lengths, target_lengths: int arrays, the sample's truncated
            token counts (targets without START and END).
        max_length, batch_tokens, batch_multiple, bucket_width: as the
            streamed pipelines take them.

    Returns:
        `(tokens_per_batch, padding_fraction)`.

    Example:

    >>> expected_batch_tokens([3, 2], [2, 1], 8, batch_tokens=16)  # two pairs: one batch of 2 x 8
    (10.0, 0.6875)
    """
    source_lengths = np.asarray(source_lengths, np.int64)
    real = source_lengths + np.asarray(target_lengths, np.int64) + 1
    lengths = np.array(padded_lengths(max_length, bucket_width))
    sizes = np.array(batch_sizes(lengths, batch_tokens, batch_multiple))
    buckets = np.searchsorted(lengths, np.maximum(source_lengths, real - source_lengths))
    batches = np.sum(1.0 / sizes[buckets])
    return float(real.sum() / batches), float(1.0 - real.sum() / np.sum(2 * lengths[buckets]))


def pairs_of_batches(batches):
    """The `(source ids, target ids)` pairs that teacher-forcing batches hold, as tuples.

    Reads back what a batch holds (padding and `START_ID`/`END_ID`
    removed): a check that two pipelines hold the same pairs. Takes any
    iterable of `(inputs, labels)` (NumPy arrays or tensors).

    Example:

    >>> batch = ({"encoder_tokens": np.array([[5, 6, 0]]), "decoder_tokens": np.array([[2, 7, 0]])},
    ...          np.array([[7, 3, 0]]))
    >>> pairs_of_batches([batch])
    [((5, 6), (7,))]
    """
    pairs = []
    for inputs, labels in batches:
        for source, label in zip(np.asarray(inputs["encoder_tokens"]), np.asarray(labels)):
            source = tuple(int(token) for token in source[source != 0])
            label = label[label != 0]
            pairs.append((source, tuple(int(token) for token in label[:-1])))
    return pairs


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _round_down(size, multiple):
    return int(max(multiple, size - size % multiple))


__all__ = [
    "BUCKET_WIDTH", "SHUFFLE_BUFFER", "BatchPlan", "batch_sizes", "expected_batch_tokens", "padded_lengths",
    "pairs_of_batches",
]
