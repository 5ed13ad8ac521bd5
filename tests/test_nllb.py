"""NLLB-200 imported onto the package's layers: ids, logits, greedy and beam translations equal transformers'.

The model is a small random `M2M100ForConditionalGeneration` with an NLLB
tokenizer (NLLB's 202 language codes), every bias and LayerNorm parameter
random, made and saved offline by `tests/nllb_fixtures.py`.
"""

import json

import keras
import numpy as np
import pytest

from keras_transformer.checkpoints.nllb import config as nllb_config
from keras_transformer.checkpoints.nllb import import_nllb
from keras_transformer.checkpoints.nllb import load_nllb
from keras_transformer.decoding.search_step import forbidden_token_ids
from keras_transformer.layers.sinusoidal_encoding import sinusoidal_encoding
from keras_transformer.translation import Translator
from keras_transformer_cli import main
from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.run_tokenizer import load_run_tokenizer
from keras_transformer_runtime.search_defaults import run_ends_at_limit
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID
from tests.nllb_fixtures import SENTENCES
from tests.nllb_fixtures import assert_batches_tokenized_as
from tests.nllb_fixtures import load_nllb_reference
from tests.nllb_fixtures import make_nllb_folder
from tests.nllb_fixtures import nllb_generate
from tests.nllb_fixtures import reference_tokenizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

MAX_NEW_TOKENS = 12


@pytest.fixture(scope="module")
def nllb_folder(tmp_path_factory):
    return make_nllb_folder(tmp_path_factory.mktemp("nllb") / "nllb-200-tiny")


@pytest.fixture(scope="module")
def reference(nllb_folder):
    return load_nllb_reference(nllb_folder)


@pytest.fixture(scope="module")
def imported(nllb_folder):
    return load_nllb(nllb_folder)


def _their_ids(tokenizer, ids):
    return [[int(tokenizer.model_ids[i]) for i in row] for row in ids]


@pytest.mark.backend_independent
@pytest.mark.parametrize("source", ["spa_Latn", "eng_Latn"])
def test_source_ids_are_the_tokenizers_language_first_and_end_last(imported, nllb_folder, source):
    _, tokenizer = imported
    their_tokenizer = reference_tokenizer(nllb_folder, source, "eng_Latn")
    ours = tokenizer.with_languages(source, "eng_Latn").tokenize(SENTENCES)
    assert _their_ids(tokenizer, ours) == their_tokenizer(SENTENCES)["input_ids"]
    assert ours[0][0] == tokenizer.token_to_id(source) and ours[0][-1] == END_ID


@pytest.mark.backend_independent
def test_target_ids_detokenize_as_the_tokenizer_decodes_them(imported, reference):
    _, tokenizer = imported
    _, their_tokenizer = reference
    tokenizer = tokenizer.with_languages("spa_Latn", "fra_Latn")
    ids = tokenizer.tokenize_target(SENTENCES)
    assert ids[0][0] == tokenizer.forced_first_id  # the language first, no </s>
    assert tokenizer.detokenize(ids) == their_tokenizer.batch_decode(_their_ids(tokenizer, ids),
                                                                      skip_special_tokens=True)


@pytest.mark.backend_independent
def test_an_unknown_or_missing_language_is_refused_with_close_codes(imported):
    _, tokenizer = imported
    with pytest.raises(UserInputError, match="--target-language eng_latn: .*close: eng_Latn"):
        tokenizer.with_languages("spa_Latn", "eng_latn")
    with pytest.raises(UserInputError, match="pass --source-language CODE .*its codes: ace_Arab"):
        tokenizer.tokenize(["Hola."])
    assert len(tokenizer.language_codes) == 202


@pytest.mark.backend_independent
def test_fairseq_sinusoids_are_m2m100s_table_from_row_two():
    from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding

    for depth in (16, 17):
        theirs = M2M100SinusoidalPositionalEmbedding.get_embedding(42, depth, padding_idx=1).numpy()
        np.testing.assert_allclose(sinusoidal_encoding(40, depth, layout="fairseq"), theirs[2:], atol=2e-6)


@pytest.mark.backend_independent
def test_a_decoder_that_starts_from_the_end_token_may_still_end():
    class StartsFromEnd:
        start_id = END_ID

    assert forbidden_token_ids(StartsFromEnd()) == (PAD_ID,)


@pytest.mark.backend_independent
def test_every_key_of_m2m100_config_is_read_or_named():
    keys = set(transformers.M2M100Config().to_dict())
    known = nllb_config.MODEL_KEYS | nllb_config.NO_EFFECT_KEYS | set(nllb_config.DEFAULT_ONLY_KEYS)
    assert keys - known == set()


def test_logits_equal_transformers_on_a_padded_batch(imported, reference):
    model, tokenizer = imported
    their_model, their_tokenizer = reference
    their_tokenizer.src_lang = "spa_Latn"
    batch = their_tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)
    target = their_tokenizer.convert_tokens_to_ids("fra_Latn")
    decoder_ids = torch.tensor([[2, target, 40, 41, 42, 43]] * 3)
    with torch.no_grad():
        theirs = their_model(**batch, decoder_input_ids=decoder_ids).logits.numpy()
    ours_of = np.argsort(tokenizer.model_ids)
    source = ours_of[batch["input_ids"].numpy()] * batch["attention_mask"].numpy()  # padding is 0 here
    ours = keras.ops.convert_to_numpy(model({"encoder_tokens": source, "decoder_tokens": ours_of[decoder_ids.numpy()]}))
    np.testing.assert_allclose(ours[..., ours_of], theirs, atol=1e-4)


def test_greedy_and_beam_tokens_equal_generate_with_forced_bos_for_two_targets(imported, reference):
    model, tokenizer = imported
    translations = {}
    for beams, search in ((1, "kept"), (4, "pooled")):
        translator = Translator(model, tokenizer.with_languages("spa_Latn", "eng_Latn"), beam_width=beams,
                                beam_search=search, no_repeat_ngram_size=0, max_new_tokens=MAX_NEW_TOKENS)
        for target in ("eng_Latn", "fra_Latn"):
            # One compiled loop for both: the forced language is an input of the loop.
            translator = translator.with_languages("spa_Latn", target)
            texts, generated = nllb_generate(*reference, SENTENCES, "spa_Latn", target, beams=beams,
                                             max_new_tokens=MAX_NEW_TOKENS)
            ours = translator._decode(translator._source_tokens(SENTENCES))[: len(SENTENCES)]
            for row, their_row in zip(ours, generated[:, 1:].tolist()):
                their_row = [i for i in their_row if i != 1]  # transformers pads a finished row with <pad>
                assert [int(tokenizer.model_ids[i]) for i in row if i != PAD_ID] == their_row
            translations[target, beams] = translator(SENTENCES)
            assert translations[target, beams] == texts
    assert any(any(texts) for texts in translations.values()), "the model should write pieces, not only codes"
    assert translations["eng_Latn", 1] != translations["fra_Latn", 1]  # the target language is heard


def test_a_beam_closed_at_the_length_limit_scores_as_generates_without_a_forced_end(imported, reference):
    """NLLB-200 sets no `forced_eos_token_id`: a hypothesis open at the limit counts the tokens it has."""
    limit = 4
    their_model, their_tokenizer = reference
    their_tokenizer.src_lang = "spa_Latn"
    batch = their_tokenizer(SENTENCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = their_model.generate(**batch, num_beams=4, num_return_sequences=4, max_new_tokens=limit,
                                   do_sample=False, output_scores=True, return_dict_in_generate=True,
                                   forced_bos_token_id=their_tokenizer.convert_tokens_to_ids("fra_Latn"))
    model, tokenizer = imported
    scores, n_best = {}, {}
    for end_at_limit in (False, True):
        translator = Translator(model, tokenizer.with_languages("spa_Latn", "fra_Latn"), beam_width=4,
                                beam_search="pooled", no_repeat_ngram_size=0, max_new_tokens=limit,
                                end_at_limit=end_at_limit)
        n_best[end_at_limit] = translator.n_best(SENTENCES, 4)
        scores[end_at_limit] = np.array([[h.normalized_score for h in t.hypotheses] for t in n_best[end_at_limit]])
    np.testing.assert_allclose(scores[False], out.sequences_scores.numpy().reshape(-1, 4), atol=1e-4)
    texts = their_tokenizer.batch_decode(out.sequences, skip_special_tokens=True)
    assert [[h.text for h in t.hypotheses] for t in n_best[False]] == [texts[i : i + 4]
                                                                     for i in range(0, len(texts), 4)]
    # Some hypotheses were closed at the limit, where a forced `</s>` would have counted one more token.
    assert not np.allclose(scores[True], scores[False], atol=1e-3)
    if keras.backend.backend() == "jax":  # the compiled engine's program is written with Keras on JAX
        from keras_transformer.translation.translation_program import export_decoding_program
        from keras_transformer_runtime.compiled_translator import CompiledTranslator

        translator = Translator(model, tokenizer, beam_width=4, beam_search="pooled", no_repeat_ngram_size=0,
                                max_new_tokens=limit, end_at_limit=False)
        program = export_decoding_program(translator, n_best=4)
        compiled = CompiledTranslator(program, [keras.ops.convert_to_numpy(v) for v in model.variables], tokenizer,
                                      translator.max_length, beam_width=4, n_best=4)
        compiled_scores = [[h.normalized_score for h in t.hypotheses]
                           for t in compiled.with_languages("spa_Latn", "fra_Latn").n_best(SENTENCES, 4)]
        np.testing.assert_allclose(compiled_scores, scores[False], atol=1e-5)


@pytest.mark.end_to_end
def test_an_imported_run_reloads_and_translates_the_same(imported, nllb_folder, tmp_path):
    model, tokenizer = imported
    run = tmp_path / "run"
    import_nllb(nllb_folder, run)
    assert json.loads((run / "imported.json").read_text())["format"] == "nllb"
    assert not run_ends_at_limit(str(run))  # NLLB-200 forces no `</s>` at the limit: `generate` closes none there
    reloaded = Translator.from_directory(run, source_language="spa_Latn", target_language="fra_Latn",
                                         beam_width=1, no_repeat_ngram_size=0, max_new_tokens=MAX_NEW_TOKENS)
    direct = Translator(model, tokenizer.with_languages("spa_Latn", "fra_Latn"), beam_width=1,
                        no_repeat_ngram_size=0, max_new_tokens=MAX_NEW_TOKENS)
    assert reloaded(SENTENCES) == direct(SENTENCES)
    assert load_run_tokenizer(run).vocabulary_size() == model.output.shape[-1]


@pytest.fixture(scope="module")
def imported_run(nllb_folder, tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "nllb"
    assert main(["import", str(nllb_folder), "--output", str(run)]) == 0
    return str(run)


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_import_and_translate_on_the_command_line_give_generates_translation(imported_run, reference, capsys):
    capsys.readouterr()
    flags = ["translate", "--model", imported_run, "--engine", "keras", "--beam", "1", "--no-repeat-ngram", "0",
             "--max-new-tokens", str(MAX_NEW_TOKENS), "--source-language", "spa_Latn"]
    assert main([*flags, "--target-language", "fra_Latn", *SENTENCES[:2]]) == 0
    printed = capsys.readouterr().out.splitlines()
    expected, _ = nllb_generate(*reference, SENTENCES[:2], "spa_Latn", "fra_Latn", max_new_tokens=MAX_NEW_TOKENS)
    assert printed == expected
    # No search flags: the run's generation.json, as generate() with the model's defaults (greedy, 20 new tokens).
    assert main(["translate", "--model", imported_run, "--engine", "keras", "--source-language", "spa_Latn",
                 "--target-language", "fra_Latn", *SENTENCES]) == 0
    expected, _ = nllb_generate(*reference, SENTENCES, "spa_Latn", "fra_Latn", max_new_tokens=None)
    assert capsys.readouterr().out.splitlines() == expected


@pytest.mark.end_to_end
@pytest.mark.backend_independent
@pytest.mark.parametrize("flags, message", [
    (["--source-language", "spa_Latn"], "pass --target-language CODE"),
    (["--source-language", "spa_latn", "--target-language", "eng_Latn"], "--source-language spa_latn: not one of "
                                                                           "this model's 202 languages; close: spa_Latn"),
])
def test_translate_refuses_a_missing_or_unknown_language_in_one_line(imported_run, capsys, flags, message):
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        main(["translate", "--model", imported_run, "--engine", "keras", *flags, "Y dijo Dios."])
    error = capsys.readouterr().err.strip().splitlines()
    assert refused.value.code == 2
    assert len(error) == 1 and message in error[0], error


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_export_nllb_writes_a_folder_transformers_loads_with_the_same_logits(imported_run, reference, tmp_path,
                                                                             capsys):
    out = tmp_path / "exported"
    assert main(["export", "--model", imported_run, "--out", str(out), "--format", "nllb"]) == 0
    exported, tokenizer = load_nllb_reference(out)
    original, _ = reference
    tokenizer.src_lang = "spa_Latn"
    batch = tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)
    decoder_ids = torch.tensor([[2, tokenizer.convert_tokens_to_ids("eng_Latn"), 40, 41]] * 3)
    with torch.no_grad():
        theirs = original(**batch, decoder_input_ids=decoder_ids).logits.numpy()
        ours = exported(**batch, decoder_input_ids=decoder_ids).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    assert "M2M100ForConditionalGeneration.from_pretrained" in capsys.readouterr().out


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_an_imported_run_fine_tunes_with_nllbs_language_tokens(imported_run, nllb_folder, tmp_path):
    from conftest import FIXTURE_CORPUS

    from keras_transformer.data.parallel_corpus import ParallelCorpus
    from keras_transformer.training.train_config import TrainConfig
    from keras_transformer.training.train_input import TrainInput
    from keras_transformer.training.trainer import train_translator

    # The batches are NLLB's teacher forcing: [spa_Latn] source </s>; decoder [</s> eng_Latn ...], labels [eng_Latn ... </s>].
    assert_batches_tokenized_as(imported_run, reference_tokenizer(nllb_folder, "spa_Latn", "eng_Latn"),
                                ("spa_Latn", "eng_Latn"), tmp_path, "NllbTokenizer")

    with pytest.raises(UserInputError, match="pass --target-language CODE"):
        TrainInput(ParallelCorpus(FIXTURE_CORPUS), max_length=64, batch_tokens=400, vocabulary_from=imported_run,
                   languages=("spa_Latn", None)).read_corpus(log=lambda line: None)
    for lora_rank in (None, 4):
        output = tmp_path / f"tuned-{lora_rank}"
        config = TrainConfig(output=str(output), corpus=FIXTURE_CORPUS, start_from=imported_run, epochs=1,
                             steps_per_epoch=2, dev_bleu_sentences=2, source_language="spa_Latn",
                             target_language="eng_Latn", lora_rank=lora_rank)
        summary = train_translator(config, verbose=0, log=lambda line: None)
        assert np.isfinite(summary["train_loss"])
        tuned = Translator.from_directory(str(output), source_language="spa_Latn", target_language="eng_Latn",
                                          beam_width=1)
        assert tuned.decoder.start_id == END_ID and isinstance(tuned("Y dijo Dios."), str)
        assert json.loads((output / "config.json").read_text())["model_options"]["sinusoid_layout"] == "fairseq"


def test_the_server_translates_each_request_between_its_own_two_languages(imported, reference):
    import time

    from starlette.testclient import TestClient

    from keras_transformer_runtime.serving.app import create_app
    from keras_transformer_runtime.serving.served_model import ServedModel

    model, tokenizer = imported
    translator = Translator(model, tokenizer, beam_width=1, no_repeat_ngram_size=0, max_new_tokens=MAX_NEW_TOKENS)
    served = ServedModel("nllb", "unused", [1], lambda folder, setting, first: translator, engine="keras")
    with TestClient(create_app({"nllb": served}, log=lambda line: None), raise_server_exceptions=False) as client:
        deadline = time.monotonic() + 60
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.05)
        answers = {}
        for target in ("eng_Latn", "fra_Latn"):
            response = client.post("/v1/translate", json={"text": SENTENCES[:2], "source_language": "spa_Latn",
                                                          "target_language": target})
            assert response.status_code == 200, response.text
            answers[target] = [t["hypotheses"][0]["text"] for t in response.json()["translations"]]
            expected, _ = nllb_generate(*reference, SENTENCES[:2], "spa_Latn", target, max_new_tokens=MAX_NEW_TOKENS)
            assert answers[target] == expected
        missing = client.post("/v1/translate", json={"text": "Hola.", "source_language": "spa_Latn"})
        unknown = client.post("/v1/translate", json={"text": "Hola.", "source_language": "spa_Latn",
                                                     "target_language": "eng_latn"})
        predict = client.post("/v1/models/nllb:predict", json={"instances": ["Hola."]})
    assert missing.status_code == 400 and "'target_language'" in missing.json()["error"]
    assert unknown.status_code == 400 and "close: eng_Latn" in unknown.json()["error"]
    assert predict.status_code == 400 and "source_language" in predict.json()["error"]


def test_one_compiled_program_translates_every_pair_as_the_keras_engine_does(imported, reference):
    if keras.backend.backend() != "jax":
        pytest.skip("the compiled engine's program is written with Keras on JAX")
    from keras_transformer.translation.translation_program import export_decoding_program
    from keras_transformer_runtime.compiled_translator import CompiledTranslator

    model, tokenizer = imported
    translator = Translator(model, tokenizer, beam_width=4, beam_search="pooled", no_repeat_ngram_size=0,
                            max_new_tokens=MAX_NEW_TOKENS)
    program = export_decoding_program(translator, n_best=2, cross_attention=True)
    compiled = CompiledTranslator(program, [keras.ops.convert_to_numpy(v) for v in model.variables], tokenizer,
                                  translator.max_length, beam_width=4, n_best=2, cross_attention=True)
    for target in ("eng_Latn", "fra_Latn"):
        ours, theirs = (engine.with_languages("spa_Latn", target).n_best(SENTENCES, 2, alignments=True)
                        for engine in (compiled, translator))
        for mine, keras_engine in zip(ours, theirs):
            assert [(h.text, h.alignment) for h in mine.hypotheses] == [(h.text, h.alignment)
                                                                        for h in keras_engine.hypotheses]
            for a, b in zip(mine.hypotheses, keras_engine.hypotheses):
                # Two compilations of the same float32 sums: equal to float32's rounding over a hypothesis' steps.
                assert (a.score, a.normalized_score) == pytest.approx((b.score, b.normalized_score), rel=1e-5, abs=1e-5)
        texts, _ = nllb_generate(*reference, SENTENCES, "spa_Latn", target, beams=4, max_new_tokens=MAX_NEW_TOKENS)
        assert [t.hypotheses[0].text for t in ours] == texts


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_the_compiled_engine_translates_an_nllb_run_as_generate(imported_run, reference, tmp_path):
    import os
    import subprocess
    import sys

    def run(*flags):
        result = subprocess.run([sys.executable, "-m", "keras_transformer_cli", "translate", "--model", imported_run,
                                 "--beam", "1", "--no-repeat-ngram", "0", "--max-new-tokens", str(MAX_NEW_TOKENS),
                                 "--source-language", "spa_Latn", *flags, *SENTENCES], capture_output=True,
                                env={**os.environ, "KERAS_TRANSFORMER_CACHE_DIR": str(tmp_path)}, timeout=600)
        assert result.returncode == 0, result.stderr.decode()[-3000:]
        return result.stdout.decode().splitlines()

    for target in ("eng_Latn", "fra_Latn"):  # the second from the program the first wrote
        expected, _ = nllb_generate(*reference, SENTENCES, "spa_Latn", target, max_new_tokens=MAX_NEW_TOKENS)
        assert run("--target-language", target) == expected


@pytest.mark.export_runtimes
@pytest.mark.backend_independent
def test_an_nllb_run_exported_to_ctranslate2_translates_as_generate(imported_run, reference, tmp_path):
    pytest.importorskip("ctranslate2")
    from keras_transformer.translation.ctranslate2_model import CTranslate2Translator
    from keras_transformer.translation.ctranslate2_model import export_ctranslate2

    out = export_ctranslate2(imported_run, str(tmp_path / "ct2"))
    translator = CTranslate2Translator(out, beam_width=1, no_repeat_ngram_size=0, max_new_tokens=MAX_NEW_TOKENS)
    for target in ("eng_Latn", "fra_Latn"):
        expected, _ = nllb_generate(*reference, SENTENCES, "spa_Latn", target, max_new_tokens=MAX_NEW_TOKENS)
        assert translator.with_languages("spa_Latn", target)(SENTENCES) == expected


@pytest.mark.backend_independent
def test_a_folder_without_either_tokenizer_is_refused_in_one_line(nllb_folder, tmp_path, capsys):
    import shutil

    folder = tmp_path / "m2m100"
    shutil.copytree(nllb_folder, folder)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(SystemExit) as refused:
        main(["import", str(folder), "--output", str(tmp_path / "out")])
    error = capsys.readouterr().err.strip().splitlines()
    assert refused.value.code == 2 and len(error) == 1, error
    assert "no tokenizer.json (NLLB-200), nor sentencepiece.bpe.model and vocab.json (M2M-100)" in error[0]
    assert not (tmp_path / "out").exists()
