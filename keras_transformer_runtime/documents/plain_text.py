"""Plain text: its paragraphs translated, its blank lines and line breaks kept.

A paragraph is a run of non-blank lines; what lies between paragraphs (blank
lines, their spaces) is copied as it is. Each paragraph is one text for the
translator, so its sentences are split and put back with the paragraph's own
whitespace (`paragraphs`): a line break between two sentences stays a line
break; one inside a sentence (text wrapped at a width) becomes the space
the translation puts between its words.
"""

import re

_PARAGRAPH = re.compile(r"[^\n]*\S[^\n]*(?:\n[^\n]*\S[^\n]*)*")


def paragraph_spans(text):
    """The `(start, end)` of each paragraph of `text`: a run of lines that are not blank, its outer spaces left out.

    Example:

    >>> text = "Sea la luz.\\nY fue.\\n\\n  \\nFin.\\n"
    >>> [text[start:end] for start, end in paragraph_spans(text)]
    ['Sea la luz.\\nY fue.', 'Fin.']
    """
    spans = []
    for match in _PARAGRAPH.finditer(text):
        start, end = match.span()
        while text[start].isspace():
            start += 1
        while text[end - 1].isspace():
            end -= 1
        spans.append((start, end))
    return spans


def translate_plain_text(text, translate, chunk=64):
    """`text`'s paragraphs translated in chunks, everything between them kept; yields the output piece by piece.

    Args:
        text: str, the whole document.
        translate: callable, a list of paragraphs -> their translations (a translator).
        chunk: paragraphs a call of `translate`.

    Yields:
        `(piece, paragraphs)`: the next piece of the output, and how many
        paragraphs it finished (for a progress bar); the pieces joined are
        the translated document.

    Example:

    >>> upper = lambda texts: [t.upper() for t in texts]
    >>> "".join(piece for piece, _ in translate_plain_text("Sea la luz.\\n\\n\\nY fue.\\n", upper))
    'SEA LA LUZ.\\n\\n\\nY FUE.\\n'
    """
    spans = paragraph_spans(text)
    written = 0
    for first in range(0, len(spans), chunk):
        part = spans[first:first + chunk]
        translations = translate([text[start:end] for start, end in part])
        pieces = []
        for (start, end), translation in zip(part, translations):
            pieces += [text[written:start], translation]
            written = end
        yield "".join(pieces), len(part)
    yield text[written:], 0
