"""SubRip subtitles (`.srt`): every cue's number and timings kept, a sentence that runs over cues translated whole.

Cues are read and written by the `srt` package. Consecutive cues whose text
does not end a sentence (no `.`, `!`, `?`, `…` or closing quote at its end)
are one group: their texts, joined with spaces, are one text for the
translator (whose sentences are split as any paragraph's). A group's
translation is shared back among its cues by length: each cue gets the
words nearest its share of the source's characters. A cue of two lines
gets its translation in two lines, cut at the space nearest the middle.
"""

import re

import srt

from keras_transformer_runtime.errors import UserInputError

_SENTENCE_END = re.compile(r"[.!?…。！？][\"'”’»)\]]*$")
# A cue is cut after a word that ends a clause when one lies this near (a share of the text) its share's end.
_CLAUSE_MARKS = ",;:.!?…”»)"
_NEAR = 0.2


def read_cues(text, name="the subtitles"):
    """The cues of a SubRip document.

    Raises:
        UserInputError: `text` is not SubRip (the first cue that is not, by its place and line).

    Example:

    >>> [cue.content for cue in read_cues("1\\n00:00:01,000 --> 00:00:02,000\\nHola.\\n")]
    ['Hola.']
    """
    try:
        return list(srt.parse(text))
    except srt.SRTParseError as error:
        line = text.count("\n", 0, error.expected_start) + 1
        raise UserInputError(f"{name} is not SubRip (.srt) from line {line} on: "
                             f"{error.unmatched_content.strip()[:60]!r} is no cue (a number, a line "
                             "`00:00:01,000 --> 00:00:02,000`, then its text); fix that cue or pass "
                             "--input-format txt") from None


def cue_groups(cues):
    """The cues in groups of consecutive ones that make whole sentences: lists of indices into `cues`.

    Example:

    >>> import datetime
    >>> cue = lambda text: srt.Subtitle(1, datetime.timedelta(0), datetime.timedelta(1), text)
    >>> cue_groups([cue("Y dijo"), cue("Dios: Sea la luz."), cue("¿Sí?")])
    [[0, 1], [2]]
    """
    groups, current = [], []
    for i, cue in enumerate(cues):
        current.append(i)
        if _SENTENCE_END.search(cue.content.strip()):
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


def translate_subtitles(text, translate, name="the subtitles", chunk=64):
    """A SubRip document's cues translated group by group; yields the output piece by piece.

    Args:
        text: str, the whole `.srt` document.
        translate: callable, a list of texts -> their translations (a translator).
        name: what to call the document in an error.
        chunk: groups of cues a call of `translate`.

    Yields:
        `(piece, cues)`: the next cues composed as SubRip, and how many
        cues they are.

    Raises:
        UserInputError: `text` is not SubRip (`read_cues`).

    Example:

    >>> document = "1\\n00:00:01,000 --> 00:00:02,000\\nY dijo\\n\\n2\\n00:00:02,000 --> 00:00:03,000\\nDios.\\n"
    >>> print("".join(piece for piece, _ in translate_subtitles(document, lambda texts: [t.upper() for t in texts])))
    1
    00:00:01,000 --> 00:00:02,000
    Y DIJO
    <BLANKLINE>
    2
    00:00:02,000 --> 00:00:03,000
    DIOS.
    <BLANKLINE>
    <BLANKLINE>
    """
    cues = read_cues(text, name)
    groups = cue_groups(cues)
    eol = "\r\n" if "\r\n" in text else "\n"
    for first in range(0, len(groups), chunk):
        part = groups[first:first + chunk]
        sources = [" ".join(" ".join(cues[i].content.split()) for i in group) for group in part]
        translated = []
        for group, translation in zip(part, translate(sources)):
            shares = shared_by_length(translation, [len(" ".join(cues[i].content.split())) for i in group])
            for i, share in zip(group, shares):
                lines = cues[i].content.strip().count("\n") + 1
                translated.append(srt.Subtitle(cues[i].index, cues[i].start, cues[i].end,
                                               in_lines(share, lines), cues[i].proprietary))
        yield srt.compose(translated, reindex=False, strict=False, eol=eol), len(translated)


def shared_by_length(text, lengths):
    """`text` cut at spaces into `len(lengths)` parts, each as near its share of the total length as can be,
    after a word that ends a clause (`,`, `:`, `.`, ...) where one is near.

    Each part gets a word or more while there are words enough; a part left
    without one (a translation of fewer words than its cues) is `"…"`, so
    that no cue is lost.

    Example:

    >>> shared_by_length("And God said: let there be light.", [12, 25])
    ['And God said:', 'let there be light.']
    >>> shared_by_length("Yes.", [3, 3])
    ['Yes.', '…']
    """
    words = text.split()
    ends = [0]  # the characters of the first k words joined by spaces
    for word in words:
        ends.append(ends[-1] + len(word) + (1 if len(ends) > 1 else 0))
    total = sum(lengths) or 1
    parts, start, wanted = [], 0, 0.0
    for count, length in enumerate(lengths[:-1]):
        wanted += length / total * ends[-1]
        after = len(lengths) - 1 - count  # parts still to fill after this one
        last = max(start + 1, len(words) - after)
        candidates = range(start + 1, last + 1)
        end = min(candidates, key=lambda k: abs(ends[min(k, len(words))] - wanted))
        near = [k for k in candidates if k <= len(words) and words[k - 1][-1] in _CLAUSE_MARKS
                and abs(ends[k] - wanted) <= _NEAR * ends[-1]]
        end = min(near, key=lambda k: abs(ends[k] - wanted)) if near else end
        parts.append(" ".join(words[start:end]) or "…")
        start = min(end, len(words))
    parts.append(" ".join(words[start:]) or "…")
    return parts


def in_lines(text, lines):
    """`text` in two lines, cut at the space nearest its middle, when the cue had two lines or more; else as it is.

    Example:

    >>> in_lines("Let there be light and there was light", 2)
    'Let there be light\\nand there was light'
    """
    if lines < 2 or " " not in text:
        return text
    middle = len(text) / 2
    cut = min((i for i, character in enumerate(text) if character == " "), key=lambda i: abs(i - middle))
    return text[:cut] + "\n" + text[cut + 1:]
