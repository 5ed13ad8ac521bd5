"""Train pairs -> token ids -> batches, streamed: the corpus is never held in memory.

`streamed_dataset` reads the train split line by line (the readers of
`parallel_files`, split by `ParallelCorpus.iter_pairs`, in chunks of 1024
pairs through `tf.data.Dataset.from_generator`), tokenizes inside the
pipeline (`map` with KerasHub's tokenizer, i.e. tensorflow-text's
SentencePiece op), truncates, shuffles in a bounded buffer, and groups the
pairs by padded length into batches of about `batch_tokens` tokens
(`group_by_window`). Memory is bounded by the shuffle buffer and the
buckets, not by the corpus.

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
from keras_transformer.data.batch_plan import padded_lengths
from keras_transformer.data.special_tokens import END_ID
from keras_transformer.data.special_tokens import START_ID

SHUFFLE_BUFFER = 65_536  # pairs; ~60 MB of token ids at 50 tokens a side
_CHUNK = 1024  # pairs per generator element and per tokenizer call


def train_chunks(corpus, shard=(0, 1), repeat=False, chunk=_CHUNK):
    """The train split's `(sources, targets)` in lists of `chunk` pairs, line by line.

    Args:
        corpus: a `ParallelCorpus` (read with `iter_pairs("train")`; bad
            lines are skipped silently when `skip_bad_lines`, since
            `corpus_scan.scan_corpus` already reported them).
        shard: `(index, count)`: keep train pairs `index`, `index + count`,
            ... only (one host's share). Defaults to `(0, 1)`, every pair.
        repeat: start again at the end of the file, forever.
        chunk: pairs per list. Defaults to 1024.

    Yields:
        `(sources, targets)`, two lists of str.

    Example:

    >>> import os, tempfile
    >>> from keras_transformer.data import ParallelCorpus
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> _ = open(path, "w").write("".join(f"Satz {i}\\tsentence {i}\\n" for i in range(5)))
    >>> corpus = ParallelCorpus(path, dev_fraction=0.0, test_fraction=0.0)
    >>> list(train_chunks(corpus, shard=(1, 2), chunk=10))
    [(['Satz 1', 'Satz 3'], ['sentence 1', 'sentence 3'])]
    """
    index, count = shard
    if not 0 <= index < count:
        raise ValueError(f"`shard` must be (index, count) with 0 <= index < count; received shard={shard!r}")
    while True:
        sources, targets = [], []
        for number, pair in enumerate(corpus.iter_pairs("train", warn=False)):
            if number % count != index:
                continue
            sources.append(pair.source)
            targets.append(pair.target)
            if len(sources) == chunk:
                yield sources, targets
                sources, targets = [], []
        if sources:
            yield sources, targets
        if not repeat:
            return


def streamed_dataset(
    corpus,
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
    >>> from keras_transformer.data.tokenizer import load_tokenizer, train_tokenizer
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> _ = open(path, "w").write("Guten Tag\\tGood day\\nDanke\\tThank you\\n")
    >>> tokenizer = load_tokenizer(train_tokenizer(["Guten Tag", "Good day", "Danke", "Thank you"], 20))
    >>> corpus = ParallelCorpus(path, dev_fraction=0.0, test_fraction=0.0)
    >>> dataset = streamed_dataset(corpus, tokenizer, 8, batch_tokens=16, repeat=False, shuffle_buffer=0)
    >>> inputs, labels = next(iter(dataset))
    >>> inputs["encoder_tokens"].shape, int(labels[0, 0]) == int(inputs["decoder_tokens"][0, 1])
    (TensorShape([2, 8]), True)
    """
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
        raise ValueError(f"`max_length` must be an int >= 2; received max_length={max_length!r}")
    if not isinstance(batch_tokens, int) or batch_tokens < max_length:
        raise ValueError(f"`batch_tokens` must be an int >= max_length={max_length}; received {batch_tokens!r}")
    lengths = padded_lengths(max_length, bucket_width)
    sizes = _batch_sizes(lengths, batch_tokens, batch_multiple)
    lengths_table = tf.constant(lengths, tf.int64)
    sizes_table = tf.constant(sizes, tf.int64)

    strings = tf.TensorSpec([None], tf.string)
    dataset = tf.data.Dataset.from_generator(
        lambda: train_chunks(corpus, shard=shard, repeat=repeat), output_signature=(strings, strings)
    )

    def tokenize(sources, targets):
        sources = tf.cast(tokenizer(sources), tf.int32)[:, :max_length]
        targets = tf.cast(tokenizer(targets), tf.int32)[:, : max_length - 1]
        return sources, targets

    dataset = dataset.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    if shuffle_buffer > 1:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=False)

    def teacher_forcing(source, target):
        decoder = tf.concat([[START_ID], target], 0)
        labels = tf.concat([target, [END_ID]], 0)
        return source, decoder, labels

    def bucket(source, decoder, labels):
        length = tf.maximum(tf.size(source, tf.int64), tf.size(labels, tf.int64))
        return tf.searchsorted(lengths_table, tf.reshape(length, [1]), out_type=tf.int64)[0]

    def batch(key, window):
        shape = tf.reshape(tf.gather(lengths_table, key), [1])
        return window.padded_batch(tf.gather(sizes_table, key), padded_shapes=(shape, shape, shape))

    dataset = dataset.map(teacher_forcing, num_parallel_calls=tf.data.AUTOTUNE).group_by_window(
        bucket, batch, window_size_func=lambda key: tf.gather(sizes_table, key)
    )
    dataset = dataset.map(
        lambda source, decoder, labels: ({"encoder_tokens": source, "decoder_tokens": decoder}, labels)
    )
    return dataset.prefetch(tf.data.AUTOTUNE)


def _batch_sizes(lengths, batch_tokens, batch_multiple):
    return [max(batch_multiple, batch_tokens // length // batch_multiple * batch_multiple) for length in lengths]


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
        max_length, batch_tokens, batch_multiple, bucket_width: as
            `streamed_dataset`.

    Returns:
        `(tokens_per_batch, padding_fraction)`.

    Example:

    >>> expected_batch_tokens([3, 2], [2, 1], 8, batch_tokens=16)  # two pairs: one batch of 2 x 8
    (10.0, 0.6875)
    """
    source_lengths = np.asarray(source_lengths, np.int64)
    real = source_lengths + np.asarray(target_lengths, np.int64) + 1
    lengths = np.array(padded_lengths(max_length, bucket_width))
    sizes = np.array(_batch_sizes(lengths, batch_tokens, batch_multiple))
    buckets = np.searchsorted(lengths, np.maximum(source_lengths, real - source_lengths))
    batches = np.sum(1.0 / sizes[buckets])
    return float(real.sum() / batches), float(1.0 - real.sum() / np.sum(2 * lengths[buckets]))


def pairs_of_batches(dataset):
    """The `(source ids, target ids)` pairs that the batches of a dataset hold, as tuples.

    Reads back what a batch holds (padding and `START_ID`/`END_ID`
    removed): a check that two pipelines hold the same pairs.

    Example:

    >>> import tensorflow as tf
    >>> batch = ({"encoder_tokens": tf.constant([[5, 6, 0]]), "decoder_tokens": tf.constant([[2, 7, 0]])},
    ...          tf.constant([[7, 3, 0]]))
    >>> pairs_of_batches([batch])
    [((5, 6), (7,))]
    """
    pairs = []
    for inputs, labels in dataset:
        for source, label in zip(np.asarray(inputs["encoder_tokens"]), np.asarray(labels)):
            source = tuple(int(token) for token in source[source != 0])
            label = label[label != 0]
            pairs.append((source, tuple(int(token) for token in label[:-1])))
    return pairs


__all__ = ["SHUFFLE_BUFFER", "expected_batch_tokens", "pairs_of_batches", "streamed_dataset", "train_chunks"]
