"""The CTranslate2 export computes what the Keras model computes, and translates as the Translator does."""

import gzip
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

ctranslate2 = pytest.importorskip("ctranslate2")

import keras_transformer as kt  # noqa: E402
from keras_transformer.training import run_folder  # noqa: E402
from keras_transformer.translation.ctranslate2_model import CTranslate2Translator  # noqa: E402
from keras_transformer.translation.ctranslate2_model import export_ctranslate2  # noqa: E402
from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer  # noqa: E402
from keras_transformer_runtime.sentence_piece_tokenizer import train_tokenizer  # noqa: E402
from keras_transformer_runtime.special_tokens import END_ID  # noqa: E402
from keras_transformer_runtime.special_tokens import START_ID  # noqa: E402
from keras_transformer.translation.translator import Translator  # noqa: E402

from conftest import FIXTURE_CORPUS  # noqa: E402

# Engine against engine, input by input, truncation included: each input handed over whole.
pytestmark = pytest.mark.usefixtures("as_generate")

VOCABULARY = 200
AWKWARD = ["", "   ", " ".join(["En el principio creó Dios los cielos y la tierra."] * 12), b"Dios \xff luz"]
# Each architecture choice the export must carry across, with weights far
# from their initial values so that a wrong mapping shows in every score.
VARIANTS = {
    "post_ln": dict(),
    "pre_ln_tied_gelu_fused": dict(norm_first=True, tie_embeddings=True, activation="gelu", fused_qkv=True),
    "learned_unscaled_no_bias": dict(positions="learned", embedding_scale=2.5, logit_scale="linear",
                                     use_bias=False, num_decoder_layers=1),
}


def _pairs(count):
    with gzip.open(FIXTURE_CORPUS, "rt", encoding="utf-8") as file:
        rows = [line.rstrip("\n").split("\t") for line in file][1:]
    return [(row[3], row[4]) for row in rows[:count]]


def _run_folder(path, **options):
    """A run folder holding a random model (weights spread out) and a vocabulary of the fixture."""
    pairs = _pairs(300)
    train_tokenizer([s for s, _ in pairs] + [t for _, t in pairs], vocabulary_size=VOCABULARY,
                    path=os.path.join(path, run_folder.VOCABULARY_FILE))
    model = kt.models.transformer(VOCABULARY, VOCABULARY, **{
        **dict(num_layers=2, d_model=32, num_heads=4, ff_dim=64, max_length=32), **options})
    rng = np.random.default_rng(0)
    for variable in model.weights:
        value = keras.ops.convert_to_numpy(variable)
        variable.assign(value * 1.5 + rng.normal(0.0, 0.05, value.shape).astype("float32"))
    model.save(os.path.join(path, run_folder.MODEL_FILE))
    return str(path), model


def _keras_log_probs(model, source, target):
    decoder = np.array([[START_ID] + target], "int32")
    logits = model({"encoder_tokens": np.array([source], "int32"), "decoder_tokens": decoder})
    log_probs = keras.ops.convert_to_numpy(keras.ops.log_softmax(logits, axis=-1))[0]
    return log_probs[np.arange(len(target) + 1), target + [END_ID]]


@pytest.mark.export_runtimes
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_ctranslate2_scores_every_target_token_as_the_keras_model_does(tmp_path, variant):
    run, model = _run_folder(tmp_path, **VARIANTS[variant])
    out = export_ctranslate2(run, str(tmp_path / "ct2"))
    tokenizer = SentencePieceTokenizer(os.path.join(out, "vocabulary.spm"))
    pieces = tokenizer.get_vocabulary()
    pairs = _pairs(8)
    sources = [[int(i) for i in row][:31] for row in tokenizer.tokenize([s for s, _ in pairs])]
    targets = [[int(i) for i in row][:30] for row in tokenizer.tokenize([t for _, t in pairs])]
    scored = ctranslate2.Translator(out).score_batch(
        [[pieces[i] for i in row] for row in sources], [[pieces[i] for i in row] for row in targets])
    for source, target, result in zip(sources, targets, scored):
        ours = _keras_log_probs(model, source, target)
        assert len(result.log_probs) == len(ours)
        np.testing.assert_allclose(result.log_probs, ours, atol=2e-4, rtol=1e-4)
    assert np.std(ours) > 0.1  # the scores differ from token to token: a wrong weight would show


@pytest.mark.export_runtimes
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_ctranslate2_greedy_search_gives_the_translators_tokens(tmp_path, variant):
    run, _ = _run_folder(tmp_path, **VARIANTS[variant])
    out = export_ctranslate2(run, str(tmp_path / "ct2"))
    sources = [s for s, _ in _pairs(40)] + AWKWARD
    for guard in (0, 3):
        ours = Translator.from_directory(run, beam_width=1, no_repeat_ngram_size=guard, batch_size=16)
        theirs = CTranslate2Translator(out, beam_width=1, no_repeat_ngram_size=guard, batch_size=16)
        with pytest.warns(UserWarning, match="truncated"):
            expected = ours(sources)
        with pytest.warns(UserWarning, match="truncated"):
            assert theirs(sources) == expected
    assert len(set(expected)) > 10 and expected[40] == expected[41] == ""


@pytest.mark.export_runtimes
def test_the_cli_exports_a_trained_run_that_translates_in_beams_and_in_int8(trained_run, tmp_path):
    from keras_transformer_cli import main

    out = str(tmp_path / "ct2")
    main(["export", "--model", str(trained_run), "--out", out, "--format", "ctranslate2"])
    assert {"model.bin", "config.json", "vocabulary.spm", "keras_transformer.json"} <= set(os.listdir(out))
    sources = [s for s, _ in _pairs(24)] + AWKWARD[:2]
    expected = Translator.from_directory(str(trained_run), beam_width=1)(sources)
    assert CTranslate2Translator(out, beam_width=1)(sources) == expected
    beams = CTranslate2Translator(out, beam_width=4)(sources)
    assert len(beams) == len(sources) and all(isinstance(text, str) for text in beams) and beams[-1] == ""
    # Batches of 8 side by side, one CTranslate2 worker each: the same translations.
    side_by_side = CTranslate2Translator(out, beam_width=4, batch_size=8, intra_threads=1, parallel_batches=2)
    assert side_by_side.translator.num_translators == 2 and side_by_side(sources) == beams
    int8 = str(tmp_path / "ct2-int8")
    main(["export", "--model", str(trained_run), "--out", int8, "--format", "ctranslate2", "--quantization", "int8"])
    assert os.path.getsize(os.path.join(int8, "model.bin")) < 0.5 * os.path.getsize(os.path.join(out, "model.bin"))
    assert len(CTranslate2Translator(int8, beam_width=1)(sources)) == len(sources)

    again = subprocess.run(
        [sys.executable, "-m", "keras_transformer_cli", "export", "--model", str(trained_run), "--out", out,
         "--format", "ctranslate2"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "exists" in again.stderr and "Traceback" not in again.stderr


def test_a_model_ctranslate2_cannot_hold_is_refused_with_the_reason(tmp_path):
    from keras_transformer.translation.ctranslate2_model import transformer_spec

    concat = kt.models.transformer(20, 20, num_layers=1, d_model=16, num_heads=2, ff_dim=32, max_length=8,
                                   merge="concat", position_dim=8)
    with pytest.raises(ValueError, match="merge='add'"):
        transformer_spec(concat)
    elu = kt.models.transformer(20, 20, num_layers=1, d_model=16, num_heads=2, ff_dim=32, max_length=8,
                                activation="elu")  # swish and silu are held since Marian's import
    with pytest.raises(ValueError, match="activations"):
        transformer_spec(elu)
    with pytest.raises(FileNotFoundError, match="export_ctranslate2"):
        CTranslate2Translator(str(tmp_path))


def test_the_cli_and_the_package_offer_the_same_quantizations():
    from keras_transformer.translation.ctranslate2_model import QUANTIZATIONS
    from keras_transformer_cli import arguments

    assert arguments.CTRANSLATE2_QUANTIZATIONS == QUANTIZATIONS
