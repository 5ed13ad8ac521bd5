"""`--source-language auto`: each input's language detected among an NLLB-200 run's, on the command line and the server.

The model is the small random NLLB-200 of `tests/nllb_fixtures.py` (NLLB's
202 language codes). A text whose language is detected is translated as it
is with that language named; a text with no letters, or clearly in a
language the run lacks (Latin), is refused alone.
"""

import json

import pytest

from keras_transformer_cli import main
from keras_transformer_runtime.documents.languages import LanguageDetector
from tests.nllb_fixtures import make_nllb_folder

pytest.importorskip("py3langid")
pytest.importorskip("langcodes")
pytest.importorskip("transformers")

pytestmark = pytest.mark.backend_independent

SPANISH = "¿Dónde está el niño? Y dijo Dios: Sea la luz; y fue la luz."
ENGLISH = "Where is the child? And God said, Let there be light: and there was light."
LATIN = "In principio erat Verbum, et Verbum erat apud Deum, et Deus erat Verbum."
NO_LETTERS = "12345 - 678"
LIMIT = ["--engine", "keras", "--beam", "1", "--no-repeat-ngram", "0", "--max-new-tokens", "8"]


def _nllb_codes():
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    return tuple(FAIRSEQ_LANGUAGE_CODES)


def test_the_detector_names_the_runs_code_or_why_it_has_none():
    nllb = LanguageDetector(_nllb_codes())
    assert nllb(SPANISH) == ("spa_Latn", None)
    assert nllb(ENGLISH) == ("eng_Latn", None)
    assert nllb("Привет, как дела? Я живу в Москве.") == ("rus_Cyrl", None)
    assert nllb("مرحبا، كيف حالك؟ أنا أعيش في القاهرة.")[0].endswith("_Arab")
    code, reason = nllb(LATIN)
    assert code is None and "(lat) is not one this model translates from" in reason
    code, reason = nllb(NO_LETTERS)
    assert code is None and "no letters" in reason
    m2m100 = LanguageDetector(("en", "es", "fr"))
    assert m2m100(SPANISH) == ("es", None) and m2m100("Où est l'enfant ? Il a faim.") == ("fr", None)


@pytest.fixture(scope="module")
def imported_run(tmp_path_factory):
    folder = make_nllb_folder(tmp_path_factory.mktemp("nllb") / "nllb-200-tiny")
    run = tmp_path_factory.mktemp("runs") / "nllb"
    assert main(["import", str(folder), "--output", str(run)]) == 0
    return str(run)


def _translated(run, source, texts, capsys, *flags):
    capsys.readouterr()
    code = main(["translate", "--model", run, *LIMIT, "--source-language", source, "--target-language", "fra_Latn",
                 *flags, *texts])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


@pytest.mark.end_to_end
def test_translate_auto_translates_each_line_from_its_own_language_and_refuses_only_the_undetectable(
        imported_run, capsys):
    code, lines, error = _translated(imported_run, "auto", [SPANISH, NO_LETTERS, ENGLISH, LATIN], capsys,
                                     "--verbose")
    assert code == 1
    assert lines[0] == _translated(imported_run, "spa_Latn", [SPANISH], capsys)[1][0]
    assert lines[2] == _translated(imported_run, "eng_Latn", [ENGLISH], capsys)[1][0]
    assert lines[1] == "" and lines[3] == "" and len(lines) == 4
    assert "line 1: source language spa_Latn" in error and "line 3: source language eng_Latn" in error
    assert "line 2: its language cannot be told (no letters)" in error
    assert "line 4: its language (lat) is not one this model translates from" in error


@pytest.mark.end_to_end
def test_translate_auto_says_each_lines_language_in_jsonl(imported_run, capsys):
    code, lines, _ = _translated(imported_run, "auto", [ENGLISH, SPANISH], capsys, "--format", "jsonl")
    records = [json.loads(line) for line in lines]
    assert code == 0 and [record["source_language"] for record in records] == ["eng_Latn", "spa_Latn"]


def test_evaluate_refuses_auto_in_one_line(imported_run, capsys, tmp_path):
    (tmp_path / "es.txt").write_text(SPANISH + "\n", encoding="utf-8")
    (tmp_path / "en.txt").write_text(ENGLISH + "\n", encoding="utf-8")
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        main(["evaluate", "--model", imported_run, "--corpus", str(tmp_path / "es.txt"), str(tmp_path / "en.txt"),
              "--source-language", "auto", "--target-language", "eng_Latn"])
    assert refused.value.code == 2 and "name the corpus' language" in capsys.readouterr().err


def test_the_server_detects_each_texts_language_and_answers_the_undetectable_with_an_error(imported_run):
    import time

    from starlette.testclient import TestClient

    from keras_transformer.translation import Translator
    from keras_transformer_runtime.serving.app import create_app
    from keras_transformer_runtime.serving.served_model import ServedModel

    translator = Translator.from_directory(imported_run, beam_width=1, no_repeat_ngram_size=0, max_new_tokens=8)
    served = ServedModel("nllb", "unused", [1], lambda folder, setting, first: translator, engine="keras")
    with TestClient(create_app({"nllb": served}, log=lambda line: None), raise_server_exceptions=False) as client:
        deadline = time.monotonic() + 60
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "never ready"
            time.sleep(0.05)
        detected = client.post("/v1/translate", json={"text": [SPANISH, LATIN, ENGLISH, NO_LETTERS],
                                                      "source_language": "auto", "target_language": "fra_Latn"})
        named = {source: client.post("/v1/translate", json={"text": text, "source_language": source,
                                                            "target_language": "fra_Latn"}).json()
                 for source, text in (("spa_Latn", SPANISH), ("eng_Latn", ENGLISH))}
        no_target = client.post("/v1/translate", json={"text": SPANISH, "source_language": "auto"})
    assert detected.status_code == 200, detected.text
    spanish, latin, english, no_letters = detected.json()["translations"]
    assert spanish["source_language"] == "spa_Latn" and english["source_language"] == "eng_Latn"
    assert spanish["hypotheses"] == named["spa_Latn"]["translations"][0]["hypotheses"]
    assert english["hypotheses"] == named["eng_Latn"]["translations"][0]["hypotheses"]
    assert latin["source"] == LATIN and "(lat) is not one this model translates from" in latin["error"]
    assert "no letters" in no_letters["error"]
    assert no_target.status_code == 400 and "'target_language'" in no_target.json()["error"]
