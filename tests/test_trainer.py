"""The main job on the test fixture: train, resume after faults, refuse bad input."""

import csv
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import zipfile

import keras
import numpy as np
import pytest

from keras_transformer.training import model_flops
from keras_transformer.training import non_finite_loss
from keras_transformer.training import run_folder
from keras_transformer.training import trainer
from keras_transformer.training.train_config import TrainConfig
from keras_transformer.errors import UserInputError
from keras_transformer.training.trainer import train_translator

RESULTS = pathlib.Path(__file__).parent.parent / "benchmarks" / "results"

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
# 3 virtual epochs of 3 steps, with dropout (0.1), for the fault tests;
# lengths up to 24 keep the number of compiled batch shapes small.
RUN = dict(TINY, max_length=24, batch_tokens=240, epochs=3, steps_per_epoch=3)


class BatchEndThread(keras.callbacks.Callback):
    """Records whether each `on_train_batch_end` ran on the main thread; async-safe, so it changes nothing."""

    async_safe = True

    def __init__(self):
        super().__init__()
        self.on_main_thread = []

    def on_train_batch_end(self, batch, logs=None):
        self.on_main_thread.append(threading.current_thread() is threading.main_thread())
QUIET = dict(verbose=0, log=lambda message: None, sample_sentences=0)
KILL_AT_STEP = """
import os, signal, sys, keras
from keras_transformer.training.train_config import TrainConfig
from keras_transformer.training.trainer import train_translator

class KillAtStep(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        self.seen = getattr(self, "seen", 0) + 1
        if self.seen == int(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)

config = TrainConfig(**eval(sys.argv[1]))
train_translator(config, verbose=0, callbacks=[KillAtStep()], sample_sentences=0)
"""


def _run(*args, **kwargs):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600, **kwargs)


def _weights(path):
    return [keras.ops.convert_to_numpy(w) for w in keras.saving.load_model(path, compile=False).weights]


@pytest.fixture(scope="module")
def uninterrupted_run(tmp_path_factory):
    """`RUN` trained in one go: the reference the resumed runs must equal.

    Returns the summary, the weights and where its batch ends ran (`BatchEndThread`).
    """
    output = tmp_path_factory.mktemp("uninterrupted")
    threads = BatchEndThread()
    summary = train_translator(TrainConfig(output=str(output), **RUN), callbacks=[threads], **QUIET)
    return summary, _weights(output / "model.keras"), threads.on_main_thread


@pytest.fixture(scope="module")
def nan_stopped_run(tmp_path_factory):
    """`RUN` whose learning rate turns NaN at its 7th step (the first of epoch 3).

    The weights are NaN after step 7, so the loss of step 8 is the first
    that is not finite. Returns the output folder and the error.
    """
    from keras_transformer import training

    schedule = training.TransformerSchedule.__call__

    def poisoned(self, step):
        return keras.ops.where(keras.ops.greater_equal(step, 6), float("nan"), schedule(self, step))

    output = tmp_path_factory.mktemp("nan")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training.TransformerSchedule, "__call__", poisoned)
        with pytest.raises(UserInputError) as error:
            train_translator(TrainConfig(output=str(output), **RUN), **QUIET)
    return output, str(error.value)


def test_two_step_fit_writes_model_vocabulary_config_logs_and_summary(tmp_path):
    # A policy left in the process by other code decides nothing: float32 asked, float32 trained, and restored after.
    keras.config.set_dtype_policy("mixed_bfloat16")
    summary = train_translator(TrainConfig(output=str(tmp_path), epochs=1, steps_per_epoch=2, **TINY), verbose=0)
    assert keras.config.dtype_policy().name == "mixed_bfloat16"
    with zipfile.ZipFile(tmp_path / "model.keras") as saved:
        assert "mixed_bfloat16" not in saved.read("config.json").decode()
    assert summary["completed_steps"] == 2
    for key in ("train_loss", "dev_loss", "dev_token_accuracy", "tokens_per_second"):
        assert summary[key] is not None and summary[key] == summary[key], key  # not NaN
    for name in ("model.keras", "vocabulary.spm", "config.json", "summary.json", "log.csv", "logs"):
        assert (tmp_path / name).exists(), name
    # Speed: model FLOPs between those of the smallest and the largest batch the settings allow.
    config = TrainConfig(output=str(tmp_path), **TINY).resolved()
    sizes = dict(num_layers=config.num_layers, num_decoder_layers=config.num_layers, d_model=config.d_model,
                 ff_dim=config.ff_dim, vocabulary_size=config.vocabulary_size)
    smallest = model_flops.training_flops(source_length=1, target_length=1, batch_size=1, **sizes)
    largest = model_flops.training_flops(source_length=config.max_length, target_length=config.max_length,
                                         batch_size=config.batch_tokens, **sizes)
    assert smallest < summary["model_flops_per_step"] < largest
    assert summary["train_step_seconds"] > 0
    assert summary["model_flops_per_second"] == pytest.approx(summary["model_flops_per_step"]
                                                              / summary["train_step_seconds"])
    if model_flops.accelerator_name() is None:
        assert summary["mfu"] is None and summary["device"] == "cpu"


@pytest.mark.end_to_end
def test_killed_run_resumes_from_backup_and_ends_with_the_same_model(tmp_path, uninterrupted_run):
    options = dict(output=str(tmp_path), **RUN)
    killed = _run("-c", KILL_AT_STEP, repr(options), "5")  # mid-way through epoch 2
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert json.loads((tmp_path / "progress.json").read_text())["epochs_done"] == 1

    resumed = train_translator(TrainConfig(**options), **QUIET)
    assert resumed["completed_steps"] == 9
    assert resumed["trained_steps_this_run"] == 6
    with open(tmp_path / "log.csv") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0", "1", "2"]
    # Same batches, weights, optimizer state and dropout masks as one
    # uninterrupted run: the same model, up to float32 rounding.
    reference, reference_weights, _ = uninterrupted_run
    assert resumed["dev_loss"] == pytest.approx(reference["dev_loss"], rel=1e-5)
    for got, want in zip(_weights(tmp_path / "model.keras"), reference_weights):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.end_to_end
def test_a_run_resumed_on_the_python_pipeline_ends_with_the_model_of_the_tf_data_run(
    tmp_path, nan_stopped_run, uninterrupted_run
):
    # Trained 2 virtual epochs on tf.data (the default here), resumed on the
    # keras.utils.PyDataset: it starts at batch 7 of the same batch stream.
    output = tmp_path / "run"
    shutil.copytree(nan_stopped_run[0], output)
    messages = []
    summary = train_translator(
        TrainConfig(output=str(output), input_pipeline="python", **RUN), **{**QUIET, "log": messages.append}
    )
    assert any(m.startswith("input pipeline: python (keras.utils.PyDataset") for m in messages), messages
    assert summary["input_pipeline"] == "python"
    assert summary["completed_steps"] == 9 and summary["trained_steps_this_run"] == 3
    reference, reference_weights, _ = uninterrupted_run
    assert reference["input_pipeline"] == "tf.data"
    assert summary["dev_loss"] == pytest.approx(reference["dev_loss"], rel=1e-5)
    for got, want in zip(_weights(output / "model.keras"), reference_weights):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.skipif(keras.backend.backend() == "tensorflow",
                    reason="Keras runs callbacks on the main thread on TensorFlow (not thread-safe there)")
def test_the_host_queues_the_next_step_without_waiting_for_the_callbacks(uninterrupted_run):
    # Keras moves batch-end callbacks (and with them the float() of the loss
    # that waits for the step) off the main thread only when every callback is
    # async-safe: then the host prepares the next step while the device runs one.
    on_main_thread = uninterrupted_run[2]
    assert len(on_main_thread) == RUN["epochs"] * RUN["steps_per_epoch"]
    assert not any(on_main_thread)


@pytest.fixture
def model_reads_off_the_main_thread(monkeypatch):
    """The callbacks (class names) that read `Callback.model` off the main thread while the test runs.

    On JAX that read writes the running step's state back into the model
    (`jax_state_sync`) while the next steps consume it; on torch it reads
    weights the next step is updating in place. Either way it is a race,
    and whether a short run loses it depends on timing, so the read itself
    is what a test can catch every time.
    """
    reads = []
    read_model = keras.callbacks.Callback.model.fget

    def model(callback):
        if threading.current_thread() is not threading.main_thread():
            reads.append(type(callback).__name__)
        return read_model(callback)

    monkeypatch.setattr(keras.callbacks.Callback, "model", property(model))
    return reads


@pytest.mark.end_to_end
def test_the_cli_trains_resumes_and_translates_with_tensorboard_and_no_callback_reads_the_model_mid_step(
    tmp_path, capsys, model_reads_off_the_main_thread
):
    # Issue 31: on JAX, TensorBoard's first batch end read the model on a
    # worker thread; with the README's defaults the run died at its third step.
    import keras_transformer_cli as cli

    output = tmp_path / "run"
    flags = [*TINY_FLAGS, "--steps-per-epoch", "3", "--dev-bleu-sentences", "4", "--output", str(output)]
    cli.main(["train", *flags, "--epochs", "2"])
    assert json.loads((output / "summary.json").read_text())["trained_steps_this_run"] == 6
    cli.main(["train", *flags, "--epochs", "3"])  # a finished run continues from its last backup
    assert json.loads((output / "summary.json").read_text())["trained_steps_this_run"] == 3
    assert run_folder.read_progress(str(output))["epochs_done"] == 3
    events = [name for name in (output / "logs" / "train").iterdir() if name.name.startswith("events.out")]
    assert len(events) == 2, "each of the two runs writes its TensorBoard log"
    capsys.readouterr()
    cli.main(["translate", "--model", str(output), "Y dijo Dios: Sea la luz."])
    assert capsys.readouterr().out.strip()
    assert model_reads_off_the_main_thread == []


def test_nan_loss_stops_at_its_step_and_keeps_the_last_good_backup(nan_stopped_run):
    output, message = nan_stopped_run
    assert "loss became nan at step 8" in message
    assert "state after step 6 (virtual epoch 2)" in message
    assert json.loads((output / "progress.json").read_text())["epochs_done"] == 2
    assert not (output / "model.keras").exists() and not (output / "summary.json").exists()
    # The backup is the state after epoch 2, finite, not the NaN weights.
    model = trainer.build_translator(**TrainConfig(**RUN).resolved().model_arguments())
    model.optimizer.build(model.trainable_variables)
    model.load_weights(output / "backup" / "latest.weights.h5")
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 6
    assert all(np.isfinite(keras.ops.convert_to_numpy(w)).all() for w in model.weights)


def _checks_with_steps_7_to_9_begun_and_7_finite():
    """The NaN stop in virtual epoch 3 of 3 steps: steps 7, 8, 9 begun, step 7's loss checked and finite."""
    check = non_finite_loss.StopOnNonFiniteLoss(steps_per_epoch=3)
    check.on_epoch_begin(2)
    for batch in range(3):
        check.on_train_batch_begin(batch)
    check.on_train_batch_end(0, {"loss": 1.5})
    return check


@pytest.mark.backend_independent
def test_the_first_non_finite_step_is_named_when_a_later_check_finishes_first():
    # Keras checks the losses on several worker threads at once and may
    # surface a later step's error first (step 9 for the NaN of step 8 was
    # seen here); the trainer names the earliest once every check has run.
    check = _checks_with_steps_7_to_9_begun_and_7_finite()
    with pytest.raises(non_finite_loss.NonFiniteLoss) as later:
        check.on_train_batch_end(2, {"loss": float("nan")})
    assert later.value.step == 9
    assert check.first_failure(timeout=0).step == 9  # step 8 not checked yet

    def step_8():
        with pytest.raises(non_finite_loss.NonFiniteLoss):
            check.on_train_batch_end(1, {"loss": float("inf")})

    worker = threading.Timer(0.3, step_8)
    worker.start()
    first = check.first_failure(timeout=30)
    worker.join()
    assert (first.step, first.value) == (8, float("inf"))


@pytest.mark.backend_independent
def test_the_first_non_finite_step_is_named_without_waiting_for_a_step_keras_never_checks():
    # Keras raises a check's error when it dispatches the next step's end:
    # that step began and is never checked. Waiting for it cost the whole
    # timeout (60 s) on torch.
    check = _checks_with_steps_7_to_9_begun_and_7_finite()
    with pytest.raises(non_finite_loss.NonFiniteLoss):
        check.on_train_batch_end(1, {"loss": float("nan")})
    found = []
    waiter = threading.Thread(target=lambda: found.append(check.first_failure(timeout=None)), daemon=True)
    waiter.start()
    waiter.join(timeout=30)
    assert not waiter.is_alive(), "first_failure waited for step 9, whose check Keras never runs"
    assert found[0].step == 8


@pytest.mark.backend_independent
def test_a_damaged_newest_backup_falls_back_to_the_previous_one(tmp_path, nan_stopped_run, uninterrupted_run):
    output = tmp_path / "run"
    shutil.copytree(nan_stopped_run[0], output)
    latest = output / "backup" / "latest.weights.h5"
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])  # a write cut short
    messages = []
    summary = train_translator(TrainConfig(output=str(output), **RUN), **{**QUIET, "log": messages.append})
    assert any("latest.weights.h5 is unreadable" in m and "after virtual epoch 1" in m for m in messages), messages
    assert summary["completed_steps"] == 9 and summary["trained_steps_this_run"] == 6
    reference, reference_weights, _ = uninterrupted_run
    assert summary["dev_loss"] == pytest.approx(reference["dev_loss"], rel=1e-5)
    for got, want in zip(_weights(output / "model.keras"), reference_weights):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.backend_independent
def test_a_backup_cut_between_weights_and_metadata_is_not_trusted(tmp_path, nan_stopped_run):
    # Killed after BackupAndRestore wrote epoch 2's weights but before its
    # metadata: Keras alone would resume epoch 2's weights as if after epoch 1.
    output = tmp_path / "run"
    shutil.copytree(nan_stopped_run[0], output)
    backup = output / "backup"
    shutil.copyfile(backup / "training_metadata.json.bkp", backup / "training_metadata.json")
    model = trainer.build_translator(**TrainConfig(**RUN).resolved().model_arguments())
    messages = []
    assert run_folder.restore_point(model, str(output), 3, 2, messages.append) == 1
    assert "holds the state after step 6, but" in messages[0] and "says 1 virtual epochs" in messages[0]
    assert json.loads((backup / "training_metadata.json").read_text())["epoch"] == 1
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 3


@pytest.mark.backend_independent
def test_no_intact_backup_is_a_clear_error_that_changes_nothing(tmp_path, nan_stopped_run):
    output = tmp_path / "run"
    shutil.copytree(nan_stopped_run[0], output)
    backup = output / "backup"
    for name in ("latest.weights.h5", "latest.weights.h5.bkp"):
        (backup / name).write_bytes(b"not an HDF5 file")

    def files():  # config.json records the new --output path, a resumable change
        return {path: path.read_bytes() for path in output.rglob("*") if path.is_file() and path.name != "config.json"}

    before = files()
    unreadable = r"no intact backup.*latest\.weights\.h5 is unreadable.*\.bkp is unreadable.*--overwrite"
    with pytest.raises(UserInputError, match=unreadable):
        train_translator(TrainConfig(output=str(output), **RUN), **QUIET)
    assert files() == before

    shutil.rmtree(backup)
    with pytest.raises(UserInputError, match="records 2 finished virtual epochs.*holds no backup"):
        train_translator(TrainConfig(output=str(output), **RUN), **QUIET)


@pytest.mark.backend_independent
def test_too_little_disk_space_fails_before_training(tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=2**20))
    with pytest.raises(UserInputError, match=r"has 1\.0 MB free, but this run writes about .* MB"):
        train_translator(TrainConfig(output=str(tmp_path), **RUN), **QUIET)
    assert not any((tmp_path / name).exists() for name in ("backup", "log.csv", "vocabulary.spm", "model.keras"))


@pytest.mark.backend_independent
def test_cli_reports_bad_input_in_one_line(tmp_path):
    cli = ["-m", "keras_transformer_cli", "train"]
    missing = _run(*cli, "--corpus", str(tmp_path / "nope.tsv.gz"), "--output", str(tmp_path / "a"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert "Traceback" not in missing.stderr
    nonsense = _run(*cli, "--epochs", "zero")
    assert nonsense.returncode == 2 and "--epochs" in nonsense.stderr
    indivisible = _run(*cli, "--d-model", "10", "--num-heads", "3", "--output", str(tmp_path / "b"))
    assert indivisible.returncode == 2 and "not divisible" in indivisible.stderr


@pytest.mark.backend_independent
def test_a_different_run_is_refused_and_a_finished_one_continues_with_more_epochs(tmp_path):
    train_translator(TrainConfig(output=str(tmp_path), epochs=1, steps_per_epoch=1, **TINY), **QUIET)
    with pytest.raises(UserInputError, match="different run.*d_model"):
        train_translator(TrainConfig(output=str(tmp_path), epochs=1, steps_per_epoch=1, **{**TINY, "d_model": 32}))
    with pytest.raises(UserInputError, match="different run.*bucket_width: 8 -> 16"):
        train_translator(TrainConfig(output=str(tmp_path), epochs=1, steps_per_epoch=1, bucket_width=16, **TINY))
    with pytest.raises(UserInputError, match="finished run"):
        train_translator(TrainConfig(output=str(tmp_path), epochs=1, steps_per_epoch=1, **TINY))
    # The last backup outlives the run, so raising --epochs continues from it.
    more = train_translator(TrainConfig(output=str(tmp_path), epochs=2, steps_per_epoch=1, **TINY), **QUIET)
    assert more["completed_steps"] == 2 and more["trained_steps_this_run"] == 1


@pytest.mark.backend_independent
def test_bucket_width_and_input_pipeline_flags_reach_the_config_and_bad_values_are_refused():
    import keras_transformer_cli as cli

    args = cli.build_parser().parse_args(["train", "--bucket-width", "32", "--input-pipeline", "python"])
    assert (args.bucket_width, args.input_pipeline) == (32, "python")
    defaults = cli.build_parser().parse_args(["train"])
    assert (defaults.bucket_width, defaults.input_pipeline) == (TrainConfig.bucket_width, "auto") == (None, "auto")
    with pytest.raises(UserInputError, match="--input-pipeline must be one of auto, tf.data, python"):
        TrainConfig(output="unused", input_pipeline="grain", **TINY).resolved()
    with pytest.raises(UserInputError, match="--bucket-width must be positive"):
        TrainConfig(output="unused", bucket_width=0, **TINY).resolved()


@pytest.mark.backend_independent
@pytest.mark.parametrize("gpu, want", [
    (None, (8, None)),
    ("NVIDIA H100 80GB HBM3", (32, "bfloat16")),
    ("Tesla V100-SXM2-16GB", (32, None)),  # no bf16 tensor cores: float32
])
def test_the_machine_sets_the_bucket_width_and_precision_a_run_leaves_open(monkeypatch, gpu, want):
    from keras_transformer.training import model_flops
    from keras_transformer.training import presets

    monkeypatch.setattr(presets, "has_accelerator", lambda: gpu is not None)
    monkeypatch.setattr(model_flops, "accelerator_name", lambda: gpu)
    config = TrainConfig(output="unused", **TINY).resolved()
    assert (config.bucket_width, config.mixed_precision) == want
    # What a run sets, it keeps; float32 is spelled None once resolved (as in earlier config.json files).
    chosen = TrainConfig(output="unused", bucket_width=16, mixed_precision="float32", **TINY).resolved()
    assert (chosen.bucket_width, chosen.mixed_precision) == (16, None)
    assert TrainConfig(output="unused", mixed_precision="float16", **TINY).resolved().mixed_precision == "float16"


@pytest.mark.backend_independent
@pytest.mark.parametrize("gpu", [None, "NVIDIA H200"])
def test_the_default_run_is_tiny_trained_longer_on_larger_batches_on_a_gpu(monkeypatch, gpu):
    from keras_transformer.training import model_flops
    from keras_transformer.training import presets

    monkeypatch.setattr(presets, "has_accelerator", lambda: gpu is not None)
    monkeypatch.setattr(model_flops, "accelerator_name", lambda: gpu)
    config = TrainConfig(output="unused").resolved()
    settings = ("preset", "epochs", "steps_per_epoch", "warmup_steps", "batch_tokens", "vocabulary_size",
                "mixed_precision")
    got = {key: getattr(config, key) for key in settings}
    if gpu is None:  # the CPU default as measured on the 2-core EPYC
        assert got == dict(preset="tiny", epochs=16, steps_per_epoch=100, warmup_steps=400, batch_tokens=4096,
                           vocabulary_size=4000, mixed_precision=None)
    else:  # the recipe measured on one H200 (benchmarks/results/gpu-h200-default/config.json)
        with open(os.path.join(RESULTS, "gpu-h200-default", "config.json")) as f:
            measured = json.load(f)
        assert got == {key: measured[key] for key in settings}
    # What a run sets, it keeps; another preset keeps its own defaults on a GPU.
    assert TrainConfig(output="unused", batch_tokens=2048, epochs=3).resolved().batch_tokens == 2048
    base = TrainConfig(output="unused", preset="base").resolved()
    assert (base.epochs, base.steps_per_epoch, base.warmup_steps, base.batch_tokens) == (20, 500, 4000, 4096)


@pytest.mark.backend_independent
def test_a_vocabulary_too_large_for_the_corpus_is_a_clear_error(tmp_path):
    options = {**TINY, "vocabulary_size": 100000}
    with pytest.raises(UserInputError, match="--vocabulary-size"):
        train_translator(TrainConfig(output=str(tmp_path), epochs=1, steps_per_epoch=1, **options), verbose=0)


@pytest.mark.backend_independent
def test_unwritable_output_fails_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(UserInputError, match="not writable"):
        train_translator(TrainConfig(output=str(blocker / "run"), epochs=1, steps_per_epoch=1, **TINY))


@pytest.mark.parametrize("mixed_precision", [None, "bfloat16"])
def test_the_non_finite_loss_message_names_the_step_and_what_to_try(tmp_path, mixed_precision):
    config = TrainConfig(**{**RUN, "output": str(tmp_path), "mixed_precision": mixed_precision}).resolved()
    message = str(non_finite_loss.stop_error(non_finite_loss.NonFiniteLoss(8, float("nan")), config))
    assert "loss became nan at step 8" in message
    assert "--warmup-steps" in message
    if mixed_precision:
        assert "--no-flash-attention resumes" in message and "float32" in message
    else:
        assert "flash-attention" not in message


def test_no_flash_attention_reaches_every_attention_layer_and_keeps_the_outputs(tmp_path):
    config = TrainConfig(**{**RUN, "output": str(tmp_path)}).resolved()
    tokens = {"encoder_tokens": np.array([[5, 6, 7, 0]]), "decoder_tokens": np.array([[2, 9, 0, 0]])}
    outputs = {}
    for flash_attention in (None, False):
        keras.utils.set_random_seed(0)
        model = trainer.build_translator(**dataclasses.replace(config, flash_attention=flash_attention).model_arguments())
        attention = [getattr(layer, name) for layer in model.layers
                     for name in ("self_attention", "cross_attention") if hasattr(layer, name)]
        assert attention and all(layer.flash_attention is flash_attention for layer in attention)
        outputs[flash_attention] = keras.ops.convert_to_numpy(model(tokens))
    np.testing.assert_allclose(outputs[False], outputs[None], atol=1e-5)


def _seconds(text):
    number, unit = text.split()
    return float(number) * {"s": 1, "min": 60, "h": 3600}[unit]


@pytest.mark.backend_independent
def test_train_says_how_long_the_run_should_take_and_how_long_it_took(tmp_path):
    lines = []
    summary = train_translator(TrainConfig(output=str(tmp_path / "run"), **dict(RUN, epochs=4)),
                               verbose=0, log=lines.append, sample_sentences=0)
    estimates = [line for line in lines if line.startswith("time after virtual epoch")]
    assert [line.split(":")[0] for line in estimates] == ["time after virtual epoch 1", "time after virtual epoch 2"]
    assert "3 more virtual epochs" in estimates[0] and "2 more virtual epochs" in estimates[1]
    said = re.search(r"about (\d+\.?\d* (?:s|min|h)) for the whole run, (\d+\.?\d* (?:s|min|h)) left", estimates[1])
    estimate, left = _seconds(said.group(1)), _seconds(said.group(2))
    took = re.search(r"^time: the run took (\d+\.?\d* (?:s|min|h)) \(estimated after virtual epoch 2: "
                     r"(\d+\.?\d* (?:s|min|h))\)$", lines[-1])
    assert took and _seconds(took.group(2)) == estimate
    # What is certain: the run's time as measured, and an estimate that adds a time left to a time
    # already spent, which the whole run's time includes. How close it comes is a benchmark's matter (benchmarks/verb_wait.py): a run of a
    # few seconds shares the cores with another test worker, whose compiles can triple one virtual
    # epoch (CI, 2026-11-28: 8 s estimated for a run of 23.5 s).
    wall = summary["wall_seconds"]
    assert abs(_seconds(took.group(1)) - wall) <= 1
    assert 0 <= left < estimate and estimate - left <= wall + 1
