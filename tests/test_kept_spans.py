"""Spans kept as they are: URLs, e-mail addresses, numbers, placeholders and `--keep` never reach the model.

The README's run drops or rewrites digits and symbols; a kept span must
come out exactly as it went in whatever the model does to the words around
it, and the rest of the text must still be translated.
"""

import json
import re

import numpy as np
import pytest

from keras_transformer_runtime.documents import paragraphs
from keras_transformer_runtime.documents.kept_spans import keep_pattern
from keras_transformer_runtime.documents.kept_spans import kept_spans
from keras_transformer_runtime.hypotheses import NBest
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID
from keras_transformer_runtime.text_translator import TextTranslator
from tests.test_documents import CORPUS  # noqa: F401 (the tokenizer fixture's corpus)
from tests.test_documents import tokenizer  # noqa: F401 (a fixture)

SPANS = ["https://example.org/a?b=1&c=(2)", "ana.p@example.co.uk", "1.234,56", "10:30", "{name}", "{{count}}",
         "%s", "%(user)s", "%1$d"]


def _pieces(text, span=None):
    span = span or (0, len(text))
    return [(text[start:end], kept) for start, end, kept in kept_spans(text, span, keep_pattern())]


@pytest.mark.backend_independent
@pytest.mark.parametrize("span", SPANS)
def test_each_kind_of_span_is_found_whole_in_the_middle_of_a_sentence(span):
    assert _pieces(f"Y dijo {span} a la luz.") == [("Y dijo", False), (span, True), ("a la luz.", False)]


@pytest.mark.backend_independent
def test_a_url_leaves_the_sentences_punctuation_and_a_piece_without_letters_is_kept():
    assert _pieces("Lee www.example.org/x.") == [("Lee", False), ("www.example.org/x", True), (".", True)]
    assert _pieces("(Ver http://example.org/a_(b)), luego.") == [
        ("(Ver", False), ("http://example.org/a_(b)", True), ("), luego.", False)]
    assert _pieces("Sea la luz.") == [("Sea la luz.", False)]
    assert _pieces("H2O y 3er lugar") == [("H2O y 3er lugar", False)]  # a digit inside a word is a word


@pytest.mark.backend_independent
def test_a_keep_pattern_that_is_not_a_regular_expression_is_refused_by_name():
    with pytest.raises(ValueError, match=r"--keep '\(a' is not a regular expression"):
        keep_pattern(["(a"])
    assert _pieces("Pídelo a ACME-7 hoy.") == [("Pídelo a ACME-", False), ("7", True), ("hoy.", False)]
    text = "Pídelo a ACME-7 hoy."
    assert [(text[s:e], kept) for s, e, kept in kept_spans(text, (0, len(text)), keep_pattern([r"ACME-\d+"]))] == [
        ("Pídelo a", False), ("ACME-7", True), ("hoy.", False)]


class Mangler(TextTranslator):
    """Upper-cases its source's pieces and drops every piece holding a digit or a symbol: a run that would
    mangle each kept span."""

    def __init__(self, tokenizer):
        self.tokenizer, self.max_length, self.batch_size, self.bucketed = tokenizer, 64, 8, False
        self.source_language = "es"
        self.units = []

    def _decode(self, source):
        generated = np.zeros((len(source), source.shape[1] + 1), "int32")
        for i, row in enumerate(source):
            tokens = [int(t) for t in row if t not in (PAD_ID, END_ID)]
            self.units.append(self.tokenizer.detokenize([tokens])[0])
            generated[i, : len(tokens) + 1] = tokens + [END_ID]
        return generated

    def _detokenize(self, rows):
        texts = super()._detokenize(rows)
        return [re.sub(r"[^\w\s.,;:¿?¡!]|\d", "", text).upper() for text in texts]

    def _decode_n_best(self, source, n, cross_attention=False):
        tokens = self._decode(source)[:, None, :]
        token_scores = np.where(tokens > 0, -0.5, 0.0)
        scores = token_scores.sum(axis=-1)
        return NBest(tokens, scores, scores / 2, token_scores)


@pytest.mark.backend_independent
def test_every_span_comes_out_as_it_went_in_and_the_model_never_sees_it(tokenizer):  # noqa: F811
    translator = Mangler(tokenizer)
    text = "Y dijo Dios: " + " y ".join(SPANS) + ". Sea la luz en www.example.org."
    translation = translator(text)
    for span in SPANS + ["www.example.org"]:
        assert translation.count(span) == 1, (span, translation)
    assert translation.startswith("Y DIJO DIOS:") and translation.endswith("SEA LA LUZ EN www.example.org.")
    assert not any(any(character.isdigit() for character in unit) for unit in translator.units)
    # Whole, the span goes to the model, which drops it.
    assert "1.234,56" not in translator(text, split_sentences=False)


@pytest.mark.backend_independent
def test_an_n_best_list_aligns_a_kept_span_to_itself_and_says_where_it_is(tokenizer):  # noqa: F811
    text = "Sea la luz en https://example.org/luz y fue."
    (translation,) = Mangler(tokenizer).n_best([text], 1)
    hypothesis = translation.hypotheses[0]
    assert hypothesis.text == "SEA LA LUZ EN https://example.org/luz Y FUE."
    segments = [(text[a:b], hypothesis.text[c:d]) for a, b, c, d in hypothesis.segments]
    assert segments[1] == ("https://example.org/luz", "https://example.org/luz")
    assert hypothesis.score == pytest.approx(sum(t.hypotheses[0].score for t in Mangler(tokenizer).n_best(
        ["Sea la luz en", "y fue."], 1)))


@pytest.mark.end_to_end
def test_translate_keeps_every_span_and_a_keep_pattern_on_a_run_that_never_saw_them(trained_run, capsys):
    from keras_transformer_cli import main

    text = "Y dijo Dios a ana@example.org: escribe a {name} en https://example.org/luz antes de las 10.30, ACME-7."
    capsys.readouterr()
    assert main(["translate", "--model", str(trained_run), "--engine", "keras", "--keep", r"ACME-\d+",
                 "--format", "jsonl", "--alignments", text]) == 0
    hypothesis = json.loads(capsys.readouterr().out)["hypotheses"][0]
    for span in ("ana@example.org", "{name}", "https://example.org/luz", "10.30", "ACME-7"):
        assert hypothesis["text"].count(span) == 1, (span, hypothesis["text"])
    assert main(["translate", "--model", str(trained_run), "--engine", "keras", "--no-sentence-splitting", text]) == 0
    assert "ACME-7" not in capsys.readouterr().out  # the model itself drops it
