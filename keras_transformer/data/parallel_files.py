"""Reading your own parallel corpus: a TSV file, or two aligned text files.

Three formats, all UTF-8, gzipped or not (gzip is recognised by its first
two bytes, never by the file name):

- **TSV**: one pair a line, `source<TAB>target`; further columns are more
  references of the same target (for BLEU; an empty one is left out).
  There is no header line unless `header=True`, which skips line 1. Every
  line has the columns of the first one.
- **Two aligned text files**: line i of the source file translates line i
  of the target file; tabs are ordinary characters there.
- **The embedded Bible corpus' own TSV**, recognised by its exact header
  `id book split es en_web en_kjv`: it keeps its splits (train / dev /
  test / heldout) and its reader, `corpus.load_bible_pairs`.

`parallel_corpus.ParallelCorpus` picks the format and splits the pairs;
this module reads the files.

A bad line (the wrong number of columns, an empty side, invalid UTF-8)
stops the reading with a `UserInputError` naming the file and the 1-based
line; with `skip_bad_lines=True` such lines are skipped, counted per kind
and reported in one warning. Two aligned files of different lengths are
always an error: a missing line shifts every pair after it, which no
skipping repairs. Surrounding whitespace of each side is removed, and a
byte-order mark at the start of a file is ignored.

Pure standard library, like `corpus`.
"""

import collections
import gzip
import os
import warnings
import zlib

from keras_transformer.errors import UserInputError

# Kinds of bad lines, as the skip warning names them.
BAD_LINE_KINDS = {
    "columns": "the wrong number of columns",
    "empty": "an empty side",
    "utf8": "invalid UTF-8",
}
_SKIP_HINT = "or pass --skip-bad-lines to skip (and count) such lines"


class _BadLine(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def _check_file(path, flag):
    if not os.path.exists(path):
        raise UserInputError(f"{flag} {path!r} does not exist.")
    if not os.path.isfile(path):
        raise UserInputError(f"{flag} {path!r} is not a file.")


def _raw_lines(path, flag):
    """(1-based line number, bytes without the line break) of a file, gunzipped if it is gzip."""
    _check_file(path, flag)
    with open(path, "rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        stream = gzip.GzipFile(fileobj=raw) if compressed else raw
        number = 0
        try:
            for number, line in enumerate(stream, 1):
                yield number, line.rstrip(b"\n").rstrip(b"\r")
        except (OSError, EOFError, zlib.error) as error:  # gzip.BadGzipFile is an OSError
            raise UserInputError(
                f"{path}: the gzip data is damaged after line {number} ({error}); "
                "compress the file again or pass it uncompressed."
            ) from None


def _decode(path, number, line):
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _BadLine(
            "utf8", f"{path}:{number}: invalid UTF-8 (byte 0x{line[error.start]:02x} at byte "
            f"{error.start + 1} of the line); save the file as UTF-8, {_SKIP_HINT}"
        ) from None
    return text[1:] if number == 1 and text.startswith("\ufeff") else text


def first_line(path, flag="--corpus"):
    """The first line of a text file (gzipped or not), or "" for an empty file.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> _ = open(path, "w").write("Guten Tag\\tGood day\\n")
    >>> first_line(path)
    'Guten Tag\\tGood day'
    """
    for number, line in _raw_lines(path, flag):
        return line.decode("utf-8", errors="replace").lstrip("\ufeff")
    return ""


class SkippedLines:
    """Counts the skipped lines of one file per kind, with the first line of each.

    `warn()` reports them in one warning (nothing when none was skipped);
    `counts` is a `Counter` by kind (see `BAD_LINE_KINDS`).

    Example:

    >>> skipped = SkippedLines("train.tsv")
    >>> skipped.add(_BadLine("utf8", "..."), 12)
    >>> dict(skipped.counts), skipped.first
    ({'utf8': 1}, {'utf8': 12})
    """

    def __init__(self, path):
        self.path, self.counts, self.first = path, collections.Counter(), {}

    def add(self, bad, number):
        self.counts[bad.kind] += 1
        self.first.setdefault(bad.kind, number)

    def warn(self):
        if not self.counts:
            return
        total = sum(self.counts.values())
        parts = ", ".join(
            f"{count} with {BAD_LINE_KINDS[kind]} (first: line {self.first[kind]})"
            for kind, count in sorted(self.counts.items(), key=lambda item: self.first[item[0]])
        )
        warnings.warn(f"{self.path}: skipped {total} bad line{'s' * (total != 1)}: {parts}.", stacklevel=4)


def iter_tsv(path, header=False, skip_bad_lines=False, flag="--corpus", skipped=None):
    """The rows of a TSV of pairs, one at a time: `read_tsv` as a generator.

    Memory stays bounded whatever the file's size. Skipped lines are
    counted in `skipped` (a `SkippedLines`), which warns only when asked.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> _ = open(path, "w").write("Guten Tag\\tGood day\\nnur eine Spalte\\nDanke\\tThanks\\n")
    >>> skipped = SkippedLines(path)
    >>> [row[0] for row in iter_tsv(path, skip_bad_lines=True, skipped=skipped)], dict(skipped.counts)
    ([1, 3], {'columns': 1})
    """
    skipped = SkippedLines(path) if skipped is None else skipped
    expected = None
    for number, line in _raw_lines(path, flag):
        try:
            text = _decode(path, number, line)
            if header and number == 1:
                continue
            columns = [column.strip() for column in text.split("\t")]
            if not any(columns):
                raise _BadLine("empty", f"{path}:{number}: empty line; delete it, {_SKIP_HINT}")
            if len(columns) < 2:
                raise _BadLine(
                    "columns", f"{path}:{number}: 1 column, expected source<TAB>target (at least 2 "
                    f"tab-separated columns); fix it, {_SKIP_HINT}"
                )
            if expected is not None and len(columns) != expected[0]:
                raise _BadLine(
                    "columns", f"{path}:{number}: {len(columns)} tab-separated columns, expected "
                    f"{expected[0]} as on line {expected[1]}; fix it, {_SKIP_HINT}"
                )
            expected = expected or (len(columns), number)
            for side, column in (("source", columns[0]), ("target", columns[1])):
                if not column:
                    raise _BadLine("empty", f"{path}:{number}: the {side} (column "
                                   f"{1 if side == 'source' else 2}) is empty; fix it, {_SKIP_HINT}")
        except _BadLine as bad:
            if not skip_bad_lines:
                raise UserInputError(str(bad)) from None
            skipped.add(bad, number)
            continue
        references = (columns[1],) + tuple(column for column in columns[2:] if column)
        yield number, columns[0], columns[1], references


def read_tsv(path, header=False, skip_bad_lines=False, flag="--corpus"):
    """Reads a TSV of pairs: `source<TAB>target[<TAB>more references...]`.

    Args:
        path: the file, UTF-8, gzipped or not.
        header: skip line 1 (a header). Defaults to False: every line is a pair.
        skip_bad_lines: skip, count and report (one warning) bad lines
            instead of raising at the first. Defaults to False.
        flag: the name of the file in messages. Defaults to `"--corpus"`.

    Returns:
        `(rows, skipped)`: rows `(line_number, source, target, references)`,
        `references` starting with the target; `skipped` a `Counter` of
        bad-line kinds (see `BAD_LINE_KINDS`).

    Raises:
        UserInputError: a missing file, or a bad line (file and line named)
            without `skip_bad_lines`.

    Example:

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "pairs.tsv")
    >>> _ = open(path, "w").write("Guten Tag\\tGood day\\tHello\\nDanke\\tThank you\\t\\n")
    >>> rows, skipped = read_tsv(path)
    >>> rows[0]
    (1, 'Guten Tag', 'Good day', ('Good day', 'Hello'))
    >>> rows[1][3], sum(skipped.values())
    (('Thank you',), 0)
    """
    skipped = SkippedLines(path)
    rows = list(iter_tsv(path, header, skip_bad_lines, flag, skipped))
    skipped.warn()
    return rows, skipped.counts


def iter_aligned(source_path, target_path, skip_bad_lines=False, flag="--corpus", skipped=None):
    """The rows of two aligned text files, one at a time: `read_aligned` as a generator.

    Files of different lengths raise when the shorter one ends.

    Example:

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = open(os.path.join(folder, "a.de"), "w").write("Guten Tag\\nDanke\\n")
    >>> _ = open(os.path.join(folder, "a.en"), "w").write("Good day\\nThank you\\n")
    >>> next(iter_aligned(os.path.join(folder, "a.de"), os.path.join(folder, "a.en")))
    (1, 'Guten Tag', 'Good day', ('Good day',))
    """
    skipped = SkippedLines(f"{source_path} + {target_path}") if skipped is None else skipped
    paths = (source_path, target_path)
    sources, targets = _raw_lines(source_path, flag), _raw_lines(target_path, flag)
    while True:
        source_line, target_line = next(sources, None), next(targets, None)
        if source_line is None or target_line is None:
            break
        number = source_line[0]
        try:
            texts = [_decode(path, number, line).strip() for path, (_, line) in zip(paths, (source_line, target_line))]
            if not texts[0] and not texts[1]:
                raise _BadLine("empty", f"{source_path}:{number}: empty line, and line {number} of {target_path} "
                                        f"is empty too; delete both, {_SKIP_HINT}")
            for path, other, text in ((source_path, target_path, texts[0]), (target_path, source_path, texts[1])):
                if not text:
                    raise _BadLine("empty", f"{path}:{number}: empty line, but line {number} of {other} is "
                                            f"not; fix it, {_SKIP_HINT}")
        except _BadLine as bad:
            if not skip_bad_lines:
                raise UserInputError(str(bad)) from None
            skipped.add(bad, number)
            continue
        yield number, texts[0], texts[1], (texts[1],)
    if source_line is not None or target_line is not None:
        longer, shorter, rest = (
            (source_path, target_path, sources) if source_line is not None else (target_path, source_path, targets)
        )
        first_extra = (source_line or target_line)[0]
        last = first_extra + sum(1 for _ in rest)
        raise UserInputError(
            f"{flag}: {longer} has {last} lines but {shorter} has {first_extra - 1}: aligned files need one "
            f"line each per pair ({longer}:{first_extra} has no partner). A missing line shifts every pair "
            "after it, so --skip-bad-lines does not apply: find where the files part and fix them."
        )


def read_aligned(source_path, target_path, skip_bad_lines=False, flag="--corpus"):
    """Reads two aligned text files: line i of one translates line i of the other.

    Args:
        source_path, target_path: the files, UTF-8, gzipped or not.
        skip_bad_lines: skip, count and report (one warning) the pairs with
            an empty side or invalid UTF-8 instead of raising at the first.
            Files of different lengths are an error all the same.
        flag: the name of the files in messages. Defaults to `"--corpus"`.

    Returns:
        `(rows, skipped)` as `read_tsv` gives them.

    Raises:
        UserInputError: a missing file, files of different lengths, or a
            bad line (file and line named) without `skip_bad_lines`.

    Example:

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = open(os.path.join(folder, "a.de"), "w").write("Guten Tag\\nDanke\\n")
    >>> _ = open(os.path.join(folder, "a.en"), "w").write("Good day\\nThank you\\n")
    >>> rows, _ = read_aligned(os.path.join(folder, "a.de"), os.path.join(folder, "a.en"))
    >>> rows[1]
    (2, 'Danke', 'Thank you', ('Thank you',))
    """
    skipped = SkippedLines(f"{source_path} + {target_path}")
    rows = list(iter_aligned(source_path, target_path, skip_bad_lines, flag, skipped))
    skipped.warn()
    return rows, skipped.counts


def is_gzip(path):
    """Whether a file starts with gzip's two magic bytes.

    Example:

    >>> import gzip, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "train.de.gz")
    >>> with gzip.open(path, "wt") as f:
    ...     _ = f.write("Guten Tag\\n")
    >>> is_gzip(path)
    True
    """
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


__all__ = [
    "BAD_LINE_KINDS", "SkippedLines", "first_line", "is_gzip", "iter_aligned", "iter_tsv", "read_aligned",
    "read_tsv",
]
