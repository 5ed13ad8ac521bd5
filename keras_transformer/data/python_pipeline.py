"""Translation pairs -> token ids -> batches, without TensorFlow: a `keras.utils.PyDataset`.

The counterpart of `keras_transformer.data.pipeline` for machines where
TensorFlow is not installed (a JAX or torch GPU machine). The corpus is
tokenized once with the `sentencepiece` library into flat NumPy arrays
(ids + offsets); `TranslationPyDataset` then assembles the batches that a
`keras_transformer.data.batch_plan.BatchPlan` lists, the same plan the
`tf.data` pipeline follows, so for the same arguments and seed both yield
the same batches (tested where TensorFlow imports).

NumPy, `sentencepiece` and Keras only.
"""

import dataclasses
import threading

import keras
import numpy as np

from keras_transformer.data.batch_plan import BUCKET_WIDTH
from keras_transformer.data.batch_plan import BatchPlan
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID
from keras_transformer_runtime.special_tokens import START_ID


@dataclasses.dataclass(frozen=True)
class TokenizedArrays:
    """A tokenized parallel corpus as flat NumPy arrays, truncated to `max_length`.

    The ids of pair `i`'s source are
    `source_ids[source_offsets[i]:source_offsets[i + 1]]`, likewise for the
    target.

    Attributes:
        source_ids: int32, every source's ids, at most `max_length` each.
        source_offsets: int64, `num_pairs + 1` offsets into `source_ids`.
        target_ids: int32, every target's ids without `START_ID`/`END_ID`,
            at most `max_length - 1` each so that `[START] + target` and
            `target + [END]` fit.
        target_offsets: int64, `num_pairs + 1` offsets into `target_ids`.
        max_length: int, the longest sequence a batch will hold.
        num_truncated: int, pairs whose source had more than `max_length`
            tokens or whose target had more than `max_length - 1`.
        start_id: int, the token each decoder input starts with (`START_ID`;
            a Marian model's padding, `PAD_ID`).
    """

    source_ids: np.ndarray
    source_offsets: np.ndarray
    target_ids: np.ndarray
    target_offsets: np.ndarray
    max_length: int
    num_truncated: int
    start_id: int = START_ID

    def __len__(self):
        return len(self.source_offsets) - 1

    def lengths(self):
        """Per-pair length, `max(source length, target length + 1)`."""
        return np.maximum(np.diff(self.source_offsets), np.diff(self.target_offsets) + 1)


def tokenize_pairs(pairs, tokenizer, max_length, start_id=START_ID):
    """Tokenizes translation pairs once into NumPy arrays, truncating them to `max_length`.

    Sources and targets are tokenized in large batches (one multi-threaded
    `sentencepiece` call per 8192 texts).

    Args:
        pairs: list of `TranslationPair` (only `.source` and `.target` are
            read).
        tokenizer: a
            `keras_transformer_runtime.sentence_piece_tokenizer.SentencePieceTokenizer`.
        max_length: int >= 2, the longest encoder or decoder sequence.
        start_id: int, the decoder's start token (`TokenizedArrays.start_id`).

    A tokenizer with two sides (`MarianTokenizer`) tokenizes the targets
    with its `tokenize_target_flat`.

    Returns:
        A `TokenizedArrays`.

    Example:

    >>> from keras_transformer.data.corpus import TranslationPair
    >>> from keras_transformer_runtime.sentence_piece_tokenizer import (
    ...     SentencePieceTokenizer, train_tokenizer)
    >>> texts = ["En el principio creó Dios los cielos y la tierra.",
    ...          "In the beginning, God created the heavens and the earth."]
    >>> tokenizer = SentencePieceTokenizer(train_tokenizer(texts, vocabulary_size=32))
    >>> pairs = [TranslationPair("Gen.1.1", "Gen", "train", texts[0], texts[1],
    ...                          (texts[1],))]
    >>> tokenized = tokenize_pairs(pairs, tokenizer, max_length=8)
    >>> tokenized.source_offsets.tolist(), tokenized.target_offsets.tolist()
    ([0, 8], [0, 7])
    >>> tokenized.num_truncated
    1
    """
    if not hasattr(tokenizer, "tokenize_flat"):
        raise TypeError(
            f"`tokenizer` must be a keras_transformer SentencePieceTokenizer, got "
            f"{type(tokenizer).__name__}; load the vocabulary with "
            "keras_transformer_runtime.sentence_piece_tokenizer.SentencePieceTokenizer(path)."
        )
    pairs = check_pairs(pairs, max_length)
    tokenize_targets = getattr(tokenizer, "tokenize_target_flat", tokenizer.tokenize_flat)
    tokenized = truncated_arrays(
        *tokenizer.tokenize_flat([pair.source for pair in pairs]),
        *tokenize_targets([pair.target for pair in pairs]),
        max_length,
    )
    return tokenized if start_id == START_ID else dataclasses.replace(tokenized, start_id=int(start_id))


def check_pairs(pairs, max_length):
    """The argument checks of both `tokenize_pairs`; returns `pairs` as a list.

    Raises:
        ValueError: `max_length` is not an int >= 2, or `pairs` is empty.

    Example:

    >>> check_pairs([], 8)
    Traceback (most recent call last):
    ...
    ValueError: `pairs` is empty; pass at least one TranslationPair.
    """
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
        raise ValueError(
            f"`max_length` must be an int >= 2 (a target needs room for START or "
            f"END); received max_length={max_length!r}"
        )
    pairs = list(pairs)
    if not pairs:
        raise ValueError("`pairs` is empty; pass at least one TranslationPair.")
    return pairs


def truncated_arrays(source_ids, source_offsets, target_ids, target_offsets, max_length):
    """A `TokenizedArrays` from flat ids and offsets, truncated to `max_length`.

    Sources keep at most `max_length` ids, targets `max_length - 1` (room
    for START or END); both `tokenize_pairs` truncate here.

    Args:
        source_ids, target_ids: int, every text's ids, one after another.
        source_offsets, target_offsets: int, `num_pairs + 1` offsets.
        max_length: int >= 2.

    Returns:
        A `TokenizedArrays`.

    Example:

    >>> arrays = truncated_arrays(np.arange(5), np.array([0, 5]), np.arange(2), np.array([0, 2]), 3)
    >>> arrays.source_ids.tolist(), arrays.target_ids.tolist(), arrays.num_truncated
    ([0, 1, 2], [0, 1], 1)
    """
    source_offsets = np.asarray(source_offsets, np.int64)
    target_offsets = np.asarray(target_offsets, np.int64)
    truncated = (np.diff(source_offsets) > max_length) | (np.diff(target_offsets) + 1 > max_length)
    return TokenizedArrays(
        *_truncate(np.asarray(source_ids, np.int32), source_offsets, max_length),
        *_truncate(np.asarray(target_ids, np.int32), target_offsets, max_length - 1),
        max_length=max_length,
        num_truncated=int(truncated.sum()),
    )


def _truncate(values, offsets, width):
    lengths = np.diff(offsets)
    column = np.arange(len(values)) - np.repeat(offsets[:-1], lengths)
    kept = np.minimum(lengths, width)
    return values[column < width], np.concatenate([[0], np.cumsum(kept)]).astype(np.int64)


class TranslationPyDataset(keras.utils.PyDataset):
    """Teacher-forcing batches of about `batch_tokens` tokens, as a `keras.utils.PyDataset`.

    The batches of `keras_transformer.data.pipeline.translation_dataset`
    for the same arguments and seed, as NumPy arrays and without
    TensorFlow: each pair becomes `encoder_tokens = source`,
    `decoder_tokens = [START] + target` and `labels = target + [END]`,
    padded with `PAD_ID` (0) to the batch's length. Which pairs make each
    batch, and in which order, is a `BatchPlan` (see there for bucketing,
    shuffling and repeating).

    Index `i` is always the same batch, so every iterator yields the same
    stream. Pass `shuffle=False` to `model.fit` (Keras would otherwise
    shuffle the batches of a dataset that does not repeat); with
    `repeat=True` it is endless: pass `steps_per_epoch` to `model.fit`.

    Args:
        tokenized: `TokenizedArrays` from `tokenize_pairs`.
        batch_tokens: int, tokens per batch and tensor, at least
            `tokenized.max_length`. Defaults to 4096.
        bucket: bool, batch pairs of similar length together. Defaults to
            True.
        shuffle: bool, shuffle the pairs, a new permutation every pass (a
            dataset that does not repeat moves to the next permutation at
            `on_epoch_end`). Defaults to True.
        seed: int, shuffle seed; None draws one. Defaults to 0.
        repeat: bool, repeat forever. Defaults to False.
        batch_multiple: int, round every batch size down to a multiple of
            this, e.g. the number of data-parallel replicas. Defaults to 1.
        bucket_width: int, padded lengths are multiples of this (and
            `max_length`). Defaults to 8.
        start: int, the index of the first batch (`repeat=True`): a resumed
            run skips the batches it trained on without assembling them.
            Defaults to 0.
        **kwargs: `workers`, `use_multiprocessing`, `max_queue_size` of
            `keras.utils.PyDataset`. Keep the default one worker for
            training with `repeat=True`: Keras' multi-worker queue drops the
            batches it prefetched at the end of each epoch.

    Example:

    >>> import numpy as np
    >>> tokenized = TokenizedArrays(
    ...     source_ids=np.array([5, 6, 7, 8, 9], "int32"),
    ...     source_offsets=np.array([0, 3, 5]),
    ...     target_ids=np.array([10, 11, 12], "int32"),
    ...     target_offsets=np.array([0, 2, 3]),
    ...     max_length=16, num_truncated=0)
    >>> dataset = TranslationPyDataset(tokenized, batch_tokens=16, shuffle=False)
    >>> inputs, labels = dataset[0]
    >>> inputs["encoder_tokens"].tolist()
    [[5, 6, 7, 0, 0, 0, 0, 0], [8, 9, 0, 0, 0, 0, 0, 0]]
    >>> inputs["decoder_tokens"].tolist()
    [[2, 10, 11, 0, 0, 0, 0, 0], [2, 12, 0, 0, 0, 0, 0, 0]]
    >>> labels.tolist()
    [[10, 11, 3, 0, 0, 0, 0, 0], [12, 3, 0, 0, 0, 0, 0, 0]]
    """

    def __init__(self, tokenized, *, batch_tokens=4096, bucket=True, shuffle=True, seed=0, repeat=False,
                 batch_multiple=1, bucket_width=BUCKET_WIDTH, start=0, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(tokenized, TokenizedArrays):
            raise ValueError(
                f"`tokenized` must be the TokenizedArrays returned by tokenize_pairs; "
                f"received type(tokenized)={type(tokenized).__name__}"
            )
        if isinstance(start, bool) or not isinstance(start, int) or start < 0 or (start and not repeat):
            raise ValueError(f"`start` must be an int >= 0, and 0 unless repeat=True; received start={start!r}")
        self.tokenized = tokenized
        self.plan = BatchPlan(
            tokenized.lengths(), tokenized.max_length, batch_tokens=batch_tokens, bucket=bucket,
            shuffle=shuffle, seed=seed, repeat=repeat, batch_multiple=batch_multiple, bucket_width=bucket_width,
        )
        self.start = start
        self.epoch = 0  # the pass a dataset that does not repeat is on
        self._passes = {}
        self._lock = threading.Lock()

    @property
    def num_batches(self):
        """Batches per epoch, or None for an endless (`repeat=True`) dataset."""
        return self.plan.num_batches

    def __len__(self):
        if self.plan.repeat:
            raise TypeError("A TranslationPyDataset with repeat=True is endless: it has no len().")
        return self.plan.num_batches

    def __getitem__(self, index):
        if self.plan.repeat:
            pass_index, batch = self.plan.locate(self.start + index)
        else:
            if not 0 <= index < self.plan.num_batches:
                raise IndexError(f"batch index {index} out of range(0, {self.plan.num_batches})")
            pass_index, batch = self.epoch, index
        pairs, offsets, lengths = self._pass(pass_index)
        return self.assemble(pairs[offsets[batch]:offsets[batch + 1]], int(lengths[batch]))

    def _pass(self, pass_index):
        with self._lock:
            if pass_index not in self._passes:
                pairs, sizes, lengths = self.plan.pass_batches(pass_index)
                # Keep two passes: a reader at the end of one and one at the start of the next.
                self._passes = {p: v for p, v in self._passes.items() if p in (pass_index - 1, pass_index + 1)}
                self._passes[pass_index] = (pairs, np.concatenate([[0], np.cumsum(sizes)]), lengths)
            return self._passes[pass_index]

    def assemble(self, rows, length):
        """The teacher-forcing batch of pairs `rows`, padded to `length`."""
        return teacher_forcing_batch(self.tokenized, rows, length)

    def on_epoch_end(self):
        if self.plan.shuffle and not self.plan.repeat:
            self.epoch += 1


def teacher_forcing_batch(tokenized, rows, length):
    """The batch of pairs `rows` of `tokenized`: `(inputs, labels)`, int32 NumPy arrays padded to `length`.

    `encoder_tokens = source`, `decoder_tokens = [START] + target`,
    `labels = target + [END]`, each `(len(rows), length)`, padded with
    `PAD_ID`; the batches of every pipeline have this form.

    Example:

    >>> tokenized = truncated_arrays(np.array([5, 6, 7]), np.array([0, 2, 3]), np.array([8, 9]),
    ...                              np.array([0, 1, 2]), max_length=4)
    >>> inputs, labels = teacher_forcing_batch(tokenized, np.array([1, 0]), 4)
    >>> inputs["decoder_tokens"].tolist(), labels.tolist()
    ([[2, 9, 0, 0], [2, 8, 0, 0]], [[9, 3, 0, 0], [8, 3, 0, 0]])
    """
    t = tokenized
    rows = np.asarray(rows, np.int64)
    encoder = _padded(t.source_ids, t.source_offsets, rows, length)
    decoder = _padded(t.target_ids, t.target_offsets, rows, length, shift=1)
    decoder[:, 0] = t.start_id
    labels = _padded(t.target_ids, t.target_offsets, rows, length)
    labels[np.arange(len(rows)), t.target_offsets[rows + 1] - t.target_offsets[rows]] = END_ID
    return {"encoder_tokens": encoder, "decoder_tokens": decoder}, labels


def _padded(values, offsets, rows, width, shift=0):
    """Rows `rows` of a flat ragged array, placed from column `shift` of a `width`-wide PAD matrix."""
    starts = offsets[rows]
    lengths = offsets[rows + 1] - starts
    columns = np.arange(width - shift)
    inside = columns < lengths[:, None]
    out = np.full((len(rows), width), PAD_ID, np.int32)
    out[:, shift:][inside] = values[(starts[:, None] + columns)[inside]]
    return out


__all__ = ["TokenizedArrays", "TranslationPyDataset", "teacher_forcing_batch", "tokenize_pairs"]
