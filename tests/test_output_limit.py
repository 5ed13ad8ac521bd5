"""The cap on run-away output: a row ends once it has written `ratio * its source's ids + OUTPUT_SLACK` tokens.

A random model rarely writes the end token, so its rows run to the length
limit: the cap must stop each one at its own limit, and change nothing
before it.
"""

import json

import numpy as np
import pytest

import keras

import keras_transformer as kt
from keras_transformer.decoding import CachedDecoder
from keras_transformer.decoding import beam_search
from keras_transformer.decoding import greedy_search
from keras_transformer.decoding import n_best_search
from keras_transformer.decoding import pooled_beam_search
from keras_transformer.decoding.refill import refill_greedy_search
from keras_transformer.translation import Translator
from keras_transformer_runtime.search_defaults import OUTPUT_SLACK
from keras_transformer_runtime.special_tokens import END_ID

MAX_NEW_TOKENS = 40
RATIO = 1.0


@pytest.fixture(scope="module")
def model_and_sources():
    keras.utils.set_random_seed(0)
    model = kt.models.transformer(40, 40, num_layers=1, d_model=16, num_heads=2, ff_dim=32, max_length=48)
    rng = np.random.default_rng(0)
    sources = rng.integers(4, 40, size=(6, 9))
    for row, length in enumerate((1, 2, 4, 6, 9, 3)):
        sources[row, length:] = 0
    return model, sources


def _rows(tokens):
    """Each row's tokens up to and with its end token, without padding."""
    return [[int(token) for token in row if token] for row in np.asarray(tokens)]


def _limits(sources):
    return [int(np.floor(RATIO * np.count_nonzero(row))) + OUTPUT_SLACK for row in sources]


def test_greedy_rows_stop_at_their_own_limit_and_are_unchanged_before_it(model_and_sources):
    model, sources = model_and_sources
    free = _rows(greedy_search(CachedDecoder(model), sources, max_new_tokens=MAX_NEW_TOKENS))
    capped = _rows(greedy_search(CachedDecoder(model, max_output_ratio=RATIO), sources, max_new_tokens=MAX_NEW_TOKENS))
    cut = 0
    for free_row, capped_row, limit in zip(free, capped, _limits(sources)):
        written = [token for token in free_row if token != END_ID]
        if len(written) > limit:
            cut += 1
            assert capped_row == written[:limit] + [END_ID]
        else:
            assert capped_row == free_row
    assert cut >= 3, "the random model should run past most limits"


def test_refilled_greedy_search_caps_each_row_as_greedy_search_does(model_and_sources):
    model, sources = model_and_sources
    decoder = CachedDecoder(model, max_output_ratio=RATIO)
    expected = _rows(greedy_search(decoder, sources, max_new_tokens=MAX_NEW_TOKENS))
    assert _rows(refill_greedy_search(decoder, sources, slots=2, max_new_tokens=MAX_NEW_TOKENS)) == expected


@pytest.mark.parametrize("search", ["kept", "pooled", "n_best"])
def test_every_beam_hypothesis_ends_by_its_sources_limit(model_and_sources, search):
    model, sources = model_and_sources
    decoder = CachedDecoder(model, max_output_ratio=RATIO)
    if search == "kept":
        hypotheses = [[row] for row in _rows(beam_search(decoder, sources, 3, max_new_tokens=MAX_NEW_TOKENS))]
    elif search == "pooled":
        hypotheses = [[row] for row in _rows(pooled_beam_search(decoder, sources, 3, max_new_tokens=MAX_NEW_TOKENS))]
    else:
        tokens = n_best_search(decoder, sources, 3, beam_width=3, max_new_tokens=MAX_NEW_TOKENS).tokens
        hypotheses = [_rows(row) for row in tokens]
    reached = 0
    for rows, limit in zip(hypotheses, _limits(sources)):
        for row in rows:
            written = len([token for token in row if token != END_ID])
            assert written <= limit, (row, limit)
            reached += written == limit
    assert reached >= 3


def test_the_translator_refuses_a_ratio_that_is_not_a_number_at_least_0(model_and_sources):
    model, _ = model_and_sources
    tokenizer = type("Tokenizer", (), {"tokenize": None, "detokenize": None, "vocabulary_size": lambda self: 40})()
    for ratio in (-1, "2", True):
        with pytest.raises(ValueError, match="max_output_ratio must be a number >= 0"):
            Translator(model, tokenizer, max_output_ratio=ratio)
    assert Translator(model, tokenizer, max_output_ratio=0).decoder.max_output_ratio == 0.0


@pytest.mark.parametrize("engine", ["keras", "compiled"])
def test_translate_caps_a_sentence_as_max_output_ratio_says(trained_run, engine, capsys, monkeypatch, tmp_path):
    from keras_transformer_cli import main

    if engine == "compiled" and keras.backend.backend() != "jax":
        pytest.skip("the compiled engine's program is written with Keras on JAX")
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE_DIR", str(tmp_path / "cache"))
    flags = ["translate", "--model", str(trained_run), "--engine", engine, "--beam", "1", "--format", "jsonl",
             "--max-new-tokens", "20", "--token-scores"]
    tokens = {}
    for ratio in ("0", "0.5"):
        capsys.readouterr()
        assert main([*flags, "--max-output-ratio", ratio, "Sea la luz."]) == 0
        tokens[ratio] = json.loads(capsys.readouterr().out)["hypotheses"][0]["tokens"]
    written = [piece for piece in tokens["0"] if piece != "</s>"]
    assert len(written) > 12, "the two-step model should run past the cap"
    # "Sea la luz." is a few ids: at most half of them, plus the slack, then the end token.
    assert tokens["0.5"][-1] == "</s>" and tokens["0.5"][:-1] == written[:len(tokens["0.5"]) - 1]
    assert OUTPUT_SLACK <= len(tokens["0.5"]) - 1 < len(written)
