"""The weights a run keeps: dev BLEU after each virtual epoch, the best one saved, checkpoint averaging."""

import csv
import os
import pathlib

import keras
import numpy as np
import pytest

from keras_transformer.training import model_selection
from keras_transformer.training import run_folder
from keras_transformer.data.parallel_corpus import ParallelCorpus
from keras_transformer.translation.evaluation import evaluate_pairs
from keras_transformer.training.learning_curve import plot_learning_curve
from keras_transformer.training.learning_curve import read_log
from keras_transformer.training.train_config import TrainConfig
from keras_transformer.training.trainer import train_translator
from keras_transformer.translation.translator import Translator

FIXTURE = str(pathlib.Path(__file__).parent / "fixtures" / "bible_es_en_small.tsv.gz")
RUN = dict(
    corpus=FIXTURE, preset="tiny", num_layers=1, d_model=16, num_heads=2, ff_dim=32, max_length=24,
    vocabulary_size=400, batch_tokens=240, warmup_steps=5, epochs=3, steps_per_epoch=3,
)


class ScriptedBleu(model_selection.DevBleu):
    """`DevBleu` whose scores are given, so which epoch is best is known."""

    def __init__(self, scores, output):
        super().__init__([], tokenizer=None, output=output, steps_per_epoch=10, log=lambda line: None)
        self.scores = list(scores)

    def score(self, verbose=0):
        return {"bleu": self.scores.pop(0)}


def _small_model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _kernel(model):
    return keras.ops.convert_to_numpy(model.layers[0].kernel).ravel().tolist()


def test_the_best_scoring_epoch_is_kept_not_the_last(tmp_path):
    model = _small_model()
    callback = ScriptedBleu([5.0, 9.0, 7.0], str(tmp_path))
    callback.set_model(model)
    for epoch in range(3):
        model.layers[0].kernel.assign(np.full((2, 1), float(epoch)))
        logs = {}
        callback.on_epoch_end(epoch, logs)
        assert logs["dev_bleu"] == [5.0, 9.0, 7.0][epoch]
    kept = model_selection.keep_best(model, str(tmp_path), callback, log=lambda line: None)
    assert kept == {"kept": "virtual epoch 2", "dev_bleu": 9.0, "dev_bleu_step": 20}
    assert _kernel(model) == [1.0, 1.0]  # the weights of epoch 2, put back in the model
    saved = keras.saving.load_model(str(tmp_path / run_folder.MODEL_FILE))
    assert _kernel(saved) == [1.0, 1.0]
    assert model_selection.read_record(str(tmp_path))["scores"] == {"1": 5.0, "2": 9.0, "3": 7.0}


def test_a_resumed_run_keeps_an_earlier_best_that_later_epochs_do_not_beat(tmp_path):
    model = _small_model()
    first = ScriptedBleu([9.0], str(tmp_path))
    first.set_model(model)
    model.layers[0].kernel.assign(np.full((2, 1), 1.0))
    first.on_epoch_end(0, {})
    resumed = ScriptedBleu([8.0], str(tmp_path))  # a new process: the best comes from the record
    resumed.set_model(model)
    assert resumed.best_bleu == 9.0
    model.layers[0].kernel.assign(np.full((2, 1), 2.0))
    resumed.on_epoch_end(1, {})
    model_selection.keep_best(model, str(tmp_path), resumed, log=lambda line: None)
    assert _kernel(model) == [1.0, 1.0]


@pytest.mark.parametrize("average_bleu, kept_kernel", [(10.0, 2.0), (6.0, 3.0)])
def test_the_average_is_kept_only_when_it_scores_better(tmp_path, average_bleu, kept_kernel):
    model = _small_model()
    callback = ScriptedBleu([5.0, 6.0, 8.0, average_bleu], str(tmp_path))
    saver = model_selection.LastCheckpoints(str(tmp_path), count=3)
    for hook in (callback, saver):
        hook.set_model(model)
    for epoch, value in enumerate((1.0, 2.0, 3.0)):
        model.layers[0].kernel.assign(np.full((2, 1), value))
        callback.on_epoch_end(epoch, {})
        saver.on_epoch_end(epoch, {})
    kept = model_selection.keep_best(model, str(tmp_path), callback, average_last=3, log=lambda line: None)
    assert _kernel(model) == [kept_kernel] * 2  # the mean of 1, 2, 3, or epoch 3's weights
    assert kept["dev_bleu"] == max(average_bleu, 8.0)
    assert model_selection.read_record(str(tmp_path))["scores"]["average of 3"] == average_bleu


def test_only_the_last_checkpoints_stay_on_disk(tmp_path):
    model = _small_model()
    saver = model_selection.LastCheckpoints(str(tmp_path), count=2)
    saver.set_model(model)
    for epoch in range(4):
        saver.on_epoch_end(epoch, {})
    names = [os.path.basename(path) for path in model_selection.checkpoint_paths(str(tmp_path))]
    assert names == ["epoch-00003.weights.npz", "epoch-00004.weights.npz"]


# The per-backend parts (decoding the kept weights, saving, reloading) have their
# own tests under every backend; this run checks how the run folder's files agree.
@pytest.mark.backend_independent
def test_a_run_logs_dev_bleu_each_epoch_keeps_its_best_and_draws_the_curve(tmp_path):
    output = tmp_path / "run"
    summary = train_translator(
        TrainConfig(output=str(output), dev_bleu_sentences=6, average_last=2, **RUN),
        verbose=0, log=lambda line: None,
    )
    with open(output / run_folder.LOG_FILE) as f:
        rows = list(csv.DictReader(f))
    logged = [float(row["dev_bleu"]) for row in rows]
    assert len(logged) == 3
    record = model_selection.read_record(str(output))
    assert [record["scores"][str(epoch)] for epoch in (1, 2, 3)] == logged
    assert "average of 2" in record["scores"]
    assert summary["dev_bleu"] == max(record["scores"].values()) == record["best"]["dev_bleu"]
    # The kept model, reloaded from model.keras, gives the score it was kept for.
    pairs = ParallelCorpus.from_config({"corpus": FIXTURE}).read()["dev"][:6]
    scorer = Translator.from_directory(str(output), beam_width=1)
    scorer.split_sentences = False  # as the dev scorer: whole verses
    rescored = evaluate_pairs(scorer, pairs, verbose=0)
    assert rescored["bleu"] == pytest.approx(summary["dev_bleu"])
    assert (output / run_folder.LEARNING_CURVE_FILE).stat().st_size > 0
    assert len(model_selection.checkpoint_paths(str(output))) == 2


def test_the_learning_curve_reads_the_csv_logger_and_tolerates_missing_values(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("epoch,loss,val_loss,dev_bleu\n0,6.0,5.5,NA\n1,5.0,4.5,3.0\n")
    assert read_log(str(log))[0] == {"epoch": 0.0, "loss": 6.0, "val_loss": 5.5}
    pytest.importorskip("matplotlib")
    png = plot_learning_curve(str(log), str(tmp_path / "curve.png"), steps_per_epoch=50)
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_with_no_score_recorded_the_last_weights_are_kept_and_saved(tmp_path):
    model = _small_model()
    callback = ScriptedBleu([], str(tmp_path))  # a run resumed after its last epoch: nothing scored here
    callback.set_model(model)
    model.layers[0].kernel.assign(np.full((2, 1), 4.0))
    kept = model_selection.keep_best(model, str(tmp_path), callback, log=lambda line: None)
    assert kept == {"kept": "last weights"}
    assert _kernel(keras.saving.load_model(str(tmp_path / run_folder.MODEL_FILE))) == [4.0, 4.0]


# 8: a compiled loop's batch on a CPU; 16: a batch larger than a lone sentence's 8 rows, as on a GPU (64).
@pytest.mark.parametrize("batch_size", [8, 16])
def test_a_compiled_dev_scorer_compiles_every_batch_shape_of_its_scoring_before_the_first_epoch(
        trained_run, tmp_path, monkeypatch, batch_size):
    from keras_transformer.data.corpus import TranslationPair
    from keras_transformer_runtime import text_translator

    monkeypatch.setattr(text_translator, "COMPILED_CPU_BATCH_SIZE", batch_size)
    from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer

    shapes = []
    decode = Translator._decode
    monkeypatch.setattr(Translator, "_decode", lambda self, source: shapes.append(source.shape) or decode(self, source))
    import keras_transformer as kt

    tokenizer = SentencePieceTokenizer(str(trained_run / run_folder.VOCABULARY_FILE))
    size = tokenizer.vocabulary_size()
    model = kt.models.transformer(size, size, num_layers=1, d_model=16, num_heads=2, ff_dim=32, max_length=80)
    sources = ["luz", "Y dijo Dios: Sea la luz; y fue la luz. " * 3, "En el principio"] * 4
    pairs = [TranslationPair(f"dev:{i}", "", "dev", source, "light", ("light",)) for i, source in enumerate(sources)]
    callback = model_selection.DevBleu(pairs, tokenizer, str(tmp_path), 10, jit_compile=True, log=lambda line: None)
    callback.set_model(model)
    callback.on_train_begin()
    before_training = set(shapes)
    shapes.clear()
    callback.score()
    assert callback._scorer().batch_size == batch_size
    assert set(shapes) == before_training  # every shape compiled before, none compiled for nothing
    assert len(before_training) == (2 if batch_size == 8 else 1)
