"""Where a text's sentences start and end, and where a sentence too long for the model is cut.

Sentences come from sentencex (Wikimedia's rule-based segmenter, about 300
languages through fallback chains, abbreviation lists for the larger ones),
chosen over pysbd by the measured comparison in
benchmarks/findings/documents.md ("Which segmenter"). A span never holds
the whitespace around a sentence, so what lies between two spans is the
source's own spacing and line breaks, which the translation keeps.

A sentence longer than the model's positions (or than a run trained here
translates well, `TRAINED_RUN_SENTENCE_TOKENS`) is cut, never truncated: at
the clause mark (`;`, `:`, `,`, a dash, a closing bracket) nearest its
middle, else at the space nearest its middle, else (a script written
without spaces) at the character nearest its middle, and again until
every piece fits.
"""

import re

import numpy as np
import sentencex

# The segmenter's rules for a language are found by its ISO 639-1 code ("es"); an NLLB-200 code
# ("spa_Latn") or a three-letter one is reduced to its language part, and the table below names the
# two-letter code of the languages whose rules differ from the fallback's (abbreviations, marks).
_TWO_LETTER = {
    "ara": "ar", "arb": "ar", "ben": "bn", "bul": "bg", "cat": "ca", "ces": "cs", "dan": "da", "deu": "de",
    "ell": "el", "eng": "en", "est": "et", "fin": "fi", "fra": "fr", "guj": "gu", "heb": "he", "hin": "hi",
    "hun": "hu", "hye": "hy", "ita": "it", "jpn": "ja", "kan": "kn", "kor": "ko", "lit": "lt", "lvs": "lv",
    "mal": "ml", "mar": "mr", "mya": "my", "nld": "nl", "nob": "nb", "ory": "or", "pan": "pa", "pes": "fa",
    "pol": "pl", "por": "pt", "ron": "ro", "rus": "ru", "slk": "sk", "slv": "sl", "spa": "es", "swe": "sv",
    "tam": "ta", "tel": "te", "tha": "th", "tur": "tr", "ukr": "uk", "urd": "ur", "vie": "vi", "zho": "zh",
}
FALLBACK_LANGUAGE = "en"
# A run trained here cuts a sentence longer than this many tokens at its clauses: the small models
# trained on verses translate long inputs worse, and of 16 to 128 tokens this cut scored best on the
# embedded corpus' dev split (benchmarks/findings/documents.md, "How long a unit"). An imported run
# cuts only what its positions cannot take.
TRAINED_RUN_SENTENCE_TOKENS = 32

# A clause ends after one of these marks when whitespace follows it.
_CLAUSE_END = re.compile(r"[;:,\u2013\u2014)\]\u201d\u00bb](?=\s)")
_SPACE = re.compile(r"\s+")


def splitting_language(code):
    """The segmenter's language for a run's source-language name: `"es"`, `"spa_Latn"`, `"spa"` -> `"es"`.

    Args:
        code: str or None, the source language as a run names it.

    Returns:
        A lower-case code the segmenter knows; `FALLBACK_LANGUAGE` for None or an empty name.

    Example:

    >>> splitting_language("spa_Latn"), splitting_language("de"), splitting_language(None)
    ('es', 'de', 'en')
    """
    if not code:
        return FALLBACK_LANGUAGE
    language = code.split("_")[0].split("-")[0].lower()
    return _TWO_LETTER.get(language, language)


def sentence_spans(text, language=FALLBACK_LANGUAGE):
    """The `(start, end)` character offsets of each sentence of `text`, without the whitespace around it.

    Args:
        text: str.
        language: the segmenter's language code (`splitting_language`).

    Returns:
        A list of `(start, end)` int pairs, in order, with `text[start:end]`
        a sentence that neither starts nor ends with whitespace; empty for
        a blank text. What lies between two spans is whitespace only, or
        nothing (sentences of a script written without spaces). A piece
        without a letter or a digit (an emoji, a lone mark) stays with the
        sentence before it (the first sentence, when it opens the text).

    Example:

    >>> text = "Y dijo Dios: Sea la luz.  ¿Y fue la luz?\\n¡Sí!"
    >>> [text[start:end] for start, end in sentence_spans(text, "es")]
    ['Y dijo Dios: Sea la luz.', '¿Y fue la luz?', '¡Sí!']
    """
    spans = []
    for segment in sentencex.get_sentence_boundaries(language, text):
        start, end = _stripped(text, segment["start_index"], segment["end_index"])
        if start >= end:
            continue
        if spans and not any(character.isalnum() for character in text[start:end]):
            spans[-1] = (spans[-1][0], end)  # an emoji or a mark after a sentence belongs to it
        elif len(spans) == 1 and not any(character.isalnum() for character in text[slice(*spans[0])]):
            spans[0] = (spans[0][0], end)  # and one before the first sentence to that
        else:
            spans.append((start, end))
    return spans


def cut_to_fit(text, span, fits):
    """`span` of `text` cut at its clause boundaries into pieces that each `fits`, in order.

    Args:
        text: str.
        span: `(start, end)`, a sentence of `text`.
        fits: callable, str -> bool: whether the model takes this piece whole.

    Returns:
        A list of `(start, end)` spans covering the sentence (the whitespace at a
        cut left out); `[span]` when it fits. A piece of one character that does
        not fit is kept as it is (the translator then truncates it and says so).

    Example:

    >>> text = "Y vió Dios que era buena la luz; y apartó Dios la luz de las tinieblas."
    >>> [text[s:e] for s, e in cut_to_fit(text, (0, len(text)), lambda piece: len(piece) < 40)]
    ['Y vió Dios que era buena la luz;', 'y apartó Dios la luz de las tinieblas.']
    """
    start, end = span
    if end - start <= 1 or fits(text[start:end]):
        return [span]
    cut = _cut_point(text, start, end)
    left, right = _stripped(text, start, cut), _stripped(text, cut, end)
    return cut_to_fit(text, left, fits) + cut_to_fit(text, right, fits)


def within_tokens(tokenizer, max_length):
    """A `fits` for `cut_to_fit`: whether a text is at most `max_length` tokens of `tokenizer`.

    A piece holds a character or more, and a tokenizer adds at most a
    language code and an end token, so a short text needs no tokenizing.

    Example:

    >>> class Characters:
    ...     def tokenize(self, texts):
    ...         return [list(text) for text in texts]
    >>> fits = within_tokens(Characters(), 5)
    >>> fits("ab"), fits("abcdef")
    (True, False)
    """

    def fits(text):
        if len(text) + 3 <= max_length:
            return True
        return len(np.asarray(tokenizer.tokenize([text])[0]).reshape(-1)) <= max_length

    return fits


def _cut_point(text, start, end):
    """Where to cut `text[start:end]`: after the clause mark nearest the middle, else at a space, else the middle."""
    middle = (start + end) / 2
    piece = text[start:end]
    for pattern in (_CLAUSE_END, _SPACE):
        cuts = [start + match.end() for match in pattern.finditer(piece) if 0 < match.end() < len(piece)]
        if cuts:
            return min(cuts, key=lambda cut: abs(cut - middle))
    return start + (end - start) // 2


def _stripped(text, start, end):
    """`(start, end)` moved inwards past whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
