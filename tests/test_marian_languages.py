"""Multi-target OPUS-MT models: a `>>xxx<<` target-language token is one id, and translations equal `generate`'s.

The model is a small random `MarianMTModel` whose vocab.json holds three
language tokens, as opus-mt-en-ROMANCE's holds its targets' (built offline
by `tests/marian_fixtures.py`).
"""

import keras
import numpy as np
import pytest

from keras_transformer.checkpoints import load_marian
from keras_transformer.translation import Translator
from tests.marian_fixtures import make_marian_folder

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


@pytest.fixture(scope="module")
def reference(marian_folder):
    return transformers.MarianMTModel.from_pretrained(marian_folder).eval(), \
        transformers.MarianTokenizer.from_pretrained(marian_folder)


@pytest.fixture(scope="module")
def imported(marian_folder):
    return load_marian(marian_folder)


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


def _generate(reference, sentences, beams, max_new_tokens):
    model, tokenizer = reference
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**batch, num_beams=beams, max_length=max_new_tokens + 2, do_sample=False)
    return tokenizer.batch_decode(generated, skip_special_tokens=True)


def test_greedy_and_pooled_beam_translations_with_language_tokens_equal_generate(imported, reference):
    model, tokenizer = imported
    greedy = Translator(model, tokenizer, beam_width=1, no_repeat_ngram_size=0, max_new_tokens=20)
    expected = _generate(reference, SENTENCES, 1, 20)
    assert greedy(SENTENCES) == expected
    assert expected[0] != expected[1]  # the language token changes the translation
    beam = Translator(model, tokenizer, beam_width=4, length_penalty=1.0, no_repeat_ngram_size=0, max_new_tokens=20,
                      beam_search="pooled", early_stopping=False)
    assert beam(SENTENCES) == _generate(reference, SENTENCES, 4, 20)


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
