"""A Marian model whose target has a vocabulary of its own (`separate_vocabs`, target_vocab.json) imports right.

The reference is a small random `MarianMTModel` with two tables and two
embedding matrices, as the newer Tatoeba-Challenge conversions have them
(built offline by `tests/marian_fixtures.py`): ids, logits, greedy and
pooled-beam translations must equal transformers', and the verbs that do
not take such a run yet refuse it in one line.
"""

import keras
import numpy as np
import pytest

from keras_transformer.translation import Translator
from keras_transformer_cli import main
from tests.marian_fixtures import generate_translations
from tests.marian_fixtures import make_marian_folder
from tests.marian_fixtures import imported, imported_run, reference  # noqa: F401 (fixtures)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SENTENCES = ["¿Dónde está el niño? Tiene 123 ovejas.", "Y dijo Dios: Sea la luz.", "Ωmega ½ ñandú", "a",
             "En el principio creó Dios los cielos y la tierra."]


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory):
    return make_marian_folder(tmp_path_factory.mktemp("marian") / "opus-mt-tc-es-en", max_position_embeddings=128,
                              separate_vocabularies=True)




@pytest.mark.backend_independent
def test_the_two_tables_differ_and_each_side_takes_its_own_ids(imported, reference):
    model, tokenizer = imported
    _, their_tokenizer = reference
    assert tokenizer.separate_vocabularies and tokenizer.source_vocabulary_size() != tokenizer.vocabulary_size()
    ours = [tokenizer.marian_ids[row].tolist() for row in tokenizer.tokenize(SENTENCES)]
    assert ours == their_tokenizer(SENTENCES)["input_ids"]
    targets = ["In the beginning God created 3 things.", "Let there be light!"]
    ours = [tokenizer.target_marian_ids[row].tolist() + [0] for row in tokenizer.tokenize_target(targets)]
    assert ours == their_tokenizer(text_target=targets)["input_ids"]
    rows = [np.argsort(tokenizer.target_marian_ids)[np.asarray(row)] for row in their_tokenizer(text_target=targets)["input_ids"]]
    assert tokenizer.detokenize(rows) == their_tokenizer.batch_decode(their_tokenizer(text_target=targets)["input_ids"],
                                                                      skip_special_tokens=True)


def test_logits_equal_marians_over_the_decoders_own_vocabulary(imported, reference):
    model, tokenizer = imported
    their_model, their_tokenizer = reference
    batch = their_tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)
    start = their_model.config.decoder_start_token_id
    decoder_marian = torch.tensor([[start, 5, 9], [start, 7, 0], [start, 11, 12]])
    with torch.no_grad():
        theirs = their_model(**batch, decoder_input_ids=decoder_marian).logits.numpy()
    ids = tokenizer.tokenize(SENTENCES[:3])
    width = max(map(len, ids))
    source = np.array([np.pad(row, (0, width - len(row))) for row in ids], "int32")
    decoder = np.argsort(tokenizer.target_marian_ids)[decoder_marian.numpy()].astype("int32")
    ours = keras.ops.convert_to_numpy(model({"encoder_tokens": source, "decoder_tokens": decoder}))
    assert ours.shape[-1] == len(tokenizer.target_marian_ids) != len(tokenizer.marian_ids)
    np.testing.assert_allclose(ours[..., np.argsort(tokenizer.target_marian_ids)], theirs, atol=1e-4)


def test_greedy_and_pooled_beam_translations_equal_generate(imported, reference):
    model, tokenizer = imported
    greedy = Translator(model, tokenizer, beam_width=1, no_repeat_ngram_size=0, max_new_tokens=20)
    expected = generate_translations(reference, SENTENCES, 20, beams=1, drop_start=True)
    assert greedy(SENTENCES) == expected and len(set(expected)) > 1
    beam = Translator(model, tokenizer, beam_width=4, length_penalty=1.0, no_repeat_ngram_size=0, max_new_tokens=20,
                      beam_search="pooled", early_stopping=False)
    assert beam(SENTENCES) == generate_translations(reference, SENTENCES, 20, beams=4, drop_start=True)



@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_translate_on_the_imported_run_gives_the_translators_translations_on_both_engines(imported_run, imported,
                                                                                          capsys):
    model, tokenizer = imported
    expected = Translator(model, tokenizer, beam_width=1, no_repeat_ngram_size=0)(SENTENCES[:2])
    for engine in ("keras", "auto"):
        capsys.readouterr()
        assert main(["translate", "--model", imported_run, "--engine", engine, "--beam", "1", "--no-repeat-ngram",
                     "0", *SENTENCES[:2]]) == 0
        assert capsys.readouterr().out.splitlines() == expected, engine


@pytest.mark.end_to_end
@pytest.mark.backend_independent
@pytest.mark.parametrize("verb", [["export", "--format", "marian", "--out", "OUT"],
                                  ["export", "--format", "ctranslate2", "--out", "OUT"],
                                  ["train", "--from", "RUN", "--output", "OUT", "--steps-per-epoch", "1"]])
def test_the_verbs_that_do_not_take_its_tables_yet_refuse_it_in_one_line(imported_run, tmp_path, capsys, verb):
    arguments = [str(tmp_path / "out") if word == "OUT" else imported_run if word == "RUN" else word for word in verb]
    if verb[0] == "export":
        arguments[1:1] = ["--model", imported_run]
    with pytest.raises(SystemExit) as refused:
        main(arguments)
    error = capsys.readouterr().err.strip().splitlines()
    assert refused.value.code == 2
    assert len(error) == 1 and "a vocabulary of its own" in error[0], error
