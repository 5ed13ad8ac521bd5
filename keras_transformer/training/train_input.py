"""The trainer's input: the corpus read (or scanned), the vocabulary learned, the batches.

A run hands this module the settings it uses as a `TrainInput` (the
corpus, how to batch it, which pipeline), never its whole `TrainConfig`.
Two modes, chosen by `stream` (`--stream`), never by size:

- **in memory** (the default): the corpus is read whole, tokenized once,
  and batched by a NumPy `BatchPlan` that the `tf.data` pipeline and the
  TensorFlow-free `keras.utils.PyDataset` share: both yield the same
  batches, and a resumed run continues on exactly the batches an
  uninterrupted one would have trained on, on either pipeline.
- **streamed**: the corpus is scanned once (`data.corpus_scan`: bad lines,
  the pair count, the dev and test pairs, the vocabulary sample), then the
  train pairs stream through `data.streaming.streamed_dataset`, tokenized
  inside `tf.data`, or, on the python pipeline, through
  `data.python_streaming.StreamedPyDataset` (the `sentencepiece` library,
  no TensorFlow). Memory stays bounded as the corpus grows. A resumed run
  skips the batches it trained on, so its batches are still exactly an
  uninterrupted run's; the skipped ones are read and tokenized again. The
  two streams shuffle differently: their batches have the same form, not
  the same pairs.

Either way the vocabulary is learned from at most `vocabulary_sample`
sentences of the train split (`data.corpus_scan.vocabulary_texts`), the
same sample in both modes; or, for a fine-tuned run, it is the starting
run's (`vocabulary_from`), which must be able to spell the corpus
(`check_vocabulary_covers`).
"""

import collections
import dataclasses
import os
import shutil

import keras
import numpy as np

from keras_transformer.training import distribute
from keras_transformer.data.corpus_scan import DEFAULT_VOCABULARY_SAMPLE
from keras_transformer.errors import UserInputError
from keras_transformer.training.train_config import tensorflow_imports
from keras_transformer.training.vocabulary_coverage import check_vocabulary_covers
from keras_transformer_runtime.run_files import VOCABULARY_FILE
from keras_transformer_runtime.run_tokenizer import is_marian_run
from keras_transformer_runtime.run_tokenizer import is_nllb_run
from keras_transformer_runtime.run_tokenizer import load_run_tokenizer
from keras_transformer_runtime.special_tokens import START_ID



@dataclasses.dataclass
class CorpusData:
    """A run's corpus after the read (in memory) or the scan (streamed)."""

    splits: object  # CorpusSplits; its "train" list is empty when streamed
    train_pairs: int
    vocabulary_texts: object  # a callable giving the vocabulary's texts
    train_lines: bytes = None  # streamed: the scan's bit per line (corpus_scan.CorpusScan)


@dataclasses.dataclass
class TrainData:
    """What `model.fit` reads, and what the log and the summary say about it."""

    pipeline: str  # "tf.data" or "python"
    train: object  # endless, after the batches a resumed run trained on
    dev: object
    batches_per_pass: int  # None when streamed (not counted)
    tokens_per_batch: float  # real tokens per batch (source + target)
    padding: float
    # {(rows, source length, target length): batches} of one pass over the
    # train batches, or over the dev batches when streamed (an estimate).
    batch_shapes: dict


def _one_pass(dataset):
    if isinstance(dataset, keras.utils.PyDataset):
        return (dataset[i] for i in range(dataset.num_batches))
    return iter(dataset)


def first_batch_of_each_shape(dataset):
    """One batch of each shape in one pass over `dataset`, as NumPy arrays, in the order the shapes come.

    Args:
        dataset: a `keras.utils.PyDataset` (its `num_batches`) or any
            iterable of batches (e.g. a `tf.data.Dataset`).

    Returns:
        A list of batches, each the structure `dataset` yields.

    Example:

    >>> batches = [(np.ones((2, 8)), np.ones((2, 8))), (np.ones((4, 4)), np.ones((4, 4))),
    ...            (np.zeros((2, 8)), np.zeros((2, 8)))]
    >>> [batch[0].shape for batch in first_batch_of_each_shape(batches)]
    [(2, 8), (4, 4)]
    """
    first = {}
    for batch in _one_pass(dataset):
        shapes = tuple(np.shape(leaf) for leaf in keras.tree.flatten(batch))
        if shapes not in first:
            first[shapes] = keras.tree.map_structure(np.asarray, batch)
    return list(first.values())


def token_statistics(dataset):
    """Batches, real tokens, padding fraction and batch shapes of one pass over a dataset.

    The shapes are a `collections.Counter` of `(rows, source length,
    target length)`: what `model_flops.mean_training_flops` takes.
    """
    batches = real = total = 0
    shapes = collections.Counter()
    for inputs, labels in _one_pass(dataset):
        batches += 1
        source, labels = np.asarray(inputs["encoder_tokens"]), np.asarray(labels)
        shapes[(*source.shape, labels.shape[1])] += 1
        for tokens in (source, labels):
            real += int(np.count_nonzero(tokens))
            total += int(tokens.size)
    return batches, real, 1.0 - real / max(total, 1), shapes


def _side_lengths(tokens):
    """(source lengths, target lengths) of tokenized pairs, as `tokenize` gives them on either pipeline."""
    if hasattr(tokens, "source_offsets"):  # python_pipeline.TokenizedArrays
        return np.diff(tokens.source_offsets), np.diff(tokens.target_offsets)
    return tokens.sources.row_lengths().numpy(), tokens.targets.row_lengths().numpy()


@dataclasses.dataclass(frozen=True)
class TrainInput:
    """How a run reads its corpus and makes its batches.

    Args:
        corpus: the `ParallelCorpus` to train on.
        max_length: int, longest source or target in tokens (longer pairs
            are truncated).
        batch_tokens: int, tokens per batch (source or target side,
            padding included).
        bucket: batch sequences of similar length together.
        bucket_width: int, padded lengths are multiples of this.
        seed: int, seeds the vocabulary sample and the data order.
        stream: read the train pairs in chunks inside the pipeline
            instead of holding the corpus.
        vocabulary_sample: int, the most train sentences the vocabulary is
            learned from.
        input_pipeline: `"auto"`, `"tf.data"` or `"python"` (as
            `TrainConfig.input_pipeline`).
        vocabulary_size: int, the pieces of the vocabulary learned.
        vocabulary_from: None (learn a vocabulary), or the run folder
            whose `vocabulary.spm` this run keeps (`--from`): the corpus
            read is checked against it, and it is copied, not learned.
        placement: the run's `distribute.Placement`: batches are cut to
            its data-parallel replicas, and a host of several streams its
            own share.
        decoder_start_id: int, the token each decoder input starts with
            (`START_ID`; a Marian model's padding, `PAD_ID`).

    A `vocabulary_from` run imported from Marian (`checkpoints.marian`)
    keeps its two SentencePiece models and id table, and its batches come
    from the python pipeline (`MarianTokenizer`); it does not stream yet.
    One imported from NLLB-200 keeps its `tokenizer.json` (from M2M-100,
    its `sentencepiece.bpe.model` and `vocab.json`), and `languages`
    (`(source, target)` codes, both needed) put its language tokens where
    its tokenizer puts them.

    Example:

    >>> from keras_transformer.data.parallel_corpus import ParallelCorpus
    >>> inputs = TrainInput(ParallelCorpus(), max_length=64, batch_tokens=1024, vocabulary_sample=100)
    >>> corpus_data = inputs.read_corpus()  # the embedded Bible corpus, read whole
    >>> corpus_data.splits.format, corpus_data.train_pairs > 1000, len(corpus_data.vocabulary_texts())
    ('bible', True, 100)
    """

    corpus: object
    max_length: int
    batch_tokens: int
    bucket: bool = True
    bucket_width: int = 8
    seed: int = 0
    stream: bool = False
    vocabulary_sample: int = DEFAULT_VOCABULARY_SAMPLE
    input_pipeline: str = "auto"
    vocabulary_size: int = 8000
    vocabulary_from: str = None
    placement: distribute.Placement = dataclasses.field(default_factory=distribute.Placement)
    decoder_start_id: int = START_ID
    languages: tuple = (None, None)

    @property
    def marian(self):
        """Whether the vocabulary is an imported Marian run's (two SentencePiece models, one id table)."""
        return self.vocabulary_from is not None and is_marian_run(self.vocabulary_from)

    @property
    def nllb(self):
        """Whether the vocabulary is an imported NLLB-200 or M2M-100 run's (language tokens: `is_nllb_run`)."""
        return self.vocabulary_from is not None and is_nllb_run(self.vocabulary_from)

    def read_corpus(self, log=print):
        """Reads (or, streamed, scans) the corpus; nothing is written.

        With `vocabulary_from`, says how much of the corpus that vocabulary
        cannot spell (`check_vocabulary_covers`).

        Args:
            log: callable for one-line messages.

        Returns:
            A `CorpusData`.

        Raises:
            UserInputError: a bad line (file and line named), no train or no
                dev pairs, or a corpus the given vocabulary cannot spell.
        """
        from keras_transformer.data import corpus_scan

        if self.nllb:  # both languages, checked before anything is read or written
            load_run_tokenizer(self.vocabulary_from, *self.languages).check_languages()
        if self.stream and (self.marian or self.nllb):
            raise UserInputError(f"--stream: fine-tuning the imported model of --from {self.vocabulary_from!r} reads "
                                 "its corpus in memory; leave --stream out.")
        if self.stream:
            scan = corpus_scan.scan_corpus(self.corpus, self.vocabulary_sample, self.seed)
            scan.splits.require("dev")
            corpus_data = CorpusData(scan.splits, scan.train_pairs, lambda: scan.vocabulary_texts, scan.train_lines)
        else:
            splits = self.corpus.read()
            train = splits.require("train")
            splits.require("dev")
            corpus_data = CorpusData(
                splits, len(train), lambda: corpus_scan.vocabulary_texts(train, self.vocabulary_sample, self.seed)
            )
        if self.vocabulary_from is not None:
            splits = corpus_data.splits  # streamed: no train pairs held, the dev pairs stand for them
            check_vocabulary_covers(splits["train"] or splits["dev"], self.vocabulary_from, log)
        return corpus_data

    def write_vocabulary(self, corpus_data, path):
        """Writes the run's vocabulary into `path`: `vocabulary_from`'s, or one of `vocabulary_size` pieces learned.

        Raises:
            UserInputError: the corpus cannot make that many pieces.
        """
        from keras_transformer_runtime.sentence_piece_tokenizer import train_tokenizer

        if self.marian or self.nllb:
            if self.marian:
                from keras_transformer.checkpoints.marian import copy_vocabulary_files as copy_files
            else:
                from keras_transformer.checkpoints.nllb.run_import import copy_tokenizer_files as copy_files
            from keras_transformer_runtime.search_defaults import GENERATION_FILE

            copy_files(self.vocabulary_from, os.path.dirname(path))
            # The imported model's search (`generate()`'s settings) stays the tuned run's default.
            if os.path.isfile(os.path.join(self.vocabulary_from, GENERATION_FILE)):
                shutil.copyfile(os.path.join(self.vocabulary_from, GENERATION_FILE),
                                os.path.join(os.path.dirname(path), GENERATION_FILE))
            return
        if self.vocabulary_from is not None:
            shutil.copyfile(os.path.join(self.vocabulary_from, VOCABULARY_FILE), path)
            return
        try:
            train_tokenizer(corpus_data.vocabulary_texts(), self.vocabulary_size, path=path)
        except ValueError as error:  # e.g. more pieces than the corpus supports
            raise UserInputError(f"--vocabulary-size: {error}")

    def train_data(self, corpus_data, vocabulary_path, start_step, log):
        """The train and dev batches of a run, the train stream starting at batch `start_step`.

        Logs the pipeline, the corpus and the batches in three lines.

        Args:
            corpus_data: what `read_corpus` gave.
            vocabulary_path: the run's `vocabulary.spm`.
            start_step: int, train batches a resumed run already trained on.
            log: callable for one-line messages.

        Returns:
            A `TrainData`.
        """
        name, tokenizer, tokenize, batches = self._pipeline(vocabulary_path)
        placement = self.placement
        if name == "tf.data":
            log("input pipeline: tf.data, " + (
                "streamed: the train pairs read and tokenized inside tf.data (KerasHub's SentencePiece op)"
                if self.stream else "tokenized with KerasHub"))
        else:
            log("input pipeline: python (keras.utils.PyDataset, tokenized with the sentencepiece library"
                + (", streamed in chunks of 1024 lines)" if self.stream else ")")
                + ("; TensorFlow does not import here" if self.input_pipeline == "auto" else ""))
        splits = corpus_data.splits
        dev_pairs = splits.require("dev")
        dev_tokens = tokenize(dev_pairs)
        batching = dict(
            batch_tokens=self.batch_tokens, bucket=self.bucket, seed=self.seed,
            batch_multiple=placement.batch_multiple, bucket_width=self.bucket_width,
        )
        # A known number of batches: Keras does not warn "ran out of data" after
        # each validation pass.
        dev_batches = batches(dev_tokens, shuffle=False, **batching)
        dev = distribute.for_devices(dev_batches, placement)
        languages = f"{splits.source_language or 'source'} -> {splits.target_language or 'target'}"
        skipped = sum(splits.skipped.values())
        skipped = f", {skipped} bad line{'s' * (skipped != 1)} skipped" if skipped else ""
        if self.stream:
            from keras_transformer.data.batch_plan import expected_batch_tokens

            train = self._streamed_train(name, corpus_data, tokenizer, start_step, log)
            # The dev split is a hash sample of the same corpus: it estimates the
            # train batches' tokens and padding without a pass over them.
            tokens_per_batch, padding = expected_batch_tokens(
                *_side_lengths(dev_tokens), self.max_length,
                batch_tokens=self.batch_tokens, batch_multiple=placement.batch_multiple,
                bucket_width=self.bucket_width if self.bucket else self.max_length,
            )
            log(f"corpus: {languages} ({splits.format}), {corpus_data.train_pairs} train / {len(dev_pairs)} dev "
                f"pairs, streamed; {dev_tokens.num_truncated} of the dev pairs truncated to {self.max_length} "
                f"tokens{skipped}")
            log(f"batches: streamed, {padding:.1%} padding tokens (estimated on the dev pairs)")
            return TrainData(name, train, dev, None, tokens_per_batch, padding, token_statistics(dev_batches)[3])
        train_tokens = tokenize(splits["train"])
        log(f"corpus: {languages} ({splits.format}), {corpus_data.train_pairs} train / {len(dev_pairs)} dev pairs, "
            f"{train_tokens.num_truncated} train pairs truncated to {self.max_length} tokens{skipped}")
        epoch_batches, epoch_tokens, padding, shapes = token_statistics(
            batches(train_tokens, shuffle=False, **batching))
        log(f"batches: {epoch_batches} per pass over the data, {padding:.1%} padding tokens"
            + (f", sizes multiples of {placement.batch_multiple}" if placement.batch_multiple > 1 else ""))
        # Every iterator over it yields the same batches (one batch plan), so a
        # resumed or distributed run trains on the same data; a resumed one
        # starts after the batches it trained on.
        train = distribute.for_devices(batches(train_tokens, repeat=True, start=start_step, **batching), placement)
        return TrainData(name, train, dev, epoch_batches, epoch_tokens / epoch_batches, padding, shapes)

    def _pipeline(self, vocabulary_path):
        """The pipeline's name, its tokenizer, `tokenize(pairs)` and `batches(tokens, start=0, **options)`."""
        name = self.input_pipeline
        if self.marian or self.nllb:
            from keras_transformer.data import python_pipeline

            tokenizer = load_run_tokenizer(os.path.dirname(vocabulary_path), *self.languages)
            return (
                "python", tokenizer,
                lambda pairs: python_pipeline.tokenize_pairs(pairs, tokenizer, self.max_length, self.decoder_start_id),
                lambda tokens, **options: python_pipeline.TranslationPyDataset(tokens, **options),
            )
        if name == "auto":
            name = "tf.data" if tensorflow_imports() else "python"
        if name == "tf.data":
            from keras_transformer.data import pipeline
            from keras_transformer.data.tokenizer import load_tokenizer

            tokenizer = load_tokenizer(vocabulary_path)

            def batches(tokens, start=0, **options):
                dataset = pipeline.translation_dataset(tokens, **options)
                return dataset.skip(start) if start else dataset

            return name, tokenizer, (lambda pairs: pipeline.tokenize_pairs(pairs, tokenizer, self.max_length)), batches
        from keras_transformer.data import python_pipeline
        from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer

        tokenizer = SentencePieceTokenizer(vocabulary_path)
        return (
            name,
            tokenizer,
            lambda pairs: python_pipeline.tokenize_pairs(pairs, tokenizer, self.max_length),
            lambda tokens, **options: python_pipeline.TranslationPyDataset(tokens, **options),
        )

    def _streamed_train(self, pipeline_name, corpus_data, tokenizer, start_step, log):
        from keras_transformer.data.batch_plan import SHUFFLE_BUFFER

        placement = self.placement

        # A buffer larger than the corpus would only hold several copies of it.
        options = dict(batch_tokens=self.batch_tokens, seed=self.seed, batch_multiple=placement.batch_multiple,
                       shuffle_buffer=min(SHUFFLE_BUFFER, corpus_data.train_pairs),
                       bucket_width=self.bucket_width if self.bucket else self.max_length)
        hosts = placement.num_processes
        if hosts > 1:
            # Each host reads every hosts-th pair and makes its own slice of the
            # global batch; all padded to max_length so the slices have one shape.
            options.update(batch_tokens=self.batch_tokens // hosts, shard=(placement.process_id, hosts),
                           batch_multiple=max(1, placement.batch_multiple // hosts), bucket_width=self.max_length)
            log(f"stream: host {placement.process_id} of {hosts} keeps every {hosts}-th line from line "
                f"{placement.process_id + 1}; batches padded to --max-length {self.max_length}")
        if start_step:
            log(f"stream: skipping the {start_step} batches trained on before (read and tokenized again)")
        if pipeline_name == "python":
            from keras_transformer.data.python_streaming import StreamedPyDataset

            dataset = StreamedPyDataset(self.corpus, corpus_data.train_lines, tokenizer, self.max_length,
                                        start=start_step, **options)
        else:
            from keras_transformer.data.streaming import streamed_dataset

            dataset = streamed_dataset(self.corpus, corpus_data.train_lines, tokenizer, self.max_length, **options)
            if start_step:
                dataset = dataset.skip(start_step)
        return dataset if hosts > 1 else distribute.for_devices(dataset, placement)


__all__ = ["CorpusData", "TrainData", "TrainInput", "token_statistics"]
