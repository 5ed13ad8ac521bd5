"""Train pairs -> token ids -> batches, streamed: the corpus is never held in memory.

`streamed_dataset` reads the train split line by line in `tf.data`
(`TextLineDataset`, chunks of 1024 lines, the train lines picked by the
bit per line that `corpus_scan.scan_corpus` wrote), tokenizes inside the
pipeline (`map` over whole chunks with KerasHub's tokenizer, i.e.
tensorflow-text's SentencePiece op), truncates, shuffles in a bounded
buffer, and groups the pairs by padded length into batches of about
`batch_tokens` tokens (`group_by_window`). No Python runs per line, and
memory is bounded by the shuffle buffer and the buckets, not by the corpus.

What it yields, and what is exact:

- one pass (`repeat=False`) holds every train pair once (the same pairs,
  truncated alike, as the in-memory `pipeline.translation_dataset`; tested
  as multisets), in another order and grouping;
- `repeat=True` is one endless stream: the file read again and again, one
  shuffle buffer and one set of buckets across the passes (a bucket left
  half full at the end of a pass fills up in the next), the same stream
  for the same corpus, seed and arguments. A resumed run skips the batches
  it trained on (`dataset.skip`), so it trains on exactly the batches of
  an uninterrupted run; the skipped ones are read and tokenized again, not
  trained on: that costs the pipeline's time for them;
- the shuffle is local: a pair moves at most about `shuffle_buffer` places.
  A file sorted by length, source or domain should be shuffled once
  beforehand (e.g. `shuf`).

A TensorFlow edge of the package, like `pipeline`.
"""

import numpy as np
import tensorflow as tf

from keras_transformer.data.batch_plan import BUCKET_WIDTH
from keras_transformer.data.batch_plan import SHUFFLE_BUFFER
from keras_transformer.data.batch_plan import batch_sizes
from keras_transformer.data.batch_plan import expected_batch_tokens  # noqa: F401 (re-exported)
from keras_transformer.data.batch_plan import padded_lengths
from keras_transformer.data.batch_plan import pairs_of_batches  # noqa: F401 (re-exported)
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID
from keras_transformer_runtime.special_tokens import START_ID

_CHUNK = 1024  # pairs per generator element and per tokenizer call


def train_texts(corpus, train_lines, shard=(0, 1), repeat=False):
    """The train split's `(sources, targets)` read by `tf.data`, in chunks of up to 1024 lines.

    `tf.data.TextLineDataset` reads the corpus file (both files of an
    aligned corpus, zipped; gunzipped where gzip), and the scan's bit per
    line (`corpus_scan.CorpusScan.train_lines`) keeps the train lines: no
    hash, no checks and no Python per line. Each side is stripped of
    surrounding ASCII whitespace (and line 1 of a byte-order mark), as
    the readers of `parallel_files` do (they also strip Unicode spaces such
    as U+00A0, which SentencePiece's normalization removes anyway).

    Args:
        corpus: a `ParallelCorpus`.
        train_lines: `bytes`, the scan's `train_lines`.
        shard: `(index, count)`: keep the lines `index`, `index + count`,
            ... only (0-based; one host's share). Defaults to `(0, 1)`.
        repeat: read the file again at its end, forever.

    Returns:
        A `tf.data.Dataset` of `(sources, targets)`, 1-D string tensors.

    Example:

    >>> import os, tempfile
    >>> from keras_transformer.data import ParallelCorpus
    >>> from keras_transformer.data.corpus_scan import scan_corpus
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> _ = open(path, "w").write("".join(f"Satz {i}\\t sentence {i}\\n" for i in range(5)))
    >>> corpus = ParallelCorpus(path, dev_fraction=0.0, test_fraction=0.0)
    >>> sources, targets = next(iter(train_texts(corpus, scan_corpus(corpus).train_lines, shard=(1, 2))))
    >>> sources.numpy().tolist(), targets.numpy().tolist()
    ([b'Satz 1', b'Satz 3'], [b'sentence 1', b'sentence 3'])
    """
    from keras_transformer.data.corpus import DEFAULT_CORPUS_PATH
    from keras_transformer.data.parallel_files import is_gzip

    index, count = shard
    if not 0 <= index < count:
        raise ValueError(f"`shard` must be (index, count) with 0 <= index < count; received shard={shard!r}")
    format_ = corpus.format
    paths = corpus.path if corpus.path is not None else str(DEFAULT_CORPUS_PATH)

    def lines(path):
        return tf.data.TextLineDataset(path, compression_type="GZIP" if is_gzip(path) else "")

    dataset = tf.data.Dataset.zip(lines(paths[0]), lines(paths[1])) if format_ == "aligned" else lines(paths)
    dataset = dataset.batch(_CHUNK)
    chunks = -(-len(train_lines) * 8 // _CHUNK)  # the chunks that can hold a train line
    dataset = dataset.take(chunks)
    if repeat:
        dataset = dataset.repeat()
    bits = tf.constant(np.frombuffer(train_lines + bytes(chunks * _CHUNK // 8 - len(train_lines)), np.uint8))
    shifts = tf.constant(np.tile(np.arange(7, -1, -1, dtype=np.uint8), _CHUNK // 8))
    columns = (3, 4) if format_ == "bible" else (0, 1)

    def keep(chunk, texts):
        first = chunk % chunks * _CHUNK
        mask = tf.bitwise.bitwise_and(
            tf.bitwise.right_shift(tf.repeat(bits[first // 8:(first + _CHUNK) // 8], 8), shifts), 1
        )
        mask = tf.cast(mask, tf.bool) & (tf.range(first, first + _CHUNK) % count == index)
        if format_ == "aligned":
            sources, targets = texts
        else:
            parts = tf.strings.split(texts, "\t").to_tensor("")
            sources, targets = parts[:, columns[0]], parts[:, columns[1]]
        mask = mask[: tf.shape(sources)[0]]

        def clean(side):
            # A byte-order mark is dropped from a file's first line only, as the readers do.
            first_line = tf.where(first == 0, tf.strings.regex_replace(side[:1], "^\ufeff", ""), side[:1])
            return tf.strings.strip(tf.boolean_mask(tf.concat([first_line, side[1:]], 0), mask))

        return clean(sources), clean(targets)

    return tf.data.Dataset.zip(tf.data.Dataset.counter(), dataset).map(keep, num_parallel_calls=tf.data.AUTOTUNE)


def streamed_dataset(
    corpus,
    train_lines,
    tokenizer,
    max_length,
    *,
    batch_tokens=4096,
    seed=0,
    shuffle_buffer=SHUFFLE_BUFFER,
    repeat=True,
    batch_multiple=1,
    bucket_width=BUCKET_WIDTH,
    shard=(0, 1),
):
    """Teacher-forcing batches of about `batch_tokens` tokens, streamed from the train split.

    The batches have the form and bucketing of
    `pipeline.translation_dataset`: `encoder_tokens = source`,
    `decoder_tokens = [START] + target`, `labels = target + [END]`, padded
    with 0 to a length `L` of `padded_lengths(max_length, bucket_width)`,
    `batch_tokens // L` pairs a batch (rounded down to a multiple of
    `batch_multiple`). Sources keep at most `max_length` ids, targets
    `max_length - 1`. See the module docstring for what is exact.

    Args:
        corpus: a `ParallelCorpus`.
        train_lines: `bytes`, which lines hold train pairs: the
            `train_lines` of `corpus_scan.scan_corpus(corpus)`.
        tokenizer: a KerasHub tokenizer (`tokenizer.load_tokenizer`).
        max_length: int >= 2, the longest encoder or decoder sequence.
        batch_tokens: int >= max_length. Defaults to 4096.
        seed: int, the shuffle seed. Defaults to 0.
        shuffle_buffer: int, pairs in the shuffle buffer; 0 or 1 keeps the
            file order. Defaults to 65,536.
        repeat: bool, an endless stream (pass `steps_per_epoch` to `fit`).
            Defaults to True.
        batch_multiple: int, round batch sizes down to a multiple of this.
            Defaults to 1.
        bucket_width: int, padded lengths are multiples of this (and
            `max_length`). Defaults to 8.
        shard: `(index, count)`, read every `count`-th train pair from the
            `index`-th. Defaults to `(0, 1)`.

    Returns:
        A `tf.data.Dataset` of `({"encoder_tokens": int32 (B, L),
        "decoder_tokens": int32 (B, L)}, labels int32 (B, L))`.

    Example:

    >>> import os, tempfile
    >>> from keras_transformer.data import ParallelCorpus
    >>> from keras_transformer.data.corpus_scan import scan_corpus
    >>> from keras_transformer.data.tokenizer import load_tokenizer, train_tokenizer
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> _ = open(path, "w").write("Guten Tag\\tGood day\\nDanke\\tThank you\\n")
    >>> tokenizer = load_tokenizer(train_tokenizer(["Guten Tag", "Good day", "Danke", "Thank you"], 20))
    >>> corpus = ParallelCorpus(path, dev_fraction=0.0, test_fraction=0.0)
    >>> train_lines = scan_corpus(corpus).train_lines
    >>> dataset = streamed_dataset(corpus, train_lines, tokenizer, 8, batch_tokens=16, repeat=False,
    ...                            shuffle_buffer=0)
    >>> inputs, labels = next(iter(dataset))
    >>> inputs["encoder_tokens"].shape, int(labels[0, 0]) == int(inputs["decoder_tokens"][0, 1])
    (TensorShape([2, 8]), True)
    """
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
        raise ValueError(f"`max_length` must be an int >= 2; received max_length={max_length!r}")
    if not isinstance(batch_tokens, int) or batch_tokens < max_length:
        raise ValueError(f"`batch_tokens` must be an int >= max_length={max_length}; received {batch_tokens!r}")
    lengths = padded_lengths(max_length, bucket_width)
    sizes = batch_sizes(lengths, batch_tokens, batch_multiple)
    lengths_table = tf.constant(lengths, tf.int64)
    sizes_table = tf.constant(sizes, tf.int64)

    dataset = train_texts(corpus, train_lines, shard=shard, repeat=repeat)

    def tokenize(sources, targets):
        # Whole chunks, ragged: per-pair work in tf.data pays its overhead for every pair
        # (benchmarks/findings/recipes-and-scale.md, "A corpus of a million pairs").
        sources = tf.cast(tokenizer(sources), tf.int32)[:, :max_length]
        targets = tf.cast(tokenizer(targets), tf.int32)[:, : max_length - 1]
        column = tf.RaggedTensor.from_tensor(tf.ones([targets.nrows(), 1], tf.int32))
        decoder = tf.concat([column * START_ID, targets], axis=1)
        labels = tf.concat([targets, column * END_ID], axis=1)
        length = tf.maximum(sources.row_lengths(), labels.row_lengths())
        return tf.searchsorted(lengths_table, length, out_type=tf.int64), sources, decoder, labels

    dataset = dataset.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    if shuffle_buffer > 1:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=False)

    def batch(key, window):
        length = tf.cast(tf.gather(lengths_table, key), tf.int32)

        def padded(ragged):
            dense = ragged.to_tensor(default_value=PAD_ID)
            return tf.pad(dense, [[0, 0], [0, length - tf.shape(dense)[1]]], constant_values=PAD_ID)

        return window.batch(tf.gather(sizes_table, key)).map(
            lambda keys, source, decoder, labels: (keys, padded(source), padded(decoder), padded(labels))
        )

    dataset = dataset.group_by_window(
        lambda key, *_: key, batch, window_size_func=lambda key: tf.gather(sizes_table, key)
    )
    dataset = dataset.map(
        lambda _, source, decoder, labels: ({"encoder_tokens": source, "decoder_tokens": decoder}, labels)
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


__all__ = ["SHUFFLE_BUFFER", "expected_batch_tokens", "pairs_of_batches", "streamed_dataset", "train_texts"]
