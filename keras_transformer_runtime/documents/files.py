"""A document file translated into another of its kind: plain text or SubRip, read, checked and written in pieces.

The kind comes from the file's extension (`KINDS`) or is named. The output
is written piece by piece as the translation goes (a chunk of paragraphs or
cues at a time, flushed), so an interrupted run keeps what it had written.
"""

import os

from keras_transformer_runtime.documents.plain_text import paragraph_spans
from keras_transformer_runtime.documents.plain_text import translate_plain_text
from keras_transformer_runtime.documents.subtitles import read_cues
from keras_transformer_runtime.documents.subtitles import translate_subtitles
from keras_transformer_runtime.errors import UserInputError

KINDS = {".txt": "txt", ".text": "txt", ".srt": "srt"}
# Kinds whose markup a plain-text translation would mangle: refused by their extension until they are read.
NOT_YET = (".html", ".htm", ".xhtml", ".md", ".markdown", ".docx", ".odt", ".epub", ".pdf", ".vtt")


def file_kind(path, kind=None):
    """`"txt"` or `"srt"`: `kind` if given, else by `path`'s extension (a file without one is plain text).

    Raises:
        UserInputError: an extension of a kind not read yet, or one that is not known.

    Example:

    >>> file_kind("notes.txt"), file_kind("film.SRT"), file_kind("README"), file_kind("page.html", "txt")
    ('txt', 'srt', 'txt', 'txt')
    """
    if kind is not None:
        return kind
    extension = os.path.splitext(path)[1].lower()
    if extension in KINDS or not extension:
        return KINDS.get(extension, "txt")
    if extension in NOT_YET:
        raise UserInputError(f"{path}: {extension} files are not translated with their markup yet; "
                             "--input-format txt translates the file as plain text, markup and all")
    raise UserInputError(f"{path}: no kind of document is known by the extension {extension!r}; name it with "
                         f"--input-format ({', '.join(sorted(set(KINDS.values())))})")


def read_document(path):
    """A document file's text: UTF-8 (a byte-order mark dropped), line endings as they are.

    Raises:
        UserInputError: the file cannot be read, or is not UTF-8 (the first bad byte's offset named).
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        raise UserInputError(f"--input {path}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UserInputError(f"--input {path}: not UTF-8 at byte {error.start} (0x{data[error.start]:02x}); "
                             "convert it first (iconv -f LATIN1 -t UTF-8, for one)") from None


def document_units(text, kind, name="the document"):
    """How many units a progress bar counts in `text`: paragraphs (plain text) or cues (SubRip).

    Raises:
        UserInputError: a SubRip document that is not SubRip.
    """
    return len(paragraph_spans(text)) if kind == "txt" else len(read_cues(text, name))


def translate_document(text, kind, translate, name="the document"):
    """`text` translated as a document of `kind`; yields `(piece, units)` as `translate_plain_text` does.

    Args:
        text: str, the whole document.
        kind: `"txt"` or `"srt"`.
        translate: callable, a list of texts -> their translations (a translator).
        name: what to call the document in an error.

    Example:

    >>> "".join(piece for piece, _ in translate_document("Hola.\\n\\nAdios.", "txt", lambda ts: [t[::-1] for t in ts]))
    '.aloH\\n\\n.soidA'
    """
    if kind == "srt":
        return translate_subtitles(text, translate, name)
    return translate_plain_text(text, translate)


def write_translated_document(text, kind, translate, out, progress=None, name="the document"):
    """Translates `text` into the open text file `out`, piece by piece, each flushed; `progress(units)` after each.

    Returns:
        The units (paragraphs or cues) translated.
    """
    done = 0
    for piece, units in translate_document(text, kind, translate, name):
        out.write(piece)
        out.flush()
        done += units
        if progress is not None and units:
            progress(units)
    return done
