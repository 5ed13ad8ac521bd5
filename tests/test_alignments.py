"""Cross-attention out of the decoding loop, word alignments read from it, and their picture."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from conftest import to_numpy
import keras_transformer as kt
from keras_transformer.decoding import CachedDecoder
from keras_transformer.decoding import beam_search
from keras_transformer.decoding import greedy_search
from keras_transformer.decoding import n_best_search
from keras_transformer.decoding import pooled_beam_search
from keras_transformer.model_parts import transformer_parts
from keras_transformer.translation.translator import Translator
from keras_transformer_runtime import alignment
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import START_ID

SOURCE = np.array([[5, 6, 7, 8, 0], [9, 10, 0, 0, 0], [11, 12, 13, 0, 0]], "int32")
SENTENCES = ["En el principio creó Dios los cielos y la tierra.", "Y dijo Dios: Sea la luz.", "Dios"]


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(7)
    return kt.models.transformer(40, 40, num_layers=2, d_model=16, num_heads=4, ff_dim=32, max_length=12)


def whole_model_cross_attention(model, source, tokens):
    """Each decoder layer's head-averaged cross-attention, the whole prefix run at once (no cache)."""
    parts = transformer_parts(model)
    encoder_outputs, encoder_mask = CachedDecoder(model).encoder(source)
    prefix = np.concatenate([np.full((len(tokens), 1), START_ID), tokens[:, :-1]], axis=1).astype("int32")
    x, layers = parts.decoder_embedding(prefix), []
    for layer in parts.decoder_layers:
        x, weights = layer(x, encoder_outputs, encoder_mask=encoder_mask, return_cross_attention=True)
        layers.append(to_numpy(weights).mean(axis=1))
    return np.stack(layers, axis=1)  # (batch, layers, steps, source)


def steps_until_end(row):
    row = list(row)
    return row.index(END_ID) + 1 if END_ID in row else len(row)


@pytest.mark.parametrize("search", ["greedy", "beam", "pooled"])
@pytest.mark.parametrize("jit_compile", [False, True])
def test_recorded_weights_are_the_whole_models_cross_attention_for_the_chosen_tokens(model, search, jit_compile):
    decoder = CachedDecoder(model, jit_compile=jit_compile)
    if search == "greedy":
        tokens, weights = greedy_search(decoder, SOURCE, max_new_tokens=8, return_cross_attention=True)
    elif search == "beam":  # the beam reorders its rows every step: the weights must follow the chosen hypothesis
        tokens, weights = beam_search(decoder, SOURCE, beam_width=3, max_new_tokens=8, return_cross_attention=True)
    else:  # a pooled hypothesis' weights are copied when it ends, or after the last step
        tokens, weights = pooled_beam_search(decoder, SOURCE, beam_width=3, max_new_tokens=8,
                                             return_cross_attention=True)
    assert weights.shape == (3, 2, tokens.shape[1], SOURCE.shape[1])
    expected = whole_model_cross_attention(model, SOURCE, tokens)
    for row in range(len(SOURCE)):
        steps = steps_until_end(tokens[row])
        np.testing.assert_allclose(weights[row, :, :steps], expected[row, :, :steps], rtol=1e-4, atol=1e-5)


def test_recording_changes_no_token_and_the_first_of_the_n_best_is_the_beams(model):
    decoder = CachedDecoder(model)
    plain_greedy = greedy_search(decoder, SOURCE, max_new_tokens=8)
    plain_beam = beam_search(decoder, SOURCE, beam_width=3, max_new_tokens=8)
    greedy_tokens, _ = greedy_search(decoder, SOURCE, max_new_tokens=8, return_cross_attention=True)
    beam_tokens, beam_weights = beam_search(decoder, SOURCE, beam_width=3, max_new_tokens=8,
                                            return_cross_attention=True)
    n_best = n_best_search(decoder, SOURCE, n=2, beam_width=3, max_new_tokens=8, return_cross_attention=True)
    np.testing.assert_array_equal(greedy_tokens, plain_greedy)
    np.testing.assert_array_equal(beam_tokens, plain_beam)
    np.testing.assert_array_equal(n_best.tokens[:, 0], plain_beam)
    np.testing.assert_allclose(n_best.cross_attention[:, 0], beam_weights, rtol=1e-5, atol=1e-6)
    assert n_best_search(decoder, SOURCE, n=2, beam_width=3, max_new_tokens=8).cross_attention is None


def test_each_pooled_hypothesis_carries_the_whole_models_attention_and_token_scores():
    from keras_transformer.decoding import mask_forbidden_tokens
    from keras_transformer.model_parts import DECODER_TOKENS
    from keras_transformer.model_parts import ENCODER_TOKENS

    keras.utils.set_random_seed(7)
    model = kt.models.transformer(40, 40, num_layers=2, d_model=16, num_heads=4, ff_dim=32, max_length=12,
                                  tie_embeddings=True, output_bias=True)
    decoder = CachedDecoder(model)
    sources = np.repeat(SOURCE, 3, axis=0)
    # A bias on `</s>`'s logit: +10 ends every pooled hypothesis in a step or two, -30 none before the limit.
    for end_bias in (10.0, -30.0):
        model.get_layer("decoder_embedding").logits_bias.assign(np.eye(40, dtype="float32")[END_ID] * end_bias)
        n_best = n_best_search(decoder, SOURCE, n=3, beam_width=3, max_new_tokens=8, return_cross_attention=True,
                               beam_search="pooled")
        assert np.all(np.diff(n_best.normalized_scores, axis=1) <= 0)  # best first
        tokens = n_best.tokens.reshape(len(sources), -1)
        expected = whole_model_cross_attention(model, sources, tokens)
        prefixes = np.concatenate([np.full((len(tokens), 1), START_ID), tokens[:, :-1]], axis=1).astype("int32")
        log_probs = to_numpy(keras.ops.log_softmax(mask_forbidden_tokens(keras.ops.cast(
            model({ENCODER_TOKENS: sources, DECODER_TOKENS: prefixes}), "float32")), axis=-1))
        ended = 0
        for row in range(len(sources)):
            source, k = divmod(row, 3)
            steps = steps_until_end(tokens[row])
            ended += END_ID in tokens[row]
            np.testing.assert_allclose(n_best.cross_attention[source, k, :, :steps], expected[row, :, :steps],
                                       rtol=1e-4, atol=1e-5)
            token_scores = log_probs[row, np.arange(steps), tokens[row, :steps]]
            np.testing.assert_allclose(n_best.token_scores[source, k, :steps], token_scores, rtol=1e-4, atol=1e-5)
            assert n_best.scores[source, k] == pytest.approx(token_scores.sum(), rel=1e-4, abs=1e-4)
            # transformers' score: the log-probability over the length with `</s>`, forced at the limit.
            length = steps if END_ID in tokens[row] else steps + 1
            assert n_best.normalized_scores[source, k] == pytest.approx(n_best.scores[source, k] / length, rel=1e-5)
        assert ended == (len(sources) if end_bias > 0 else 0)  # ended, or pooled at the limit


def test_weights_are_distributions_over_the_real_source_tokens_whatever_the_padding(model):
    decoder = CachedDecoder(model)
    tokens, weights = greedy_search(decoder, SOURCE, max_new_tokens=6, stop_at_end=False,
                                    return_cross_attention=True)
    real = SOURCE != 0
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
    assert np.all(weights[~np.broadcast_to(real[:, None, None, :], weights.shape)] == 0.0)
    wider = np.pad(SOURCE, [[0, 0], [0, 3]])
    more_tokens, more_weights = greedy_search(decoder, wider, max_new_tokens=6, stop_at_end=False,
                                              return_cross_attention=True)
    np.testing.assert_array_equal(more_tokens, tokens)
    np.testing.assert_allclose(more_weights[..., : SOURCE.shape[1]], weights, atol=1e-5)


def test_a_decoder_that_cannot_record_says_so(model):
    from keras_transformer.decoding import UncachedDecoder

    with pytest.raises(ValueError, match="does not record cross-attention"):
        greedy_search(UncachedDecoder(model, max_length=6), SOURCE, max_new_tokens=4, return_cross_attention=True)


# The rule, on pieces and weights made up to show it.

def test_pieces_are_grouped_into_the_words_of_the_text():
    pieces = ["▁Y", "▁dijo", "▁Dios", ":", "▁¿", "Qu", "é", "?"]
    assert alignment.word_of_each_piece(pieces) == [0, 1, 2, 2, 3, 3, 3, 3]
    assert alignment.words_of_pieces(pieces + ["</s>"]) == "Y dijo Dios: ¿Qué?".split()


def test_each_target_word_links_to_the_source_word_it_attended_to_most():
    source = ["▁Sea", "▁la", "▁lu", "z", "."]
    target = ["▁Let", "▁there", "▁be", "▁light", ".", "</s>"]
    attention = np.full((6, 5), 0.02)
    for piece, source_piece in enumerate([0, 1, 1, 3, 4, 4]):
        attention[piece, source_piece] = 0.9
    # "light" and its "." are one target word; "luz." takes its largest piece.
    assert alignment.alignment_links(attention, source, target) == ((0, 0), (1, 1), (1, 2), (2, 3))
    assert alignment.format_alignment(((0, 0), (2, 3))) == "0-0 2-3"


def test_a_word_of_many_pieces_does_not_outweigh_a_word_attended_to_more():
    source = ["▁Abraham", "▁Ma", "h", "al", "eth"]  # word 1 has four pieces of 0.2, word 0 one of 0.3
    attention = np.array([[0.3, 0.2, 0.2, 0.15, 0.15]])
    assert alignment.alignment_links(attention, source, ["▁Abraham"]) == ((0, 0),)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=8), st.lists(st.booleans(), min_size=0, max_size=8),
       st.integers(0, 2**32 - 1))
def test_every_target_word_gets_one_link_to_a_source_word(source_starts, target_starts, seed):
    source = [("▁" if start or i == 0 else "") + "s" for i, start in enumerate(source_starts)]
    target = [("▁" if start or i == 0 else "") + "t" for i, start in enumerate(target_starts)] + ["</s>"]
    weights = np.random.default_rng(seed).dirichlet(np.ones(len(source)), size=len(target))
    links = alignment.alignment_links(weights, source, target)
    assert [j for _, j in links] == list(range(len(alignment.words_of_pieces(target))))
    assert all(0 <= i < len(alignment.words_of_pieces(source)) for i, _ in links)


def test_a_layer_that_the_model_lacks_is_refused():
    assert alignment.layer_weights(np.ones((2, 3, 4)), "mean").shape == (3, 4)
    for layer in (2, -3, "last", 1.0):
        with pytest.raises(ValueError, match="decoder layer from -2 to 1"):
            alignment.layer_weights(np.ones((2, 3, 4)), layer)


# The translator and the command line, on a trained run.

@pytest.fixture(scope="module")
def translator(trained_run):
    return Translator.from_directory(str(trained_run), max_new_tokens=8, beam_width=4)


def test_each_hypothesis_aligns_its_words_to_the_sources_words(translator):
    translations = translator.n_best(SENTENCES + [""], 2, alignments=True)
    assert [t.text for t in translations] == translator(SENTENCES + [""])
    for text, translation in zip(SENTENCES, translations):
        assert alignment.words_of_pieces(translation.source_tokens) == text.split()
        for hypothesis in translation.hypotheses:
            target_words = alignment.words_of_pieces(hypothesis.tokens)
            assert target_words == hypothesis.text.split()
            assert [j for _, j in hypothesis.alignment] == list(range(len(target_words)))
            assert all(0 <= i < len(text.split()) for i, _ in hypothesis.alignment)
            attention = np.array(hypothesis.attention)
            assert attention.shape == (len(hypothesis.tokens), len(translation.source_tokens))
            np.testing.assert_allclose(attention.sum(axis=1), 1.0, atol=1e-4)
    blank = translations[-1]
    assert blank.source_tokens == () and blank.hypotheses[0].alignment == ()
    assert translator.n_best(SENTENCES[0], 1).source_tokens is None  # not asked for


def test_an_alignment_layer_the_model_lacks_is_refused_before_decoding(translator):
    with pytest.raises(ValueError, match="decoder layer from -1 to 0"):
        translator.n_best(SENTENCES, 1, alignments=True, alignment_layer=1)


def test_a_front_end_of_one_translation_an_input_says_what_gives_attention(trained_run):
    from keras_transformer_runtime.text_translator import TextTranslator

    class OneTranslation(TextTranslator):
        tokenizer, max_length, batch_size, bucketed, beam_width = None, 8, 8, False, 1

        def decoder_layer_count(self):
            return 1

    OneTranslation.tokenizer = Translator.from_directory(str(trained_run)).tokenizer
    with pytest.raises(NotImplementedError, match="a compiled program of an n-best list"):
        OneTranslation().n_best("Dios", 1, alignments=True)


RUN_IN_ANOTHER_BACKEND = """
import json, sys
from keras_transformer.translation.translator import Translator
out = {}
for beam in (1, 4):
    translator = Translator.from_directory(sys.argv[1], max_new_tokens=8, beam_width=beam)
    out[beam] = [t.to_json() for t in translator.n_best(json.loads(sys.argv[2]), min(beam, 2), alignments=True)]
print(json.dumps(out))
"""


# Every backend against the one of backend-independent tests (torch in CI): each pair once, not once per lane.
@pytest.mark.backend_independent
@pytest.mark.parametrize("other", [b for b in ("tensorflow", "jax", "torch") if b != keras.backend.backend()])
def test_n_best_scores_alignments_and_weights_are_the_same_on_every_backend(trained_run, other):
    result = subprocess.run(
        [sys.executable, "-c", RUN_IN_ANOTHER_BACKEND, str(trained_run), json.dumps(SENTENCES)],
        env=dict(os.environ, KERAS_BACKEND=other), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    theirs = json.loads(result.stdout.strip().splitlines()[-1])
    for beam in (1, 4):
        ours = Translator.from_directory(str(trained_run), max_new_tokens=8, beam_width=beam).n_best(
            SENTENCES, min(beam, 2), alignments=True)
        for mine, other_record in zip(ours, theirs[str(beam)]):
            mine = mine.to_json()
            assert other_record["source_tokens"] == mine["source_tokens"]
            assert len(mine["hypotheses"]) == len(other_record["hypotheses"])
            for a, b in zip(mine["hypotheses"], other_record["hypotheses"]):
                assert (a["text"], a["tokens"], a["alignment"]) == (b["text"], b["tokens"], b["alignment"])
                np.testing.assert_allclose([a["score"], a["normalized_score"]], [b["score"], b["normalized_score"]],
                                           rtol=1e-4, atol=1e-4)
                np.testing.assert_allclose(a["token_scores"], b["token_scores"], atol=1e-4)
                np.testing.assert_allclose(a["attention"], b["attention"], atol=1e-4)


# The command line's printing and drawing; the tokens under it agree on every backend (the test above).
@pytest.mark.backend_independent
def test_the_command_line_prints_alignments_json_and_draws_the_map(trained_run, capsys, tmp_path):
    from keras_transformer_cli import main

    model = str(trained_run)
    main(["translate", "--model", model, "--engine", "keras", *SENTENCES])
    plain = capsys.readouterr().out.splitlines()
    main(["translate", "--model", model, "--engine", "keras", "--alignments", *SENTENCES])
    lines = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    python = Translator.from_directory(model).n_best(SENTENCES, 2, alignments=True)
    assert [fields[0] for fields in lines] == plain
    assert [fields[1] for fields in lines] == [alignment.format_alignment(t.hypotheses[0].alignment) for t in python]
    main(["translate", "--model", model, "--engine", "keras", "--n-best", "2", "--alignments", *SENTENCES])
    lines = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    assert all(len(fields) == 5 for fields in lines)
    assert [fields[4] for fields in lines] == [alignment.format_alignment(h.alignment)
                                               for t in python for h in t.hypotheses]
    main(["translate", "--model", model, "--engine", "keras", "--format", "jsonl", "--n-best", "2",
          "--attention-weights", *SENTENCES])
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert records == [json.loads(json.dumps(t.to_json(token_scores=False))) for t in python]
    picture = tmp_path / "map.png"
    main(["translate", "--model", model, "--engine", "keras", "--attention-map", str(picture), SENTENCES[1]])
    assert capsys.readouterr().out.splitlines() == plain[1:2]
    with open(picture, "rb") as image:
        assert image.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("flags, message", [
    (["--attention-map", "map.png", "Dios", "luz"], "--attention-map draws one translation"),
    (["--attention-weights", "Dios"], "--attention-weights are written in --format jsonl only"),
    (["--alignments", "--alignment-layer", "top", "Dios"], '"mean" or a decoder layer index'),
    (["--alignments", "--alignment-layer", "3", "Dios"], "decoder layer from -1 to 0"),
    (["--attention-map", "no/such/folder/map.png", "Dios"], "--attention-map 'no/such/folder/map.png'"),
    (["--attention-map", "map.png", "  "], "nothing to draw: the source has no words"),
])
def test_bad_attention_options_get_one_line_errors(trained_run, capsys, flags, message):
    from keras_transformer_cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["translate", "--model", str(trained_run), "--engine", "keras", *flags])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert message in error[-1] and error[-1].startswith("keras-transformer")
