"""What a translator gives beyond the text: its hypotheses with their scores.

`NBest` holds a decoding loop's n best hypotheses as arrays (from
`keras_transformer.decoding.n_best_search`, or from the compiled program);
`TextTranslator.n_best` reads them into one `Translation` per input: the source,
the warnings about it alone, and its best hypotheses, best first, each a `Hypothesis` with its
log-probability score, the length-normalized score the beam ranked it by,
and each token's score; with `alignments=True`, also its word alignment to
the source and the cross-attention it was read from
(`keras_transformer_runtime.alignment`). `Translation.to_json()` is the
object `keras-transformer translate --format jsonl` writes, one per line.
"""

import collections
import dataclasses

NBest = collections.namedtuple("NBest", ("tokens", "scores", "normalized_scores", "token_scores",
                                         "cross_attention"), defaults=(None,))
NBest.__doc__ = """The n best hypotheses of each source, best first (NumPy arrays).

Fields:
    tokens: int `(batch, n, steps)`, as `beam_search` gives them.
    scores: float `(batch, n)`, each hypothesis' log-probability.
    normalized_scores: float `(batch, n)`, the length-normalized score the beam ranked by.
    token_scores: float `(batch, n, steps)`, each token's log-probability (0 after `END_ID`).
    cross_attention: float `(batch, n, num_layers, steps, source_length)`, each decoder
        layer's head-averaged cross-attention at the step that chose each token; None
        unless asked for (`n_best_search(..., return_cross_attention=True)`).
"""


@dataclasses.dataclass(frozen=True)
class Hypothesis:
    """One translation of a source, with its scores.

    Args:
        text: the translation.
        score: float, its log-probability: the sum of `token_scores`.
        normalized_score: float, what the beam ranked it by:
            `score / ((5 + length) / 6) ** alpha` for the kept search,
            `score / length ** alpha` for the pooled one (transformers'
            `sequences_scores`); `length` counts its tokens with the end
            token (which the pooled search adds at the length limit).
        tokens: tuple of str, its subword pieces, the end token (`"</s>"`)
            last when it was generated.
        token_scores: tuple of float, each piece's log-probability.
        alignment: tuple of `(source word, target word)` pairs, one per
            target word, or None when not asked for.
        attention: tuple of tuples of float, for each of `tokens` the
            cross-attention over the source's pieces
            (`Translation.source_tokens`) that the alignment read, or None.
        segments: for a text translated sentence by sentence
            (`documents.paragraphs`), one `(source start, source end,
            target start, target end)` a sentence: its characters in the
            source and in `text`; None for a text of one sentence.

    Example:

    >>> Hypothesis("Let there be light.", -1.5, -0.9, ("▁Let", "</s>"), (-1.0, -0.5)).to_json()["score"]
    -1.5
    """

    text: str
    score: float
    normalized_score: float
    tokens: tuple = ()
    token_scores: tuple = ()
    alignment: tuple = None
    attention: tuple = None
    segments: tuple = None

    def to_json(self, token_scores=True, attention=True):
        """A dict of plain values (`json.dumps` takes it).

        Args:
            token_scores: bool, with `tokens` and `token_scores`.
            attention: bool, with `attention` (when there is one).

        Returns:
            `text`, `score`, `normalized_score`; the token fields if asked;
            `alignment` as `[i, j]` pairs when there is one; `attention`
            if asked and there is one; `segments` as `{"source": [start, end],
            "target": [start, end]}` objects when there are some.
        """
        value = {"text": self.text, "score": self.score, "normalized_score": self.normalized_score}
        if token_scores:
            value.update(tokens=list(self.tokens), token_scores=list(self.token_scores))
        if self.alignment is not None:
            value["alignment"] = [list(link) for link in self.alignment]
        if attention and self.attention is not None:
            value["attention"] = [list(row) for row in self.attention]
        if self.segments is not None:
            value["segments"] = [{"source": [a, b], "target": [c, d]} for a, b, c, d in self.segments]
        return value


@dataclasses.dataclass(frozen=True)
class Translation:
    """A source and its hypotheses, best first.

    Args:
        source: the input text.
        hypotheses: tuple of `Hypothesis`, best first; the first is the
            translation the translator returns when called.
        source_tokens: tuple of str, the source's pieces, when the
            hypotheses carry alignments; else None.
        warnings: tuple of str, what went wrong with this source alone
            (longer than `max_length` and truncated, mostly unknown to the
            vocabulary, lone surrogates replaced), one line each; empty
            when nothing did.

    Example:

    >>> translation = Translation("Sea la luz.", (Hypothesis("Let there be light.", -1.5, -0.9),))
    >>> translation.text, translation.to_json(token_scores=False)["hypotheses"][0]["text"]
    ('Let there be light.', 'Let there be light.')
    >>> "warnings" in translation.to_json()
    False
    >>> Translation("🙂🎉", (Hypothesis("", -0.5, -0.4),), warnings=(
    ...     "2 of 2 characters are unknown to the vocabulary, so the translation is a guess",)).to_json()["warnings"]
    ['2 of 2 characters are unknown to the vocabulary, so the translation is a guess']
    """

    source: str
    hypotheses: tuple
    source_tokens: tuple = None
    warnings: tuple = ()

    @property
    def text(self):
        """The best hypothesis' text."""
        return self.hypotheses[0].text

    def to_json(self, token_scores=True, attention=True):
        """A dict of plain values: `source`, `source_tokens` if any, `hypotheses` (each `Hypothesis.to_json`)
        and `warnings` if any."""
        value = {"source": self.source}
        if self.source_tokens is not None:
            value["source_tokens"] = list(self.source_tokens)
        value["hypotheses"] = [hypothesis.to_json(token_scores, attention) for hypothesis in self.hypotheses]
        if self.warnings:
            value["warnings"] = list(self.warnings)
        return value
