"""One pass over a corpus that streams: its dev and test pairs, its size, a vocabulary sample.

A streamed training run (`TrainConfig(stream=True)`, `--stream`) never
holds the train pairs: before anything is written, `scan_corpus` reads the
corpus once, line by line, and keeps only what is small. Every bad line is
found here (one `UserInputError` naming the file and line, or with
`skip_bad_lines` a count and one warning per file), so a bad line stops
the run before the output folder is touched, as for a corpus read whole.

The vocabulary is learned from a bounded sample of the train pairs
(`vocabulary_sample`, both sides): all of them when they fit, else a
uniform sample drawn by reservoir sampling with the run's seed, so the
in-memory and the streamed run learn the same vocabulary from the same
corpus and seed, and memory stays bounded as the corpus grows.

Pure standard library, like the readers.
"""

import collections
import dataclasses
import random

from keras_transformer.data.parallel_corpus import CorpusSplits
from keras_transformer.errors import UserInputError

# Sentences the vocabulary is learned from at most (both sides of half as
# many pairs); SentencePiece's own guidance is a few hundred thousand to a
# few million sentences. Learning the vocabulary takes the time of the
# sample, not of the corpus (benchmarks/findings/recipes-and-scale.md, "A
# corpus of a million pairs").
DEFAULT_VOCABULARY_SAMPLE = 200_000


class VocabularySample:
    """A uniform sample of pairs of a stream, at most `size // 2` of them, in stream order.

    Reservoir sampling (Vitter's algorithm R) with `random.Random(seed)`:
    one pass, memory bounded by the sample, the same sample for the same
    stream and seed. When the stream has at most `size // 2` pairs, every
    pair is kept.

    Args:
        size: int >= 2, the most sentences `texts()` gives (both sides of
            `size // 2` pairs).
        seed: int, the sampling seed. Defaults to 0.

    Example:

    >>> sample = VocabularySample(4, seed=0)
    >>> for source, target in [("uno", "one"), ("dos", "two"), ("tres", "three")]:
    ...     sample.add(source, target)
    >>> len(sample.texts()), sample.seen
    (4, 3)
    >>> small = VocabularySample(10)
    >>> small.add("uno", "one"); small.add("dos", "two")
    >>> small.texts()  # all sources, then all targets
    ['uno', 'dos', 'one', 'two']
    """

    def __init__(self, size, seed=0):
        if isinstance(size, bool) or not isinstance(size, int) or size < 2:
            raise UserInputError(
                f"--vocabulary-sample must be at least 2 sentences (one pair), got {size!r}."
            )
        self.capacity = size // 2
        self.seen = 0
        self._rng = random.Random(seed)
        self._kept = []  # (stream index, source, target)

    def add(self, source, target):
        """Offers the next pair of the stream."""
        if len(self._kept) < self.capacity:
            self._kept.append((self.seen, source, target))
        else:
            slot = self._rng.randrange(self.seen + 1)
            if slot < self.capacity:
                self._kept[slot] = (self.seen, source, target)
        self.seen += 1

    def texts(self):
        """The kept pairs' sources, then their targets, in stream order."""
        kept = sorted(self._kept)
        return [source for _, source, _ in kept] + [target for _, _, target in kept]


def vocabulary_texts(pairs, size=DEFAULT_VOCABULARY_SAMPLE, seed=0):
    """The sentences the vocabulary is learned from: a bounded sample of `pairs`.

    Args:
        pairs: iterable of `TranslationPair` (the train split).
        size: int, at most this many sentences (both sides of `size // 2`
            pairs). Defaults to 200,000.
        seed: int, the sampling seed. Defaults to 0.

    Returns:
        A list of str: every source then every target of the sample.

    Example:

    >>> from keras_transformer.data import load_bible_pairs
    >>> pairs = load_bible_pairs("train")
    >>> len(vocabulary_texts(pairs, size=1000)), len(vocabulary_texts(pairs)) == 2 * len(pairs)
    (1000, True)
    """
    sample = VocabularySample(size, seed)
    for pair in pairs:
        sample.add(pair.source, pair.target)
    return sample.texts()


@dataclasses.dataclass(frozen=True)
class CorpusScan:
    """What one pass over a streamed corpus keeps.

    Attributes:
        splits: a `CorpusSplits` whose `"train"` list is empty (the train
            pairs stream); the other splits hold their pairs.
        train_pairs: int, the number of train pairs.
        vocabulary_texts: list of str, the sample the vocabulary is
            learned from (see `vocabulary_texts`).
        train_lines: bytes, one bit a line of the corpus file (of the
            source file of aligned files), most significant bit first: set
            for the lines that hold a train pair. Header, bad, dev and test
            lines are clear, so a reader of raw lines needs no split, no
            hash and no checks: 1 bit a line, 125 KB per million.
    """

    splits: CorpusSplits
    train_pairs: int
    vocabulary_texts: list
    train_lines: bytes = b""

    def is_train_line(self, number):
        """Whether 1-based line `number` of the corpus file holds a train pair."""
        index = number - 1
        return index // 8 < len(self.train_lines) and bool(self.train_lines[index // 8] & (128 >> index % 8))


def scan_corpus(corpus, vocabulary_sample=DEFAULT_VOCABULARY_SAMPLE, seed=0):
    """Reads a corpus once, keeping the pairs of every split but train.

    Args:
        corpus: a `ParallelCorpus`.
        vocabulary_sample: int, sentences of the vocabulary sample.
        seed: int, its sampling seed.

    Returns:
        A `CorpusScan`.

    Raises:
        UserInputError: as `ParallelCorpus.read`, or no train pairs.

    Example:

    >>> import os, tempfile
    >>> from keras_transformer.data import ParallelCorpus, split_for_text
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> _ = open(path, "w").write("".join(f"Satz {i}\\tsentence {i}\\n" for i in range(100)))
    >>> scan = scan_corpus(ParallelCorpus(path, dev_fraction=0.1), vocabulary_sample=20)
    >>> scan.train_pairs + len(scan.splits["dev"]) + len(scan.splits["test"]), len(scan.vocabulary_texts)
    (100, 20)
    >>> scan.splits["train"], scan.is_train_line(1) == (split_for_text("Satz 0", 0.1) == "train")
    ([], True)
    """
    format_ = corpus.check()
    sample = VocabularySample(vocabulary_sample, seed)
    kept = collections.defaultdict(list)
    skipped = collections.Counter()
    bits = bytearray()
    for position, pair in enumerate(corpus.iter_pairs(skipped=skipped)):
        if pair.split == "train":
            sample.add(pair.source, pair.target)
            # The Bible corpus' rows are lines 2, 3, ... (after its header); ids of your own are FILE:LINE.
            index = position + 1 if format_ == "bible" else int(pair.id.rsplit(":", 1)[1]) - 1
            if index // 8 >= len(bits):
                bits.extend(bytes(index // 8 + 1 - len(bits)))
            bits[index // 8] |= 128 >> index % 8
        else:
            kept[pair.split].append(pair)
    if not sample.seen:
        raise UserInputError(
            "the corpus has no train pairs; lower --dev-fraction and --test-fraction, or pass a larger --corpus."
        )
    source, target = corpus.languages
    splits = CorpusSplits({"train": [], **kept}, format_, source, target, skipped)
    return CorpusScan(splits, sample.seen, sample.texts(), bytes(bits))


__all__ = ["DEFAULT_VOCABULARY_SAMPLE", "CorpusScan", "VocabularySample", "scan_corpus", "vocabulary_texts"]
