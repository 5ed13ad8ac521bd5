"""Spans a translation must carry exactly as they are: URLs, e-mail addresses, numbers, placeholders, `--keep`.

A model cannot be trusted to copy them: the README's run, trained on
verses, drops or rewrites every digit and symbol it is given
(benchmarks/findings/documents.md, "Kept spans"). So such a span is never
shown to the model: `kept_spans` finds it, `documents.paragraphs` cuts the
sentence around it, the pieces between are translated, and the span is put
back between their translations, in the source's order, with the source's
own spacing. A piece with no letter left (a lone `.` after a URL) is kept
as it is too.
"""

import re

# What every input keeps: web addresses (a closing bracket or punctuation after one is the sentence's, unless
# the address opened it), e-mail addresses, numbers with their separators, and format strings' placeholders:
# `{name}`, `{{name}}`, `%s` / `%(name)s` / `%1$d`.
DEFAULT_PATTERNS = (
    r"\b(?:https?://|ftp://|www\.)(?:[^\s<>\"()]|\([^\s<>\"()]*\))+?(?=[.,;:!?)\]}'\"»]*(?:\s|$))",
    r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b",
    r"(?<![^\W\d_])\d+(?:[.,:/]\d+)*(?![^\W\d_])",
    r"\{\{[^{}]*\}\}",
    r"\{[^{}\s]*\}",
    r"%(?:\(\w+\)|\d+\$)?[-+0#]*\d*(?:\.\d+)?[sdifgeExXoc]",
)


def keep_pattern(extra=()):
    """One compiled pattern matching every default kept span and each of `extra` (regular expressions).

    Raises:
        ValueError: an `extra` pattern is not a regular expression (`--keep` names it).

    Example:

    >>> [match.group() for match in keep_pattern([r"ACME-\\w+"]).finditer("Ver www.acme.es o ACME-7x: {n} a %s")]
    ['www.acme.es', 'ACME-7x', '{n}', '%s']
    """
    for pattern in extra:
        try:
            re.compile(pattern)
        except re.error as error:
            raise ValueError(f"--keep {pattern!r} is not a regular expression: {error}") from None
    # The user's patterns first: a span they mark wins over a default one starting at the same place.
    return re.compile("|".join(f"(?:{pattern})" for pattern in (*extra, *DEFAULT_PATTERNS)))


def kept_spans(text, span, pattern):
    """`span` of `text` as `(start, end, kept)` pieces: the kept matches of `pattern` and the pieces between.

    Whitespace at a cut is left out of both sides; a piece between matches
    that holds no letter is kept too. Without a match, `[(*span, False)]`.

    Example:

    >>> text = "Pague {n} euros en https://acme.es/a?b=1."
    >>> [(text[s:e], kept) for s, e, kept in kept_spans(text, (0, len(text)), keep_pattern())]
    [('Pague', False), ('{n}', True), ('euros en', False), ('https://acme.es/a?b=1', True), ('.', True)]
    """
    start, end = span
    pieces, position = [], start
    for match in pattern.finditer(text, start, end):
        if match.end() == match.start():
            continue
        pieces.extend(_between(text, position, match.start()))
        pieces.append((match.start(), match.end(), True))
        position = match.end()
    if not pieces:
        return [(start, end, False)]
    pieces.extend(_between(text, position, end))
    return pieces


def _between(text, start, end):
    """The piece of `text` between two kept spans, without its outer whitespace: none, or one `(start, end, kept)`."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start == end:
        return []
    return [(start, end, not any(character.isalpha() for character in text[start:end]))]
