"""transformers' beam search ("pooled") on both engines, with n-best lists, and as an imported run's default.

The reference is transformers' own `generate()` on a small random
`MarianMTModel` (`tests/marian_fixtures.py`): its returned sequences and
`sequences_scores`, and what it does with no argument at all, which is
what `translate` must do with no flag on the imported run.
"""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_transformer.translation.translator import Translator
from keras_transformer_cli import main
from keras_transformer_runtime.search_defaults import run_ends_at_limit
from tests.marian_fixtures import generate_translations
from tests.marian_fixtures import load_reference
from tests.marian_fixtures import make_marian_folder
from tests.marian_fixtures import imported, imported_run, reference  # noqa: F401 (fixtures)

# Held to transformers' generate, which takes each input whole.
pytestmark = pytest.mark.usefixtures("as_generate")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SENTENCES = ["¿Dónde está el niño? Tiene 123 ovejas.", "Y dijo Dios: Sea la luz.", "a",
             "En el principio creó Dios los cielos."]
NEW_TOKENS = 20


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory):
    return make_marian_folder(tmp_path_factory.mktemp("marian") / "opus-mt-es-en")


def _generated(reference, sentences, **options):
    """`generate`'s texts and `sequences_scores` (`num_return_sequences` a sentence, best first)."""
    model, tokenizer = reference
    batch = tokenizer(list(sentences), return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, output_scores=True, return_dict_in_generate=True, **options)
    scores = getattr(out, "sequences_scores", None)  # a beam search's only
    scores = None if scores is None else scores.numpy()
    return tokenizer.batch_decode(out.sequences, skip_special_tokens=True), scores


def _pooled(imported, **options):
    model, tokenizer = imported
    return Translator(model, tokenizer, beam_width=4, no_repeat_ngram_size=0, max_new_tokens=NEW_TOKENS,
                      beam_search="pooled", **options)


def _length(hypothesis):
    """transformers' length of a hypothesis: its tokens, and the `</s>` it forces at the limit."""
    return len(hypothesis.tokens) + (hypothesis.tokens[-1:] != ("</s>",))


def test_pooled_n_best_lists_are_generates_returned_sequences_with_its_scores(imported, reference):
    translator = _pooled(imported)
    translations = translator.n_best(SENTENCES, 4)
    texts, scores = _generated(reference, SENTENCES, num_beams=4, num_return_sequences=4,
                               max_length=NEW_TOKENS + 2)
    assert [[h.text for h in t.hypotheses] for t in translations] == [texts[i : i + 4] for i in range(0, 16, 4)]
    normalized = np.array([[h.normalized_score for h in t.hypotheses] for t in translations])
    np.testing.assert_allclose(normalized, scores.reshape(-1, 4), rtol=1e-5, atol=1e-5)
    assert np.all(np.diff(normalized, axis=1) <= 0)  # best first
    assert [t.text for t in translations] == translator(SENTENCES)  # the first is the translation
    for translation in translations:
        for hypothesis in translation.hypotheses:
            assert hypothesis.score == pytest.approx(sum(hypothesis.token_scores), abs=1e-4)
            assert hypothesis.normalized_score == pytest.approx(hypothesis.score / _length(hypothesis), rel=1e-5)
    assert len(set(texts)) > 4  # the inputs and the ranks matter


def test_the_compiled_pooled_program_gives_the_keras_engines_hypotheses_scores_and_alignments(imported, reference):
    if keras.backend.backend() != "jax":
        pytest.skip("the compiled engine's program is written with Keras on JAX")
    from keras_transformer.translation.translation_program import export_decoding_program
    from keras_transformer_runtime.compiled_translator import CompiledTranslator

    model, tokenizer = imported
    translator = _pooled(imported)
    program = export_decoding_program(translator, n_best=4, cross_attention=True)
    compiled = CompiledTranslator(program, [keras.ops.convert_to_numpy(v) for v in model.variables], tokenizer,
                                  translator.max_length, beam_width=4, n_best=4, cross_attention=True)
    ours, theirs = (engine.n_best(SENTENCES, 4, alignments=True) for engine in (compiled, translator))
    for mine, keras_engine in zip(ours, theirs):
        assert [h.tokens for h in mine.hypotheses] == [h.tokens for h in keras_engine.hypotheses]
        assert [h.alignment for h in mine.hypotheses] == [h.alignment for h in keras_engine.hypotheses]
        for a, b in zip(mine.hypotheses, keras_engine.hypotheses):
            assert (a.score, a.normalized_score) == pytest.approx((b.score, b.normalized_score), abs=1e-5)
            np.testing.assert_allclose(a.attention, b.attention, atol=1e-5)
    texts, scores = _generated(reference, SENTENCES, num_beams=4, max_length=NEW_TOKENS + 2)
    assert compiled(SENTENCES) == texts
    np.testing.assert_allclose([t.hypotheses[0].normalized_score for t in ours], scores, rtol=1e-5, atol=1e-5)


def _edit_generation_config(folder, **changes):
    path = folder / "generation_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.backend_independent
@pytest.mark.filterwarnings("ignore:Using the model-agnostic default `max_length`:UserWarning")
@pytest.mark.parametrize("case", ["its own settings", "no generation_config.json"])
def test_an_imported_run_decodes_by_default_as_generate_does_with_the_model(case, marian_folder, tmp_path, capsys):
    folder = tmp_path / "opus"
    shutil.copytree(marian_folder, folder)
    if case == "its own settings":
        _edit_generation_config(folder, num_beams=3, length_penalty=0.7, early_stopping=True, no_repeat_ngram_size=2,
                                max_length=14)
    else:  # transformers falls back on config.json and its own defaults: greedy, 20 new tokens
        os.remove(folder / "generation_config.json")
    run = tmp_path / "run"
    assert main(["import", str(folder), "--output", str(run)]) == 0
    capsys.readouterr()
    assert main(["--verbose", "translate", "--model", str(run), "--engine", "keras", *SENTENCES]) == 0
    printed = capsys.readouterr()
    reference = load_reference(str(folder))
    assert printed.out.splitlines() == _generated(reference, SENTENCES)[0]
    beams = reference[0].generation_config.num_beams or 1
    assert f"search: pooled, beam {beams}" in printed.err and "generation.json" in printed.err
    assert run_ends_at_limit(str(run))  # Marian forces `</s>` at the limit: a hypothesis closed there counts it


@pytest.mark.backend_independent
def test_each_flag_given_wins_over_the_runs_defaults_and_the_rest_stay(imported_run, reference, imported, capsys):
    capsys.readouterr()
    assert main(["--verbose", "translate", "--model", imported_run, "--engine", "keras", "--beam", "2",
                 "--early-stopping", "--length-penalty", "0.5", "--max-new-tokens", "6", *SENTENCES]) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines() == generate_translations(reference, SENTENCES, 6, beams=2, early_stopping=True,
                                                             length_penalty=0.5)
    assert ("search: pooled, beam 2, length penalty 0.5, early stopping on, max new tokens 6, no-repeat-ngram 0; "
            "defaults: the run's generation.json (from the model's generation_config.json); from the command line: "
            "--beam --length-penalty --early-stopping --max-new-tokens") in printed.err
    assert main(["translate", "--model", imported_run, "--engine", "keras", "--beam-search", "kept",
                 "--no-repeat-ngram", "2", "--max-new-tokens", "12", *SENTENCES]) == 0
    model, tokenizer = imported  # kept's own length penalty, the run's 4 beams
    kept = Translator(model, tokenizer, beam_width=4, beam_search="kept", length_penalty=0.6, no_repeat_ngram_size=2,
                      max_new_tokens=12)
    assert capsys.readouterr().out.splitlines() == kept(SENTENCES)


@pytest.mark.backend_independent
def test_max_new_tokens_limits_the_translation_and_a_bad_value_gets_one_line(imported_run, reference, capsys):
    capsys.readouterr()
    assert main(["translate", "--model", imported_run, "--engine", "keras", "--max-new-tokens", "3",
                 "--format", "jsonl", "--token-scores", *SENTENCES]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["hypotheses"][0]["text"] for line in lines] == generate_translations(reference, SENTENCES, 3,
                                                                                     beams=4)
    assert all(len(line["hypotheses"][0]["tokens"]) <= 3 for line in lines)
    assert max(len(text) for text in _generated(reference, SENTENCES)[0]) > max(
        len(line["hypotheses"][0]["text"]) for line in lines)
    # The model has 64 positions: 63 new tokens at most.
    for verb, values in ((["translate"], ("0", "-1", "many", "64")), (["evaluate"], ("64",)),
                         (["serve", "--engine", "keras"], ("0",))):
        for value in values:
            with pytest.raises(SystemExit) as refused:
                main([*verb, "--model", imported_run, "--max-new-tokens", value, *(["x"] if verb == ["translate"]
                                                                                    else [])])
            error = capsys.readouterr().err.strip().splitlines()
            assert refused.value.code == 2
            assert len(error) == 1 and f"--max-new-tokens {value}: expected a positive integer, at most 63" in error[0]


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_the_compiled_engine_runs_generates_search_by_default_with_n_best_lists(imported_run, reference, tmp_path):
    def run(*flags):
        result = subprocess.run([sys.executable, "-m", "keras_transformer_cli", "translate", "--model", imported_run,
                                 "--no-sentence-splitting", "--max-output-ratio", "0", *flags, *SENTENCES],
                                capture_output=True,
                                env={**os.environ, "KERAS_TRANSFORMER_CACHE_DIR": str(tmp_path)}, timeout=600)
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        return result.stdout.decode().splitlines()

    assert run() == _generated(reference, SENTENCES)[0]
    scored = ["--n-best", "4", "--format", "jsonl", "--alignments"]
    compiled, keras_engine = ([json.loads(line) for line in run(*scored, "--engine", engine)]
                              for engine in ("compiled", "keras"))
    for ours, theirs in zip(compiled, keras_engine, strict=True):
        assert [(h["text"], h["alignment"]) for h in ours["hypotheses"]] == [
            (h["text"], h["alignment"]) for h in theirs["hypotheses"]]
        for mine, other in zip(ours["hypotheses"], theirs["hypotheses"]):
            assert (mine["score"], mine["normalized_score"]) == pytest.approx(
                (other["score"], other["normalized_score"]), abs=1e-4)
