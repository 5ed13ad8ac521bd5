"""Multi-target OPUS-MT models: a `>>xxx<<` target-language token is one id, and translations equal `generate`'s.

The model is a small random `MarianMTModel` whose vocab.json holds three
language tokens, as opus-mt-en-ROMANCE's holds its targets' (built offline
by `tests/marian_fixtures.py`).
"""

import io
import types

import keras
import numpy as np
import pytest

from keras_transformer.translation import Translator
from keras_transformer_cli import main
from keras_transformer_runtime.serving.request_bodies import RequestError
from keras_transformer_runtime.serving.request_bodies import parse_translate
from tests.marian_fixtures import generate_translations
from tests.marian_fixtures import make_marian_folder
from tests.marian_fixtures import imported, imported_run, reference  # noqa: F401 (fixtures)

# Held to transformers' generate, which takes each input whole.
pytestmark = pytest.mark.usefixtures("as_generate")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CODES = ("fra", "por", "spa")
# Each code on some sentence, a token the vocabulary lacks, one away from the start, and an empty rest.
SENTENCES = [">>fra<< Y dijo Dios: Sea la luz.", ">>por<< Y dijo Dios: Sea la luz.", ">>spa<<¿Dónde está el niño?",
             ">>xyz<< Tiene 123 ovejas.", "Y dijo >>fra<< Dios.", ">>fra<<", ">>por<< En el principio creó Dios."]


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory):
    return make_marian_folder(tmp_path_factory.mktemp("marian") / "opus-mt-es-ROMANCE", max_position_embeddings=128,
                              language_codes=CODES)




@pytest.mark.backend_independent
def test_a_language_token_at_the_start_is_one_id_as_marians_tokenizer_gives_it(imported, reference):
    _, tokenizer = imported
    _, their_tokenizer = reference
    ours = [tokenizer.marian_ids[row].tolist() for row in tokenizer.tokenize(SENTENCES)]
    assert ours == their_tokenizer(SENTENCES)["input_ids"]
    fra = their_tokenizer.convert_tokens_to_ids(">>fra<<")
    assert ours[0][0] == fra and ours[5] == [fra, their_tokenizer.eos_token_id]
    assert fra not in ours[4]  # not at the start: spelled out, as Marian does


@pytest.mark.backend_independent
def test_the_tokenizer_lists_the_codes_it_knows(imported):
    assert imported[1].language_codes == CODES


def test_greedy_and_pooled_beam_translations_with_language_tokens_equal_generate(imported, reference):
    model, tokenizer = imported
    greedy = Translator(model, tokenizer, beam_width=1, no_repeat_ngram_size=0, max_new_tokens=20)
    expected = generate_translations(reference, SENTENCES, 20, beams=1)
    assert greedy(SENTENCES) == expected
    assert expected[0] != expected[1]  # the language token changes the translation
    beam = Translator(model, tokenizer, beam_width=4, length_penalty=1.0, no_repeat_ngram_size=0, max_new_tokens=20,
                      beam_search="pooled", early_stopping=False)
    assert beam(SENTENCES) == generate_translations(reference, SENTENCES, 20, beams=4)


def test_the_imported_logits_of_a_language_token_equal_marians(imported, reference):
    model, tokenizer = imported
    their_model, their_tokenizer = reference
    batch = their_tokenizer(SENTENCES[:2], return_tensors="pt", padding=True)
    start = their_model.config.decoder_start_token_id
    with torch.no_grad():
        theirs = their_model(**batch, decoder_input_ids=torch.full((2, 1), start)).logits.numpy()
    ids = tokenizer.tokenize(SENTENCES[:2])
    width = max(map(len, ids))
    source = np.array([np.pad(row, (0, width - len(row))) for row in ids], "int32")
    decoder = np.full((2, 1), int(np.argsort(tokenizer.marian_ids)[start]), "int32")
    ours = keras.ops.convert_to_numpy(model({"encoder_tokens": source, "decoder_tokens": decoder}))
    np.testing.assert_allclose(ours[..., np.argsort(tokenizer.marian_ids)], theirs, atol=1e-4)



@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_translate_target_language_adds_the_token_and_gives_generates_translation(imported_run, reference, capsys):
    capsys.readouterr()
    flags = ["translate", "--model", imported_run, "--engine", "keras", "--beam", "1", "--no-repeat-ngram", "0",
             "--max-new-tokens", "127"]
    assert main([*flags, "--target-language", "por", "Y dijo Dios: Sea la luz.", ">>fra<< Y dijo Dios: Sea la luz."]) == 0
    printed = capsys.readouterr().out.splitlines()
    expected = generate_translations(reference, [">>por<< Y dijo Dios: Sea la luz.", ">>fra<< Y dijo Dios: Sea la luz."],
                                     127)
    assert printed == expected and printed[0] != printed[1]  # a sentence's own code stands


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_translate_refuses_an_unknown_target_language_flag_naming_its_codes(imported_run, capsys):
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        main(["translate", "--model", imported_run, "--engine", "keras", "--target-language", "fro", "Y dijo Dios."])
    error = capsys.readouterr().err.strip().splitlines()
    assert refused.value.code == 2
    assert len(error) == 1 and "target language 'fro' is not one this model writes; close: fra" in error[0]
    assert "fra, por, spa" in error[0], error


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_a_line_without_a_code_loses_only_itself_and_says_why(imported_run, reference, capsys, monkeypatch):
    capsys.readouterr()
    flags = ["translate", "--model", imported_run, "--engine", "keras", "--beam", "1", "--no-repeat-ngram", "0",
             "--max-new-tokens", "127"]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(
        b">>fra<< Y dijo Dios.\nSea la luz.\n>>xyz<< Sea la luz.\n>>por<< Y fue la luz.\n")))
    assert main(flags) == 1
    printed = capsys.readouterr()
    lines = printed.out.split("\n")[:-1]
    assert len(lines) == 4 and lines[1] == "" and lines[2] == ""
    assert [lines[0], lines[3]] == generate_translations(reference, [">>fra<< Y dijo Dios.", ">>por<< Y fue la luz."],
                                                         127)
    errors = printed.err.strip().splitlines()
    assert "line 2: this model writes 3 languages: start each sentence with its code" in errors[0]
    assert "line 3: target language 'xyz' is not one this model writes" in errors[1]
    assert "2 lines this model cannot take were skipped" in errors[-1]


@pytest.mark.backend_independent
def test_the_servers_target_language_field_adds_the_token_and_a_missing_one_is_a_400():
    models = {"es-romance": types.SimpleNamespace(beams=(1,), default_beam=1, limits=(None,), language_codes=CODES),
              "es-en": types.SimpleNamespace(beams=(1,), default_beam=1, limits=(None,), language_codes=())}
    parsed = parse_translate(b'{"model": "es-romance", "text": ["Hola.", ">>spa<< Hola."], "target_language": "fra"}',
                             models, 8)
    assert parsed.texts == (">>fra<< Hola.", ">>spa<< Hola.")
    missing = parse_translate(b'{"model": "es-romance", "text": ["Hola.", ">>por<< Hola."]}', models, 8)
    assert missing.texts == ("Hola.", ">>por<< Hola.")
    ((index, reason),) = missing.refused
    assert index == 0 and "start each sentence with its code" in reason
    with pytest.raises(RequestError, match="writes one language"):
        parse_translate(b'{"model": "es-en", "text": "Hola.", "target_language": "fra"}', models, 8)
    assert parse_translate(b'{"model": "es-en", "text": "Hola."}', models, 8).texts == ("Hola.",)


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_evaluate_takes_the_target_language_and_refuses_a_corpus_without_codes(imported_run, tmp_path, capsys):
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("Y dijo Dios.\tEt Dieu dit.\nSea la luz.\tQue la lumière soit.\n", encoding="utf-8")
    flags = ["evaluate", "--model", imported_run, "--engine", "keras", "--beam", "1", "--corpus", str(corpus),
             "--test", str(corpus)]
    with pytest.raises(SystemExit) as refused:
        main(flags)
    assert refused.value.code == 2 and "fra, por, spa" in capsys.readouterr().err
    assert main([*flags, "--target-language", "fra"]) == 0
    assert "BLEU" in capsys.readouterr().out
