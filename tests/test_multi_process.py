"""A job of two JAX processes on 127.0.0.1, started as docs/scaling-out.md tells a user to start one on two hosts.

Each process is `keras-transformer train --distribute data` with its own
`KERAS_DISTRIBUTION_PROCESS_ID` and `--output`; they meet at a coordinator
on a free port of 127.0.0.1 and all-reduce over gloo. Every process runs
under `timeout` and is killed when its test ends, whatever happened.

TensorFlow's multi-worker training is refused; the last tests check the
refusal and the reason for it, two `MultiWorkerMirroredStrategy` workers
whose Keras `fit` fails (when Keras fixes it, that test fails: wire it in).
"""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

import keras_transformer_cli as cli
from keras_transformer.training import distribute
from keras_transformer.errors import UserInputError

jax_only = pytest.mark.skipif(keras.backend.backend() != "jax", reason="several processes: JAX's runtime")
tensorflow_only = pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow's multi-worker")

FIXTURE = str(pathlib.Path(__file__).parent / "fixtures" / "bible_es_en_small.tsv.gz")
FLAGS = [
    "--corpus", FIXTURE, "--preset", "tiny", "--num-layers", "1", "--d-model", "16", "--num-heads", "2",
    "--ff-dim", "32", "--max-length", "24", "--vocabulary-size", "400", "--batch-tokens", "240",
    "--warmup-steps", "5", "--dev-bleu-sentences", "0", "--epochs", "3", "--steps-per-epoch", "2",
    "--distribute", "data",
]
SECONDS_A_PROCESS = 150
# The coordinator declares a silent process lost after this many seconds.
HEARTBEAT_SECONDS = "10"


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _start(output, log, process_id=None, port=None, env=None, extra_flags=()):
    """One `keras-transformer train` process of the job (or alone, without `process_id`)."""
    environment = {**os.environ, "KERAS_BACKEND": "jax", **(env or {})}
    if process_id is not None:
        environment.update(
            KERAS_DISTRIBUTION_JOB_ADDRESSES=f"127.0.0.1:{port}", KERAS_DISTRIBUTION_NUM_PROCESSES="2",
            KERAS_DISTRIBUTION_PROCESS_ID=str(process_id), KERAS_TRANSFORMER_HEARTBEAT_SECONDS=HEARTBEAT_SECONDS,
        )
    command = ["timeout", "-s", "KILL", str(SECONDS_A_PROCESS), sys.executable, "-m", "keras_transformer_cli",
               "train", *FLAGS, *extra_flags, "--output", str(output)]
    return subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _reap(processes):
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _job(folder, name, kill_process_1_after_epochs=None, extra_flags=()):
    """Runs the 2-process job writing `folder/NAME-0` and `folder/NAME-1`; returns their exit codes and logs.

    With `kill_process_1_after_epochs`, process 1 is killed once it has
    backed up that many virtual epochs, in the middle of the next one.
    """
    port, processes, logs = _free_port(), [], []
    try:
        for process_id in (0, 1):
            logs.append(folder / f"{name}-{process_id}.log")
            with open(logs[-1], "w") as log:
                processes.append(_start(folder / f"{name}-{process_id}", log, process_id, port,
                                        extra_flags=extra_flags))
        if kill_process_1_after_epochs is not None:
            progress = folder / f"{name}-1" / "progress.json"
            deadline = time.monotonic() + SECONDS_A_PROCESS
            while time.monotonic() < deadline and processes[1].poll() is None:
                if progress.exists() and json.loads(progress.read_text())["epochs_done"] >= kill_process_1_after_epochs:
                    break
                time.sleep(0.05)
            os.killpg(processes[1].pid, signal.SIGKILL)
        codes = [process.wait(timeout=SECONDS_A_PROCESS + 10) for process in processes]
    finally:
        _reap(processes)
    return codes, [log.read_text() for log in logs]


def _losses(output):
    lines = (output / "log.csv").read_text().splitlines()[1:]
    return [float(line.split(",")[1]) for line in lines]


def _weights(output):
    import keras_transformer  # noqa: F401 (registers the layers)

    model = keras.saving.load_model(output / "model.keras", compile=False)
    return [keras.ops.convert_to_numpy(weight) for weight in model.weights]


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The job run once uninterrupted, and one process alone on two virtual devices: the same global batches."""
    folder = tmp_path_factory.mktemp("job")
    with open(folder / "alone.log", "w") as log:
        alone = _start(folder / "alone", log, env={
            "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
        })
        try:
            assert alone.wait(timeout=SECONDS_A_PROCESS + 10) == 0, (folder / "alone.log").read_text()[-3000:]
        finally:
            _reap([alone])
    codes, logs = _job(folder, "whole")
    assert codes == [0, 0], "\n".join(log[-3000:] for log in logs)
    return folder


@pytest.mark.processes
@jax_only
def test_two_processes_train_as_one_process_on_two_devices(job):
    assert "2 processes" in (job / "whole-0.log").read_text()
    reference = _losses(job / "alone")
    assert len(reference) == 3
    for process_id in (0, 1):
        np.testing.assert_allclose(_losses(job / f"whole-{process_id}"), reference, rtol=1e-5)
    for got, want in zip(_weights(job / "whole-0"), _weights(job / "alone")):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.processes
@jax_only
def test_each_process_writes_its_own_folder_and_process_0s_model_translates(job):
    for process_id in (0, 1):
        claim = json.loads((job / f"whole-{process_id}" / "process.json").read_text())
        assert claim == {"process_id": process_id, "num_processes": 2}
    sentences = ["Y dijo Dios: Sea la luz.", "En el principio creó Dios los cielos y la tierra."]
    translations = {}
    for name in ("whole-0", "alone"):
        translated = subprocess.run(
            [sys.executable, "-m", "keras_transformer_cli", "translate", "--model", str(job / name), *sentences],
            capture_output=True, text=True, timeout=SECONDS_A_PROCESS, env={**os.environ, "KERAS_BACKEND": "jax"},
        )
        assert translated.returncode == 0, translated.stderr[-2000:]
        translations[name] = translated.stdout.splitlines()
    # A model of 6 steps may well say nothing yet; it must say what the one-process model says.
    assert len(translations["whole-0"]) == len(sentences)
    assert translations["whole-0"] == translations["alone"]


@pytest.mark.processes
@jax_only
def test_two_processes_given_one_folder_stop_with_a_clear_error(tmp_path):
    port, processes = _free_port(), []
    try:
        for process_id in (0, 1):
            with open(tmp_path / f"{process_id}.log", "w") as log:
                processes.append(_start(tmp_path / "shared", log, process_id, port))
        codes = [process.wait(timeout=SECONDS_A_PROCESS + 10) for process in processes]
    finally:
        _reap(processes)
    assert all(code != 0 for code in codes)
    logs = "".join((tmp_path / f"{process_id}.log").read_text() for process_id in (0, 1))
    assert "Give each process of the job its own --output" in logs


@pytest.mark.processes
@jax_only
def test_a_killed_process_stops_the_other_with_a_clear_error_and_the_job_resumes_to_the_same_weights(job, tmp_path):
    start = time.monotonic()
    codes, logs = _job(tmp_path, "killed", kill_process_1_after_epochs=1)
    assert codes[1] == -signal.SIGKILL
    assert codes[0] == 2, logs[0][-3000:]
    assert "process 0 of 2: process 1 stopped answering" in logs[0], logs[0][-3000:]
    assert time.monotonic() - start < SECONDS_A_PROCESS
    # The same commands again: both processes resume from their backups.
    codes, logs = _job(tmp_path, "killed")
    assert codes == [0, 0], "\n".join(log[-3000:] for log in logs)
    assert all("resuming after epoch" in log for log in logs)
    for process_id in (0, 1):
        for got, want in zip(_weights(tmp_path / f"killed-{process_id}"), _weights(job / "whole-0")):
            np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.processes
@jax_only
def test_streamed_two_process_job_reads_each_process_its_own_lines(tmp_path):
    codes, logs = _job(tmp_path, "stream", extra_flags=["--stream", "--epochs", "2"])
    assert codes == [0, 0], "\n".join(log[-3000:] for log in logs)
    for process_id, log in enumerate(logs):
        assert f"stream: host {process_id} of 2 keeps every 2-th line from line {process_id + 1}" in log
    # One job: the loss each process logs is the global batch's, the same in both.
    losses = [_losses(tmp_path / f"stream-{process_id}") for process_id in (0, 1)]
    assert len(losses[0]) == 2 and np.all(np.isfinite(losses[0]))
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)


MULTI_WORKER_FIT = """
import numpy as np, tensorflow as tf, keras
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
data = tf.data.Dataset.from_tensor_slices((np.ones((16, 4), "float32"), np.ones((16, 1), "float32"))).batch(8)
print("LOSS", model.fit(data, epochs=1, verbose=0).history["loss"])
"""


@pytest.mark.processes
@tensorflow_only
def test_keras_fit_under_multi_worker_mirrored_strategy_still_fails_which_is_why_it_is_refused(tmp_path):
    ports = [_free_port(), _free_port()]
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    workers = []
    try:
        for index in (0, 1):
            config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
            with open(tmp_path / f"{index}.log", "w") as log:
                workers.append(subprocess.Popen(
                    ["timeout", "-s", "KILL", "120", sys.executable, "-c", MULTI_WORKER_FIT],
                    env={**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CONFIG": config},
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                ))
        codes = [worker.wait(timeout=130) for worker in workers]
    finally:
        _reap(workers)
    logs = [(tmp_path / f"{index}.log").read_text() for index in (0, 1)]
    assert all(code != 0 for code in codes), "Keras' fit works under MultiWorkerMirroredStrategy now: wire it in"
    assert all("Attempt to convert a value (PerReplica" in log for log in logs), logs[0][-3000:]


@tensorflow_only
def test_train_refuses_tensorflow_workers_with_the_reason(monkeypatch, capsys):
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}))
    with pytest.raises(SystemExit) as stop:
        cli.main(["train", "--distribute", "data", "--output", "unused"])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert "TF_CONFIG names 2 workers" in error and "keras-team/keras#20585" in error and "KERAS_BACKEND=jax" in error


@pytest.mark.skipif(keras.backend.backend() == "jax", reason="JAX runs jobs of several processes")
def test_several_processes_on_another_backend_are_refused(monkeypatch):
    monkeypatch.setenv(distribute.NUM_PROCESSES_VARIABLE, "2")
    monkeypatch.setenv(distribute.PROCESS_ID_VARIABLE, "0")
    monkeypatch.setenv(distribute.JOB_ADDRESSES_VARIABLE, "127.0.0.1:1")
    with pytest.raises(UserInputError, match="set KERAS_BACKEND=jax"):
        distribute.join_processes()


def test_malformed_job_variables_are_clear_errors(monkeypatch):
    monkeypatch.setenv(distribute.NUM_PROCESSES_VARIABLE, "two")
    with pytest.raises(UserInputError, match="must be integers"):
        distribute.join_processes()
