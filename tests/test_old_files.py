"""Files written before the layers held Keras sublayers (1bfd57a) still load and give the same outputs.

`tests/fixtures/old-format/` was written by 1bfd57a
(`make_old_format_models.py`): a run folder of `keras-transformer train`
(its model.keras holds the optimizer's state too) and a fused-QKV model
with learned positions, with the logits and translations they gave then.
"""

import json
import pathlib

import keras
import numpy as np
import pytest

from conftest import to_numpy
from keras_transformer.translation.translator import Translator

OLD = pathlib.Path(__file__).parent / "fixtures" / "old-format"


@pytest.mark.parametrize("name, path", [("run", "run/model.keras"), ("fused", "fused.keras")])
def test_an_old_model_file_loads_and_gives_the_logits_it_gave(name, path):
    saved = np.load(OLD / f"{name}.npz")
    # compile=True also restores the run's optimizer state, whose variables
    # follow the model's.
    model = keras.saving.load_model(OLD / path, compile=name == "run")
    logits = to_numpy(model({key: saved[key] for key in ("encoder_tokens", "decoder_tokens")}))
    np.testing.assert_allclose(logits, saved["logits"], rtol=1e-4, atol=1e-4)


def test_an_old_run_folder_translates_as_it_did():
    expected = json.loads((OLD / "translations.json").read_text())
    for beams in (1, 3):
        translator = Translator.from_directory(str(OLD / "run"), beam_width=beams)
        assert translator(expected["sentences"]) == expected[f"beam_{beams}"]


def test_an_old_model_saved_again_is_written_in_the_new_layout(tmp_path):
    model = keras.saving.load_model(OLD / "fused.keras")
    model.save(tmp_path / "again.keras")
    saved = np.load(OLD / "fused.npz")
    inputs = {key: saved[key] for key in ("encoder_tokens", "decoder_tokens")}
    again = keras.saving.load_model(tmp_path / "again.keras")
    np.testing.assert_array_equal(to_numpy(again(inputs)), to_numpy(model(inputs)))
    paths = {v.path for v in again.weights}
    assert "encoder_layer_0/self_attention/qkv/kernel" in paths
    assert "decoder_embedding/token_embedding/embeddings" in paths
