"""Train pairs -> token ids -> batches, streamed without TensorFlow: a `keras.utils.PyDataset`.

The counterpart of `keras_transformer.data.streaming` (the `tf.data`
stream) for machines where TensorFlow is not installed, as
`python_pipeline` is the counterpart of `pipeline`. `StreamedPyDataset`
reads the train split in chunks of 1024 lines (the train lines picked by
the bit per line that `corpus_scan.scan_corpus` wrote, so no line is
hashed or checked again), tokenizes each chunk in one `sentencepiece`
call per side, truncates as the other pipelines do, shuffles in a
bounded buffer and groups the pairs by padded length into batches of
about `batch_tokens` tokens. Memory is bounded by the shuffle buffer and
the buckets, not by the corpus.

What it yields, and what is exact (as for the `tf.data` stream):

- one pass (`repeat=False`) holds every train pair once, the pairs of
  the in-memory pipelines truncated alike, in another order and grouping;
- `repeat=True` is one endless stream (a bucket left half full at the end
  of a pass fills up in the next), the same batches for the same corpus,
  seed and arguments; `start` skips the batches a resumed run trained on
  (read and tokenized again, not assembled), so it continues on exactly
  the batches of an uninterrupted run;
- the shuffle is local: a pair moves at most about `shuffle_buffer`
  places.

The batches are not those of the `tf.data` stream (another shuffle), only
of the same form. The stream is read in order: Keras must read it with
one worker (the default), and a batch before the last few read restarts
the stream from the file's start.

NumPy, `sentencepiece` and Keras only: no TensorFlow.
"""

import collections
import contextlib
import gzip
import itertools
import random
import threading

import keras
import numpy as np

from keras_transformer.data.batch_plan import BUCKET_WIDTH
from keras_transformer.data.batch_plan import SHUFFLE_BUFFER
from keras_transformer.data.batch_plan import batch_sizes
from keras_transformer.data.batch_plan import padded_lengths
from keras_transformer.data.python_pipeline import TokenizedArrays
from keras_transformer.data.python_pipeline import teacher_forcing_batch
from keras_transformer.data.python_pipeline import truncated_arrays
from keras_transformer.errors import UserInputError

_CHUNK = 1024  # lines read, and texts tokenized, at a time (a multiple of 8: whole bytes of train_lines)
_RECENT = 4  # batches kept: Keras on TensorFlow reads batches 0 and 1 for their shapes, then starts again


def train_text_chunks(corpus, train_lines, shard=(0, 1)):
    """The train split's `(sources, targets)`, one pass, in chunks of up to 1024 lines.

    The lines whose bit is set in `train_lines` (header, bad, dev and test
    lines are clear), split into their columns and stripped as the readers
    of `parallel_files` do; a chunk without a train line gives nothing.

    Args:
        corpus: a `ParallelCorpus`.
        train_lines: `bytes`, the scan's `train_lines`.
        shard: `(index, count)`: keep the lines `index`, `index + count`,
            ... only (0-based; one host's share, the lines
            `streaming.train_texts` keeps). Defaults to `(0, 1)`.

    Yields:
        `(sources, targets)`, two lists of str of one length.

    Raises:
        UserInputError: a train line that no longer splits into a pair
            (the file changed since the scan).

    Example:

    >>> import os, tempfile
    >>> from keras_transformer.data import ParallelCorpus
    >>> from keras_transformer.data.corpus_scan import scan_corpus
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> _ = open(path, "w").write("".join(f"Satz {i}\\t sentence {i}\\n" for i in range(5)))
    >>> corpus = ParallelCorpus(path, dev_fraction=0.0, test_fraction=0.0)
    >>> list(train_text_chunks(corpus, scan_corpus(corpus).train_lines, shard=(1, 2)))
    [(['Satz 1', 'Satz 3'], ['sentence 1', 'sentence 3'])]
    """
    from keras_transformer.data.corpus import DEFAULT_CORPUS_PATH

    index, count = _check_shard(shard)
    format_ = corpus.format
    paths = corpus.path if corpus.path is not None else str(DEFAULT_CORPUS_PATH)
    columns = (3, 4) if format_ == "bible" else (0, 1)
    bits = np.frombuffer(train_lines, np.uint8)
    with contextlib.ExitStack() as files:
        if format_ == "aligned":
            lines = zip(*(files.enter_context(_lines(path)) for path in paths))
        else:
            lines = files.enter_context(_lines(paths))
        for first in range(0, len(bits) * 8, _CHUNK):
            block = list(itertools.islice(lines, _CHUNK))
            if not block:
                return
            keep = np.zeros(len(block), bool)
            chunk_bits = np.unpackbits(bits[first // 8:(first + _CHUNK) // 8])[: len(block)]
            keep[: len(chunk_bits)] = chunk_bits
            if count > 1:
                keep &= np.arange(first, first + len(block)) % count == index
            sources, targets = [], []
            for i in np.flatnonzero(keep).tolist():
                try:
                    if format_ == "aligned":
                        source, target = (side.decode("utf-8") for side in block[i])
                    else:
                        parts = block[i].decode("utf-8").split("\t")
                        source, target = parts[columns[0]], parts[columns[1]]
                except (UnicodeDecodeError, IndexError):
                    raise UserInputError(_changed(paths, first + i)) from None
                if first + i == 0:  # a byte-order mark is dropped from a file's first line, as the readers do
                    source, target = source.lstrip("\ufeff"), target.lstrip("\ufeff")
                sources.append(source.strip())
                targets.append(target.strip())
                if not sources[-1] or not targets[-1]:
                    raise UserInputError(_changed(paths, first + i))
            if sources:
                yield sources, targets


@contextlib.contextmanager
def _lines(path):
    """A file's lines as bytes, gunzipped where it is gzip (told by its first two bytes)."""
    with open(path, "rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        yield gzip.GzipFile(fileobj=raw) if compressed else raw


def _changed(paths, index):
    path = paths[0] if isinstance(paths, tuple) else paths
    return (f"{path}:{index + 1}: this line held a train pair when the corpus was scanned but does not now; "
            "the corpus changed during the run: start the run again (it scans the corpus anew).")


def _check_shard(shard):
    index, count = shard
    if not 0 <= index < count:
        raise ValueError(f"`shard` must be (index, count) with 0 <= index < count; received shard={shard!r}")
    return index, count


class StreamedPyDataset(keras.utils.PyDataset):
    """Teacher-forcing batches of about `batch_tokens` tokens, streamed from the train split, without TensorFlow.

    The batches have the form, dtypes and bucketing of the other
    pipelines: `encoder_tokens = source`, `decoder_tokens = [START] +
    target`, `labels = target + [END]`, int32, padded with 0 to a length
    `L` of `padded_lengths(max_length, bucket_width)`, `batch_tokens // L`
    pairs a batch (rounded down to a multiple of `batch_multiple`).
    Sources keep at most `max_length` ids, targets `max_length - 1`. See
    the module docstring for what is exact.

    Index `i` is batch `start + i` of the stream: read it in order (a
    `for` loop, or `model.fit` with one worker and `steps_per_epoch`).
    `repeat=True` is endless (`num_batches` is None); a single pass
    (`repeat=False`) is read by iterating, and ends there (an index past
    its end raises `IndexError`).

    Args:
        corpus: a `ParallelCorpus`.
        train_lines: `bytes`, which lines hold train pairs: the
            `train_lines` of `corpus_scan.scan_corpus(corpus)`.
        tokenizer: a
            `keras_transformer_runtime.sentence_piece_tokenizer.SentencePieceTokenizer`.
        max_length: int >= 2, the longest encoder or decoder sequence.
        batch_tokens: int >= max_length. Defaults to 4096.
        seed: int, the shuffle seed. Defaults to 0.
        shuffle_buffer: int, pairs in the shuffle buffer; 0 or 1 keeps the
            file order. Defaults to 65,536.
        repeat: bool, an endless stream. Defaults to True.
        batch_multiple: int, round batch sizes down to a multiple of this.
            Defaults to 1.
        bucket_width: int, padded lengths are multiples of this (and
            `max_length`). Defaults to 8.
        shard: `(index, count)`: read the lines `index`, `index + count`,
            ... only (one host's share). Defaults to `(0, 1)`.
        start: int >= 0, the stream's batch at index 0: a resumed run skips
            the batches it trained on. Defaults to 0.

    Example:

    >>> import os, tempfile
    >>> from keras_transformer.data import ParallelCorpus
    >>> from keras_transformer.data.corpus_scan import scan_corpus
    >>> from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer, train_tokenizer
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> _ = open(path, "w").write("Guten Tag\\tGood day\\nDanke\\tThank you\\n")
    >>> tokenizer = SentencePieceTokenizer(train_tokenizer(["Guten Tag", "Good day", "Danke", "Thank you"], 20))
    >>> corpus = ParallelCorpus(path, dev_fraction=0.0, test_fraction=0.0)
    >>> dataset = StreamedPyDataset(corpus, scan_corpus(corpus).train_lines, tokenizer, 8, batch_tokens=16,
    ...                             repeat=False, shuffle_buffer=0)
    >>> [(inputs["encoder_tokens"].shape, labels.dtype.name) for inputs, labels in dataset]
    [((2, 8), 'int32')]
    """

    def __init__(self, corpus, train_lines, tokenizer, max_length, *, batch_tokens=4096, seed=0,
                 shuffle_buffer=SHUFFLE_BUFFER, repeat=True, batch_multiple=1, bucket_width=BUCKET_WIDTH,
                 shard=(0, 1), start=0):
        super().__init__()  # one worker: the stream is read in order
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
            raise ValueError(f"`max_length` must be an int >= 2; received max_length={max_length!r}")
        if isinstance(batch_tokens, bool) or not isinstance(batch_tokens, int) or batch_tokens < max_length:
            raise ValueError(f"`batch_tokens` must be an int >= max_length={max_length}; received {batch_tokens!r}")
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ValueError(f"`start` must be an int >= 0; received start={start!r}")
        if not hasattr(tokenizer, "tokenize_flat"):
            raise TypeError(
                f"`tokenizer` must be a keras_transformer SentencePieceTokenizer, got {type(tokenizer).__name__}; "
                "load the vocabulary with keras_transformer_runtime.sentence_piece_tokenizer.SentencePieceTokenizer(path)."
            )
        _check_shard(shard)
        self.corpus, self.train_lines, self.tokenizer, self.max_length = corpus, train_lines, tokenizer, max_length
        self.lengths = padded_lengths(max_length, bucket_width)
        self.sizes = batch_sizes(self.lengths, batch_tokens, batch_multiple)
        self.seed, self.shuffle_buffer, self.repeat, self.shard = seed, shuffle_buffer, bool(repeat), shard
        self.start = start
        self._lock = threading.Lock()
        self._groups = None  # the stream's (length, pairs) groups, from batch self._position on
        self._position = 0
        self._recent = collections.OrderedDict()

    @property
    def num_batches(self):
        """None: a stream is not counted (`repeat=True`: endless)."""
        return None

    def __getitem__(self, index):
        batch = self._batch(self.start + index)
        if batch is None:
            raise IndexError(f"batch {index} is past the end of the stream (repeat=False)")
        return batch

    def __iter__(self):
        for position in itertools.count(self.start):
            batch = self._batch(position)
            if batch is None:
                return
            yield batch

    def _batch(self, position):
        """Batch `position` of the stream, or None past the end of a single pass."""
        with self._lock:
            if position in self._recent:
                return self._recent[position]
            if self._groups is None or position < self._position:
                self._groups, self._position = self._stream(), 0
            for _ in range(position - self._position):  # skipped: read and tokenized, not assembled
                if next(self._groups, None) is None:
                    return None
            group = next(self._groups, None)
            self._position = position + 1
            if group is None:
                return None
            length, pairs = group
            batch = _assemble(pairs, length, self.max_length)
            self._recent[position] = batch
            if len(self._recent) > _RECENT:
                self._recent.popitem(last=False)
            return batch

    def _pairs(self):
        """`(bucket, source ids, target ids)` of every train pair in file order, ids as int32 bytes."""
        lengths = np.array(self.lengths)
        while True:
            for sources, targets in train_text_chunks(self.corpus, self.train_lines, self.shard):
                tokens = truncated_arrays(
                    *self.tokenizer.tokenize_flat(sources), *self.tokenizer.tokenize_flat(targets), self.max_length
                )
                buckets = np.searchsorted(lengths, tokens.lengths()).tolist()
                source_bytes, target_bytes = tokens.source_ids.tobytes(), tokens.target_ids.tobytes()
                source_offsets = (tokens.source_offsets * 4).tolist()
                target_offsets = (tokens.target_offsets * 4).tolist()
                for i, bucket in enumerate(buckets):
                    # Copies (bytes slices): a pair in the buffer keeps no chunk alive.
                    yield (bucket, source_bytes[source_offsets[i]:source_offsets[i + 1]],
                           target_bytes[target_offsets[i]:target_offsets[i + 1]])
            if not self.repeat:
                return

    def _shuffled(self):
        """The pairs through a buffer of `shuffle_buffer`: each step sends out a random one and takes the next."""
        if self.shuffle_buffer <= 1:
            yield from self._pairs()
            return
        rng = random.Random(self.seed)
        buffer = []
        for pair in self._pairs():
            if len(buffer) < self.shuffle_buffer:
                buffer.append(pair)
                continue
            slot = rng.randrange(len(buffer))
            yield buffer[slot]
            buffer[slot] = pair
        while buffer:  # the end of a single pass
            slot = rng.randrange(len(buffer))
            buffer[slot], buffer[-1] = buffer[-1], buffer[slot]
            yield buffer.pop()

    def _stream(self):
        """`(padded length, [(source, target), ...])` of each batch, in order."""
        buckets = [[] for _ in self.lengths]
        for bucket, source, target in self._shuffled():
            buckets[bucket].append((source, target))
            if len(buckets[bucket]) == self.sizes[bucket]:
                yield self.lengths[bucket], buckets[bucket]
                buckets[bucket] = []
        for bucket, pairs in enumerate(buckets):  # a single pass ends with its half-full buckets, shortest first
            if pairs:
                yield self.lengths[bucket], pairs


def _assemble(pairs, length, max_length):
    """The teacher-forcing batch of `(source, target)` id bytes, padded to `length`."""
    def flat(side):
        parts = [pair[side] for pair in pairs]
        offsets = np.concatenate([[0], np.cumsum([len(part) // 4 for part in parts])]).astype(np.int64)
        return np.frombuffer(b"".join(parts), np.int32), offsets

    tokens = TokenizedArrays(*flat(0), *flat(1), max_length=max_length, num_truncated=0)
    return teacher_forcing_batch(tokens, np.arange(len(pairs)), length)


__all__ = ["StreamedPyDataset", "train_text_chunks"]
