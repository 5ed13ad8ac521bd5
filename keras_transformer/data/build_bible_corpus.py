"""Rebuilds `bible_es_en.tsv.gz` from the Debian SWORD Bible modules.

Source: Spanish Reina-Valera 1909 (`spaRV1909eb`). Targets: World English
Bible (`engWEB2015eb`) and King James Version (`engKJV2006eb`) as a second
reference. All three are public domain.

Get the modules without installing them (any Debian or Ubuntu machine):

    apt-get update
    apt-get download sword-text-sparv sword-text-web sword-text-kjv
    for deb in sword-text-*.deb; do dpkg -x "$deb" sword; done

Then, with `pip install pysword` (GPL-2; needed by this script only, never
by the package at run time):

    python -m keras_transformer.data.build_bible_corpus \\
        --sword-dir sword/usr/share/sword \\
        --out keras_transformer/data/bible_es_en.tsv.gz \\
        --fixture-out tests/fixtures/bible_es_en_small.tsv.gz

Verses are aligned by (book, chapter, verse). RV1909 and KJV share the KJV
versification and WEB uses NRSVA, so the script drops what does not line
up: WEB chapters whose verse counts differ from RV1909, RV1909 chapters and
verses that its own numbering shifts (found by empty verses and by the
Strong's numbers both RV1909 and KJV carry), and the few WEB verses that
textual criticism moved. The split of each verse comes from
`corpus.split_for_verse_id`, a hash of its id, and the gzip header holds no
time stamp, so rebuilds are identical byte for byte.
"""

import argparse
import gzip
import hashlib
import io
import re
import sys
import unicodedata

from keras_transformer.data.corpus import COLUMNS
from keras_transformer.data.corpus import split_for_verse_id

SPANISH = "spaRV1909eb"
WEB = "engWEB2015eb"
KJV = "engKJV2006eb"

# Tags whose content is not verse text.
_NOTE = re.compile(r"<note\b[^>]*?(?:/>|>.*?</note>)", re.S)
_SPEAKER = re.compile(r"<speaker\b[^>]*>.*?</speaker>", re.S)
# WEB appends its glossary to the last verse of Revelation.
_GLOSSARY = re.compile(r'<div\b[^>]*type="glossary".*', re.S)
# RV1909 marks a supplied enclitic pronoun as its own tag, glued to the
# verb: "diciéndo</w><transChange>lo</transChange>" is "diciéndolo".
_ENCLITIC = re.compile(
    r"(\w+)</w><transChange[^>]*>(me|te|se|le|lo|la|les|los|las|nos|os)</transChange>"
)
# The words before such a tag in RV1909 that are not verbs ("no lo").
_NOT_VERBS = {
    "como", "cuánto", "dios", "ellos", "gentes", "jehová", "josué", "no", "os", "que", "y"
}
# Word-level tags can split a word (KJV "<w>afrai</w>d"): drop them without
# a space. Every other tag (lines, paragraphs, titles, added words) and a
# removed note separate words.
_INLINE_TAG = re.compile(r"</?(?:w|q|divineName|foreign|seg|name|hi|reference)\b[^>]*>")
_ANY_TAG = re.compile(r"<[^>]*>")
# Stray USFM markers left in KJV by its conversion: "the \nd LORD".
_USFM = re.compile(r"\\\+?[a-z]+\d*\*?")
_SPACE_BEFORE = re.compile(r"\s+([,.;:!?])")
_SPACE_AFTER = re.compile(r"([¡¿“‘(])\s+")
_SPACES = re.compile(r"\s+")
_STRONGS = re.compile(r"strong:([GH]\d+)")


def clean_osis(text):
    """Returns the plain text of one OSIS verse, on a single line."""
    text = _GLOSSARY.sub(" ", text)
    text = _NOTE.sub(" ", text)
    text = _SPEAKER.sub(" ", text)
    text = _ENCLITIC.sub(_join_enclitic, text)
    text = _INLINE_TAG.sub("", text)
    text = _ANY_TAG.sub(" ", text)
    text = _USFM.sub(" ", text)
    text = text.replace("¶", " ")
    text = unicodedata.normalize("NFC", text)
    text = _SPACES.sub(" ", text)
    # Tags removed next to punctuation leave "word ," and "¡ word".
    text = _SPACE_BEFORE.sub(r"\1", text)
    return _SPACE_AFTER.sub(r"\1", text).strip()


def _join_enclitic(match):
    word, pronoun = match.groups()
    if word.lower() in _NOT_VERBS:
        return match.group(0)
    return f"{word}{pronoun}</w> "


def read_module(modules, name):
    """Returns {(book, chapter, verse): raw OSIS text} and chapter lengths."""
    bible = modules.get_bible_from_module(name)
    verses, lengths = {}, {}
    for books in bible.get_structure().get_books().values():
        for book in books:
            for chapter, count in enumerate(book.chapter_lengths, start=1):
                lengths[book.osis_name, chapter] = count
                for verse in range(1, count + 1):
                    verses[book.osis_name, chapter, verse] = bible.get(
                        books=book.osis_name, chapters=chapter, verses=verse, clean=False
                    )
    return verses, lengths


def empty_verse_chapters(spanish):
    """Chapters around the verses that RV1909 leaves empty.

    RV1909 numbers some chapters differently from the KJV scheme its module
    uses; where it does, a verse is empty and its text sits in a neighbour,
    or in the next chapter when the empty verse ends one (Jonah 1:17 is
    RV1909's Jonah 2:1).
    """
    chapters = set()
    for (book, chapter, verse), text in spanish.items():
        if not text:
            chapters.add((book, chapter))
            if (book, chapter, verse + 1) not in spanish:
                chapters.add((book, chapter + 1))
    return chapters


def strongs_shifted_chapters(spanish_raw, kjv_raw, window=3, margin=0.1):
    """Chapters where an RV1909 verse holds another KJV verse's text.

    Both modules tag words with Strong's numbers, a language-free check: a
    verse is shifted when a KJV verse up to `window` verses away shares
    clearly more numbers with it than the KJV verse of the same id. Its
    neighbours are then merged or split differently too, so the whole
    chapter goes.
    """
    keys = list(spanish_raw)
    es = [set(_STRONGS.findall(_NOTE.sub(" ", spanish_raw[key]))) for key in keys]
    en = [set(_STRONGS.findall(_NOTE.sub(" ", kjv_raw[key]))) for key in keys]
    chapters = set()
    for i, numbers in enumerate(es):
        own = _jaccard(numbers, en[i])
        nearby = range(max(0, i - window), min(len(keys), i + window + 1))
        if numbers and max(_jaccard(numbers, en[j]) for j in nearby) > own + margin:
            chapters.add(keys[i][:2])
    return chapters


def web_mismatches(web, kjv, max_ratio=2.5, margin=0.25):
    """Finds WEB verses whose text departs from the shared KJV numbering.

    WEB follows modern critical texts: it swaps Matthew 23:13-14 and moves
    the doxology of Romans 16:25-27 to 14:23. Caught as a WEB verse far
    longer than its KJV verse, or whose words match a neighbouring KJV verse
    much better than its own.
    """
    keys = [key for key in web if kjv.get(key)]
    words = {key: set(re.findall(r"[a-z]{4,}", web[key].lower())) for key in keys}
    kjv_words = {key: set(re.findall(r"[a-z]{4,}", kjv[key].lower())) for key in keys}
    mismatched = set()
    for i, key in enumerate(keys):
        if len(web[key].split()) > max_ratio * len(kjv[key].split()):
            mismatched.add(key)
        own = _jaccard(words[key], kjv_words[key])
        for j in (i - 1, i + 1):
            if 0 <= j < len(keys) and _jaccard(words[key], kjv_words[keys[j]]) > own + margin:
                mismatched.add(key)
    return mismatched


def _jaccard(a, b):
    return len(a & b) / max(1, len(a | b))


def build_rows(sword_dir):
    """Returns the corpus rows, in canonical order, as tuples of COLUMNS."""
    from pysword.modules import SwordModules  # GPL-2: build time only.

    modules = SwordModules(sword_dir)
    modules.parse_modules()
    raw, lengths = {}, {}
    for name in (SPANISH, WEB, KJV):
        raw[name], lengths[name] = read_module(modules, name)
    es, web, kjv = (
        {key: clean_osis(text) for key, text in raw[name].items()}
        for name in (SPANISH, WEB, KJV)
    )

    skipped_chapters = strongs_shifted_chapters(raw[SPANISH], raw[KJV])
    skipped_chapters |= empty_verse_chapters(es)
    skipped_chapters |= {
        chapter
        for chapter, count in lengths[SPANISH].items()
        if lengths[WEB].get(chapter) != count
    }
    skipped_verses = web_mismatches(web, kjv)
    print(
        f"Dropping {len(skipped_chapters)} misaligned chapters and "
        f"{len(skipped_verses)} WEB verses.",
        file=sys.stderr,
    )

    rows = []
    for key, source in es.items():
        book, chapter, verse = key
        if (book, chapter) in skipped_chapters or key in skipped_verses:
            continue
        if not source or not web.get(key):
            continue
        verse_id = f"{book}.{chapter}.{verse}"
        rows.append(
            (verse_id, book, split_for_verse_id(verse_id), source, web[key], kjv.get(key, ""))
        )
    return rows


def write_tsv_gz(rows, path):
    """Writes rows as a gzipped TSV whose bytes depend on the rows only."""
    lines = ["\t".join(COLUMNS)]
    for row in rows:
        for field in row:
            if "\t" in field or "\n" in field:
                raise ValueError(f"Tab or newline inside a field of {row[0]}.")
        lines.append("\t".join(row))
    data = ("\n".join(lines) + "\n").encode("utf-8")
    buffer = io.BytesIO()
    # No file name and mtime=0 in the gzip header: identical bytes on rebuild.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as f:
        f.write(data)
    with open(path, "wb") as f:
        f.write(buffer.getvalue())


def fixture_rows(rows, counts=None, max_words=40):
    """Picks a small, deterministic sample of rows for fast tests.

    Only verses of at most `max_words` words in every language qualify;
    among those, the ones with the smallest id hash are taken per split.
    """
    counts = counts or {"train": 200, "dev": 40, "test": 30, "heldout": 30}
    order = {row[0]: index for index, row in enumerate(rows)}
    picked = []
    for split, count in counts.items():
        candidates = [
            row
            for row in rows
            if row[2] == split and max(len(text.split()) for text in row[3:]) <= max_words
        ]
        candidates.sort(key=lambda row: hashlib.sha1(row[0].encode()).hexdigest())
        picked.extend(candidates[:count])
    return sorted(picked, key=lambda row: order[row[0]])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sword-dir",
        required=True,
        help="SWORD root holding mods.d/ and modules/, e.g. DIR/usr/share/sword.",
    )
    parser.add_argument("--out", required=True, help="Output .tsv.gz path.")
    parser.add_argument(
        "--fixture-out", help="Also write the small test fixture to this path."
    )
    args = parser.parse_args(argv)

    rows = build_rows(args.sword_dir)
    write_tsv_gz(rows, args.out)
    counts = {split: 0 for split in ("train", "dev", "test", "heldout")}
    for row in rows:
        counts[row[2]] += 1
    print(f"{len(rows)} pairs -> {args.out}: {counts}", file=sys.stderr)
    if args.fixture_out:
        small = fixture_rows(rows)
        write_tsv_gz(small, args.fixture_out)
        print(f"{len(small)} pairs -> {args.fixture_out}", file=sys.stderr)


if __name__ == "__main__":
    main()
