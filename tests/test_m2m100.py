"""M2M-100 with its own tokenizer (SentencePiece, `vocab.json`) imported: ids, logits, translations as transformers'.

The model is a small random `M2M100ForConditionalGeneration` with an
`M2M100Tokenizer` (a SentencePiece BPE learned on a few sentences, a
shuffled `vocab.json`, M2M-100's 100 language tokens, 8 rows the tokenizer
lacks), made and saved offline by `tests/nllb_fixtures.py`.
"""

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("sentencepiece")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import keras  # noqa: E402

from keras_transformer.checkpoints.nllb import load_nllb  # noqa: E402
from keras_transformer.translation import Translator  # noqa: E402
from keras_transformer_cli import main  # noqa: E402
from keras_transformer_runtime.errors import UserInputError  # noqa: E402
from keras_transformer_runtime.m2m100_tokenizer import M2m100Tokenizer  # noqa: E402
from keras_transformer_runtime.run_tokenizer import load_run_tokenizer  # noqa: E402
from keras_transformer_runtime.special_tokens import END_ID  # noqa: E402
from keras_transformer_runtime.special_tokens import PAD_ID  # noqa: E402
from tests.nllb_fixtures import SENTENCES  # noqa: E402
from tests.nllb_fixtures import assert_batches_tokenized_as  # noqa: E402
from tests.nllb_fixtures import load_nllb_reference  # noqa: E402
from tests.nllb_fixtures import make_m2m100_tokenizer  # noqa: E402
from tests.nllb_fixtures import make_nllb_folder  # noqa: E402
from tests.nllb_fixtures import nllb_generate  # noqa: E402

MAX_NEW_TOKENS = 12
# Besides the sentences: a language token and specials written in the text (kept whole), characters the pieces
# lack, nothing at all.
TEXTS = [*SENTENCES, "Sea __fr__ la</s>luz <unk> y <s>.", "ñandú 𝛼 QQQ zebra", ""]


@pytest.fixture(scope="module")
def m2m100_folder(tmp_path_factory):
    return make_nllb_folder(tmp_path_factory.mktemp("m2m100") / "m2m100-tiny", extra_rows=8,
                            make_tokenizer=make_m2m100_tokenizer)


@pytest.fixture(scope="module")
def hub_layout_folder(m2m100_folder, tmp_path_factory):
    """The tokenizer laid out as `facebook/m2m100_418M`'s: the language tokens listed, no ids saved."""
    folder = tmp_path_factory.mktemp("hub") / "m2m100-hub-layout"
    folder.mkdir()
    for name in ("sentencepiece.bpe.model", "vocab.json"):
        shutil.copyfile(m2m100_folder / name, folder / name)
    config = json.loads((m2m100_folder / "tokenizer_config.json").read_text())
    languages = config.pop("extra_special_tokens")
    assert len(languages) == 100
    config.pop("added_tokens_decoder")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "special_tokens_map.json").write_text(json.dumps({"eos_token": "</s>", "unk_token": "<unk>",
                                                                "additional_special_tokens": languages}))
    return folder


@pytest.fixture(scope="module")
def reference(m2m100_folder):
    return load_nllb_reference(m2m100_folder)


@pytest.fixture(scope="module")
def imported(m2m100_folder):
    return load_nllb(m2m100_folder)


def _their_tokenizer(folder, source, target):
    return transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True, src_lang=source, tgt_lang=target)


def _their_ids(tokenizer, ids):
    return [[int(tokenizer.model_ids[i]) for i in row] for row in ids]


def _generate(reference, sentences, target, beams=1, max_new_tokens=MAX_NEW_TOKENS):
    """transformers' translations from `es` (`generate` with `forced_bos_token_id`, the target's token)."""
    return nllb_generate(*reference, sentences, "es", f"__{target}__", beams=beams, max_new_tokens=max_new_tokens)


@pytest.mark.backend_independent
@pytest.mark.parametrize("source", ["es", "en"])
def test_source_ids_are_m2m100_tokenizers_whether_the_folder_saves_the_ids_or_lists_the_tokens(
        imported, m2m100_folder, hub_layout_folder, source):
    _, tokenizer = imported
    assert isinstance(tokenizer, M2m100Tokenizer)
    for folder in (m2m100_folder, hub_layout_folder):
        ours = M2m100Tokenizer(folder, tokenizer.vocabulary_size()).with_languages(source, "fr").tokenize(TEXTS)
        assert _their_ids(tokenizer, ours) == _their_tokenizer(folder, source, "fr")(TEXTS)["input_ids"], folder
    assert ours[0][0] == tokenizer.token_to_id(f"__{source}__") and ours[0][-1] == END_ID
    assert tokenizer.token_to_id("no such piece") == tokenizer.token_to_id("<unk>")


@pytest.mark.backend_independent
def test_target_ids_and_any_ids_decode_as_the_tokenizer_decodes_them(imported, m2m100_folder):
    _, tokenizer = imported
    their_tokenizer = _their_tokenizer(m2m100_folder, "es", "de")
    tokenizer = tokenizer.with_languages("es", "de")
    ids = tokenizer.tokenize_target(TEXTS)
    assert ids[0][0] == tokenizer.forced_first_id  # the language first, no </s>
    assert [row + [2] for row in _their_ids(tokenizer, ids)] == their_tokenizer(text_target=TEXTS)["input_ids"]
    assert tokenizer.detokenize(ids) == their_tokenizer.batch_decode(_their_ids(tokenizer, ids),
                                                                      skip_special_tokens=True)
    # Any ids: specials, language tokens, and the 8 rows the tokenizer lacks (transformers writes them as <unk>).
    rows = np.random.default_rng(0).integers(0, tokenizer.vocabulary_size(), (60, 10)).tolist()
    assert tokenizer.detokenize(rows) == their_tokenizer.batch_decode(_their_ids(tokenizer, rows),
                                                                       skip_special_tokens=True)
    assert tokenizer.detokenize(ids[0]) == SENTENCES[0]


@pytest.mark.backend_independent
def test_codes_are_typed_as_m2m100s_and_an_unknown_one_is_refused_with_close_codes(imported):
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

    _, tokenizer = imported
    assert tokenizer.language_codes == tuple(sorted(FAIRSEQ_LANGUAGE_CODES["m2m100"]))
    tokens = tokenizer.with_languages("__es__", "__fr__")  # the token form too
    assert (tokens.source_language, tokens.target_language) == ("es", "fr")
    assert tokens.forced_first_id == tokenizer.with_languages("es", "fr").forced_first_id
    assert tokens.forced_first_id == tokenizer.token_to_id("__fr__")
    with pytest.raises(UserInputError, match="^--target-language fre: not one of this model's 100 languages; "
                                             "close: fr; its codes: af, am") as refused:
        tokenizer.with_languages("es", "fre")
    assert "\n" not in str(refused.value)
    with pytest.raises(UserInputError, match="pass --source-language CODE"):
        tokenizer.tokenize(["Hola."])


@pytest.mark.backend_independent
def test_a_folder_without_the_language_tokens_ids_is_refused_in_one_line_until_resaved(m2m100_folder, tmp_path,
                                                                                        capsys):
    folder = tmp_path / "plain"
    shutil.copytree(m2m100_folder, folder)
    # What transformers 5 saves of an M2M100Tokenizer made without its language tokens named: no list, no ids.
    (folder / "added_tokens.json").unlink()
    transformers.M2M100Tokenizer(str(folder / "vocab.json"), str(folder / "sentencepiece.bpe.model")).save_pretrained(
        folder)
    assert not (folder / "added_tokens.json").exists()
    with pytest.raises(SystemExit) as refused:
        main(["import", str(folder), "--output", str(tmp_path / "out")])
    error = capsys.readouterr().err.strip().splitlines()
    assert refused.value.code == 2 and len(error) == 1, error
    assert "tokenizer_config.json: names no language token (__en__, ...)" in error[0] and "save_pretrained" in error[0]
    assert not (tmp_path / "out").exists()
    # The fix the message gives.
    M2M100Tokenizer = transformers.M2M100Tokenizer
    t = M2M100Tokenizer.from_pretrained(folder)
    M2M100Tokenizer.from_pretrained(folder, additional_special_tokens=list(t.lang_token_to_id)).save_pretrained(folder)
    ours = M2m100Tokenizer(folder, source_language="es", target_language="fr")
    assert _their_ids(ours, ours.tokenize(TEXTS)) == _their_tokenizer(folder, "es", "fr")(TEXTS)["input_ids"]


@pytest.mark.backend_independent
def test_a_hub_import_fetches_m2m100s_tokenizer_files():
    from keras_transformer.checkpoints.nllb.run_import import HUB_FILES

    assert {"sentencepiece.bpe.model", "vocab.json", "special_tokens_map.json", "added_tokens.json",
            "tokenizer_config.json"} <= set(HUB_FILES)


def test_logits_equal_transformers_on_a_padded_batch(imported, reference):
    model, tokenizer = imported
    their_model, their_tokenizer = reference
    their_tokenizer.src_lang = "es"
    batch = their_tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)
    decoder_ids = torch.tensor([[2, their_tokenizer.get_lang_id("fr"), 40, 41, 42, 43]] * 3)
    with torch.no_grad():
        theirs = their_model(**batch, decoder_input_ids=decoder_ids).logits.numpy()
    ours_of = np.argsort(tokenizer.model_ids)
    source = ours_of[batch["input_ids"].numpy()] * batch["attention_mask"].numpy()  # padding is 0 here
    ours = keras.ops.convert_to_numpy(model({"encoder_tokens": source, "decoder_tokens": ours_of[decoder_ids.numpy()]}))
    np.testing.assert_allclose(ours[..., ours_of], theirs, atol=1e-4)


def test_greedy_and_beam_tokens_equal_generate_with_forced_bos_for_two_targets(imported, reference):
    model, tokenizer = imported
    translations = {}
    for beams, search in ((1, "kept"), (4, "pooled")):
        translator = Translator(model, tokenizer.with_languages("es", "fr"), beam_width=beams, beam_search=search,
                                no_repeat_ngram_size=0, max_new_tokens=MAX_NEW_TOKENS)
        for target in ("fr", "en"):
            translator = translator.with_languages("es", target)
            texts, generated = _generate(reference, SENTENCES, target, beams=beams)
            ours = translator._decode(translator._source_tokens(SENTENCES))[: len(SENTENCES)]
            for row, their_row in zip(ours, generated[:, 1:].tolist()):
                their_row = [i for i in their_row if i != 1]  # transformers pads a finished row with <pad>
                assert [int(tokenizer.model_ids[i]) for i in row if i != PAD_ID] == their_row
            translations[target, beams] = tokenizer.detokenize([[i for i in row if i != PAD_ID] for row in ours])
            assert translations[target, beams] == texts
    assert translator(SENTENCES) == translations["en", 4]  # the whole path once; the command line's test has more
    assert any(any(texts) for texts in translations.values()), "the model should write pieces, not only codes"
    assert translations["fr", 1] != translations["en", 1]  # the target language is heard


@pytest.fixture(scope="module")
def imported_run(m2m100_folder, tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "m2m100"
    assert main(["import", str(m2m100_folder), "--output", str(run)]) == 0
    return run


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_import_and_translate_on_the_command_line_give_generates_translations(imported_run, reference, capsys):
    for name in ("sentencepiece.bpe.model", "vocab.json", "tokenizer_config.json", "added_tokens.json"):
        assert (imported_run / name).is_file(), name
    assert not (imported_run / "tokenizer.json").exists()
    assert json.loads((imported_run / "imported.json").read_text())["format"] == "m2m100"
    assert isinstance(load_run_tokenizer(imported_run), M2m100Tokenizer)
    capsys.readouterr()
    flags = ["translate", "--model", str(imported_run), "--engine", "keras", "--no-repeat-ngram", "0",
             "--max-new-tokens", str(MAX_NEW_TOKENS), "--source-language", "es"]
    for beams, target in ((1, "fr"), (4, "en")):
        assert main([*flags, "--beam", str(beams), "--target-language", target, *SENTENCES[:3]]) == 0
        expected, _ = _generate(reference, SENTENCES[:3], target, beams=beams)
        assert capsys.readouterr().out.splitlines() == expected
    with pytest.raises(SystemExit) as refused:
        main([*flags, "--target-language", "fre", "Hola."])
    error = capsys.readouterr().err.strip().splitlines()
    assert refused.value.code == 2 and len(error) == 1 and "--target-language fre: not one of this model's 100 " \
                                                           "languages; close: fr" in error[0], error


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_export_writes_an_m2m100_folder_transformers_loads_with_the_same_logits(imported_run, reference, tmp_path):
    out = tmp_path / "exported"
    assert main(["export", "--model", str(imported_run), "--out", str(out), "--format", "nllb"]) == 0
    exported, tokenizer = load_nllb_reference(out)
    assert isinstance(tokenizer, transformers.M2M100Tokenizer)
    original, their_tokenizer = reference
    tokenizer.src_lang = their_tokenizer.src_lang = "es"
    batch = tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)
    assert batch["input_ids"].tolist() == their_tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)[
        "input_ids"].tolist()
    decoder_ids = torch.tensor([[2, tokenizer.get_lang_id("en"), 40, 41]] * 3)
    with torch.no_grad():
        theirs = original(**batch, decoder_input_ids=decoder_ids).logits.numpy()
        ours = exported(**batch, decoder_input_ids=decoder_ids).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


@pytest.mark.end_to_end
@pytest.mark.backend_independent
@pytest.mark.filterwarnings("ignore:the vocabulary of --from")
@pytest.mark.filterwarnings("ignore:.*longer than max_length")
def test_an_imported_run_fine_tunes_with_m2m100_tokenizers_batches(imported_run, m2m100_folder, tmp_path):
    from conftest import FIXTURE_CORPUS

    from keras_transformer.training.train_config import TrainConfig
    from keras_transformer.training.trainer import train_translator

    assert_batches_tokenized_as(imported_run, _their_tokenizer(m2m100_folder, "es", "en"), ("es", "en"), tmp_path,
                                "M2M100Tokenizer")

    output = tmp_path / "tuned"
    config = TrainConfig(output=str(output), corpus=FIXTURE_CORPUS, start_from=str(imported_run), epochs=1,
                         steps_per_epoch=2, dev_bleu_sentences=2, source_language="es", target_language="en")
    assert np.isfinite(train_translator(config, verbose=0, log=lambda line: None)["train_loss"])
    assert (output / "sentencepiece.bpe.model").is_file() and (output / "added_tokens.json").is_file()
    tuned = Translator.from_directory(str(output), source_language="es", target_language="en", beam_width=1)
    assert isinstance(tuned.tokenizer, M2m100Tokenizer) and isinstance(tuned("Y dijo Dios."), str)


@pytest.mark.export_runtimes
@pytest.mark.backend_independent
def test_an_m2m100_run_exported_to_ctranslate2_translates_as_generate(imported_run, reference, tmp_path):
    pytest.importorskip("ctranslate2")
    from keras_transformer.translation.ctranslate2_model import CTranslate2Translator
    from keras_transformer.translation.ctranslate2_model import export_ctranslate2

    out = export_ctranslate2(str(imported_run), str(tmp_path / "ct2"))
    translator = CTranslate2Translator(out, beam_width=1, no_repeat_ngram_size=0, max_new_tokens=MAX_NEW_TOKENS)
    for target in ("fr", "en"):
        expected, _ = _generate(reference, SENTENCES, target)
        assert translator.with_languages("es", target)(SENTENCES) == expected
