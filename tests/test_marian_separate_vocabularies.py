"""A Marian model whose target has a vocabulary of its own (`separate_vocabs`, target_vocab.json) imports right.

The reference is a small random `MarianMTModel` with two tables and two
embedding matrices, as the newer Tatoeba-Challenge conversions have them
(built offline by `tests/marian_fixtures.py`): ids, logits, greedy and
pooled-beam translations must equal transformers', and each export
(Marian, CTranslate2, SavedModel) and `train --from` takes both tables.
"""

import os

import keras
import numpy as np
import pytest

from keras_transformer.translation import Translator
from keras_transformer_cli import main
from tests.marian_fixtures import generate_translations
from tests.marian_fixtures import load_reference
from tests.marian_fixtures import make_marian_folder
from tests.marian_fixtures import imported, imported_run, reference  # noqa: F401 (fixtures)

# Held to transformers' generate, which takes each input whole.
pytestmark = pytest.mark.usefixtures("as_generate")

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



def test_alignments_spell_the_source_from_its_table_and_each_hypothesis_from_the_targets(imported, reference):
    model, tokenizer = imported
    their_model, their_tokenizer = reference
    translator = Translator(model, tokenizer, beam_width=4, length_penalty=1.0, no_repeat_ngram_size=0,
                            max_new_tokens=20, beam_search="pooled")
    translations = translator.n_best(SENTENCES[:2], 2, alignments=True)
    batch = their_tokenizer(SENTENCES[:2], return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = their_model.generate(**batch, num_beams=4, num_return_sequences=2, max_length=22)
    for row, translation in enumerate(translations):
        source_ids = [i for i in batch["input_ids"][row].tolist() if i != their_tokenizer.pad_token_id]
        source_pieces = {i: piece for piece, i in their_tokenizer.encoder.items()}  # its source table
        assert list(translation.source_tokens) == [source_pieces[i] for i in source_ids]
        for rank, hypothesis in enumerate(translation.hypotheses):
            target_ids = generated[2 * row + rank].tolist()[1:]  # after the decoder's start
            pieces = their_tokenizer.convert_ids_to_tokens(target_ids)  # its target table
            assert list(hypothesis.tokens) == pieces[: pieces.index("</s>") if "</s>" in pieces else None]
            attention = np.array(hypothesis.attention)
            assert attention.shape == (len(hypothesis.tokens), len(translation.source_tokens))
            np.testing.assert_allclose(attention.sum(axis=1), 1.0, atol=1e-4)
            assert hypothesis.alignment and all(0 <= i < len(SENTENCES[row].split()) for i, _ in hypothesis.alignment)


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_translate_on_the_imported_run_gives_the_translators_translations_on_both_engines(imported_run, imported,
                                                                                          capsys):
    model, tokenizer = imported
    translator = Translator(model, tokenizer, beam_width=1, no_repeat_ngram_size=0)
    expected = translator(SENTENCES[:2])
    for engine in ("keras", "auto"):
        capsys.readouterr()
        assert main(["translate", "--model", imported_run, "--engine", engine, "--beam", "1", "--no-repeat-ngram",
                     "0", "--max-new-tokens", str(translator.max_new_tokens), *SENTENCES[:2]]) == 0
        assert capsys.readouterr().out.splitlines() == expected, engine


@pytest.fixture(scope="module")
def exported_marian(imported_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("exported") / "marian"
    assert main(["export", "--model", imported_run, "--out", str(out), "--format", "marian"]) == 0
    return str(out)


@pytest.mark.backend_independent
def test_export_marian_keeps_both_tables_and_gives_the_originals_ids_logits_and_translations(exported_marian,
                                                                                           imported, reference):
    _, tokenizer = imported
    their_model, their_tokenizer = reference
    exported = load_reference(exported_marian)
    model, exported_tokenizer = exported
    assert exported_tokenizer.separate_vocabs and not model.config.share_encoder_decoder_embeddings
    assert (model.config.vocab_size, model.config.decoder_vocab_size) == (their_model.config.vocab_size,
                                                                          their_model.config.decoder_vocab_size)
    # The export numbers the pieces with this package's ids: Marian's through each side's permutation.
    rows = exported_tokenizer(SENTENCES)["input_ids"]
    assert [tokenizer.marian_ids[row].tolist() for row in rows] == their_tokenizer(SENTENCES)["input_ids"]
    targets = ["In the beginning God created 3 things.", "Let there be light!"]
    rows = [tokenizer.target_marian_ids[row].tolist() for row in exported_tokenizer(text_target=targets)["input_ids"]]
    assert rows == their_tokenizer(text_target=targets)["input_ids"]

    decoder = np.array([[0, 5, 9], [0, 7, 3], [0, 11, 12]])
    with torch.no_grad():
        ours = model(**exported_tokenizer(SENTENCES[:3], return_tensors="pt", padding=True),
                     decoder_input_ids=torch.tensor(decoder)).logits.numpy()
        theirs = their_model(**their_tokenizer(SENTENCES[:3], return_tensors="pt", padding=True),
                             decoder_input_ids=torch.tensor(tokenizer.target_marian_ids[decoder])).logits.numpy()
    assert ours.shape[-1] == len(tokenizer.target_marian_ids) != len(tokenizer.marian_ids)
    np.testing.assert_allclose(ours, theirs[..., tokenizer.target_marian_ids], atol=1e-4)
    for beams in (1, 4):
        expected = generate_translations(reference, SENTENCES, 20, beams=beams, drop_start=True)
        assert generate_translations(exported, SENTENCES, 20, beams=beams) == expected and len(set(expected)) > 1


@pytest.mark.export_runtimes
@pytest.mark.backend_independent
def test_export_ctranslate2_takes_each_sides_vocabulary_and_translates_as_transformers(imported_run, reference,
                                                                                     tmp_path):
    pytest.importorskip("ctranslate2")
    from keras_transformer.translation.ctranslate2_model import CTranslate2Translator

    out = tmp_path / "ct2"
    assert main(["export", "--model", imported_run, "--out", str(out), "--format", "ctranslate2"]) == 0
    assert {"source_vocabulary.json", "target_vocabulary.json"} <= set(os.listdir(out))
    theirs = CTranslate2Translator(str(out), beam_width=1, no_repeat_ngram_size=0, max_new_tokens=20)
    assert theirs(SENTENCES) == generate_translations(reference, SENTENCES, 20, beams=1, drop_start=True)


@pytest.mark.export_runtimes
@pytest.mark.backend_independent
def test_export_savedmodel_tokenizes_with_the_source_table_and_detokenizes_with_the_targets(imported_run, tmp_path):
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("tensorflow_text")

    out = tmp_path / "saved"
    assert main(["export", "--model", imported_run, "--out", str(out), "--max-new-tokens", "20"]) == 0
    served = tf.saved_model.load(str(out)).signatures["serving_default"]
    translations = [text.decode() for text in served(texts=tf.constant([*SENTENCES, ""]))["translations"].numpy()]
    # The signature guards against repeated trigrams as Translator does by default; without, it is greedy `generate`.
    expected = Translator.from_directory(imported_run, beam_width=1, max_new_tokens=20)([*SENTENCES, ""])
    assert translations == expected and len(set(expected)) > 2


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_fine_tuning_tokenizes_each_side_with_its_own_table_and_trains(imported_run, reference, tmp_path):
    from keras_transformer.data.parallel_corpus import ParallelCorpus
    from keras_transformer.model_parts import transformer_parts
    from keras_transformer.training.train_config import TrainConfig
    from keras_transformer.training.train_input import TrainInput
    from keras_transformer.training.trainer import train_translator
    from keras_transformer_runtime.marian_tokenizer import MarianTokenizer
    from tests.conftest import FIXTURE_CORPUS

    inputs = TrainInput(ParallelCorpus(FIXTURE_CORPUS), max_length=64, batch_tokens=400,
                        vocabulary_from=imported_run, decoder_start_id=0)
    corpus_data = inputs.read_corpus(log=lambda line: None)
    inputs.write_vocabulary(corpus_data, str(tmp_path / "vocabulary.spm"))
    dev = inputs.train_data(corpus_data, str(tmp_path / "vocabulary.spm"), 0, lambda line: None).dev
    _, their_tokenizer = reference
    tokenizer = MarianTokenizer(imported_run)
    # The shortest dev pairs: neither side truncated at max_length.
    pairs = sorted(corpus_data.splits["dev"], key=lambda pair: len(pair.source) + len(pair.target))[:8]
    sources = {tuple(row) for row in their_tokenizer([pair.source for pair in pairs])["input_ids"]}
    targets = {tuple(row) for row in their_tokenizer(text_target=[pair.target for pair in pairs])["input_ids"]}
    found = 0
    for batch, labels in (dev[j] for j in range(dev.num_batches)):
        for source, label, decoder in zip(batch["encoder_tokens"], labels, batch["decoder_tokens"]):
            source = tuple(tokenizer.marian_ids[source[source != 0]].tolist())
            if source in sources:
                found += 1
                label = tuple(tokenizer.target_marian_ids[label[label != 0]].tolist())
                assert label in targets and decoder[0] == 0
    assert found == len(pairs)

    output = tmp_path / "tuned"
    config = TrainConfig(output=str(output), corpus=FIXTURE_CORPUS, start_from=imported_run, epochs=1,
                         steps_per_epoch=2, dev_bleu_sentences=2)
    assert np.isfinite(train_translator(config, verbose=0, log=lambda line: None)["train_loss"])
    tuned = Translator.from_directory(str(output), beam_width=1)
    parts = transformer_parts(tuned.model)
    assert (parts.encoder_embedding.vocabulary_size, parts.decoder_embedding.vocabulary_size) == (
        tokenizer.source_vocabulary_size(), tokenizer.vocabulary_size())
    assert isinstance(tuned("Y dijo Dios."), str)
