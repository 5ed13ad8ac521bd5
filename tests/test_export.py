"""The exported SavedModel translates like the Python Translator, without this package."""

import json
import os
import subprocess
import sys

import pytest

from keras_transformer.translation.translator import Translator

from conftest import FIXTURE_CORPUS as FIXTURE
TEXTS = [
    "Y dijo Dios: Sea la luz.",
    "",
    "   ",
    " ".join(["En el principio creó Dios los cielos y la tierra."] * 12),  # beyond max_length
    "Y llamó Dios á la luz Día",
]
LOAD_WITHOUT_THE_PACKAGE = """
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece ops
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
texts = json.loads(sys.argv[2])
outputs = serve(texts=tf.constant([t.encode("utf-8") for t in texts] + [b"Dios \\xff\\xfe luz"]))
print(json.dumps([t.decode("utf-8") for t in outputs["translations"].numpy()]))
print(serve(texts=tf.constant([], tf.string))["translations"].shape[0])  # an empty batch
print("keras_transformer" in sys.modules)
"""


@pytest.fixture(scope="module")
def run_dir(trained_run):
    return trained_run


@pytest.mark.export_runtimes
def test_exported_savedmodel_translates_like_the_translator_in_a_fresh_process(run_dir, tmp_path):
    from keras_transformer_cli import main

    export_dir = str(tmp_path / "export")
    main(["export", "--model", str(run_dir), "--out", export_dir, "--max-new-tokens", "10"])
    assert os.path.isdir(os.path.join(export_dir, "logits"))
    result = subprocess.run(
        [sys.executable, "-c", LOAD_WITHOUT_THE_PACKAGE, export_dir, json.dumps(TEXTS)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    translations, empty_batch, imported = result.stdout.strip().splitlines()[-3:]
    exported = json.loads(translations)
    assert imported == "False" and empty_batch == "0"
    # The SavedModel takes each string whole.
    expected = Translator.from_directory(str(run_dir), max_new_tokens=10, beam_width=1)(TEXTS, split_sentences=False)
    assert exported[: len(TEXTS)] == expected
    assert exported[1] == "" and exported[2] == ""
    assert isinstance(exported[-1], str)  # invalid UTF-8: replaced, not fatal


def test_export_of_a_folder_without_a_model_is_a_one_line_error(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer_cli", "export", "--model", str(tmp_path), "--out", str(tmp_path / "x")],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 2 and "model.keras" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("settings, keywords, expected", [
    (None, {}, {"max_new_tokens": None, "no_repeat_ngram_size": 3, "max_output_ratio": 3.5}),  # the package's
    # A beam search is not exported: the SavedModel decodes greedily whatever the settings' search.
    ({"beam_width": 4, "max_new_tokens": 12, "no_repeat_ngram_size": 0, "max_output_ratio": 2}, {},
     {"max_new_tokens": 12, "no_repeat_ngram_size": 0, "max_output_ratio": 2.0}),
    ({"max_new_tokens": 12, "no_repeat_ngram_size": 0, "max_output_ratio": 2}, {"max_new_tokens": 9,
                                                                               "no_repeat_ngram_size": 2},
     {"max_new_tokens": 9, "no_repeat_ngram_size": 2, "max_output_ratio": 2.0}),
])
def test_the_savedmodel_takes_the_options_it_honours_from_the_settings_and_its_keywords(run_dir, tmp_path,
                                                                                      monkeypatch, settings,
                                                                                      keywords, expected):
    from keras_transformer.translation import export
    from keras_transformer_runtime.decoding_settings import DecodingSettings

    class Built(Exception):
        pass

    def build(model, vocabulary_proto, marian_directory=None, **options):
        raise Built(options)

    monkeypatch.setattr(export, "_require_tensorflow_backend", lambda: None)
    monkeypatch.setattr(export, "build_serving_module", build)
    settings = DecodingSettings(**settings) if settings is not None else None
    with pytest.raises(Built) as built:
        export.export_translator(str(run_dir), str(tmp_path / "export"), settings=settings, **keywords)
    assert built.value.args[0] == expected
