"""The run folder: its files, preparing and resuming it, backups, dropout's random state.

A training run writes everything into one folder (`--output`):

- `config.json` (`CONFIG_FILE`): the `TrainConfig`; a run resumes only with the same one.
- `vocabulary.spm` (`VOCABULARY_FILE`): the SentencePiece model.
- `model.keras` (`MODEL_FILE`): the trained model: the weights with the best dev
  BLEU, saved when they are scored (`model_selection`).
- `model_selection.json` (`SELECTION_FILE`): dev BLEU per virtual epoch, and what was kept.
- `checkpoints/` (`CHECKPOINT_FOLDER`): the last weights averaged with `--average-last`.
- `log.csv` (`LOG_FILE`), `logs/` (`TENSORBOARD_FOLDER`): metrics per virtual epoch.
- `learning_curve.png` (`LEARNING_CURVE_FILE`): loss and dev BLEU against steps.
- `progress.json` (`PROGRESS_FILE`): finished virtual epochs and dropout's random state.
- `summary.json` (`SUMMARY_FILE`): the final figures.
- `backup/` (`BACKUP_FOLDER`): the last two backups, for resuming.
- `process.json` (`PROCESS_FILE`): in a job of several processes, which
  process writes this folder; each process needs its own.
"""

import dataclasses
import json
import os
import shutil

import keras

from keras_transformer.training import distribute
from keras_transformer.errors import UserInputError
from keras_transformer.training.train_config import RESUMABLE_CHANGES
from keras_transformer.training.train_config import TrainConfig
from keras_transformer_runtime.run_files import MODEL_FILE  # noqa: F401 (part of this module's names)
from keras_transformer_runtime.run_files import VOCABULARY_FILE  # noqa: F401

CONFIG_FILE, SUMMARY_FILE, PROGRESS_FILE = "config.json", "summary.json", "progress.json"
BACKUP_FOLDER, LOG_FILE = "backup", "log.csv"
# What keras.callbacks.BackupAndRestore(double_checkpoint=True) writes.
_BACKUP_WEIGHTS, _BACKUP_METADATA = "latest.weights.h5", "training_metadata.json"
TENSORBOARD_FOLDER = "logs"
SELECTION_FILE, CHECKPOINT_FOLDER, LEARNING_CURVE_FILE = "model_selection.json", "checkpoints", "learning_curve.png"
PROCESS_FILE = "process.json"
# Disk use: float32 weights and Adam's two moments (3 x 4 bytes a parameter)
# in model.keras and in each of the two backups, plus logs and vocabulary.
_BYTES_PER_PARAMETER = 3 * 4 * 3
_LOG_BYTES = 16 * 2**20


def read_json(path):
    with open(path) as f:
        return json.load(f)


def write_json(path, value):
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        json.dump(value, f, indent=2, sort_keys=True)
    os.replace(temporary, path)  # atomic: a kill never leaves half a file


def prepare_output(output, settings, total_steps, overwrite=False, process_id=0, num_processes=1):
    """Checks the output folder before any work, and says whether to resume.

    With `overwrite`, the previous run's progress, summary, backups and
    `log.csv` are removed (its `model.keras` stays until the new run
    replaces it). In a job of several processes, the first to prepare the
    folder claims it (`process.json`), and any other process is refused it.

    Args:
        output: the run folder (`--output`).
        settings: dict, the run's resolved `TrainConfig` as
            `dataclasses.asdict` gives it: written as `config.json`, and
            held against the one a resumed run wrote.
        total_steps: int, the run's optimizer steps: a folder that holds
            them all is a finished run.
        overwrite: start again even if the folder holds this run.
        process_id: int, this process's index in its job.
        num_processes: int, the processes in the job.

    Returns:
        The number of virtual epochs already done (0 for a new run), as
        `progress.json` records it; `train_translator` checks it against
        the backups.

    Raises:
        UserInputError: the folder is unwritable, holds a different model,
            or holds a finished run (unless `overwrite`).
    """
    # Named for this process: processes of a job that start on one folder at once must not remove each other's.
    probe = os.path.join(output, f".write-test-{os.getpid()}")
    try:
        os.makedirs(output, exist_ok=True)
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as error:
        raise UserInputError(f"--output {output!r} is not writable: {error.strerror}.")
    if num_processes > 1:
        _claim_for_process(output, process_id, num_processes)
    config_path = os.path.join(output, CONFIG_FILE)
    if overwrite or not os.path.exists(config_path):
        for name in (PROGRESS_FILE, SUMMARY_FILE, LOG_FILE, SELECTION_FILE, LEARNING_CURVE_FILE):
            if os.path.exists(os.path.join(output, name)):
                os.remove(os.path.join(output, name))
        # A backup or checkpoint of another run would otherwise be restored into this one.
        for folder in (BACKUP_FOLDER, CHECKPOINT_FOLDER):
            shutil.rmtree(os.path.join(output, folder), ignore_errors=True)
        write_json(config_path, settings)
        return 0
    saved = read_json(config_path)
    # A field newer than the saved run's config had its default there.
    defaults = {field.name: field.default for field in dataclasses.fields(TrainConfig)}
    different = sorted(
        key for key in settings
        if key not in RESUMABLE_CHANGES and saved.get(key, defaults[key]) != settings[key]
    )
    if different:
        changes = ", ".join(f"{key}: {saved.get(key)!r} -> {settings[key]!r}" for key in different)
        raise UserInputError(
            f"--output {output!r} holds a different run ({changes}). "
            "Use another --output, the same settings to resume, or --overwrite."
        )
    summary_path = os.path.join(output, SUMMARY_FILE)
    if os.path.exists(summary_path) and read_json(summary_path).get("completed_steps", 0) >= total_steps:
        raise UserInputError(
            f"--output {output!r} already holds a finished run of {total_steps} steps. "
            "Raise --epochs to train further, or use --overwrite to start again."
        )
    write_json(config_path, settings)
    return read_progress(output).get("epochs_done", 0)


def _claim_for_process(output, process_id, num_processes):
    """Makes `output` this process's folder, or refuses one that another process of the job writes."""
    path = os.path.join(output, PROCESS_FILE)
    claim = {"process_id": process_id, "num_processes": num_processes}
    temporary = f"{path}.{process_id}.tmp"
    with open(temporary, "w") as f:
        json.dump(claim, f)
    try:
        # A hard link is created whole or not at all, and never over an existing
        # file: of two processes starting on one folder at once, one gets it.
        os.link(temporary, path)
    except FileExistsError:
        pass
    finally:
        os.remove(temporary)
    try:
        owner = read_json(path)
    except (OSError, ValueError):
        owner = None
    if owner != claim:
        raise UserInputError(
            f"--output {output!r} is written by "
            + (f"process {owner['process_id']} of a job of {owner['num_processes']}"
               if isinstance(owner, dict) and {"process_id", "num_processes"} <= set(owner) else "another process")
            + f"; this is process {process_id} of {num_processes}. Give each process of the job its own "
            "--output (on several hosts, a folder on each host's own disk)."
        )


def read_progress(output):
    path = os.path.join(output, PROGRESS_FILE)
    try:
        return read_json(path) if os.path.exists(path) else {}
    except (OSError, ValueError):
        return {}  # the backups decide where to resume; this file only adds the RNG state


def _seed_states(model):
    # In model order: the generators' names carry process-wide counters.
    return [v for v in model.variables if v.path.endswith("seed_generator_state")]


def _random_state(model):
    """Dropout's random state, which backups miss: seed-generator variables
    (not weights) and, on torch, the global generators its unseeded dropout
    draws from."""
    state = {"seed_generators": [keras.ops.convert_to_numpy(v).tolist() for v in _seed_states(model)]}
    if keras.backend.backend() == "torch":
        import torch

        state["torch"] = torch.get_rng_state().tolist()
        if torch.cuda.is_available():
            state["torch_cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def _set_random_state(model, state):
    variables = _seed_states(model)
    if len(state.get("seed_generators", ())) == len(variables):
        for variable, value in zip(variables, state["seed_generators"]):
            variable.assign(keras.ops.convert_to_tensor(value, variable.dtype))
    if keras.backend.backend() == "torch" and "torch" in state:
        import torch

        torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
        if "torch_cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["torch_cuda"]])


class RestoreRandomState(keras.callbacks.Callback):
    """Sets the random state of the epoch a run resumes after, right before
    its first step: `fit` draws from torch's global generator before that
    (a new data loader takes a seed from it), which an uninterrupted run
    does only once, at its start."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_train_batch_begin(self, batch, logs=None):
        if self.state:
            _set_random_state(self.model, self.state)
            self.state = None


class ProgressFile(keras.callbacks.Callback):
    """Records finished virtual epochs and dropout's random state, after the backup.

    The random state of the previous epoch is kept too, for a resume from
    the previous backup; with it a resumed run draws the same dropout masks
    as an uninterrupted one.

    Args:
        path: the run's `progress.json`.
        epochs_done: int, the virtual epochs done before this `fit`; the
            attribute `epochs_done` then follows each epoch recorded.
    """

    def __init__(self, path, epochs_done=0):
        super().__init__()
        self.path = path
        self.epochs_done = epochs_done

    def on_epoch_end(self, epoch, logs=None):
        states = {str(epoch + 1): _random_state(self.model)}
        previous = read_progress(os.path.dirname(self.path)).get("random_states")
        if isinstance(previous, dict) and str(epoch) in previous:
            states[str(epoch)] = previous[str(epoch)]
        write_json(self.path, {"epochs_done": epoch + 1, "random_states": states})
        self.epochs_done = epoch + 1


class EpochBackup(keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore` that backs up once a virtual epoch, and lets steps queue.

    Keras runs the callbacks' batch-end work on a worker thread (JAX and
    torch) only when every callback is `async_safe` or has none; otherwise
    it waits for each step to finish before it starts the next one, and a
    GPU idles while the host prepares it. `BackupAndRestore` defines a
    batch-end hook, which does nothing when it saves at epoch ends, so
    this one says it is async-safe.

    Args:
        backup_dir: str, the folder of the backups. Two are kept
            (`double_checkpoint=True`) and neither is deleted at the end of
            training, so a larger `--epochs` continues the run.

    Example:

    >>> import tempfile
    >>> EpochBackup(tempfile.mkdtemp()).async_safe
    True
    """

    async_safe = True

    def __init__(self, backup_dir):
        super().__init__(backup_dir, save_freq="epoch", double_checkpoint=True, delete_checkpoint=False)



def _size(num_bytes):
    for unit in ("bytes", "KB", "MB", "GB"):
        if abs(num_bytes) < 1024 or unit == "GB":
            return f"{num_bytes:.0f} {unit}" if unit == "bytes" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024


def check_free_space(output, parameters, checkpoints=0):
    """Fails before training when the folder cannot hold what the run writes
    (with `checkpoints` kept for averaging, 4 bytes a parameter each)."""
    backup = os.path.join(output, BACKUP_FOLDER)
    existing = [os.path.join(output, MODEL_FILE)] + (
        [os.path.join(backup, name) for name in os.listdir(backup)] if os.path.isdir(backup) else []
    )
    # Files this run rewrites in place need no more room than they already take.
    needed = parameters * (_BYTES_PER_PARAMETER + 4 * checkpoints) + _LOG_BYTES
    needed -= sum(os.path.getsize(path) for path in existing if os.path.isfile(path))
    free = shutil.disk_usage(output).free
    if free < needed:
        raise UserInputError(
            f"--output {output!r} has {_size(free)} free, but this run writes about {_size(needed)} "
            f"(model.keras and two backups, each with the Adam moments of {parameters:,} parameters, "
            + (f"{checkpoints} checkpoints to average, " if checkpoints else "")
            + "plus logs). Free some space or choose another --output."
        )


def _backup_error(path, error):
    reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"{path} is unreadable ({reason[:160]})"


def _check_backup(model, weights, metadata, steps_per_epoch):
    """(virtual epochs, None) for an intact backup, else (None, the reason)."""
    for path in (weights, metadata):
        if not os.path.isfile(path):
            return None, f"{path} is missing"
    try:
        epochs = int(read_json(metadata)["epoch"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        return None, _backup_error(metadata, error)
    try:
        model.load_weights(weights)
    except Exception as error:  # h5py raises OSError, KeyError or ValueError on damaged files
        return None, _backup_error(weights, error)
    steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    if steps != epochs * steps_per_epoch:
        return None, (
            f"{weights} holds the state after step {steps}, but {metadata} says {epochs} virtual "
            f"epochs of {steps_per_epoch} steps (a backup interrupted half-way)"
        )
    return epochs, None


def restore_point(model, output, steps_per_epoch, recorded_epochs, log, placement=None):
    """Checks the backups before training; returns the virtual epochs to resume after.

    `keras.callbacks.BackupAndRestore` would restore the newest backup and,
    only if it cannot be opened at all, the previous one, without a word;
    with no backup it starts from scratch. Here every backup is loaded and
    its optimizer step compared with its epoch first. A damaged newest
    backup is replaced by the previous one (said in the log); if neither is
    intact, or `progress.json` records finished epochs but no backup exists,
    training does not start.

    In a job of several processes (`placement`, a `distribute.Placement`),
    one killed while the others wrote their backups of an epoch is an
    epoch behind them, so they resume from their previous backup, of that
    epoch: the job resumes after the epoch every process has backed up.
    """
    epochs = _restore_point(model, output, steps_per_epoch, recorded_epochs, log)
    if placement is None:
        return epochs
    job_epochs = distribute.agreed_epochs(epochs, placement)
    if job_epochs < epochs:  # killed between this process's backup and another's
        epochs = _restore_point(model, output, steps_per_epoch, recorded_epochs, log, at_most=job_epochs)
    return epochs


def _restore_point(model, output, steps_per_epoch, recorded_epochs, log, at_most=None):
    folder = os.path.join(output, BACKUP_FOLDER)
    latest = (os.path.join(folder, _BACKUP_WEIGHTS), os.path.join(folder, _BACKUP_METADATA))
    previous = tuple(path + ".bkp" for path in latest)
    if not any(os.path.exists(path) for path in latest + previous):
        if recorded_epochs:
            raise UserInputError(
                f"{os.path.join(output, PROGRESS_FILE)} records {recorded_epochs} finished virtual epochs, "
                f"but {folder} holds no backup of them, so this run cannot resume; nothing was changed. "
                "Put the backup folder back, or use --overwrite to start again from scratch."
            )
        return 0
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    epochs, reason = _check_backup(model, *latest, steps_per_epoch)
    if reason is None and (at_most is None or epochs <= at_most):
        return epochs
    if reason is None:
        reason = f"the newest backup is of virtual epoch {epochs}, and another process of the job resumes after {at_most}"
    # Keras picks the weights format by file extension, so the previous
    # backup is checked under a .weights.h5 name, then moved where
    # BackupAndRestore reads.
    candidate = os.path.join(output, ".previous-backup.weights.h5")
    try:
        previous_reason = f"{previous[0]} is missing"
        if os.path.isfile(previous[0]):
            shutil.copyfile(previous[0], candidate)
            epochs, previous_reason = _check_backup(model, candidate, previous[1], steps_per_epoch)
            if previous_reason is None and at_most is not None and epochs != at_most:
                previous_reason = f"the previous backup is of virtual epoch {epochs}, not {at_most}"
        if previous_reason is not None:
            raise UserInputError(
                f"no intact backup to resume from: {reason}; {previous_reason.replace(candidate, previous[0])}. "
                "Nothing was changed. Use --overwrite to start again from scratch, or another --output."
            )
        shutil.copyfile(previous[1], latest[1] + ".tmp")
        os.replace(candidate, latest[0])
        os.replace(latest[1] + ".tmp", latest[1])
    finally:
        if os.path.exists(candidate):
            os.remove(candidate)
    log(f"backup: {reason}; resuming from the previous backup, after virtual epoch {epochs}")
    return epochs
