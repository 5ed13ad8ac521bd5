"""The main job on the test fixture: train, resume after a kill, refuse bad input."""

import csv
import json
import os
import pathlib
import subprocess
import sys

import pytest

from keras_transformer.trainer import TrainConfig
from keras_transformer.trainer import TrainingError
from keras_transformer.trainer import train_translator

FIXTURE = str(pathlib.Path(__file__).parent / "fixtures" / "bible_es_en_small.tsv.gz")
TINY = dict(
    corpus=FIXTURE, preset="tiny", num_layers=1, d_model=16, num_heads=2, ff_dim=32,
    max_length=48, vocabulary_size=400, batch_tokens=480, warmup_steps=5,
)
TINY_FLAGS = [
    "--corpus", FIXTURE, "--preset", "tiny", "--num-layers", "1", "--d-model", "16",
    "--num-heads", "2", "--ff-dim", "32", "--max-length", "48", "--vocabulary-size", "400",
    "--batch-tokens", "480", "--warmup-steps", "5",
]
KILL_AT_STEP = """
import os, signal, sys, keras
from keras_transformer.trainer import TrainConfig, train_translator

class KillAtStep(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        self.seen = getattr(self, "seen", 0) + 1
        if self.seen == int(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)

config = TrainConfig(**eval(sys.argv[1]))
train_translator(config, verbose=0, callbacks=[KillAtStep()])
"""


def _run(*args, **kwargs):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, **kwargs)


def test_two_step_fit_writes_model_vocabulary_config_logs_and_summary(tmp_path):
    summary = train_translator(TrainConfig(output=str(tmp_path), epochs=1, steps_per_epoch=2, **TINY), verbose=0)
    assert summary["completed_steps"] == 2
    for key in ("train_loss", "dev_loss", "dev_token_accuracy", "tokens_per_second"):
        assert summary[key] is not None and summary[key] == summary[key], key  # not NaN
    for name in ("model.keras", "vocabulary.spm", "config.json", "summary.json", "log.csv", "logs"):
        assert (tmp_path / name).exists(), name


def test_killed_run_resumes_from_backup_and_ends_with_the_same_step_count(tmp_path):
    options = dict(output=str(tmp_path), epochs=3, steps_per_epoch=3, **TINY)
    killed = _run("-c", KILL_AT_STEP, repr(options), "5")  # mid-way through epoch 2
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert json.loads((tmp_path / "progress.json").read_text()) == {"epochs_done": 1}

    resumed = train_translator(TrainConfig(**options), verbose=0)
    assert resumed["completed_steps"] == 9
    assert resumed["trained_steps_this_run"] == 6
    with open(tmp_path / "log.csv") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0", "1", "2"]


def test_cli_reports_bad_input_in_one_line(tmp_path):
    cli = ["-m", "keras_transformer.cli", "train"]
    missing = _run(*cli, "--corpus", str(tmp_path / "nope.tsv.gz"), "--output", str(tmp_path / "a"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr
    nonsense = _run(*cli, "--epochs", "zero")
    assert nonsense.returncode == 2 and "--epochs" in nonsense.stderr
    indivisible = _run(*cli, "--d-model", "10", "--num-heads", "3", "--output", str(tmp_path / "b"))
    assert indivisible.returncode == 2 and "not divisible" in indivisible.stderr


def test_output_folder_of_a_different_run_is_refused(tmp_path):
    train_translator(TrainConfig(output=str(tmp_path), epochs=1, steps_per_epoch=1, **TINY), verbose=0)
    with pytest.raises(TrainingError, match="different run.*d_model"):
        train_translator(TrainConfig(output=str(tmp_path), epochs=1, steps_per_epoch=1, **{**TINY, "d_model": 32}))
    with pytest.raises(TrainingError, match="finished run"):
        train_translator(TrainConfig(output=str(tmp_path), epochs=1, steps_per_epoch=1, **TINY))


def test_a_vocabulary_too_large_for_the_corpus_is_a_clear_error(tmp_path):
    options = {**TINY, "vocabulary_size": 100000}
    with pytest.raises(TrainingError, match="--vocabulary-size"):
        train_translator(TrainConfig(output=str(tmp_path), epochs=1, steps_per_epoch=1, **options), verbose=0)


def test_unwritable_output_fails_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(TrainingError, match="not writable"):
        train_translator(TrainConfig(output=str(blocker / "run"), epochs=1, steps_per_epoch=1, **TINY))
