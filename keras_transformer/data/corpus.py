"""The embedded Spanish -> English Bible corpus (RV1909 -> WEB, plus KJV).

Pure standard library: reading the corpus needs neither TensorFlow nor the
SWORD tools that built it (see `build_bible_corpus.py` beside this file).
"""

import csv
import dataclasses
import gzip
import hashlib
import importlib.resources
import os

CORPUS_FILENAME = "bible_es_en.tsv.gz"
DEFAULT_CORPUS_PATH = importlib.resources.files("keras_transformer.data").joinpath(
    CORPUS_FILENAME
)
COLUMNS = ("id", "book", "split", "es", "en_web", "en_kjv")
SPLITS = ("train", "dev", "test", "heldout")
# Whole books kept out of train/dev/test: a test on unseen books.
HELDOUT_BOOKS = frozenset({"Ruth", "Jonah", "Phlm", "Jude"})


@dataclasses.dataclass(frozen=True)
class TranslationPair:
    """One translation pair: a Bible verse, or a line of your own corpus.

    Attributes:
        id: Verse id `"Book.chapter.verse"` with the OSIS book name,
            e.g. `"Gen.1.1"`; `"FILE:LINE"` for your own corpus (see
            `parallel_corpus.ParallelCorpus`).
        book: OSIS book name, e.g. `"Gen"`; `""` for your own corpus.
        split: One of `"train"`, `"dev"`, `"test"`, `"heldout"` (the Bible
            corpus only).
        source: the source text (Bible: Spanish, Reina-Valera 1909).
        target: the target text (Bible: English, World English Bible).
        references: All references of the target: the target, then any
            others (Bible: the KJV text when the verse has one; your own
            TSV: its columns after the second).
    """

    id: str
    book: str
    split: str
    source: str
    target: str
    references: tuple


def split_for_verse_id(verse_id):
    """Returns the split of a verse, a pure function of its id.

    Verses of the held-out books go to `"heldout"`; the others go by the
    SHA-1 of the id: about 2% `"dev"`, 2% `"test"` and 96% `"train"`.

    Args:
        verse_id: Verse id such as `"Gen.1.1"`.

    Returns:
        The split name.

    Example:

    >>> split_for_verse_id("Ruth.1.1")
    'heldout'
    >>> split_for_verse_id("Gen.1.1") in ("train", "dev", "test")
    True
    """
    if verse_id.split(".", 1)[0] in HELDOUT_BOOKS:
        return "heldout"
    bucket = int(hashlib.sha1(verse_id.encode("utf-8")).hexdigest(), 16) % 100
    if bucket < 2:
        return "dev"
    if bucket < 4:
        return "test"
    return "train"


def load_bible_pairs(split="train", path=None):
    """Loads verse-aligned Spanish -> English pairs from the Bible corpus.

    Args:
        split: `"train"`, `"dev"`, `"test"`, `"heldout"` (whole books never
            seen in the other splits) or `"all"`.
        path: Gzipped TSV with columns `id, book, split, es, en_web,
            en_kjv`. Defaults to the corpus shipped with the package.

    Returns:
        A list of `TranslationPair`, in canonical Bible order.

    Example:

    >>> pairs = load_bible_pairs("all")
    >>> pairs[0].id, pairs[0].source[:15], pairs[0].target[:16]
    ('Gen.1.1', 'EN el principio', 'In the beginning')
    >>> all(pair.split == "dev" for pair in load_bible_pairs("dev"))
    True
    """
    if split not in SPLITS + ("all",):
        raise ValueError(
            f"`split` must be one of {SPLITS + ('all',)}; received split={split!r}"
        )
    if path is None:
        source = DEFAULT_CORPUS_PATH
    else:
        source = os.fspath(path)
        if not os.path.isfile(source):
            raise FileNotFoundError(
                f"Bible corpus not found at path={source!r}; pass the path of a "
                f"gzipped TSV built by keras_transformer.data.build_bible_corpus, "
                f"or path=None for the packaged corpus."
            )
    with _open_binary(source) as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = tuple(next(reader))
        if header != COLUMNS:
            raise ValueError(f"Unexpected corpus header {header}; expected {COLUMNS}.")
        pairs = []
        for verse_id, book, row_split, es, en_web, en_kjv in reader:
            if split != "all" and row_split != split:
                continue
            references = (en_web, en_kjv) if en_kjv else (en_web,)
            pairs.append(
                TranslationPair(verse_id, book, row_split, es, en_web, references)
            )
    return pairs


def _open_binary(source):
    if isinstance(source, str):
        return open(source, "rb")
    return source.open("rb")  # An importlib.resources Traversable.


__all__ = [
    "DEFAULT_CORPUS_PATH",
    "TranslationPair",
    "load_bible_pairs",
    "split_for_verse_id",
]
