"""A parallel corpus by split: the embedded Bible, or your own files split by a hash.

`ParallelCorpus` names a corpus (the embedded Bible corpus, a TSV, or two
aligned text files; see `parallel_files` for the formats and bad lines)
and how to split it; `read()` gives its `TranslationPair`s by split, the
same objects `corpus.load_bible_pairs` gives, so the tokenizer, the
pipelines, the trainer and the evaluation take either.

Your own corpus is split by `dev` and `test` files where given, and
otherwise by a hash of each pair's *source* text (`split_for_text`): a
pair's split is a pure function of its text, the same in every run and on
every machine, whatever the line order, and repeated source sentences
never straddle train and test. The Bible corpus keeps its own four splits
(train / dev / test / heldout).
"""

import collections
import dataclasses
import hashlib
import os

from keras_transformer.data import corpus as bible
from keras_transformer.data.corpus import TranslationPair
from keras_transformer.data.parallel_files import _check_file
from keras_transformer.data.parallel_files import first_line
from keras_transformer.data.parallel_files import is_gzip
from keras_transformer.data.parallel_files import SkippedLines
from keras_transformer.data.parallel_files import iter_aligned
from keras_transformer.data.parallel_files import iter_tsv
from keras_transformer.errors import UserInputError

DEFAULT_DEV_FRACTION = 0.02
DEFAULT_TEST_FRACTION = 0.02
BIBLE_HEADER = "\t".join(bible.COLUMNS)
FORMATS = ("bible", "tsv", "aligned")


def split_for_text(text, dev_fraction=DEFAULT_DEV_FRACTION, test_fraction=DEFAULT_TEST_FRACTION):
    """The split of a pair, a pure function of its source text.

    The first 8 bytes of the text's SHA-1 as a number in [0, 1): below
    `dev_fraction` is `"dev"`, below `dev_fraction + test_fraction` is
    `"test"`, the rest `"train"`.

    Args:
        text: the source side of the pair.
        dev_fraction, test_fraction: the expected shares of dev and test.

    Returns:
        `"train"`, `"dev"` or `"test"`.

    Example:

    >>> split_for_text("Guten Tag", dev_fraction=0.0, test_fraction=0.0)
    'train'
    >>> split_for_text("Guten Tag", 0.3, 0.3) == split_for_text("Guten Tag", 0.3, 0.3)
    True
    """
    value = int.from_bytes(hashlib.sha1(text.encode("utf-8")).digest()[:8], "big") / 2.0**64
    if value < dev_fraction:
        return "dev"
    return "test" if value < dev_fraction + test_fraction else "train"


def _paths(value, flag):
    """None, one path (a TSV) or a tuple of two (aligned files)."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    value = tuple(os.fspath(path) for path in value)
    if len(value) == 1:
        return value[0]
    if len(value) != 2:
        raise UserInputError(
            f"{flag} takes one TSV file or two aligned text files (source, target), got {len(value)} paths."
        )
    return value


@dataclasses.dataclass(frozen=True)
class CorpusSplits:
    """The pairs of a corpus by split, with what reading them found.

    `splits["dev"]` is the list of dev pairs (empty for a split the corpus
    lacks); `splits.require("dev")` raises a `UserInputError` instead.

    Args:
        pairs: dict `{split: [TranslationPair, ...]}`.
        format: `"bible"`, `"tsv"` or `"aligned"`.
        source_language, target_language: names, or None when not given.
        skipped: `Counter` of the bad lines skipped, by kind (all files).

    Example:

    >>> pair = TranslationPair("a.tsv:1", "", "train", "Danke", "Thanks", ("Thanks",))
    >>> splits = CorpusSplits({"train": [pair], "dev": []}, "tsv")
    >>> splits["train"][0].target, splits["test"]
    ('Thanks', [])
    >>> splits.require("dev")
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: the corpus has no dev pairs (1 pair in all); raise --dev-fraction, or pass --dev with dev pairs.
    """

    pairs: dict
    format: str
    source_language: str = None
    target_language: str = None
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def __getitem__(self, split):
        return self.pairs.get(split, [])

    def require(self, split):
        """The pairs of `split`; a `UserInputError` that says what to do if there are none."""
        if split == "heldout" and self.format != "bible":
            raise UserInputError(
                "only the embedded Bible corpus has a heldout split (whole books); use --split dev or test."
            )
        if not self[split]:
            advice = {
                "train": "every line went to dev or test: lower --dev-fraction and --test-fraction",
                "dev": "raise --dev-fraction, or pass --dev with dev pairs",
                "test": "raise --test-fraction, or pass --test with test pairs",
            }.get(split, "")
            total = sum(len(pairs) for pairs in self.pairs.values())
            raise UserInputError(
                f"the corpus has no {split} pairs ({total} pair{'s' * (total != 1)} in all); {advice}."
            )
        return self[split]


@dataclasses.dataclass(frozen=True)
class ParallelCorpus:
    """Where a parallel corpus is, how to read it and how to split it.

    Args:
        path: None (the embedded Spanish -> English Bible corpus), a TSV
            file (the Bible's own format is recognised by its header), or
            a `(source_path, target_path)` pair of aligned text files.
        dev, test: files of dev / test pairs in the format of `path`; None
            takes that split from `path` by a hash of the source text.
        dev_fraction, test_fraction: the shares of `path` that the hash
            split sends to dev and test (where no file is given). None
            means 0.02 each.
        header: the TSV's first line is a header, skipped. Defaults to False.
        skip_bad_lines: skip, count and report bad lines instead of
            stopping at the first. Defaults to False.
        source_language, target_language: names, e.g. `"de"`, `"en"`;
            labels only (the run folder's default name, the summary).

    Example:

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> for name, text in (("train.de", "Guten Tag\\nDanke\\nJa\\n"), ("train.en", "Good day\\nThanks\\nYes\\n")):
    ...     _ = open(os.path.join(folder, name), "w").write(text)
    >>> corpus = ParallelCorpus((os.path.join(folder, "train.de"), os.path.join(folder, "train.en")),
    ...                         dev_fraction=0.0, test_fraction=0.0, source_language="de")
    >>> splits = corpus.read()
    >>> splits.format, [pair.source for pair in splits["train"]], splits["train"][2].id
    ('aligned', ['Guten Tag', 'Danke', 'Ja'], 'train.de:3')
    >>> ParallelCorpus().read()["heldout"][0].book  # the embedded Bible corpus
    'Ruth'
    """

    path: object = None
    dev: object = None
    test: object = None
    dev_fraction: float = None
    test_fraction: float = None
    header: bool = False
    skip_bad_lines: bool = False
    source_language: str = None
    target_language: str = None

    def __post_init__(self):
        for name, flag in (("path", "--corpus"), ("dev", "--dev"), ("test", "--test")):
            object.__setattr__(self, name, _paths(getattr(self, name), flag))
        for name in ("dev_fraction", "test_fraction"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value < 1.0:
                raise UserInputError(f"--{name.replace('_', '-')} must be in [0, 1), got {value}.")
        if self._fractions()[0] + self._fractions()[1] >= 1.0:
            raise UserInputError("--dev-fraction plus --test-fraction must be below 1: nothing would be left to train on.")

    @classmethod
    def from_config(cls, config):
        """The corpus a `TrainConfig` (or its `config.json` dict) names.

        Example:

        >>> ParallelCorpus.from_config({"corpus": ["a.de", "a.en"], "dev_fraction": 0.1}).path
        ('a.de', 'a.en')
        """
        if not isinstance(config, dict):
            config = dataclasses.asdict(config)
        names = {field.name for field in dataclasses.fields(cls)} - {"path"}
        return cls(path=config.get("corpus"), **{name: config[name] for name in names if config.get(name) is not None})

    def _fractions(self):
        return (
            DEFAULT_DEV_FRACTION if self.dev_fraction is None else self.dev_fraction,
            DEFAULT_TEST_FRACTION if self.test_fraction is None else self.test_fraction,
        )

    @property
    def format(self):
        """`"bible"`, `"tsv"` or `"aligned"`; reads the first line of a TSV."""
        if self.path is None:
            return "bible"
        if isinstance(self.path, tuple):
            return "aligned"
        return "bible" if first_line(self.path) == BIBLE_HEADER else "tsv"

    @property
    def languages(self):
        """`(source_language, target_language)`; `("es", "en")` for the Bible corpus."""
        if self.format == "bible":
            return "es", "en"
        return self.source_language, self.target_language

    def check(self):
        """Checks files and options without reading the pairs; returns the format.

        Raises:
            UserInputError: a missing file, or options that do not fit the
                format (dev files with the Bible corpus, `header` with
                aligned files, a dev file in another format...).
        """
        for flag, value in (("--corpus", self.path), ("--dev", self.dev), ("--test", self.test)):
            for path in (value,) if isinstance(value, str) else value or ():
                _check_file(path, flag)
        format_ = self.format
        if format_ == "bible":
            given = [flag for flag, value in (
                ("--dev", self.dev), ("--test", self.test), ("--dev-fraction", self.dev_fraction),
                ("--test-fraction", self.test_fraction),
            ) if value is not None]
            if given:
                raise UserInputError(
                    f"the Bible corpus keeps its own splits (train/dev/test/heldout): {', '.join(given)} "
                    "applies to your own corpus only."
                )
            # An NLLB-200 run names them by its codes (spa_Latn, eng_Latn).
            if (_language(self.source_language or "es"), _language(self.target_language or "en")) != ("es", "en"):
                raise UserInputError("the Bible corpus is Spanish (es, spa_Latn) -> English (en, eng_Latn); leave "
                                     "out --source-language and --target-language, or pass your own --corpus.")
            return format_
        if self.header and format_ == "aligned":
            raise UserInputError("--header is for a TSV corpus; aligned text files have no header line.")
        for flag, value in (("--dev", self.dev), ("--test", self.test)):
            if value is not None and isinstance(value, tuple) != (format_ == "aligned"):
                raise UserInputError(
                    f"{flag} must be in the format of --corpus: "
                    + ("two aligned text files, source then target." if format_ == "aligned" else "one TSV file.")
                )
        return format_

    def read(self):
        """Reads and splits the pairs; warns once per file about skipped lines.

        Returns:
            A `CorpusSplits`. Pairs of your own corpus have the id
            `"FILE:LINE"` (the source file's name, 1-based line), an empty
            `book`, and `references` holding the target and any further
            TSV columns.

        Raises:
            UserInputError: see `check`, `read_tsv` and `read_aligned`.
        """
        format_ = self.check()
        if format_ == "bible" and self.path is not None and not is_gzip(self.path):
            raise UserInputError(f"--corpus {self.path!r} has the Bible corpus' header but is not gzipped; gzip it.")
        pairs = {split: [] for split in (bible.SPLITS if format_ == "bible" else ("train", "dev", "test"))}
        skipped = collections.Counter()
        for pair in self.iter_pairs(skipped=skipped):
            pairs[pair.split].append(pair)
        if format_ == "bible":
            return CorpusSplits(pairs, format_, "es", "en")
        return CorpusSplits(pairs, format_, self.source_language, self.target_language, skipped)

    def iter_pairs(self, split=None, skipped=None, warn=True):
        """The pairs one at a time, split line by line: `read()` without holding them.

        Memory stays bounded whatever the corpus' size (the embedded Bible
        corpus is small and read whole).

        Args:
            split: None for every pair, or `"train"`, `"dev"`, `"test"`:
                only that split's pairs (and only the files that can hold
                it are read).
            skipped: a `collections.Counter` that counts the skipped bad
                lines by kind, or None.
            warn: warn once per file about skipped lines when it ends.
                Defaults to True.

        Yields:
            `TranslationPair`s, in file order.

        Example:

        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
        >>> _ = open(path, "w").write("Guten Tag\\tGood day\\nDanke\\tThanks\\n")
        >>> [pair.id for pair in ParallelCorpus(path, test_fraction=0.0).iter_pairs("train")]
        ['pairs.tsv:1', 'pairs.tsv:2']
        """
        format_ = self.check()
        if format_ == "bible":
            for pair in bible.load_bible_pairs("all", path=self.path):
                if split is None or pair.split == split:
                    yield pair
            return
        dev_fraction, test_fraction = self._fractions()
        for file_split, files in (("train", self.path), ("dev", self.dev), ("test", self.test)):
            if files is None or split not in (None, file_split) and (file_split != "train" or getattr(self, split)):
                continue
            flag = "--corpus" if file_split == "train" else f"--{file_split}"
            if format_ == "aligned":
                counter = SkippedLines(f"{files[0]} + {files[1]}")
                rows = iter_aligned(*files, skip_bad_lines=self.skip_bad_lines, flag=flag, skipped=counter)
            else:
                counter = SkippedLines(files)
                rows = iter_tsv(files, header=self.header, skip_bad_lines=self.skip_bad_lines, flag=flag,
                                skipped=counter)
            name = os.path.basename(files[0] if format_ == "aligned" else files)
            for number, source, target, references in rows:
                row_split = file_split
                if file_split == "train":
                    row_split = split_for_text(
                        source, 0.0 if self.dev else dev_fraction, 0.0 if self.test else test_fraction
                    )
                if split is None or row_split == split:
                    yield TranslationPair(f"{name}:{number}", "", row_split, source, target, references)
            if skipped is not None:
                skipped.update(counter.counts)
            if warn:
                counter.warn()


__all__ = ["CorpusSplits", "ParallelCorpus", "split_for_text"]


def _language(name):
    """ISO 639-1 for Spanish and English whichever way they are named (es, spa, spa_Latn); other names as given."""
    return {"spa": "es", "eng": "en"}.get(name.split("_")[0], name)
