"""Hugging Face Marian (OPUS-MT) checkpoints on the package's layers, checked against transformers itself.

The reference models are small random `MarianMTModel`s built offline by
`tests/marian_fixtures.py`, with every bias, LayerNorm parameter and the
final logits bias random, so that a dropped, swapped or transposed weight
changes the numbers.
"""

import json
import os
import shutil

import keras
import numpy as np
import pytest

from keras_transformer.checkpoints import load_marian
from keras_transformer.decoding import CachedDecoder
from keras_transformer.model_parts import transformer_parts
from keras_transformer.translation.translator import Translator
from keras_transformer_cli import main
from keras_transformer_runtime.search_defaults import DEFAULT_MAX_OUTPUT_RATIO as PACKAGE_OUTPUT_RATIO
from tests.conftest import to_numpy
from tests.marian_fixtures import generate_translations
from tests.marian_fixtures import load_reference
from tests.marian_fixtures import make_marian_folder
from tests.marian_fixtures import imported, reference  # noqa: F401 (fixtures)

# Held to transformers' generate, which takes each input whole.
pytestmark = pytest.mark.usefixtures("as_generate")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# Accents, punctuation, digits, and characters no piece covers (Ω, ½, emoji).
SENTENCES = ["¿Dónde está el niño? Tiene 123 ovejas.", "Y dijo Dios: Sea la luz.", "Ωmega ½ 😀 ñandú",
             "a", "En el principio creó Dios los cielos y la tierra, y la tierra estaba desordenada."]


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory):
    return make_marian_folder(tmp_path_factory.mktemp("marian") / "opus-mt-es-en", max_position_embeddings=128)




def _our_ids(tokenizer, marian_ids):
    """Marian ids (NumPy) as this package's ids."""
    return np.argsort(tokenizer.marian_ids)[np.asarray(marian_ids)]


@pytest.mark.backend_independent
def test_token_ids_equal_marian_tokenizers_on_accents_digits_and_unknown_characters(imported, reference):
    _, tokenizer = imported
    _, their_tokenizer = reference
    ours = tokenizer.tokenize(SENTENCES)
    theirs = their_tokenizer(SENTENCES)["input_ids"]
    assert [tokenizer.marian_ids[row].tolist() for row in ours] == theirs
    unknown = their_tokenizer.convert_tokens_to_ids("<unk>")
    assert any(unknown in row for row in theirs)  # the test reaches the unknown-piece path


@pytest.mark.backend_independent
def test_detokenized_text_equals_marian_decode(imported, reference):
    _, tokenizer = imported
    _, their_tokenizer = reference
    targets = their_tokenizer(text_target=["In the beginning God created 3 things.", "Let there be light!"])["input_ids"]
    rows = [_our_ids(tokenizer, row) for row in targets]
    assert tokenizer.detokenize(rows) == their_tokenizer.batch_decode(targets, skip_special_tokens=True)


def test_encoder_outputs_and_logits_match_marian_on_a_padded_batch(imported, reference):
    model, tokenizer = imported
    their_model, their_tokenizer = reference
    batch = their_tokenizer(SENTENCES, return_tensors="pt", padding=True)
    targets = their_tokenizer(text_target=["God said.", "Let there be light, and there was light.", "x",
                                           "In the beginning", "The earth was empty."],
                              return_tensors="pt", padding=True)["input_ids"]
    pad = their_model.config.pad_token_id
    decoder_input = torch.cat([torch.full((len(SENTENCES), 1), pad), targets[:, :-1]], dim=1)
    with torch.no_grad():
        theirs = their_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             decoder_input_ids=decoder_input)
        their_encoder = their_model.get_encoder()(input_ids=batch["input_ids"],
                                                   attention_mask=batch["attention_mask"]).last_hidden_state
    real = batch["attention_mask"].numpy().astype(bool)
    assert not real.all()  # padded rows
    encoder_tokens = _our_ids(tokenizer, batch["input_ids"].numpy()) * real
    decoder_tokens = _our_ids(tokenizer, decoder_input.numpy())
    logits = to_numpy(model({"encoder_tokens": encoder_tokens.astype("int32"),
                             "decoder_tokens": decoder_tokens.astype("int32")}))
    encoder = CachedDecoder(model).encoder
    encoder_outputs = to_numpy(encoder(encoder_tokens.astype("int32"))[0])
    np.testing.assert_allclose(encoder_outputs[real], their_encoder.numpy()[real], atol=1e-4, rtol=0)
    # Rows of a target's real positions (its first `</s>` included); columns in our id order.
    target_real = np.cumsum(targets.numpy() == their_model.config.eos_token_id, axis=1) - (
        targets.numpy() == their_model.config.eos_token_id) == 0
    their_logits = theirs.logits.numpy()[:, :, tokenizer.marian_ids]
    np.testing.assert_allclose(logits[target_real], their_logits[target_real], atol=1e-4, rtol=0)
    assert np.abs(their_logits).max() > 1.0  # not a model of zeros


def test_parameter_count_equals_marian(imported, reference):
    model, _ = imported
    their_model, _ = reference
    # transformers counts the fixed sinusoid tables as parameters and keeps
    # final_logits_bias as a buffer; here the sinusoids are constants and the bias a weight.
    positions = sum(p.numel() for name, p in their_model.named_parameters() if "embed_positions" in name)
    assert model.count_params() == their_model.num_parameters() - positions + their_model.final_logits_bias.numel()


def test_greedy_translations_equal_generate(imported, reference):
    model, tokenizer = imported
    translator = Translator(model, tokenizer, beam_width=1, no_repeat_ngram_size=0, max_new_tokens=30)
    assert translator(SENTENCES) == generate_translations(reference, SENTENCES, 30, beams=1)


@pytest.mark.parametrize("beams, length_penalty, early_stopping", [(4, 1.0, False), (4, 0.6, True), (2, 2.0, False)])
def test_pooled_beam_translations_equal_generate(imported, reference, beams, length_penalty, early_stopping):
    model, tokenizer = imported
    translator = Translator(model, tokenizer, beam_width=beams, length_penalty=length_penalty, no_repeat_ngram_size=0,
                            max_new_tokens=20, beam_search="pooled", early_stopping=early_stopping)
    expected = generate_translations(reference, SENTENCES, 20, beams=beams, length_penalty=length_penalty,
                                     early_stopping=early_stopping)
    assert translator(SENTENCES) == expected
    assert len(set(expected)) > 1  # the inputs matter


def test_a_saved_imported_model_reloads_to_the_same_logits(imported, tmp_path):
    model, tokenizer = imported
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path, compile=False)
    batch = {"encoder_tokens": np.array([[5, 6, 7, 3], [8, 3, 0, 0]], "int32"),
             "decoder_tokens": np.array([[0, 9, 10], [0, 11, 0]], "int32")}
    np.testing.assert_allclose(to_numpy(reloaded(batch)), to_numpy(model(batch)), atol=1e-6)
    parts = transformer_parts(reloaded)
    assert parts.encoder_embedding is parts.decoder_embedding
    assert parts.decoder_start_id == 0


@pytest.mark.backend_independent
def test_a_pytorch_bin_checkpoint_imports_to_the_same_weights(marian_folder, imported, tmp_path):
    folder = make_marian_folder(tmp_path / "bin", max_position_embeddings=128, weights="bin")
    assert not os.path.exists(os.path.join(folder, "model.safetensors"))
    model, _ = load_marian(folder)
    for ours, theirs in zip(model.weights, imported[0].weights):
        np.testing.assert_array_equal(to_numpy(ours), to_numpy(theirs))


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_an_imported_run_exported_to_marian_gives_the_originals_ids_and_translations(marian_folder, reference,
                                                                                  tmp_path):
    from keras_transformer_runtime.marian_tokenizer import MarianTokenizer

    run, out = tmp_path / "opus", tmp_path / "marian"
    assert main(["import", marian_folder, "--output", str(run)]) == 0
    assert main(["export", "--model", str(run), "--out", str(out), "--format", "marian"]) == 0
    exported = load_reference(str(out))
    # The export's ids are this package's; its specials too (tokenizer_config.json's added tokens).
    rows = [MarianTokenizer(run).marian_ids[row].tolist() for row in exported[1](SENTENCES)["input_ids"]]
    assert rows == reference[1](SENTENCES)["input_ids"]
    assert generate_translations(exported, SENTENCES, 20) == generate_translations(reference, SENTENCES, 20)


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_import_writes_a_run_folder_that_translate_takes(marian_folder, imported, tmp_path, capsys):
    run = tmp_path / "runs" / "opus"
    assert main(["import", marian_folder, "--output", str(run)]) == 0
    assert {"model.keras", "source.spm", "target.spm", "vocab.json", "marian_config.json"} <= set(os.listdir(run))
    capsys.readouterr()
    model, tokenizer = imported
    translator = Translator(model, tokenizer, beam_width=1, no_repeat_ngram_size=0)
    # The Translator's limit, not the run's generate() default (generation.json): the same search both sides.
    assert main(["translate", "--model", str(run), "--engine", "keras", "--beam", "1", "--no-repeat-ngram", "0",
                 "--max-new-tokens", str(translator.max_new_tokens), *SENTENCES[:2]]) == 0
    printed = capsys.readouterr().out.splitlines()
    expected = translator(SENTENCES[:2])
    assert printed == expected
    with pytest.raises(SystemExit) as refused:  # a second import does not write over the run
        main(["import", marian_folder, "--output", str(run)])
    assert refused.value.code == 2


# A fresh process, as a user runs `keras-transformer import` with KERAS_BACKEND=tensorflow set.
_IMPORT_IN_A_FRESH_PROCESS = """
import json, sys
from keras_transformer_cli import main
code = main(["import", sys.argv[1], "--output", sys.argv[2]])
import keras
print(json.dumps({"code": code, "backend": keras.backend.backend(), "tensorflow": "tensorflow" in sys.modules}))
"""


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_import_writes_its_run_with_keras_on_jax_without_importing_tensorflow(marian_folder, imported, tmp_path):
    import subprocess
    import sys

    pytest.importorskip("jax")
    run = tmp_path / "run"
    finished = subprocess.run([sys.executable, "-c", _IMPORT_IN_A_FRESH_PROCESS, str(marian_folder), str(run)],
                              env={**os.environ, "KERAS_BACKEND": "tensorflow"}, capture_output=True, text=True,
                              timeout=600)
    assert finished.returncode == 0, finished.stderr[-2000:]
    said = json.loads(finished.stdout.strip().splitlines()[-1])
    assert said == {"code": 0, "backend": "jax", "tensorflow": False}
    written = keras.saving.load_model(run / "model.keras")
    model, _ = imported
    batch = {"encoder_tokens": np.array([[5, 9, 2, 0]], "int32"), "decoder_tokens": np.array([[0, 7, 8]], "int32")}
    np.testing.assert_allclose(to_numpy(written(batch)), to_numpy(model(batch)), rtol=1e-5, atol=1e-5)


def _copy(folder, tmp_path, name="broken"):
    target = tmp_path / name
    shutil.copytree(folder, target)
    return target


def _edit_config(folder, **changes):
    _edit_json(folder / "config.json", **changes)


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _extra_piece(folder):
    path = folder / "vocab.json"
    table = json.loads(path.read_text())
    table["▁zzz"] = len(table)
    path.write_text(json.dumps(table))


def _separate_tables_on_a_shared_matrix(folder):
    shutil.copyfile(folder / "vocab.json", folder / "target_vocab.json")
    _edit_json(folder / "tokenizer_config.json", separate_vocabs=True)


BAD_FOLDERS = {
    "no weights": (lambda f: os.remove(f / "model.safetensors"), "holds neither model.safetensors"),
    "no target.spm": (lambda f: os.remove(f / "target.spm"), "target.spm: missing"),
    "no vocab.json": (lambda f: os.remove(f / "vocab.json"), "vocab.json: missing"),
    "a BART config": (lambda f: _edit_config(f, model_type="bart"), "model_type 'bart' is not one this package imports"),
    "pre-LN (normalize_before)": (lambda f: _edit_config(f, normalize_before=True), "normalize_before=True"),
    "an activation the layers lack": (lambda f: _edit_config(f, activation_function="gelu_new"),
                                      "activation_function='gelu_new'"),
    "a truncated safetensors file": (lambda f: _truncate(f / "model.safetensors"),
                                     "not a readable safetensors file"),
    "a vocab.json that disagrees with the embedding": (_extra_piece, "but config.json's vocab_size is"),
    "separate_vocabs without target_vocab.json": (
        lambda f: _edit_json(f / "tokenizer_config.json", separate_vocabs=True), "target_vocab.json: missing"),
    "separate_vocabs with one shared matrix": (_separate_tables_on_a_shared_matrix,
                                               "share_encoder_decoder_embeddings=true gives both sides one matrix"),
}



def _edit_json(path, **changes):
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.backend_independent
@pytest.mark.parametrize("case", sorted(BAD_FOLDERS))
def test_a_bad_folder_is_refused_in_one_line_naming_the_file_and_leaves_no_output(case, marian_folder, tmp_path,
                                                                                  capsys):
    damage, message = BAD_FOLDERS[case]
    folder = _copy(marian_folder, tmp_path)
    damage(folder)
    output = tmp_path / "out"
    with pytest.raises(SystemExit) as refused:
        main(["import", str(folder), "--output", str(output)])
    error = capsys.readouterr().err.strip().splitlines()
    assert refused.value.code == 2
    assert len(error) == 1 and message in error[0] and str(folder) in error[0], error
    assert not output.exists()
    assert not [name for name in os.listdir(tmp_path) if "importing" in name]


@pytest.mark.backend_independent
def test_a_hub_id_that_cannot_be_fetched_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["import", "Helsinki-NLP/opus-mt-xx-yy", "--output", str(tmp_path / "out")])
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "could not fetch it from the Hugging Face hub" in error[0]


@pytest.mark.backend_independent
def test_key_biases_are_imported_though_attention_ignores_them(imported, reference):
    # A bias on the keys adds one constant to every score of a query, which
    # the softmax removes: only a direct comparison catches a dropped one.
    model, _ = imported
    their_model, _ = reference
    variables = {variable.path: variable for variable in model.weights}
    for stack, attention, ours in (("encoder", "self_attn", "self_attention"),
                                   ("decoder", "encoder_attn", "cross_attention")):
        theirs = getattr(getattr(their_model.model, stack).layers[0], attention).k_proj.bias.detach().numpy()
        np.testing.assert_array_equal(to_numpy(variables[f"{stack}_layer_0/{ours}/key/bias"]), theirs)
        assert np.abs(theirs).max() > 0


def test_the_decoder_starts_from_padding_and_may_emit_every_other_piece(imported):
    from keras_transformer.decoding.search_step import forbidden_token_ids

    model, _ = imported
    decoder = CachedDecoder(model)
    assert decoder.start_id == 0 and forbidden_token_ids(decoder) == (0,)


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_an_imported_run_gives_n_best_lists_with_alignments(marian_folder, tmp_path, capsys):
    run = tmp_path / "opus"
    assert main(["import", marian_folder, "--output", str(run)]) == 0
    capsys.readouterr()
    assert main(["translate", "--model", str(run), "--engine", "keras", "--n-best", "2", "--format", "jsonl",
                 "--alignments", SENTENCES[1]]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["source_tokens"][-1] == "</s>" and len(line["hypotheses"]) == 2
    assert line["hypotheses"][0]["score"] >= line["hypotheses"][1]["score"]
    assert all("alignment" in hypothesis for hypothesis in line["hypotheses"])


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_translate_with_pooled_beams_prints_what_generate_gives(marian_folder, reference, tmp_path, capsys):
    run = tmp_path / "opus"
    assert main(["import", marian_folder, "--output", str(run)]) == 0
    capsys.readouterr()
    assert main(["translate", "--model", str(run), *SENTENCES[:3]]) == 0  # generate()'s search, by default
    printed = capsys.readouterr().out.splitlines()
    their_model, their_tokenizer = reference
    batch = their_tokenizer(SENTENCES[:3], return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = their_model.generate(**batch)  # its generation_config.json: 4 beams, max_length 128
    assert printed == their_tokenizer.batch_decode(generated, skip_special_tokens=True)
    assert main(["translate", "--model", str(run), "--n-best", "2", SENTENCES[0]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].split(" ||| ")[1] == printed[0]


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_an_imported_run_fine_tunes_with_marians_tokenizer_and_start(marian_folder, reference, tmp_path):
    from conftest import FIXTURE_CORPUS

    from keras_transformer.data.parallel_corpus import ParallelCorpus
    from keras_transformer.training.train_config import TrainConfig
    from keras_transformer.training.train_input import TrainInput
    from keras_transformer.training.trainer import train_translator

    run = tmp_path / "opus"
    assert main(["import", marian_folder, "--output", str(run)]) == 0
    # The batches are Marian's teacher forcing: the source ends with </s>, the decoder starts from <pad>.
    inputs = TrainInput(ParallelCorpus(FIXTURE_CORPUS), max_length=64, batch_tokens=400, vocabulary_from=str(run),
                        decoder_start_id=0)
    corpus_data = inputs.read_corpus(log=lambda line: None)
    inputs.write_vocabulary(corpus_data, str(tmp_path / "vocabulary.spm"))
    dev = inputs.train_data(corpus_data, str(tmp_path / "vocabulary.spm"), 0, lambda line: None).dev
    their_model, their_tokenizer = reference
    # The dev pair shortest in Marian's pieces: no side truncated at max_length.
    pair = min(corpus_data.splits["dev"], key=lambda pair: len(pair.source) + len(pair.target))
    source = their_tokenizer([pair.source])["input_ids"][0]
    target = their_tokenizer(text_target=[pair.target])["input_ids"][0]
    assert len(source) < 64 and len(target) < 64
    marian_ids = MarianIds(run)
    rows = [(batch, labels, i) for batch, labels in (dev[j] for j in range(dev.num_batches))
            for i in range(len(labels)) if marian_ids(batch["encoder_tokens"][i]) == source]
    assert rows, "the pair's source is not tokenized as MarianTokenizer does"
    batch, labels, row = rows[0]
    assert marian_ids(labels[row]) == target
    assert batch["decoder_tokens"][row][0] == 0 and marian_ids(batch["decoder_tokens"][row][1:]) == target[:-1]

    for extra in ([], ["--lora", "4"]):
        output = tmp_path / f"tuned{len(extra)}"
        config = TrainConfig(output=str(output), corpus=FIXTURE_CORPUS, start_from=str(run), epochs=1,
                             steps_per_epoch=2, dev_bleu_sentences=2,
                             lora_rank=int(extra[1]) if extra else None)
        summary = train_translator(config, verbose=0, log=lambda line: None)
        assert np.isfinite(summary["train_loss"])
        tuned = Translator.from_directory(str(output), beam_width=1)
        assert tuned.decoder.start_id == 0 and isinstance(tuned("Y dijo Dios."), str)
        assert json.loads((output / "config.json").read_text())["model_options"]["sinusoid_layout"] == "halves"
        # generate()'s search, imported with the model, stays the tuned run's default.
        assert (output / "generation.json").read_text() == (run / "generation.json").read_text()


class MarianIds:
    """A row of a run's ids, unpadded, as Marian's ids."""

    def __init__(self, run):
        from keras_transformer_runtime.marian_tokenizer import MarianTokenizer

        self.marian_ids = MarianTokenizer(run).marian_ids

    def __call__(self, row):
        row = np.asarray(row)
        return self.marian_ids[row[row != 0]].tolist()


@pytest.mark.export_runtimes
@pytest.mark.backend_independent
def test_an_imported_run_exported_to_ctranslate2_translates_as_ours(marian_folder, tmp_path):
    pytest.importorskip("ctranslate2")
    from keras_transformer.translation.ctranslate2_model import CTranslate2Translator

    run, out = tmp_path / "opus", tmp_path / "ct2"
    assert main(["import", marian_folder, "--output", str(run)]) == 0
    assert main(["export", "--model", str(run), "--out", str(out), "--format", "ctranslate2"]) == 0
    ours = Translator.from_directory(str(run), beam_width=1, no_repeat_ngram_size=0, max_new_tokens=40)
    theirs = CTranslate2Translator(str(out), beam_width=1, no_repeat_ngram_size=0, max_new_tokens=40)
    assert theirs(SENTENCES) == ours(SENTENCES)


@pytest.mark.export_runtimes
@pytest.mark.backend_independent
def test_an_imported_run_exported_as_a_savedmodel_translates_as_ours(marian_folder, tmp_path):
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("tensorflow_text")

    run, out = tmp_path / "opus", tmp_path / "saved"
    assert main(["import", marian_folder, "--output", str(run)]) == 0
    assert main(["export", "--model", str(run), "--out", str(out)]) == 0
    served = tf.saved_model.load(str(out)).signatures["serving_default"]
    texts = [*SENTENCES, ""]
    translations = [text.decode() for text in served(texts=tf.constant(texts))["translations"].numpy()]
    # The export may run in a child process (TensorFlow's), beyond `as_generate`: its cap is the package's.
    assert translations == Translator.from_directory(str(run), beam_width=1,
                                                     max_output_ratio=PACKAGE_OUTPUT_RATIO)(texts)
