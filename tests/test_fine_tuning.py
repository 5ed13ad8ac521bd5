"""Fine-tuning a trained run on new data: `train --from RUN_FOLDER`, `--lora RANK` (issue 38).

Tiny runs on the fixture corpus: the run starts from the trained weights
and vocabulary with a fresh optimizer, LoRA trains only the adapters and
saves a plain model, a resumed LoRA run keeps learning, the new folder is
an ordinary run folder, and bad input stops the command with nothing
written.
"""

import dataclasses
import filecmp
import json
import os
import shutil
import zipfile

import keras
import numpy as np
import pytest
from conftest import FIXTURE_CORPUS

from keras_transformer import model_file
from keras_transformer.data.bible_tsv import write_bible_tsv
from keras_transformer.errors import UserInputError
from keras_transformer.training.fine_tuning import resolved_config
from keras_transformer.training.train_config import TrainConfig
from keras_transformer.training.trainer import train_translator

_QUIET = dict(verbose=0, log=lambda message: None)


@pytest.fixture(scope="module")
def kjv(tmp_path_factory):
    """The fixture corpus' Spanish -> KJV pairs, one TSV per split."""
    folder = tmp_path_factory.mktemp("kjv")
    write_bible_tsv(str(folder), "kjv", path=FIXTURE_CORPUS)
    return {split: str(folder / f"{split}.tsv") for split in ("train", "dev", "test")}


def _fine_tuning(start, kjv, output, **options):
    settings = dict(output=str(output), start_from=str(start), corpus=kjv["train"], dev=kjv["dev"], test=kjv["test"],
                    batch_tokens=240, epochs=1, steps_per_epoch=2, warmup_steps=1, dev_bleu_sentences=4)
    return TrainConfig(**{**settings, **options})


def _weights(path):
    model = model_file.load_model(str(path), compile=False)
    return {variable.path: keras.ops.convert_to_numpy(variable) for variable in model.weights}


def test_the_bible_tsv_holds_one_reference_and_the_corpus_splits(kjv):
    from keras_transformer.data.corpus import load_bible_pairs

    pairs = load_bible_pairs("test", path=FIXTURE_CORPUS)
    lines = open(kjv["test"], encoding="utf-8").read().splitlines()
    assert lines == [f"{pair.source}\t{pair.references[1]}" for pair in pairs]
    assert any("unto" in line or "thee" in line or "hath" in line for line in open(kjv["train"], encoding="utf-8"))


@pytest.mark.backend_independent
def test_a_fine_tuning_run_starts_from_the_trained_weights_and_vocabulary(trained_run, kjv, tmp_path):
    # A learning rate too small to move a weight: what the run saves is what it started from.
    summary = train_translator(_fine_tuning(trained_run, kjv, tmp_path / "ft", learning_rate=1e-12), **_QUIET)
    before, after = _weights(trained_run / "model.keras"), _weights(tmp_path / "ft" / "model.keras")
    assert before.keys() == after.keys()
    for path in before:
        np.testing.assert_allclose(after[path], before[path], atol=1e-6, err_msg=path)
    assert filecmp.cmp(trained_run / "vocabulary.spm", tmp_path / "ft" / "vocabulary.spm", shallow=False)
    config = json.load(open(tmp_path / "ft" / "config.json"))
    start = json.load(open(trained_run / "config.json"))
    assert config["start_from"] == str(trained_run)
    assert {key: config[key] for key in ("d_model", "num_layers", "vocabulary_size", "max_length")} == {
        key: start[key] for key in ("d_model", "num_layers", "vocabulary_size", "max_length")}
    assert summary["completed_steps"] == 2  # a fresh optimizer: its step count starts again


@pytest.mark.backend_independent
def test_fine_tuning_changes_the_weights_and_takes_the_fine_tuning_defaults(trained_run, kjv, tmp_path):
    from keras_transformer.training.fine_tuning import FINE_TUNING_DEFAULTS

    config = resolved_config(_fine_tuning(trained_run, kjv, tmp_path / "ft", epochs=None, steps_per_epoch=None,
                                          warmup_steps=None))
    assert {key: getattr(config, key) for key in FINE_TUNING_DEFAULTS} == FINE_TUNING_DEFAULTS
    train_translator(_fine_tuning(trained_run, kjv, tmp_path / "ft2"), **_QUIET)
    before, after = _weights(trained_run / "model.keras"), _weights(tmp_path / "ft2" / "model.keras")
    assert max(float(np.abs(after[path] - before[path]).max()) for path in before) > 1e-4


def test_lora_trains_the_adapters_only_and_saves_a_plain_model(trained_run, kjv, tmp_path):
    # No dev BLEU (dev_bleu_sentences=0): what is trained is the question, not how it translates.
    summary = train_translator(_fine_tuning(trained_run, kjv, tmp_path / "lora", lora_rank=2,
                                            lora_targets=["query", "value"], dev_bleu_sentences=0), **_QUIET)
    start = json.load(open(trained_run / "config.json"))
    attention_layers = 3 * start["num_layers"]  # encoder self, decoder self and cross
    assert summary["trainable_parameters"] == attention_layers * 2 * 2 * start["d_model"] * 2
    before, after = _weights(trained_run / "model.keras"), _weights(tmp_path / "lora" / "model.keras")
    assert before.keys() == after.keys()  # no adapter weights: a plain model
    adapted = [path for path in before if path.endswith(("query/kernel", "value/kernel"))]
    assert len(adapted) == attention_layers * 2
    for path in before:
        changed = not np.array_equal(after[path], before[path])
        assert changed == (path in adapted), path

    from keras_transformer.translation.translator import Translator

    translations = Translator.from_directory(str(tmp_path / "lora"), beam_width=1)(["Y dijo Dios."])
    assert len(translations) == 1 and isinstance(translations[0], str)


@pytest.mark.end_to_end  # a whole fine-tuning run, 17 s under JAX: CI's, keeping the contributor's loop in 5 minutes
def test_lora_targets_reach_every_projection_and_the_embeddings(trained_run, kjv, tmp_path):
    targets = ["query", "key", "value", "output", "embeddings"]
    summary = train_translator(_fine_tuning(trained_run, kjv, tmp_path / "lora", lora_rank=2, lora_targets=targets,
                                            dev_bleu_sentences=0), **_QUIET)
    start = json.load(open(trained_run / "config.json"))
    d_model, vocabulary = start["d_model"], start["vocabulary_size"]
    projections = 3 * start["num_layers"] * 4 * (2 * d_model * 2)
    embeddings = 2 * (vocabulary * 2 + 2 * d_model)  # the encoder's and the decoder's token matrices
    assert summary["trainable_parameters"] == projections + embeddings
    before, after = _weights(trained_run / "model.keras"), _weights(tmp_path / "lora" / "model.keras")
    changed = {path for path in before if not np.array_equal(after[path], before[path])}
    assert any(path.endswith("token_embedding/embeddings") for path in changed), sorted(changed)
    assert all(path.endswith(("/kernel", "/embeddings")) for path in changed), sorted(changed)
    with pytest.raises(UserInputError, match="--lora-targets says what --lora adapts"):
        resolved_config(_fine_tuning(trained_run, kjv, tmp_path / "x", lora_targets=["query"]))
    with pytest.raises(UserInputError, match="--lora-targets must be some of"):
        resolved_config(_fine_tuning(trained_run, kjv, tmp_path / "x", lora_rank=2, lora_targets=["ffn"]))
    with pytest.raises(UserInputError, match="at least one of them an attention projection"):
        resolved_config(_fine_tuning(trained_run, kjv, tmp_path / "x", lora_rank=2, lora_targets=["embeddings"]))


class _AdaptersAtStart(keras.callbacks.Callback):
    """Records, before the first step, the largest |A| of each LoRA adapter."""

    def on_train_begin(self, logs=None):
        adapted = [layer for layer in self.model._flatten_layers() if getattr(layer, "lora_enabled", False)]
        factors = [layer.lora_kernel_a if hasattr(layer, "lora_kernel_a") else layer.lora_embeddings_a
                   for layer in adapted]
        self.largest = [float(np.abs(keras.ops.convert_to_numpy(a)).max()) for a in factors]


# The trainer's resume logic (re-started adapter factors); LoRA's numbers on each backend: the tests above
# and tests/test_lora.py.
@pytest.mark.backend_independent
def test_a_resumed_lora_run_keeps_learning(trained_run, kjv, tmp_path):
    output = tmp_path / "lora"
    train_translator(_fine_tuning(trained_run, kjv, output, lora_rank=2, dev_bleu_sentences=0), **_QUIET)
    first = _weights(output / "model.keras")
    # Further epochs resume from the backup, whose kernels are merged; loading it zeroes both adapter
    # factors (Keras' Dense), where neither would get a gradient again.
    adapters = _AdaptersAtStart()
    train_translator(_fine_tuning(trained_run, kjv, output, lora_rank=2, dev_bleu_sentences=0, epochs=2),
                     callbacks=[adapters], **_QUIET)
    assert len(adapters.largest) == 6 + 2 and min(adapters.largest) > 0.0  # W_Q, W_V of 3 layers; 2 embeddings
    second = _weights(output / "model.keras")
    moved = [path for path in first if not np.array_equal(first[path], second[path])]
    assert moved and all(path.endswith(("query/kernel", "value/kernel", "embeddings")) for path in moved), moved


@pytest.mark.backend_independent
def test_the_fine_tuned_folder_evaluates_and_exports_like_any_run(trained_run, kjv, tmp_path, capsys):
    import keras_transformer_cli as cli

    output = tmp_path / "ft"
    train_translator(_fine_tuning(trained_run, kjv, output), **_QUIET)
    assert cli.main(["evaluate", "--model", str(output), "--beam", "1", "--limit", "3"]) == 0
    assert "test" in capsys.readouterr().out
    pytest.importorskip("ctranslate2")
    assert cli.main(["export", "--model", str(output), "--out", str(tmp_path / "ct2"), "--format", "ctranslate2"]) == 0
    assert os.path.isfile(tmp_path / "ct2" / "model.bin")


@pytest.mark.backend_independent
@pytest.mark.parametrize("flag, value", [("d_model", 32), ("num_layers", 2), ("vocabulary_size", 500),
                                         ("preset", "small")])
def test_sizes_that_contradict_the_starting_model_are_refused(trained_run, kjv, tmp_path, flag, value):
    with pytest.raises(UserInputError, match=f"--{flag.replace('_', '-')} '?{value}'? \\(the model has"):
        train_translator(_fine_tuning(trained_run, kjv, tmp_path / "out", **{flag: value}), **_QUIET)
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.backend_independent
def test_bad_starting_folders_are_refused_with_nothing_written(trained_run, kjv, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserInputError, match="holds no model.keras, no vocabulary.spm and no config.json"):
        train_translator(_fine_tuning(empty, kjv, tmp_path / "out"), **_QUIET)
    with pytest.raises(UserInputError, match="is the --output folder itself"):
        train_translator(_fine_tuning(trained_run, kjv, trained_run), **_QUIET)
    # A model.keras whose layers this version does not define (a later or earlier package).
    incompatible = tmp_path / "incompatible"
    shutil.copytree(trained_run, incompatible)
    with zipfile.ZipFile(trained_run / "model.keras") as original:
        files = {name: original.read(name) for name in original.namelist()}
    files["config.json"] = files["config.json"].replace(b'PositionalEmbedding"', b'PositionalEmbeddingV9"')
    with zipfile.ZipFile(incompatible / "model.keras", "w") as changed:
        for name, data in files.items():
            changed.writestr(name, data)
    with pytest.raises(UserInputError, match="not a model this package can read"):
        train_translator(_fine_tuning(incompatible, kjv, tmp_path / "out"), **_QUIET)
    assert not os.path.exists(tmp_path / "out")
    with pytest.raises(UserInputError, match="--lora adapts a trained model"):
        TrainConfig(lora_rank=2, corpus=kjv["train"]).resolved()


@pytest.mark.backend_independent
def test_a_corpus_the_vocabulary_cannot_spell_is_refused(trained_run, tmp_path):
    greek = tmp_path / "greek.tsv"
    greek.write_text("".join(f"Ἐν ἀρχῇ ἦν ὁ λόγος {i}\tΚαὶ ὁ λόγος ἦν πρὸς τὸν θεόν {i}\n" for i in range(60)),
                     encoding="utf-8")
    config = TrainConfig(output=str(tmp_path / "out"), start_from=str(trained_run), corpus=str(greek),
                         dev_fraction=0.2, test_fraction=0.2)
    with pytest.raises(UserInputError, match="cannot spell .* source characters"):
        train_translator(config, **_QUIET)
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.backend_independent
def test_the_vocabulary_share_is_logged_and_a_high_one_warns(trained_run, kjv, tmp_path):
    from keras_transformer.training import vocabulary_coverage
    from keras_transformer.data.parallel_corpus import ParallelCorpus

    pairs = ParallelCorpus(kjv["train"]).read()["train"]
    lines = []
    shares = vocabulary_coverage.check_vocabulary_covers(pairs, str(trained_run), lines.append)
    assert all(0.0 <= share < vocabulary_coverage.UNKNOWN_WARNING for share in shares)
    assert "unknown to it" in lines[0]
    odd = [dataclasses.replace(pair, target=pair.target + " ☃☃☃☃☃☃☃☃☃☃") for pair in pairs]
    with pytest.warns(UserWarning, match="cannot spell"):
        vocabulary_coverage.check_vocabulary_covers(odd, str(trained_run), lines.append)


@pytest.mark.backend_independent
def test_the_command_line_states_the_fine_tuning_defaults():
    import keras_transformer_cli as cli
    from keras_transformer_cli import arguments
    from keras_transformer.training.fine_tuning import FINE_TUNING_DEFAULTS
    from keras_transformer.training.fine_tuning import LORA_DEFAULTS
    from keras_transformer.training.fine_tuning import LORA_TARGETS

    defaults = FINE_TUNING_DEFAULTS
    assert arguments.FINE_TUNING_SUMMARY == (
        f"{defaults['epochs']} x {defaults['steps_per_epoch']} steps, {defaults['warmup_steps']} warm-up steps, "
        f"peak learning rate {defaults['learning_rate']:g}")
    assert arguments.LORA_LEARNING_RATE == LORA_DEFAULTS["learning_rate"]
    assert arguments.LORA_TARGETS == LORA_TARGETS
    from keras_transformer.lora import TARGETS

    assert arguments.LORA_TARGET_NAMES == TARGETS
    args = cli.build_parser().parse_args(["train", "--from", "runs/es-en", "--lora", "8", "--learning-rate", "2e-3"])
    assert (args.start_from, args.lora_rank, args.learning_rate) == ("runs/es-en", 8, 2e-3)
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["train", "--learning-rate", "0"])


@pytest.mark.backend_independent
def test_a_fine_tuning_config_is_resolved_by_the_code_that_reads_the_starting_run(trained_run, kjv, tmp_path):
    config = _fine_tuning(trained_run, kjv, tmp_path / "ft")
    with pytest.raises(ValueError, match="fine_tuning.resolved_config"):
        config.resolved()  # the starting run's sizes are not in it yet
    start = json.load(open(trained_run / "config.json"))
    assert resolved_config(config).d_model == start["d_model"]
