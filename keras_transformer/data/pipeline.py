"""Translation pairs -> token ids -> `tf.data` batches for `model.fit`.

The corpus is tokenized once, eagerly and in large batches, into ragged
int32 tensors; datasets are then built from those tensors, so every epoch
only slices, pads and batches integers. Batches are sized by tokens, not
sentences (section 5.1 of the paper batches about 25k source and 25k target
tokens), and bucketing by length keeps the padding low.

Which pairs make each batch, and in which order, comes from a NumPy
`keras_transformer.data.batch_plan.BatchPlan`; the `keras.utils.PyDataset`
of `keras_transformer.data.python_pipeline` follows the same plan, so it
yields the same batches where TensorFlow is not installed.

A TensorFlow edge of the package. The datasets feed `model.fit` under every
Keras backend (Keras reads `tf.data` on JAX and torch too).
"""

import dataclasses
import itertools

import numpy as np
import tensorflow as tf

from keras_transformer.data.batch_plan import BUCKET_WIDTH
from keras_transformer.data.batch_plan import BatchPlan
from keras_transformer.data.batch_plan import padded_lengths
from keras_transformer.data.python_pipeline import check_pairs
from keras_transformer.data.python_pipeline import truncated_arrays
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID
from keras_transformer_runtime.special_tokens import START_ID

_TOKENIZE_CHUNK = 8192


@dataclasses.dataclass(frozen=True)
class TokenizedPairs:
    """A tokenized parallel corpus, truncated to `max_length`.

    Attributes:
        sources: `tf.RaggedTensor`, int32 `(num_pairs, None)`, source ids,
            at most `max_length` each.
        targets: `tf.RaggedTensor`, int32 `(num_pairs, None)`, target ids
            without `START_ID`/`END_ID`, at most `max_length - 1` each so
            that `[START] + target` and `target + [END]` fit.
        max_length: int, the longest sequence a batch will hold.
        num_truncated: int, pairs whose source had more than `max_length`
            tokens or whose target had more than `max_length - 1`.
    """

    sources: tf.RaggedTensor
    targets: tf.RaggedTensor
    max_length: int
    num_truncated: int

    def __len__(self):
        return int(self.sources.nrows())

    @classmethod
    def from_arrays(cls, arrays):
        """The same corpus from the NumPy `python_pipeline.TokenizedArrays`.

        Example:

        >>> from keras_transformer.data.python_pipeline import truncated_arrays
        >>> arrays = truncated_arrays(np.arange(5), np.array([0, 2, 5]),
        ...                           np.arange(2), np.array([0, 1, 2]), 4)
        >>> TokenizedPairs.from_arrays(arrays).sources.to_list()
        [[0, 1], [2, 3, 4]]
        """
        return cls(
            sources=tf.RaggedTensor.from_row_splits(arrays.source_ids, arrays.source_offsets),
            targets=tf.RaggedTensor.from_row_splits(arrays.target_ids, arrays.target_offsets),
            max_length=arrays.max_length,
            num_truncated=arrays.num_truncated,
        )

    def lengths(self):
        """Per-pair length, `max(source length, target length + 1)`, as NumPy."""
        return np.maximum(
            self.sources.row_lengths().numpy(), self.targets.row_lengths().numpy() + 1
        )


def tokenize_pairs(pairs, tokenizer, max_length):
    """Tokenizes translation pairs once, truncating them to `max_length`.

    Sources and targets are tokenized in large batches (one SentencePiece
    call per 8192 texts), not one sentence at a time.

    Args:
        pairs: list of `TranslationPair` (only `.source` and `.target` are
            read).
        tokenizer: a KerasHub tokenizer, e.g. from
            `keras_transformer.data.tokenizer.load_tokenizer`.
        max_length: int >= 2, the longest encoder or decoder sequence.

    Returns:
        A `TokenizedPairs`.

    Example:

    >>> from keras_transformer.data.corpus import TranslationPair
    >>> from keras_transformer.data.tokenizer import load_tokenizer, train_tokenizer
    >>> texts = ["En el principio creó Dios los cielos y la tierra.",
    ...          "In the beginning, God created the heavens and the earth."]
    >>> tokenizer = load_tokenizer(train_tokenizer(texts, vocabulary_size=32))
    >>> pairs = [TranslationPair("Gen.1.1", "Gen", "train", texts[0], texts[1],
    ...                          (texts[1],))]
    >>> tokenized = tokenize_pairs(pairs, tokenizer, max_length=8)
    >>> tokenized.sources.row_lengths().numpy().tolist()
    [8]
    >>> tokenized.targets.row_lengths().numpy().tolist()
    [7]
    >>> tokenized.num_truncated
    1
    """
    pairs = check_pairs(pairs, max_length)
    return TokenizedPairs.from_arrays(truncated_arrays(
        *_tokenize_flat([pair.source for pair in pairs], tokenizer),
        *_tokenize_flat([pair.target for pair in pairs], tokenizer),
        max_length,
    ))


def _tokenize_flat(texts, tokenizer):
    """Every text's ids, one after another, and the offsets: NumPy, as `tokenize_flat`."""
    chunks = []
    for start in range(0, len(texts), _TOKENIZE_CHUNK):
        ids = tokenizer.tokenize(texts[start : start + _TOKENIZE_CHUNK])
        if not isinstance(ids, tf.RaggedTensor):
            # Eager KerasHub tokenizers return Python lists; flatten them in C.
            lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            values = np.fromiter(
                itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum())
            )
            ids = tf.RaggedTensor.from_row_lengths(values, lengths)
        chunks.append(tf.cast(ids, "int32"))
    ids = tf.concat(chunks, axis=0)
    return ids.flat_values.numpy(), ids.row_splits.numpy()


def translation_dataset(
    tokenized,
    *,
    batch_tokens=4096,
    bucket=True,
    shuffle=True,
    seed=0,
    repeat=False,
    batch_multiple=1,
    bucket_width=BUCKET_WIDTH,
):
    """Teacher-forcing batches of about `batch_tokens` tokens each.

    Each pair becomes `encoder_tokens = source`, `decoder_tokens = [START] +
    target` and `labels = target + [END]`, padded with `PAD_ID` (0). A pair's
    length is `max(len(source), len(target) + 1)`, and every batch is padded
    to one length `L` from `padded_lengths(max_length, bucket_width)`
    (multiples of 8 by default) for all three tensors.

    Which pairs make each batch, and in which order, is a
    `keras_transformer.data.batch_plan.BatchPlan` computed in NumPy; this
    dataset gathers and pads them. With `bucket=True`, pairs are grouped by
    padded length and a bucket of length `L` makes batches of
    `batch_tokens // L` pairs, so every batch holds at most `batch_tokens`
    tokens per tensor. With `bucket=False`, shuffled pairs are batched as
    they come, with a fixed batch size equal to the mean batch size
    bucketing gives on these pairs (so both make the same number of steps
    per epoch), and padded to the batch's longest pair rounded up to a
    multiple of `bucket_width`; a batch can then exceed `batch_tokens`.
    Either way the batch shapes are few (at most two batch sizes per padded
    length), which keeps JAX from recompiling the training step for every
    batch. `keras_transformer.data.python_pipeline.TranslationPyDataset`
    yields the same batches without TensorFlow.

    Args:
        tokenized: `TokenizedPairs` from `tokenize_pairs`.
        batch_tokens: int, tokens per batch and tensor (batch size times
            padded length), at least `tokenized.max_length`. Defaults to 4096.
        bucket: bool, batch pairs of similar length together. Defaults to
            True.
        shuffle: bool, shuffle the pairs (all of them, reshuffled every
            epoch: each new iterator over a dataset that does not repeat
            takes the next permutation). Defaults to True.
        seed: int, shuffle seed; the same seed gives the same batches.
            Defaults to 0.
        repeat: bool, repeat forever (then pass `steps_per_epoch` to
            `model.fit`). Each pass is a permutation of (seed, pass number),
            so every iterator over the dataset yields the same batches.
            Defaults to False.
        batch_multiple: int, round every batch size down to a multiple of
            this (at least one multiple), e.g. the number of data-parallel
            replicas, so a global batch splits evenly across devices. Only
            the last batch of a bucket in a pass that does not repeat can be
            smaller. Defaults to 1.
        bucket_width: int, padded lengths are multiples of this (and
            `max_length`): each is one batch shape, one compiled program on
            JAX. Defaults to 8.

    Returns:
        A `tf.data.Dataset` of `({"encoder_tokens": int32 (B, L),
        "decoder_tokens": int32 (B, L)}, labels int32 (B, L))`.

    Example:

    >>> import tensorflow as tf
    >>> tokenized = TokenizedPairs(
    ...     sources=tf.ragged.constant([[5, 6, 7], [8, 9]]),
    ...     targets=tf.ragged.constant([[10, 11], [12]]),
    ...     max_length=16, num_truncated=0)
    >>> dataset = translation_dataset(tokenized, batch_tokens=16, shuffle=False)
    >>> inputs, labels = next(iter(dataset))
    >>> inputs["encoder_tokens"].numpy().tolist()
    [[5, 6, 7, 0, 0, 0, 0, 0], [8, 9, 0, 0, 0, 0, 0, 0]]
    >>> inputs["decoder_tokens"].numpy().tolist()
    [[2, 10, 11, 0, 0, 0, 0, 0], [2, 12, 0, 0, 0, 0, 0, 0]]
    >>> labels.numpy().tolist()
    [[10, 11, 3, 0, 0, 0, 0, 0], [12, 3, 0, 0, 0, 0, 0, 0]]
    """
    if not isinstance(tokenized, TokenizedPairs):
        raise ValueError(
            f"`tokenized` must be the TokenizedPairs returned by tokenize_pairs; "
            f"received type(tokenized)={type(tokenized).__name__}"
        )
    plan = BatchPlan(
        tokenized.lengths(), tokenized.max_length, batch_tokens=batch_tokens, bucket=bucket, shuffle=shuffle,
        seed=seed, repeat=repeat, batch_multiple=batch_multiple, bucket_width=bucket_width,
    )
    if repeat:
        passes = tf.data.Dataset.counter()
    elif shuffle:
        # A new permutation for each iterator, as Dataset.shuffle(reshuffle_each_iteration=True).
        epochs = itertools.count()
        passes = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).map(
            lambda _: tf.numpy_function(lambda: np.int64(next(epochs)), [], tf.int64)
        )
    else:
        passes = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64))

    def batches_of_pass(pass_index):
        pairs, sizes, lengths = tf.numpy_function(
            plan.pass_batches, [pass_index], (tf.int64, tf.int64, tf.int64)
        )
        for tensor in (pairs, sizes, lengths):
            tensor.set_shape([None])
        ends = tf.cumsum(sizes)
        return tf.data.Dataset.from_tensor_slices((ends - sizes, ends, lengths)).map(
            lambda start, end, length: (pairs[start:end], length)
        )

    dataset = passes.flat_map(batches_of_pass).map(
        lambda rows, length: _teacher_forcing_batch(tokenized, rows, length),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    # A known length: padding_fraction refuses an endless dataset, and Keras
    # does not warn "ran out of data" after a pass of a finite one.
    cardinality = tf.data.INFINITE_CARDINALITY if repeat else plan.num_batches
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(cardinality))
    return dataset.prefetch(tf.data.AUTOTUNE)


def _teacher_forcing_batch(tokenized, rows, length):
    sources = tf.gather(tokenized.sources, rows)
    targets = tf.gather(tokenized.targets, rows)

    def column(token):
        return tf.RaggedTensor.from_tensor(tf.fill([tf.shape(rows)[0], 1], tf.constant(token, targets.dtype)))

    decoder = tf.concat([column(START_ID), targets], axis=1)
    labels = tf.concat([targets, column(END_ID)], axis=1)
    length = tf.cast(length, "int32")

    def padded(ragged):
        dense = ragged.to_tensor(default_value=PAD_ID)
        return tf.pad(dense, [[0, 0], [0, length - tf.shape(dense)[1]]], constant_values=PAD_ID)

    return {"encoder_tokens": padded(sources), "decoder_tokens": padded(decoder)}, padded(labels)


def padding_fraction(dataset, num_batches=None):
    """Fraction of padding in `encoder_tokens` and `decoder_tokens`.

    Counts the `PAD_ID` (0) entries of both inputs over the batches: the
    share of the model's work spent on padding.

    Args:
        dataset: a dataset from `translation_dataset`.
        num_batches: int, look at the first `num_batches` batches only.
            Defaults to all of them (one epoch), which needs a dataset made
            with `repeat=False`.

    Returns:
        A float in [0, 1).

    Example:

    >>> import tensorflow as tf
    >>> tokenized = TokenizedPairs(
    ...     sources=tf.ragged.constant([[5, 6, 7], [8, 9]]),
    ...     targets=tf.ragged.constant([[10, 11], [12]]),
    ...     max_length=8, num_truncated=0)
    >>> dataset = translation_dataset(tokenized, batch_tokens=16)
    >>> padding_fraction(dataset)  # 10 real tokens in two (2, 8) inputs.
    0.6875
    """
    if num_batches is None:
        if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
            raise ValueError(
                "`dataset` repeats forever; pass num_batches=... or build it with "
                "repeat=False."
            )
    else:
        dataset = dataset.take(num_batches)
    padding = total = 0
    for inputs, _ in dataset:
        for name in ("encoder_tokens", "decoder_tokens"):
            tokens = inputs[name]
            padding += int(tf.reduce_sum(tf.cast(tokens == PAD_ID, "int64")))
            total += int(tf.size(tokens))
    if total == 0:
        raise ValueError("`dataset` yielded no tokens; nothing to measure.")
    return padding / total


__all__ = [
    "BUCKET_WIDTH",
    "TokenizedPairs",
    "padded_lengths",
    "padding_fraction",
    "tokenize_pairs",
    "translation_dataset",
]
