"""A batch of texts split into the sentences a translator takes, and their translations put back together.

`split_texts` cuts each text into units: its sentences (`sentences`), a
sentence too long for the model cut at its clauses, and a multi-target
model's leading `>>fra<<` token given to every unit. The caller translates
`units(...)` as one batch (similar lengths batch together whatever text
they came from), then `join_texts` or `join_translations` rebuild one
answer a text: the units' translations in order, with the source's own
whitespace between them (a line break stays a line break). A text of one
sentence is its own unit, unchanged, so it translates exactly as it would
unsplit.

How an n-best list combines over a paragraph (`join_translations`): its
k-th hypothesis joins each sentence's k-th (as many as the sentence with
the fewest has); `score` is their sum (the sentences are decoded
independently, so it is the paragraph's log-probability), `normalized_score`
their mean, `tokens` and `token_scores` run on from sentence to sentence
(each sentence's `</s>` included); alignments count words over the whole
paragraph (source words over the `source_tokens` of all its sentences,
target words over the joined text), the attention is block-diagonal (a
sentence's pieces attend to its own source only), and `segments` gives each
sentence's character span in the source and in the hypothesis' text.
"""

import dataclasses
import unicodedata

import numpy as np

from keras_transformer_runtime.alignment import END_PIECE
from keras_transformer_runtime.alignment import word_of_each_piece
from keras_transformer_runtime.documents.kept_spans import keep_pattern
from keras_transformer_runtime.documents.kept_spans import kept_spans
from keras_transformer_runtime.documents.sentences import FALLBACK_LANGUAGE
from keras_transformer_runtime.documents.sentences import cut_to_fit
from keras_transformer_runtime.documents.sentences import sentence_spans
from keras_transformer_runtime.hypotheses import Hypothesis
from keras_transformer_runtime.hypotheses import Translation
from keras_transformer_runtime.marian_tokenizer import split_language_code


@dataclasses.dataclass(frozen=True)
class SplitText:
    """One text cut into the units a translator takes.

    Args:
        text: the text as given.
        spans: tuple of `(start, end)`, each unit's characters in `text`.
        prefix: a target-language token (`">>fra<< "`) put before each unit, or `""`.
        cut: how many of its sentences were longer than the model takes and cut at clauses.
        kept: the indices of `spans` copied into the translation as they are,
            never translated (`documents.kept_spans`).

    Example:

    >>> split = split_texts([">>fra<< Hola. ¿Qué tal?"], "es")[0]
    >>> split.units()
    ['>>fra<< Hola.', '>>fra<< ¿Qué tal?']
    """

    text: str
    spans: tuple
    prefix: str = ""
    cut: int = 0
    kept: tuple = ()

    def units(self):
        """The strings to translate: the text itself when it is one sentence, else each unit with the prefix."""
        if len(self.spans) == 1 and not self.cut and not self.kept:
            return [self.text]
        return [self.prefix + self.text[start:end] for i, (start, end) in enumerate(self.spans) if i not in self.kept]

    def with_kept(self, translated, kept):
        """Every span's part in order: the next of `translated` (an iterator) for a translated span, `kept(text)`
        for a kept one."""
        return [kept(self.text[start:end]) if i in self.kept else next(translated)
                for i, (start, end) in enumerate(self.spans)]

    def gaps(self):
        """The source's characters between consecutive units (whitespace, or `""` in scripts without spaces)."""
        return [self.text[end:start] for (_, end), (start, _) in zip(self.spans, self.spans[1:])]


def split_texts(texts, language=FALLBACK_LANGUAGE, fits=None, keep=()):
    """Each of `texts` as a `SplitText`: its sentences, cut at clauses where `fits` refuses one.

    Args:
        texts: list of str.
        language: the segmenter's language (`sentences.splitting_language`).
        fits: callable, str -> bool, whether the model takes a unit whole
            (its tokens within the model's positions); None: every sentence fits.
        keep: regular expressions of spans copied as they are, beside the
            defaults (`kept_spans.keep_pattern`); each sentence is cut around them.

    Returns:
        A list of `SplitText`, one a text; a blank text has no units.

    Example:

    >>> [split.units() for split in split_texts(["Sea la luz. Y fue la luz.", "  ", "Hola."], "es")]
    [['Sea la luz.', 'Y fue la luz.'], [], ['Hola.']]
    """
    split, pattern = [], keep_pattern(keep)
    for text in texts:
        code, rest = split_language_code(text)
        offset = len(code)
        spans, cut, kept = [], 0, []
        for start, end in sentence_spans(rest, language):
            sentence = (start + offset, end + offset)
            for start, end, keeps in kept_spans(text, sentence, pattern):
                if keeps:
                    kept.append(len(spans))
                    spans.append((start, end))
                    continue
                pieces = [(start, end)] if fits is None else cut_to_fit(
                    text, (start, end), lambda piece: fits(code + " " + piece if code else piece))
                cut += len(pieces) > 1
                spans.extend(pieces)
        split.append(SplitText(text, tuple(spans), f"{code} " if code else "", cut, tuple(kept)))
    return split


def units(split):
    """Every unit of `split` (a list of `SplitText`), in order: what to translate as one batch."""
    return [unit for text in split for unit in text.units()]


def join_texts(split, translations):
    """One translation a text: its units' `translations` (in `units` order) joined with its own whitespace,
    each kept span where it was.

    Example:

    >>> split = split_texts(["Sea la luz.\\nY fue la luz.", "", "Hola en www.acme.es."], "es")
    >>> join_texts(split, ["Let there be light.", "And there was light.", "Hello at"])
    ['Let there be light.\\nAnd there was light.', '', 'Hello at www.acme.es.']
    """
    joined, translated = [], iter(translations)
    for text in split:
        joined.append(_joined(text.with_kept(translated, lambda kept: kept), text.gaps(), text.kept)[0])
    return joined


def join_translations(split, translations, alignments=False):
    """One `Translation` a text from its units' `Translation`s (in `units` order); see the module's rule.

    Args:
        split: list of `SplitText`.
        translations: list of `Translation`, one a unit.
        alignments: bool, whether the hypotheses carry alignments (a blank
            text's empty hypothesis then has empty ones).

    Returns:
        A list of `Translation`, one a text, its `source` the text as given.
        A text of one unit gets that unit's `Translation` unchanged.
    """
    joined, translated = [], iter(translations)
    for text in split:
        given = [next(translated) for _ in range(len(text.spans) - len(text.kept))]
        if not text.spans:
            empty = Hypothesis("", 0.0, 0.0, **({"alignment": (), "attention": ()} if alignments else {}))
            joined.append(Translation(text.text, (empty,), () if alignments else None))
        elif len(text.spans) == 1 and not text.cut and not text.kept:
            joined.append(dataclasses.replace(given[0], source=text.text))
        else:
            hypotheses = max((len(part.hypotheses) for part in given), default=1)
            joined.append(_joined_translation(text, text.with_kept(
                iter(given), lambda kept: _kept_translation(kept, hypotheses, alignments))))
    return joined


def _kept_translation(text, hypotheses, alignments):
    """The `Translation` of a kept span: itself, `hypotheses` times, scored 0, each word aligned to itself."""
    pieces = tuple("▁" + word for word in text.split())
    links = tuple((i, i) for i in range(len(pieces))) if alignments else None
    attention = tuple(tuple(float(i == j) for j in range(len(pieces))) for i in range(len(pieces)))
    hypothesis = Hypothesis(text, 0.0, 0.0, pieces, (0.0,) * len(pieces), links, attention if alignments else None)
    return Translation(text, (hypothesis,) * hypotheses, pieces if alignments else None)


def _joined_translation(text, parts):
    """One `Translation` of `text` from the `Translation`s of its units."""
    count = min(len(part.hypotheses) for part in parts)
    hypotheses = tuple(_joined_hypothesis(text, [part.hypotheses[k] for part in parts],
                                          [part.source_tokens for part in parts]) for k in range(count))
    with_tokens = all(part.source_tokens is not None for part in parts)
    warnings = [f"sentence {i + 1}: {warning}" for i, part in enumerate(parts) for warning in part.warnings]
    if text.cut:
        warnings.append(f"{text.cut} sentence{'s' if text.cut > 1 else ''} longer than the model takes "
                        f"{'were' if text.cut > 1 else 'was'} cut at clause boundaries and translated in pieces")
    return Translation(text.text, hypotheses,
                       tuple(piece for part in parts for piece in part.source_tokens) if with_tokens else None,
                       tuple(warnings))


def _joined_hypothesis(text, hypotheses, sources):
    """The hypothesis of `text` made of one hypothesis a unit (`sources`: each unit's source pieces)."""
    joined, target_spans = _joined([hypothesis.text for hypothesis in hypotheses], text.gaps(), text.kept)
    fields = dict(
        text=joined,
        score=float(sum(hypothesis.score for hypothesis in hypotheses)),
        normalized_score=float(np.mean([hypothesis.normalized_score for hypothesis in hypotheses])),
        tokens=tuple(token for hypothesis in hypotheses for token in hypothesis.tokens),
        token_scores=tuple(score for hypothesis in hypotheses for score in hypothesis.token_scores),
        segments=tuple((*source, *target) for source, target in zip(text.spans, target_spans)),
    )
    if all(hypothesis.alignment is not None for hypothesis in hypotheses):
        fields["alignment"] = _shifted_links(hypotheses, sources)
    if all(hypothesis.attention is not None for hypothesis in hypotheses):
        fields["attention"] = _block_diagonal([hypothesis.attention for hypothesis in hypotheses],
                                              [len(source) for source in sources])
    return Hypothesis(**fields)


def _joined(parts, gaps, kept=()):
    """`(text, spans)`: `parts` joined by `gaps`, and each part's span in the text (an empty part adds no gap);
    beside a `kept` part the source's gap is copied as it is (`www.acme.es` and its `.`)."""
    text, spans = "", []
    for i, part in enumerate(parts):
        if part and text:
            text += gaps[i - 1] if i in kept or i - 1 in kept else _gap(gaps[i - 1], text, part)
        spans.append((len(text), len(text) + len(part)))
        text += part
    return text, spans


def _gap(gap, before, after):
    """What goes between two translated units: the source's whitespace; a space where the source had none
    (sentences of a script written without spaces) unless the translation is written without them too."""
    if gap or _written_without_spaces(before[-1]) or _written_without_spaces(after[0]):
        return gap
    return " "


def _written_without_spaces(character):
    name = unicodedata.name(character, "")
    return name.startswith(("CJK", "HIRAGANA", "KATAKANA", "THAI", "LAO", "KHMER", "MYANMAR", "IDEOGRAPHIC",
                            "FULLWIDTH", "HANGUL"))


def _words(pieces):
    """How many words `pieces` hold by the alignment rule (a last `</s>` left out)."""
    pieces = list(pieces or ())
    if pieces and pieces[-1] == END_PIECE:
        pieces = pieces[:-1]
    return max(word_of_each_piece(pieces), default=-1) + 1


def _shifted_links(hypotheses, sources):
    """Each unit's `(source word, target word)` links moved past the words of the units before it."""
    links, source_words, target_words = [], 0, 0
    for hypothesis, source in zip(hypotheses, sources):
        links.extend((i + source_words, j + target_words) for i, j in hypothesis.alignment)
        source_words += _words(source)
        target_words += _words(hypothesis.tokens)
    return tuple(links)


def _block_diagonal(attentions, widths):
    """The units' attention matrices (target pieces x source pieces) on one diagonal, zeros elsewhere."""
    rows = sum(len(attention) for attention in attentions)
    matrix = np.zeros((rows, sum(widths)))
    row = column = 0
    for attention, width in zip(attentions, widths):
        block = np.asarray(attention, "float64").reshape(-1, width) if len(attention) else np.zeros((0, width))
        matrix[row:row + len(block), column:column + width] = block
        row, column = row + len(block), column + width
    return tuple(map(tuple, matrix.tolist()))


def progress_over_texts(progress, texts, lines):
    """`progress` (a callable taking a count, or None) told of texts done, from counts of the `lines` units
    that `texts` texts were split into (a paragraph counts once; the count rounds down until the end).

    Example:

    >>> told = []
    >>> counting = progress_over_texts(told.append, 2, 5)
    >>> for count in (2, 2, 1):
    ...     counting(count)
    >>> told
    [1, 1]
    """
    if progress is None or texts == lines:
        return progress
    done = [0, 0]  # sentences, texts

    def told(count):
        done[0] += count
        texts_done = done[0] * texts // lines
        if texts_done > done[1]:
            progress(texts_done - done[1])
            done[1] = texts_done

    return told
