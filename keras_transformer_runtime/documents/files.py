"""A document file translated into another of its kind: plain text, SubRip, HTML or Markdown, read, checked, written.

The kind comes from the file's extension (`KINDS`) or is named. The output
is written piece by piece as the translation goes (a chunk of paragraphs,
cues or blocks at a time, flushed), so an interrupted run keeps what it had
written; an HTML page is written whole at the end (it is well formed only
whole).
"""

import os

from keras_transformer_runtime.documents.html_text import HtmlError
from keras_transformer_runtime.documents.html_text import html_passages
from keras_transformer_runtime.documents.html_text import translate_html
from keras_transformer_runtime.documents.markdown_text import markdown_units
from keras_transformer_runtime.documents.markdown_text import translate_markdown
from keras_transformer_runtime.documents.plain_text import paragraph_spans
from keras_transformer_runtime.documents.plain_text import translate_plain_text
from keras_transformer_runtime.documents.subtitles import read_cues
from keras_transformer_runtime.documents.subtitles import translate_subtitles
from keras_transformer_runtime.errors import UserInputError

KINDS = {".txt": "txt", ".text": "txt", ".srt": "srt", ".html": "html", ".htm": "html", ".xhtml": "html",
         ".md": "md", ".markdown": "md"}
# Kinds whose markup a plain-text translation would mangle: refused by their extension until they are read.
NOT_YET = (".docx", ".odt", ".epub", ".pdf", ".vtt")
# What a progress bar counts in each kind.
UNITS = {"txt": "paragraphs", "srt": "cues", "html": "passages", "md": "blocks"}


def file_kind(path, kind=None):
    """`"txt"`, `"srt"`, `"html"` or `"md"`: `kind` if given, else by `path`'s extension (none: plain text).

    Raises:
        UserInputError: an extension of a kind not read yet, or one that is not known.

    Example:

    >>> file_kind("notes.txt"), file_kind("film.SRT"), file_kind("README"), file_kind("page.html", "txt")
    ('txt', 'srt', 'txt', 'txt')
    >>> file_kind("index.htm"), file_kind("README.md")
    ('html', 'md')
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
    """How many units (`UNITS`) a progress bar counts in `text`: paragraphs, cues, HTML passages, Markdown blocks.

    Raises:
        UserInputError: a SubRip document that is not SubRip, or HTML that cannot be read.
    """
    if kind == "html":
        try:
            return len(html_passages(text))
        except HtmlError as error:
            raise UserInputError(f"{name}: {error}") from None
    if kind == "md":
        return markdown_units(text)
    return len(paragraph_spans(text)) if kind == "txt" else len(read_cues(text, name))


def translate_document(text, kind, translate, name="the document", aligned=None):
    """`text` translated as a document of `kind`; yields `(piece, units)` as `translate_plain_text` does.

    Args:
        text: str, the whole document.
        kind: `"txt"`, `"srt"`, `"html"` or `"md"`.
        translate: callable, a list of texts -> their translations (a translator); for Markdown also given
            `keep=` (regular expressions of spans kept as they are, `TextTranslator.keep_patterns`).
        name: what to call the document in an error.
        aligned: for HTML, callable, a list of texts -> one `(translation, alignment)` a text.

    Example:

    >>> "".join(piece for piece, _ in translate_document("Hola.\\n\\nAdios.", "txt", lambda ts: [t[::-1] for t in ts]))
    '.aloH\\n\\n.soidA'
    """
    if kind == "srt":
        return translate_subtitles(text, translate, name)
    if kind == "html":
        return translate_html(text, aligned)
    if kind == "md":
        return translate_markdown(text, translate)
    return translate_plain_text(text, translate)


def write_translated_document(text, kind, translate, out, progress=None, name="the document", aligned=None):
    """Translates `text` into the open text file `out`, piece by piece, each flushed; `progress(units)` after each.

    Returns:
        The units (`UNITS`) translated.
    """
    done = 0
    for piece, units in translate_document(text, kind, translate, name, aligned):
        out.write(piece)
        out.flush()
        done += units
        if progress is not None and units:
            progress(units)
    return done
