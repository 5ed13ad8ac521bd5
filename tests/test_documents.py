"""Documents, not only lines: sentences split, translated together, and put back with the source's whitespace."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from keras_transformer_runtime.documents import paragraphs
from keras_transformer_runtime.documents.sentences import cut_to_fit
from keras_transformer_runtime.documents.sentences import sentence_spans
from keras_transformer_runtime.documents.sentences import splitting_language
from keras_transformer_runtime.hypotheses import NBest
from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer
from keras_transformer_runtime.sentence_piece_tokenizer import train_tokenizer
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID
from keras_transformer_runtime.text_translator import TextTranslator

CORPUS = ["En el principio creó Dios los cielos y la tierra.", "Y dijo Dios: Sea la luz; y fue la luz.",
          "¿Dónde está el Sr. Pérez?", "¡Vino el niño, y la tierra era buena!", "Let there be light.",
          ">>fra<< Hola."] * 4


@pytest.fixture(scope="module")
def tokenizer():
    return SentencePieceTokenizer(train_tokenizer(CORPUS, vocabulary_size=60))


class Reverser(TextTranslator):
    """A translator whose 'translation' is its source's pieces backwards: what it does to a whole paragraph
    differs from what it does to each sentence, so a test can see which one it was given."""

    def __init__(self, tokenizer, max_length=64, source_language="es"):
        self.tokenizer, self.max_length, self.batch_size, self.bucketed = tokenizer, max_length, 8, False
        self.source_language = source_language
        self.rows_decoded = []

    def _decode(self, source):
        generated = np.zeros((len(source), source.shape[1] + 1), "int32")
        for i, row in enumerate(source):
            tokens = [int(t) for t in row if t not in (PAD_ID, END_ID)][::-1]
            generated[i, : len(tokens) + 1] = tokens + [END_ID]
            self.rows_decoded.append(tokens[::-1])
        return generated

    def _decode_n_best(self, source, n, cross_attention=False):
        tokens = self._decode(source)[:, None, :]
        token_scores = np.where(tokens > 0, -0.25, 0.0)
        scores = token_scores.sum(axis=-1)
        return NBest(tokens, scores, scores / 2, token_scores)


def test_a_paragraph_is_its_sentences_translated_one_by_one_and_joined_with_its_own_whitespace(tokenizer):
    translator = Reverser(tokenizer)
    sentences = ["En el principio creó Dios los cielos y la tierra.", "¿Dónde está el Sr. Pérez?",
                 "¡Vino el niño, y la tierra era buena!"]
    paragraph = f"{sentences[0]}  {sentences[1]}\n\n{sentences[2]}"
    one_by_one = translator(sentences, split_sentences=False)
    assert translator(paragraph) == f"{one_by_one[0]}  {one_by_one[1]}\n\n{one_by_one[2]}"
    assert translator(paragraph, split_sentences=False) != translator(paragraph)


@pytest.mark.parametrize("text", ["Y dijo Dios: Sea la luz; y fue la luz.", "¿Dónde está el Sr. Pérez?",
                                  "  Let there be light.  ", "luz", ""])
def test_a_text_of_one_sentence_translates_exactly_as_it_did_unsplit(tokenizer, text):
    translator = Reverser(tokenizer)
    assert translator(text) == translator(text, split_sentences=False)
    assert translator.n_best(text, 1).to_json() == translator.n_best(text, 1, split_sentences=False).to_json()


def test_the_sentences_of_every_text_are_decoded_together_in_one_call(tokenizer):
    translator = Reverser(tokenizer)
    translator(["Sea la luz. Y fue la luz.", "Hola.", "¿Dónde está? Aquí."])
    assert len(translator.rows_decoded) == 5  # 2 + 1 + 2 sentences, in batches of 8: one batch


def test_a_sentence_longer_than_the_model_takes_is_cut_at_its_clauses_not_truncated(tokenizer):
    translator = Reverser(tokenizer, max_length=20)
    text = "Y dijo Dios: Sea la luz; y fue la luz, y la tierra era buena, y el niño era bueno en la tierra."
    assert len(tokenizer.tokenize(text)) > 20
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        translation = translator.n_best(text, 1)  # the cut is said on the translation
    assert not [w for w in caught if "truncated" in str(w.message)]
    units = paragraphs.units(translator.split_texts([text]))
    assert len(units) > 1 and all(len(tokenizer.tokenize(unit)) <= 20 for unit in units)
    assert "".join(units).replace(" ", "") == text.replace(" ", "")  # every character translated, none dropped
    assert translation.text == " ".join(translator(units, split_sentences=False))
    assert any("cut at clause boundaries" in warning for warning in translation.warnings)


@given(st.lists(st.sampled_from(["luz", "Dios", "tierra,", "y", ";", "niño:", "era"]), min_size=1, max_size=40),
       st.integers(4, 30))
@settings(max_examples=60, deadline=None)
def test_cut_pieces_fit_and_hold_every_character_of_the_sentence_in_order(words, limit):
    text = " ".join(words)
    pieces = cut_to_fit(text, (0, len(text)), lambda piece: len(piece) <= limit)
    assert "".join(text[start:end] for start, end in pieces).replace(" ", "") == text.replace(" ", "")
    assert all(end - start <= limit or " " not in text[start:end] for start, end in pieces)
    assert all(text[start:end] == text[start:end].strip() for start, end in pieces)


@given(st.lists(st.sampled_from(["Sea la luz", "Y fue", "¿Dónde?", "¡Aquí!", ".", " ", "  ", "\n", "\n\n", "luz."]),
                max_size=12))
@settings(max_examples=80, deadline=None)
def test_sentences_hold_no_outer_whitespace_and_what_lies_between_them_is_whitespace(parts):
    text = "".join(parts)
    spans = sentence_spans(text, "es")
    assert all(text[start:end] and text[start:end] == text[start:end].strip() for start, end in spans)
    cuts = [0, *(i for span in spans for i in span), len(text)]
    assert all(text[a:b].strip() == "" for a, b in zip(cuts[::2], cuts[1::2]))  # before, between, after


def test_the_source_languages_abbreviations_do_not_end_a_sentence():
    text = "Lo dijo la Sra. Gómez en la pág. 5. Luego vino."
    assert [text[a:b] for a, b in sentence_spans(text, "es")] == ["Lo dijo la Sra. Gómez en la pág. 5.",
                                                                  "Luego vino."]
    assert splitting_language("spa_Latn") == splitting_language("spa") == "es"


def test_a_target_language_token_goes_before_every_sentence():
    split = paragraphs.split_texts([">>por<< Sea la luz. Y fue la luz."], "es")
    assert paragraphs.units(split) == [">>por<< Sea la luz.", ">>por<< Y fue la luz."]
    assert paragraphs.join_texts(split, ["Haja luz.", "E houve luz."]) == ["Haja luz. E houve luz."]


def test_sentences_of_a_script_without_spaces_are_joined_with_a_space_in_a_spaced_translation():
    split = paragraphs.split_texts(["今日は晴れです。明日は雨です。"], "ja")
    assert len(split[0].spans) == 2
    assert paragraphs.join_texts(split, ["It is sunny.", "It will rain."]) == ["It is sunny. It will rain."]
    assert paragraphs.join_texts(split, ["晴れ。", "雨。"]) == ["晴れ。雨。"]


def test_progress_counts_texts_not_sentences(tokenizer):
    told = []
    Reverser(tokenizer)(["Sea la luz. Y fue la luz. Hola.", "Hola.", ""], progress=told.append)
    assert sum(told) == 3


def test_an_n_best_list_of_a_paragraph_joins_its_sentences_hypotheses():
    from keras_transformer_runtime.hypotheses import Hypothesis
    from keras_transformer_runtime.hypotheses import Translation

    text = "Sea la luz.\nY fue."
    split = paragraphs.split_texts([text], "es")
    first = Translation("Sea la luz.", (Hypothesis("Let light be.", -1.0, -0.5, ("▁Let", "▁light", "▁be", ".", "</s>"),
                                                   (-0.5, -0.2, -0.1, -0.1, -0.1), ((0, 0), (2, 1), (1, 2)),
                                                   ((1.0, 0.0),) * 5),
                                        Hypothesis("Light.", -2.0, -1.5)), ("▁Sea", "▁la", "▁luz", ".", "</s>")[:2])
    second = Translation("Y fue.", (Hypothesis("It was.", -0.5, -0.25, ("▁It", "▁was", ".", "</s>"),
                                               (-0.2, -0.1, -0.1, -0.1), ((1, 0), (1, 1)), ((0.5, 0.5, 0.0),) * 4),),
                         ("▁Y", "▁fue", "."), ("mostly unknown",))
    joined = paragraphs.join_translations(split, [first, second])[0]
    assert joined.source == text and len(joined.hypotheses) == 1  # as many as the sentence with the fewest
    best = joined.hypotheses[0]
    assert best.text == "Let light be.\nIt was."
    assert best.score == -1.5 and best.normalized_score == pytest.approx(-0.375)
    assert [best.text[c:d] for _, _, c, d in best.segments] == ["Let light be.", "It was."]
    assert [text[a:b] for a, b, _, _ in best.segments] == ["Sea la luz.", "Y fue."]
    assert best.alignment == ((0, 0), (2, 1), (1, 2), (3, 3), (3, 4))  # 2 source words, 3 target words before
    assert np.array(best.attention).shape == (9, 5) and np.array(best.attention)[5:, :2].sum() == 0
    assert joined.source_tokens == ("▁Sea", "▁la", "▁Y", "▁fue", ".")
    assert joined.warnings == ("sentence 2: mostly unknown",)
    assert best.to_json()["segments"] == [{"source": [0, 11], "target": [0, 13]},
                                          {"source": [12, 18], "target": [14, 21]}]


def test_the_command_lines_sentence_default_is_the_packages():
    from keras_transformer_cli import arguments
    from keras_transformer_runtime.documents.sentences import TRAINED_RUN_SENTENCE_TOKENS

    assert arguments.TRAINED_RUN_SENTENCE_TOKENS == TRAINED_RUN_SENTENCE_TOKENS
