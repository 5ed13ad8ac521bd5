"""`export --format marian`: a run trained here, loaded by transformers' MarianMTModel and MarianTokenizer."""

import os

import numpy as np
import pytest

from keras_transformer.translation.translator import Translator
from keras_transformer_cli import main
from tests.conftest import to_numpy

# Each module trains a run (the trained_run fixture): CI runs them, the contributor's loop leaves them out.
# Held to this package's own translations input by input: each input handed over whole.
pytestmark = [pytest.mark.end_to_end, pytest.mark.usefixtures("as_generate")]

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SENTENCES = ["Y dijo Dios: Sea la luz.", "En el principio creó Dios los cielos y la tierra.", "¿Dónde? 123"]


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("exported") / "marian"
    assert main(["export", "--model", str(trained_run), "--out", str(out), "--format", "marian"]) == 0
    return str(out)


def test_the_exported_folder_gives_this_packages_ids_and_logits(trained_run, exported):
    translator = Translator.from_directory(str(trained_run), beam_width=1, no_repeat_ngram_size=0)
    their_model = transformers.MarianMTModel.from_pretrained(exported).eval()
    their_tokenizer = transformers.MarianTokenizer.from_pretrained(exported)
    ours = translator.tokenizer.tokenize(SENTENCES)
    # MarianTokenizer appends </s>, which a run trained here never saw after a source.
    theirs = their_tokenizer(SENTENCES, add_special_tokens=False)["input_ids"]
    assert ours == theirs
    width = max(map(len, ours))
    source = np.array([row + [0] * (width - len(row)) for row in ours])
    target = np.array([[2, 5, 9, 11], [2, 7, 0, 0], [2, 30, 31, 0]])
    logits = to_numpy(translator.model({"encoder_tokens": source.astype("int32"),
                                        "decoder_tokens": target.astype("int32")}))
    with torch.no_grad():
        their_logits = their_model(input_ids=torch.tensor(source), attention_mask=torch.tensor(source != 0),
                                   decoder_input_ids=torch.tensor(target)).logits.numpy()
    real = target != 0
    real[:, 0] = True
    np.testing.assert_allclose(logits[real], their_logits[real], atol=1e-4, rtol=0)


def test_the_exported_folder_translates_as_this_package_greedy(trained_run, exported):
    translator = Translator.from_directory(str(trained_run), beam_width=1, no_repeat_ngram_size=0, max_new_tokens=12)
    their_model = transformers.MarianMTModel.from_pretrained(exported).eval()
    their_tokenizer = transformers.MarianTokenizer.from_pretrained(exported)
    batch = their_tokenizer(SENTENCES, add_special_tokens=False, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = their_model.generate(**batch, num_beams=1, max_length=14)
    assert translator(SENTENCES) == their_tokenizer.batch_decode(generated, skip_special_tokens=True)


def test_an_exported_run_imports_back_to_the_same_logits(trained_run, exported, tmp_path):
    run = tmp_path / "back"
    assert main(["import", exported, "--output", str(run)]) == 0
    first = Translator.from_directory(str(trained_run), beam_width=1)
    back = Translator.from_directory(str(run), beam_width=1)
    source = np.array([[5, 6, 7, 8], [9, 10, 0, 0]], "int32")
    target = np.array([[2, 11, 12], [2, 13, 0]], "int32")
    back_ids = np.argsort(back.tokenizer.marian_ids)  # the import's order of the exported ids
    np.testing.assert_allclose(
        to_numpy(back.model({"encoder_tokens": back_ids[source] * (source != 0),
                             "decoder_tokens": back_ids[target] * (target != 0)}))[..., back_ids],
        to_numpy(first.model({"encoder_tokens": source, "decoder_tokens": target})), atol=1e-4)


@pytest.mark.backend_independent
def test_a_model_marian_cannot_express_is_refused_in_one_line(trained_run, tmp_path, capsys):
    import keras_transformer as kt

    run = tmp_path / "pre-ln"
    run.mkdir()
    kt.models.transformer(400, 400, num_layers=1, d_model=16, num_heads=2, ff_dim=32, max_length=24,
                          norm_first=True).save(str(run / "model.keras"))
    for name in ("vocabulary.spm",):
        (run / name).write_bytes((trained_run / name).read_bytes())
    with pytest.raises(SystemExit) as refused:
        main(["export", "--model", str(run), "--out", str(tmp_path / "out"), "--format", "marian"])
    error = capsys.readouterr().err.strip().splitlines()
    assert refused.value.code == 2 and len(error) == 1 and "norm_first=True (pre-LN)" in error[0]
    assert not os.path.exists(tmp_path / "out")
