"""Keras' `model.quantize` reaches every weight it would in KerasHub, and a quantized model reloads."""

import keras
import numpy as np
import pytest

from conftest import FIXTURE_CORPUS
from conftest import to_numpy
import keras_transformer as kt
from keras_transformer import quantization

INPUTS = {
    "encoder_tokens": np.array([[5, 6, 7, 8, 0], [9, 10, 0, 0, 0]], "int32"),
    "decoder_tokens": np.array([[1, 11, 12, 13], [1, 14, 15, 0]], "int32"),
}


@pytest.fixture(autouse=True)
def _one_garbage_collection():
    """Keras collects garbage after each kernel `quantize` drops, seconds a test in this large process;
    `quantization.collected_once` makes that one collection at the end, as `translate --quantize` does."""
    with quantization.collected_once():
        yield


def _model(**options):
    keras.utils.set_random_seed(0)
    return kt.models.transformer(60, 60, num_layers=1, d_model=16, num_heads=2, ff_dim=32, max_length=16,
                                 dropout=0.0, **options)


def _quantized_layers(model):
    return {layer.path for layer in model._flatten_layers() if layer.quantization_mode is not None}


ATTENTION = [f"{stack}/{part}" for stack, parts in (
    ("encoder_layer_0/self_attention", ("query", "key", "value", "attention_output")),
    ("decoder_layer_0/self_attention", ("query", "key", "value", "attention_output")),
    ("decoder_layer_0/cross_attention", ("query", "key", "value", "attention_output")),
) for part in parts]
EMBEDDINGS = ["encoder_embedding/token_embedding", "decoder_embedding/token_embedding"]


@pytest.mark.parametrize("mode", ["int8", "int4", "float8"])
def test_quantize_reaches_every_attention_projection_and_embedding_and_the_model_reloads(mode, tmp_path):
    model = _model(tie_embeddings=True)
    before = to_numpy(model(INPUTS))
    model.quantize(mode)
    quantized = _quantized_layers(model)
    assert set(ATTENTION) <= quantized, sorted(set(ATTENTION) - quantized)
    if mode != "float8":  # Keras quantizes Embedding to int8 and int4 only
        assert set(EMBEDDINGS) <= quantized
        assert keras.backend.standardize_dtype(
            model.get_layer("decoder_embedding").token_embedding._embeddings.dtype) == "int8"
    after = to_numpy(model(INPUTS))
    assert np.all(np.isfinite(after))
    # Close to the float model, and not identical to it.
    assert np.abs(after - before).max() > 0
    assert np.corrcoef(after.ravel(), before.ravel())[0, 1] > (0.9 if mode == "int4" else 0.98)
    model.save(tmp_path / "quantized.keras")
    reloaded = keras.saving.load_model(tmp_path / "quantized.keras")
    assert _quantized_layers(reloaded) == quantized
    np.testing.assert_array_equal(to_numpy(reloaded(INPUTS)), after)


def test_a_fused_qkv_kernel_and_an_untied_output_projection_quantize_too(tmp_path):
    model = _model(fused_qkv=True, tie_embeddings=False)
    model.quantize("int8")
    quantized = _quantized_layers(model)
    assert {"encoder_layer_0/self_attention/qkv", "decoder_layer_0/cross_attention/qkv",
            "output_projection"} <= quantized
    model.save(tmp_path / "fused.keras")
    np.testing.assert_array_equal(to_numpy(keras.saving.load_model(tmp_path / "fused.keras")(INPUTS)),
                                  to_numpy(model(INPUTS)))


def test_projection_weights_of_a_quantized_layer_are_refused_with_the_reason():
    model = _model()
    model.quantize("int8")
    with pytest.raises(ValueError, match="is quantized \\(int8\\)"):
        model.get_layer("encoder_layer_0").self_attention.projection_weights()


OLD_RUN = str(__import__("pathlib").Path(__file__).parent / "fixtures" / "old-format" / "run")


def test_the_cli_and_the_package_offer_the_same_keras_quantizations():
    from keras_transformer.quantization import MODES
    from keras_transformer_cli import arguments

    assert arguments.KERAS_QUANTIZATIONS == MODES


def test_translate_and_evaluate_take_quantize_and_keep_the_float_report(tmp_path, capsys):
    import json
    import shutil

    from keras_transformer.translation.translator import Translator
    from keras_transformer_cli import main

    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    translator = Translator.from_directory(str(run), quantize="int8")
    attention = translator.model.get_layer("decoder_layer_0").cross_attention
    assert attention.query_dense.quantization_mode == "int8"
    assert translator.model.get_layer("decoder_embedding").token_embedding.quantization_mode == "int8"
    sentences = ["Y dijo Dios: Sea la luz.", "Jesús lloró."]
    main(["translate", "--model", str(run), "--quantize", "int8", *sentences])
    assert capsys.readouterr().out.splitlines() == translator(sentences)
    # The fixture's config.json names the corpus path of the machine that wrote it.
    main(["evaluate", "--model", str(run), "--split", "heldout", "--limit", "2", "--quantize", "int4",
          "--corpus", FIXTURE_CORPUS])
    report = json.loads((run / "evaluation-heldout-beam4-norepeat3-int4.json").read_text())
    assert report["sentences"] == 2
    assert not (run / "evaluation-heldout-beam4-norepeat3.json").exists()


def test_export_refuses_quantize_for_ctranslate2_with_the_flag_to_use(tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    from keras_transformer_cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--model", OLD_RUN, "--out", str(tmp_path / "out"), "--format", "ctranslate2",
              "--quantize", "int8"])
    assert exit_info.value.code == 2 and "--quantization int8" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("tie", [True, False])
def test_int8_by_row_blocks_quantizes_exactly_as_keras_and_reloads(tie, monkeypatch, tmp_path):
    monkeypatch.setattr(quantization, "ROWS_PER_BLOCK", 7)  # 60 token rows: nine blocks, the last one short
    theirs = _model(tie_embeddings=tie)
    theirs.quantize("int8")
    ours = quantization.quantize(_model(tie_embeddings=tie), "int8")
    assert _quantized_layers(ours) == _quantized_layers(theirs)
    assert [v.path for v in ours.weights] == [v.path for v in theirs.weights]
    for mine, keras_own in zip(ours.weights, theirs.weights):
        np.testing.assert_array_equal(to_numpy(mine), to_numpy(keras_own), err_msg=mine.path)
    ours.save(tmp_path / "quantized.keras")
    reloaded = keras.saving.load_model(tmp_path / "quantized.keras")
    np.testing.assert_allclose(to_numpy(reloaded(INPUTS)), to_numpy(theirs(INPUTS)), atol=1e-6)
