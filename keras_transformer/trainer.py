"""The package's main job: train a Spanish -> English translator end to end.

corpus -> SentencePiece vocabulary -> bucketed batches -> functional
Transformer -> `model.fit` with the paper's schedule and a masked,
label-smoothed loss -> an output folder holding the model, the vocabulary,
the config and the logs. `keras-transformer train` is a thin layer over
`train_translator`.

The batches come from `tf.data` wherever TensorFlow imports, else from a
`keras.utils.PyDataset` tokenized with the `sentencepiece` library
(`input_pipeline`): the same batches either way (one NumPy batch plan), so
a run can even resume on the other one. TensorFlow is imported only on the
`tf.data` path, for TensorBoard logs and for `tf.distribute`.

Training runs as `epochs` "virtual epochs" of `steps_per_epoch` steps over a
repeated dataset. A backup is written at the end of each one, so a killed
run, started again with the same command, resumes from the last virtual
epoch, skips the batches it already trained on, and ends after the same
number of steps as an uninterrupted run. A damaged backup is detected
before training (the previous one is used, or the run stops with a message;
it never silently starts again from scratch), a NaN or infinite loss stops
the run at that step with the last good backup kept, and too little free
disk space fails before the first step.

`distribute="data"` or `"model"` spreads training over the visible devices
with Keras' and TensorFlow's own engines: `keras.distribution.DataParallel`
or `ModelParallel` (the layout of `model_parallel_layout_map`) on JAX,
`tf.distribute.MirroredStrategy` on TensorFlow. Batches stay global
batches, split across the devices.
"""

import contextlib
import dataclasses
import json
import math
import os
import shutil
import time

import keras
import numpy as np

from keras_transformer.data.batch_plan import BUCKET_WIDTH

PRESETS = {
    "tiny": dict(num_layers=2, d_model=128, num_heads=4, ff_dim=512),
    "small": dict(num_layers=3, d_model=256, num_heads=4, ff_dim=1024),
    "base": dict(num_layers=6, d_model=512, num_heads=8, ff_dim=2048),
    "big": dict(num_layers=6, d_model=1024, num_heads=16, ff_dim=4096),
}
DISTRIBUTE_MODES = ("data", "model")
INPUT_PIPELINES = ("auto", "tf.data", "python")
# Fields that may differ when a run is resumed in the same folder (a backup
# holds whole arrays, so it reloads onto another number of devices; both
# input pipelines yield the same batches).
_RESUMABLE_CHANGES = ("output", "epochs", "jit_compile", "distribute", "input_pipeline", "flash_attention")
CONFIG_FILE, SUMMARY_FILE, PROGRESS_FILE = "config.json", "summary.json", "progress.json"
MODEL_FILE, VOCABULARY_FILE, BACKUP_FOLDER, LOG_FILE = "model.keras", "vocabulary.spm", "backup", "log.csv"
# What keras.callbacks.BackupAndRestore(double_checkpoint=True) writes.
_BACKUP_WEIGHTS, _BACKUP_METADATA = "latest.weights.h5", "training_metadata.json"
SAMPLE_SENTENCES = 200  # dev sentences translated at the end of training
# Disk use: float32 weights and Adam's two moments (3 x 4 bytes a parameter)
# in model.keras and in each of the two backups, plus logs and vocabulary.
_BYTES_PER_PARAMETER = 3 * 4 * 3
_LOG_BYTES = 16 * 2**20


class TrainingError(Exception):
    """A problem with the user's input, reported as one line, not a traceback."""


def has_accelerator():
    """True when Keras sees a GPU or TPU.

    Example:

    >>> has_accelerator() in (True, False)
    True
    """
    if keras.backend.backend() == "torch":  # keras.distribution does not cover torch
        import torch

        return torch.cuda.is_available()
    return any(
        kind in device.lower()
        for device in keras.distribution.list_devices()
        for kind in ("gpu", "tpu", "cuda")
    )


@dataclasses.dataclass
class TrainConfig:
    """Everything that defines a training run; saved as `config.json`.

    Model sizes default to the preset's; `preset=None` picks "base" on an
    accelerator and "tiny" on a CPU.

    Args:
        output: folder for the model, vocabulary, config and logs.
        corpus: gzipped TSV of the corpus; None for the embedded one.
        preset: "tiny", "small", "base", "big" or None.
        num_layers, d_model, num_heads, ff_dim: model size; None takes the
            preset's.
        dropout: residual dropout. Defaults to 0.1.
        max_length: longest source or target, in tokens. Defaults to 128.
        vocabulary_size: joint SentencePiece vocabulary. Defaults to 8000.
        batch_tokens: tokens per batch (source or target side, padding
            included). Defaults to 4096.
        epochs: number of virtual epochs.
        steps_per_epoch: optimizer steps per virtual epoch.
        warmup_steps: warm-up of the learning-rate schedule.
        label_smoothing: defaults to 0.1, as in the paper.
        mixed_precision: None, "float16" or "bfloat16".
        jit_compile: True, False or "auto" (Keras decides).
        bucket: batch sequences of similar length together.
        bucket_width: padded lengths are multiples of this (and
            max_length). Defaults to 8. Each padded length is one batch
            shape, and JAX compiles one program per shape (about a minute
            each for the base model on a GPU): use 32 there (lengths
            32/64/96/128).
        tie_embeddings: share the decoder embedding with the output layer.
        seed: seeds weights, dropout and data order.
        distribute: None (one device), "data" (data parallel: the model is
            replicated, every global batch is split across the devices) or
            "model" (JAX only: attention and feed-forward kernels are split
            across the devices of each host, see
            `model_parallel_layout_map`). Needs the JAX or TensorFlow
            backend; with a single device it trains on that one.
        input_pipeline: "auto" (the default: "tf.data" where TensorFlow
            imports, else "python"), "tf.data" (`tf.data`, tokenized with
            KerasHub) or "python" (a `keras.utils.PyDataset` tokenized with
            the `sentencepiece` library, no TensorFlow). Both yield the same
            batches.
        flash_attention: None (default) lets the backend pick the attention
            kernel (fused cuDNN / SDPA kernels on a GPU in float16 or
            bfloat16); False takes the explicit float32-softmax path, the
            fallback if a fused kernel misbehaves. A resumed run may change it.

    Example:

    >>> config = TrainConfig(output="/tmp/run", preset="tiny").resolved()
    >>> config.d_model, config.num_layers
    (128, 2)
    """

    output: str = "runs/es-en"
    corpus: str = None
    preset: str = None
    num_layers: int = None
    d_model: int = None
    num_heads: int = None
    ff_dim: int = None
    dropout: float = 0.1
    max_length: int = 128
    vocabulary_size: int = 8000
    batch_tokens: int = 4096
    epochs: int = None
    steps_per_epoch: int = None
    warmup_steps: int = None
    label_smoothing: float = 0.1
    mixed_precision: str = None
    jit_compile: object = "auto"
    bucket: bool = True
    tie_embeddings: bool = True
    seed: int = 0
    distribute: str = None
    bucket_width: int = BUCKET_WIDTH
    input_pipeline: str = "auto"
    flash_attention: bool = None

    def resolved(self):
        """A copy with the preset and the hardware defaults filled in."""
        preset = self.preset or ("base" if has_accelerator() else "tiny")
        if preset not in PRESETS:
            raise TrainingError(f"--preset must be one of {', '.join(PRESETS)}, got {preset!r}.")
        sizes = {key: getattr(self, key) or value for key, value in PRESETS[preset].items()}
        config = dataclasses.replace(self, preset=preset, **sizes)
        # The CPU default is sized to finish in about 15 minutes on 2 cores.
        defaults = dict(epochs=8, steps_per_epoch=100, warmup_steps=400)
        if preset in ("base", "big"):
            defaults = dict(epochs=20, steps_per_epoch=500, warmup_steps=4000)
        for key, value in defaults.items():
            if getattr(config, key) is None:
                config = dataclasses.replace(config, **{key: value})
        config._validate()
        return config

    def _validate(self):
        positive = ("num_layers", "d_model", "num_heads", "ff_dim", "max_length",
                    "vocabulary_size", "batch_tokens", "epochs", "steps_per_epoch", "warmup_steps",
                    "bucket_width")
        for key in positive:
            if getattr(self, key) < 1:
                raise TrainingError(f"--{key.replace('_', '-')} must be positive, got {getattr(self, key)}.")
        if self.d_model % self.num_heads:
            raise TrainingError(
                f"--d-model {self.d_model} is not divisible by --num-heads {self.num_heads}."
            )
        if self.batch_tokens < self.max_length:
            raise TrainingError(
                f"--batch-tokens {self.batch_tokens} is smaller than --max-length "
                f"{self.max_length}: a batch could not hold one sequence."
            )
        if not 0.0 <= self.dropout < 1.0 or not 0.0 <= self.label_smoothing < 1.0:
            raise TrainingError("--dropout and --label-smoothing must be in [0, 1).")
        if self.mixed_precision not in (None, "float16", "bfloat16"):
            raise TrainingError(
                f"--mixed-precision must be float16 or bfloat16, got {self.mixed_precision!r}."
            )
        if self.corpus is not None and not os.path.isfile(self.corpus):
            raise TrainingError(f"--corpus {self.corpus!r} does not exist.")
        if self.input_pipeline not in INPUT_PIPELINES:
            raise TrainingError(
                f"--input-pipeline must be one of {', '.join(INPUT_PIPELINES)}, got {self.input_pipeline!r}."
            )
        if self.input_pipeline == "tf.data" and not tensorflow_imports():
            raise TrainingError(
                "--input-pipeline tf.data needs TensorFlow, which does not import here: "
                "pip install tensorflow, or use --input-pipeline python (the same batches, no TensorFlow)."
            )
        if self.distribute not in (None, *DISTRIBUTE_MODES):
            raise TrainingError(f"--distribute must be data or model, got {self.distribute!r}.")
        backend = keras.backend.backend()
        if self.distribute and backend not in ("jax", "tensorflow"):
            raise TrainingError(
                f"--distribute needs the jax or tensorflow backend (KERAS_BACKEND=jax or tensorflow); "
                f"the {backend} backend trains on one device here."
            )
        if self.distribute == "model" and backend != "jax":
            raise TrainingError(
                "--distribute model (keras.distribution.ModelParallel) needs the jax backend "
                "(KERAS_BACKEND=jax); on tensorflow use --distribute data (MirroredStrategy)."
            )

    @property
    def total_steps(self):
        """Optimizer steps of the whole run."""
        return self.epochs * self.steps_per_epoch


def tensorflow_imports():
    """True when `import tensorflow` works here.

    Example:

    >>> tensorflow_imports() in (True, False)
    True
    """
    try:
        import tensorflow  # noqa: F401
    except Exception:  # ImportError, or a broken install (missing libraries...)
        return False
    return True


def _read_json(path):
    with open(path) as f:
        return json.load(f)


def _write_json(path, value):
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        json.dump(value, f, indent=2, sort_keys=True)
    os.replace(temporary, path)  # atomic: a kill never leaves half a file


def prepare_output(config, overwrite=False):
    """Checks the output folder before any work, and says whether to resume.

    With `overwrite`, the previous run's progress, summary, backups and
    `log.csv` are removed (its `model.keras` stays until the new run
    replaces it).

    Returns:
        The number of virtual epochs already done (0 for a new run), as
        `progress.json` records it; `train_translator` checks it against
        the backups.

    Raises:
        TrainingError: the folder is unwritable, holds a different model,
            or holds a finished run (unless `overwrite`).
    """
    probe = os.path.join(config.output, ".write-test")
    try:
        os.makedirs(config.output, exist_ok=True)
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as error:
        raise TrainingError(f"--output {config.output!r} is not writable: {error.strerror}.")
    config_path = os.path.join(config.output, CONFIG_FILE)
    if overwrite or not os.path.exists(config_path):
        for name in (PROGRESS_FILE, SUMMARY_FILE, LOG_FILE):
            if os.path.exists(os.path.join(config.output, name)):
                os.remove(os.path.join(config.output, name))
        # A backup of another run would otherwise be restored into this one.
        shutil.rmtree(os.path.join(config.output, BACKUP_FOLDER), ignore_errors=True)
        _write_json(config_path, dataclasses.asdict(config))
        return 0
    saved = _read_json(config_path)
    current = dataclasses.asdict(config)
    # A field newer than the saved run's config had its default there.
    defaults = {field.name: field.default for field in dataclasses.fields(TrainConfig)}
    different = sorted(
        key for key in current
        if key not in _RESUMABLE_CHANGES and saved.get(key, defaults[key]) != current[key]
    )
    if different:
        changes = ", ".join(f"{key}: {saved.get(key)!r} -> {current[key]!r}" for key in different)
        raise TrainingError(
            f"--output {config.output!r} holds a different run ({changes}). "
            "Use another --output, the same settings to resume, or --overwrite."
        )
    summary_path = os.path.join(config.output, SUMMARY_FILE)
    if os.path.exists(summary_path) and _read_json(summary_path).get("completed_steps", 0) >= config.total_steps:
        raise TrainingError(
            f"--output {config.output!r} already holds a finished run of {config.total_steps} steps. "
            "Raise --epochs to train further, or use --overwrite to start again."
        )
    _write_json(config_path, current)
    return _read_progress(config.output).get("epochs_done", 0)


def _read_progress(output):
    path = os.path.join(output, PROGRESS_FILE)
    try:
        return _read_json(path) if os.path.exists(path) else {}
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


class _RestoreRandomState(keras.callbacks.Callback):
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


class _ProgressFile(keras.callbacks.Callback):
    """Records finished virtual epochs and dropout's random state, after the backup.

    The random state of the previous epoch is kept too, for a resume from
    the previous backup; with it a resumed run draws the same dropout masks
    as an uninterrupted one.
    """

    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_epoch_end(self, epoch, logs=None):
        states = {str(epoch + 1): _random_state(self.model)}
        previous = _read_progress(os.path.dirname(self.path)).get("random_states")
        if isinstance(previous, dict) and str(epoch) in previous:
            states[str(epoch)] = previous[str(epoch)]
        _write_json(self.path, {"epochs_done": epoch + 1, "random_states": states})


class _NonFiniteLoss(Exception):
    def __init__(self, step, value):
        super().__init__(f"loss {value} at step {step}")
        self.step, self.value = step, value


class _StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Stops at the first step whose loss is NaN or infinite.

    `keras.callbacks.TerminateOnNaN` only asks `fit` to stop: `fit` then
    ends the epoch, so `BackupAndRestore` backs up the broken weights over
    the good ones and deletes its backups when training ends. Raising out
    of `fit` skips all of that: the last good backup stays on disk.
    """

    def __init__(self, steps_per_epoch):
        super().__init__()
        self.steps_per_epoch = steps_per_epoch
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (logs or {}).get("loss") is None:
            return
        # The epoch's running mean: NaN or infinite from the first bad step on.
        loss = float(keras.ops.convert_to_numpy(logs["loss"]))
        if not math.isfinite(loss):
            raise _NonFiniteLoss(self.epoch * self.steps_per_epoch + batch + 1, loss)


def _non_finite_loss_error(stop, config):
    good_epochs = (stop.step - 1) // config.steps_per_epoch
    kept = (
        f"{os.path.join(config.output, BACKUP_FOLDER)} keeps the state after step "
        f"{good_epochs * config.steps_per_epoch} (virtual epoch {good_epochs}), and nothing was saved after it"
        if good_epochs else "no virtual epoch had finished, so there is no backup and nothing was saved"
    )
    if config.mixed_precision and config.flash_attention is not False:
        advice = (
            "Under mixed precision the attention runs on the backend's fused kernel: try the explicit "
            "attention path first (the same command plus --no-flash-attention resumes from the backup), "
            "then float32 (without --mixed-precision, with --overwrite)"
            + (", or bfloat16 rather than float16" if config.mixed_precision == "float16" else "")
            + "; a lower learning rate (a larger --warmup-steps, with --overwrite) helps if neither does."
        )
    else:
        advice = (
            "Lower the learning rate (a larger --warmup-steps)"
            + (" or train in float32 (without --mixed-precision)" if config.mixed_precision else "")
            + " and start again with --overwrite; the same command resumes from the backup but will "
            "probably fail at the same step."
        )
    return TrainingError(
        f"the training loss became {stop.value} at step {stop.step}; training stopped there. {kept}. {advice}"
    )


def _size(num_bytes):
    for unit in ("bytes", "KB", "MB", "GB"):
        if abs(num_bytes) < 1024 or unit == "GB":
            return f"{num_bytes:.0f} {unit}" if unit == "bytes" else f"{num_bytes:.1f} {unit}"
        num_bytes /= 1024


def _check_free_space(output, parameters):
    """Fails before training when the folder cannot hold what the run writes."""
    backup = os.path.join(output, BACKUP_FOLDER)
    existing = [os.path.join(output, MODEL_FILE)] + (
        [os.path.join(backup, name) for name in os.listdir(backup)] if os.path.isdir(backup) else []
    )
    # Files this run rewrites in place need no more room than they already take.
    needed = parameters * _BYTES_PER_PARAMETER + _LOG_BYTES
    needed -= sum(os.path.getsize(path) for path in existing if os.path.isfile(path))
    free = shutil.disk_usage(output).free
    if free < needed:
        raise TrainingError(
            f"--output {output!r} has {_size(free)} free, but this run writes about {_size(needed)} "
            f"(model.keras and two backups, each with the Adam moments of {parameters:,} parameters, "
            "plus logs). Free some space or choose another --output."
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
        epochs = int(_read_json(metadata)["epoch"])
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


def _restore_point(model, output, steps_per_epoch, recorded_epochs, log):
    """Checks the backups before training; returns the virtual epochs to resume after.

    `keras.callbacks.BackupAndRestore` would restore the newest backup and,
    only if it cannot be opened at all, the previous one, without a word;
    with no backup it starts from scratch. Here every backup is loaded and
    its optimizer step compared with its epoch first. A damaged newest
    backup is replaced by the previous one (said in the log); if neither is
    intact, or `progress.json` records finished epochs but no backup exists,
    training does not start.
    """
    folder = os.path.join(output, BACKUP_FOLDER)
    latest = (os.path.join(folder, _BACKUP_WEIGHTS), os.path.join(folder, _BACKUP_METADATA))
    previous = tuple(path + ".bkp" for path in latest)
    if not any(os.path.exists(path) for path in latest + previous):
        if recorded_epochs:
            raise TrainingError(
                f"{os.path.join(output, PROGRESS_FILE)} records {recorded_epochs} finished virtual epochs, "
                f"but {folder} holds no backup of them, so this run cannot resume; nothing was changed. "
                "Put the backup folder back, or use --overwrite to start again from scratch."
            )
        return 0
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    epochs, reason = _check_backup(model, *latest, steps_per_epoch)
    if reason is None:
        return epochs
    # Keras picks the weights format by file extension, so the previous
    # backup is checked under a .weights.h5 name, then moved where
    # BackupAndRestore reads.
    candidate = os.path.join(output, ".previous-backup.weights.h5")
    try:
        previous_reason = f"{previous[0]} is missing"
        if os.path.isfile(previous[0]):
            shutil.copyfile(previous[0], candidate)
            epochs, previous_reason = _check_backup(model, candidate, previous[1], steps_per_epoch)
        if previous_reason is not None:
            raise TrainingError(
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


def model_parallel_layout_map(device_mesh):
    """How `distribute="model"` splits the Transformer's weights.

    Megatron-style tensor parallelism over the mesh axis `"model"`: the
    query, key and value projections (separate or fused) and the first
    feed-forward layer are split by output feature, i.e. by attention head
    and hidden unit; the attention output projection and the second
    feed-forward layer by input feature. Each device then holds whole heads
    and a slice of the feed-forward units, and XLA adds one all-reduce
    after each block. Embeddings, layer norms and the output projection are
    replicated. Keys are regexes on variable paths
    (`decoder_layer_0/cross_attention/query_kernel`).

    Args:
        device_mesh: a `keras.distribution.DeviceMesh` with a `"model"`
            axis (and usually `"batch"`), or None to fill in later.

    Returns:
        A `keras.distribution.LayoutMap`.

    Example:

    >>> layout_map = model_parallel_layout_map(None)
    >>> layout_map["encoder_layer_0/self_attention/query_kernel"].axes
    (None, 'model')
    >>> layout_map["decoder_layer_1/feed_forward/output/kernel"].axes
    ('model', None)
    >>> layout_map["encoder_embedding/embeddings"] is None  # replicated
    True
    """
    layout_map = keras.distribution.LayoutMap(device_mesh)
    layout_map[r".*attention/(query|key|value|qkv)_kernel"] = (None, "model")
    layout_map[r".*attention/(query|key|value|qkv)_bias"] = ("model",)
    layout_map[r".*attention/output_kernel"] = ("model", None)
    layout_map[r".*feed_forward/hidden/kernel"] = (None, "model")
    layout_map[r".*feed_forward/hidden/bias"] = ("model",)
    layout_map[r".*feed_forward/output/kernel"] = ("model", None)
    return layout_map


@dataclasses.dataclass
class _Placement:
    """Where training runs: the scope to build the model in, and how batches split."""

    scope: object = contextlib.nullcontext
    devices: int = 1
    batch_multiple: int = 1  # global batches are cut to a multiple of the data-parallel replicas
    num_processes: int = 1
    process_id: int = 0
    distribution: object = None  # the keras.distribution set for this run (JAX)


def _place(config, log):
    if not config.distribute:
        return _Placement()
    if keras.backend.backend() == "jax":
        return _place_on_jax(config, log)
    return _place_on_tensorflow(config, log)


def _place_on_jax(config, log):
    import jax

    if int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")) > 1 and not jax.distributed.is_initialized():
        # Multi-host: the coordinator address, process count and id come from
        # KERAS_DISTRIBUTION_* environment variables (see the README).
        keras.distribution.initialize()
    devices = keras.distribution.list_devices()
    processes, process_id = jax.process_count(), jax.process_index()
    if len(devices) == 1:
        log(f"distribute: --distribute {config.distribute} but only one device ({devices[0]}); training on it")
        return _Placement()
    if config.distribute == "data":
        distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
        replicas = len(devices)
        how = f"data parallel (keras.distribution.DataParallel) over {len(devices)} devices"
    else:
        per_host = len(devices) // processes
        if config.num_heads % per_host or config.ff_dim % per_host:
            raise TrainingError(
                f"--distribute model splits attention heads and feed-forward units over {per_host} devices: "
                f"--num-heads {config.num_heads} and --ff-dim {config.ff_dim} must be multiples of {per_host}."
            )
        mesh = keras.distribution.DeviceMesh((processes, per_host), ("batch", "model"), devices)
        distribution = keras.distribution.ModelParallel(
            layout_map=model_parallel_layout_map(mesh), batch_dim_name="batch", auto_shard_dataset=False
        )
        replicas = processes
        how = (f"model parallel (keras.distribution.ModelParallel): kernels split over {per_host} devices"
               + (f", data parallel over {processes} hosts" if processes > 1 else ""))
    log(f"distribute: {how} ({', '.join(map(str, devices))}); "
        f"{processes} process{'es' if processes > 1 else ''}, global batches split across them")
    return _Placement(
        devices=len(devices), batch_multiple=replicas, num_processes=processes, process_id=process_id,
        distribution=distribution,
    )


def _place_on_tensorflow(config, log):
    import tensorflow as tf

    devices = [d.name for d in tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")]
    if len(devices) == 1:
        log(f"distribute: --distribute {config.distribute} but only one device ({devices[0]}); training on it")
        return _Placement()
    strategy = tf.distribute.MirroredStrategy(devices)
    log(f"distribute: data parallel (tf.distribute.MirroredStrategy) over {len(devices)} devices "
        f"({', '.join(devices)}); global batches split across them")
    return _Placement(
        scope=strategy.scope, devices=len(devices), batch_multiple=strategy.num_replicas_in_sync
    )


def _for_devices(dataset, placement):
    """Pads a pass's last, smaller batches to a multiple of the replicas, and
    gives each host its slice of every global batch (a `tf.data.Dataset` or
    a `keras.utils.PyDataset`)."""
    if placement.batch_multiple == 1 and placement.num_processes == 1:
        return dataset
    if isinstance(dataset, keras.utils.PyDataset):
        return _DeviceSlices(dataset, placement)
    import tensorflow as tf

    multiple, processes, index = placement.batch_multiple, placement.num_processes, placement.process_id

    def split(inputs, labels):
        # Extra rows are all padding: no loss, no accuracy, no attention.
        rows = tf.shape(labels)[0]
        padded = rows + (-rows) % multiple
        per_host = padded // processes

        def part(tokens):
            tokens = tf.pad(tokens, [[0, padded - rows], [0, 0]])
            return tokens[index * per_host:(index + 1) * per_host]

        return {name: part(tokens) for name, tokens in inputs.items()}, part(labels)

    return dataset.map(split)


class _DeviceSlices(keras.utils.PyDataset):
    """`_for_devices` for a `keras.utils.PyDataset`, in NumPy."""

    def __init__(self, batches, placement):
        super().__init__()
        self.batches, self.placement = batches, placement

    @property
    def num_batches(self):
        return self.batches.num_batches

    def __getitem__(self, index):
        inputs, labels = self.batches[index]
        return {name: self._part(tokens) for name, tokens in inputs.items()}, self._part(labels)

    def _part(self, tokens):
        # Extra rows are all padding: no loss, no accuracy, no attention.
        rows = len(tokens)
        padded = rows + (-rows) % self.placement.batch_multiple
        per_host = padded // self.placement.num_processes
        tokens = np.pad(tokens, [(0, padded - rows), (0, 0)])
        return tokens[self.placement.process_id * per_host:(self.placement.process_id + 1) * per_host]

    def on_epoch_end(self):
        self.batches.on_epoch_end()


def _one_pass(dataset):
    if isinstance(dataset, keras.utils.PyDataset):
        return (dataset[i] for i in range(dataset.num_batches))
    return iter(dataset)


def _token_statistics(dataset):
    """Batches, real tokens and padding fraction of one pass over a dataset."""
    batches = real = total = 0
    for inputs, labels in _one_pass(dataset):
        batches += 1
        for tokens in (inputs["encoder_tokens"], labels):
            tokens = np.asarray(tokens)
            real += int(np.count_nonzero(tokens))
            total += int(tokens.size)
    return batches, real, 1.0 - real / max(total, 1)


def _input_pipeline(config, vocabulary_path):
    """The pipeline's name, `tokenize(pairs)` and `batches(tokens, start=0, **options)`."""
    name = config.input_pipeline
    if name == "auto":
        name = "tf.data" if tensorflow_imports() else "python"
    if name == "tf.data":
        from keras_transformer.data import pipeline
        from keras_transformer.data.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(vocabulary_path)

        def batches(tokens, start=0, **options):
            dataset = pipeline.translation_dataset(tokens, **options)
            return dataset.skip(start) if start else dataset

        return name, (lambda pairs: pipeline.tokenize_pairs(pairs, tokenizer, config.max_length)), batches
    from keras_transformer.data import python_pipeline
    from keras_transformer.data.sentence_piece_tokenizer import SentencePieceTokenizer

    tokenizer = SentencePieceTokenizer(vocabulary_path)
    return (
        name,
        lambda pairs: python_pipeline.tokenize_pairs(pairs, tokenizer, config.max_length),
        lambda tokens, **options: python_pipeline.TranslationPyDataset(tokens, **options),
    )


def _sample_translations(model, tokenizer, pairs, log):
    """Greedy translations of a few dev pairs, three shown, BLEU on all."""
    from keras_transformer.evaluation import evaluate_pairs
    from keras_transformer.translator import Translator

    result = evaluate_pairs(Translator(model, tokenizer), pairs, verbose=0)
    for pair, translation in list(zip(pairs, result["translations"]))[:3]:
        log(f"  {pair.source}\n  -> {translation}\n  (reference: {pair.target})")
    log(f"dev BLEU {result['bleu']:.2f} (greedy, first {len(pairs)} dev sentences; {result['bleu_signature']})")
    return {"dev_sample_bleu": result["bleu"], "dev_sample_sentences": len(pairs)}


def build_translator(config, **model_options):
    """The compiled Transformer a `TrainConfig` describes.

    Args:
        config: a resolved `TrainConfig`.
        **model_options: more arguments for `kt.models.transformer`, e.g.
            `embedding_scale=None` or `norm_first=True` (the ablations use
            them).

    Example:

    >>> config = TrainConfig(preset="tiny", vocabulary_size=100).resolved()
    >>> build_translator(config).name
    'transformer'
    """
    from keras_transformer import models
    from keras_transformer import training

    model = models.transformer(
        config.vocabulary_size,
        config.vocabulary_size,
        num_layers=config.num_layers,
        d_model=config.d_model,
        num_heads=config.num_heads,
        ff_dim=config.ff_dim,
        max_length=config.max_length,
        dropout=config.dropout,
        tie_embeddings=config.tie_embeddings,
        **{"flash_attention": config.flash_attention, **model_options},
    )
    schedule = training.TransformerSchedule(config.d_model, warmup_steps=config.warmup_steps)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=training.MaskedSparseCrossentropy(label_smoothing=config.label_smoothing),
        metrics=[training.MaskedAccuracy()],
        jit_compile=config.jit_compile,
    )
    return model


def train_translator(
    config, overwrite=False, verbose=1, log=print, callbacks=(), sample_sentences=SAMPLE_SENTENCES
):
    """Trains (or resumes) a translator as `config` says; returns a summary dict.

    Before the first step it checks the output folder (writable, same run,
    enough free space for the model and its backups) and the backups it
    would resume from; a NaN or infinite loss stops training at that step
    with a `TrainingError` and leaves the last good backup in place.

    Args:
        config: a `TrainConfig`.
        overwrite: start from scratch even if `config.output` holds a run.
        verbose: Keras' `fit` verbosity (1: a progress bar per epoch).
        log: callable for one-line progress messages.
        callbacks: extra Keras callbacks, run after the package's own.
        sample_sentences: dev sentences translated (greedy) and scored with
            BLEU at the end; 0 skips it. Defaults to 200.

    Returns:
        A dict with train/dev loss, dev token accuracy, tokens per second,
        wall time and the step count, also written to `summary.json`.

    Raises:
        TrainingError: bad settings, an unusable output folder or backup,
            too little disk space, or a loss that stopped being finite.
    """
    start = time.time()
    config = config.resolved()
    recorded_epochs = prepare_output(config, overwrite=overwrite)
    if config.mixed_precision:
        keras.config.set_dtype_policy(f"mixed_{config.mixed_precision}")
    keras.utils.set_random_seed(config.seed)
    placement = _place(config, log)
    previous_distribution = keras.distribution.distribution() if placement.distribution else None
    if placement.distribution:
        # Before the model is built: its variables are created sharded.
        keras.distribution.set_distribution(placement.distribution)
    try:
        return _train(config, placement, recorded_epochs, start, verbose, log, callbacks, sample_sentences)
    finally:
        if placement.distribution:
            keras.distribution.set_distribution(previous_distribution)


def _train(config, placement, recorded_epochs, start, verbose, log, callbacks, sample_sentences):
    from keras_transformer.data import corpus
    from keras_transformer.data import sentence_piece_tokenizer as tokenizer_lib

    output = config.output
    with placement.scope():
        model = build_translator(config)
        _check_free_space(output, model.count_params())
        epochs_done = _restore_point(model, output, config.steps_per_epoch, recorded_epochs, log)
    random_states = _read_progress(output).get("random_states")
    random_state = random_states.get(str(epochs_done)) if epochs_done and isinstance(random_states, dict) else None

    train_pairs = corpus.load_bible_pairs("train", path=config.corpus)
    dev_pairs = corpus.load_bible_pairs("dev", path=config.corpus)
    vocabulary_path = os.path.join(output, VOCABULARY_FILE)
    if epochs_done == 0 or not os.path.exists(vocabulary_path):
        texts = [p.source for p in train_pairs] + [p.target for p in train_pairs]
        try:
            tokenizer_lib.train_tokenizer(texts, config.vocabulary_size, path=vocabulary_path)
        except ValueError as error:  # e.g. more pieces than the corpus supports
            raise TrainingError(f"--vocabulary-size: {error}")
    input_pipeline, tokenize, batches = _input_pipeline(config, vocabulary_path)
    if input_pipeline == "tf.data":
        log("input pipeline: tf.data, tokenized with KerasHub")
    else:
        log("input pipeline: python (keras.utils.PyDataset, tokenized with the sentencepiece library)"
            + ("; TensorFlow does not import here" if config.input_pipeline == "auto" else ""))
    train_tokens = tokenize(train_pairs)
    dev_tokens = tokenize(dev_pairs)
    log(
        f"corpus: {len(train_pairs)} train / {len(dev_pairs)} dev pairs, "
        f"{train_tokens.num_truncated} train pairs truncated to {config.max_length} tokens"
    )
    batching = dict(
        batch_tokens=config.batch_tokens, bucket=config.bucket, seed=config.seed,
        batch_multiple=placement.batch_multiple, bucket_width=config.bucket_width,
    )
    epoch_batches, epoch_tokens, padding = _token_statistics(batches(train_tokens, shuffle=False, **batching))
    log(f"batches: {epoch_batches} per pass over the data, {padding:.1%} padding tokens"
        + (f", sizes multiples of {placement.batch_multiple}" if placement.batch_multiple > 1 else ""))
    # Every iterator over it yields the same batches (one batch plan), so a
    # resumed or distributed run trains on the same data; a resumed one
    # starts after the batches it trained on.
    train_data = batches(train_tokens, repeat=True, start=epochs_done * config.steps_per_epoch, **batching)
    train_data = _for_devices(train_data, placement)
    # A known number of batches: Keras does not warn "ran out of data" after
    # each validation pass.
    dev_data = _for_devices(batches(dev_tokens, shuffle=False, **batching), placement)

    log(
        f"model: preset {config.preset}, {model.count_params():,} parameters, "
        f"backend {keras.backend.backend()}, {config.total_steps} steps"
        + (f", resuming after epoch {epochs_done}" if epochs_done else "")
    )
    tensorboard = []
    if tensorflow_imports():  # Keras writes TensorBoard logs with tf.summary
        tensorboard = [keras.callbacks.TensorBoard(os.path.join(output, "logs"))]
    else:
        log("TensorBoard logs need TensorFlow, which does not import here; the metrics are in log.csv")
    callbacks = [
        # Backup first: the progress file must never run ahead of it. The
        # last backup stays after training, so a larger --epochs continues.
        keras.callbacks.BackupAndRestore(
            os.path.join(output, BACKUP_FOLDER), double_checkpoint=True, delete_checkpoint=False
        ),
        _RestoreRandomState(random_state),
        _ProgressFile(os.path.join(output, PROGRESS_FILE)),
        keras.callbacks.CSVLogger(os.path.join(output, LOG_FILE), append=True),
        *tensorboard,
        _StopOnNonFiniteLoss(config.steps_per_epoch),
        *callbacks,
    ]
    fit_start = time.time()
    try:
        history = model.fit(
            train_data,
            epochs=config.epochs,
            steps_per_epoch=config.steps_per_epoch,
            validation_data=dev_data,
            callbacks=callbacks,
            shuffle=False,  # the batch plan already shuffles
            verbose=verbose,
        )
    except _NonFiniteLoss as stop:
        raise _non_finite_loss_error(stop, config) from None
    fit_seconds = time.time() - fit_start
    trained_steps = config.total_steps - epochs_done * config.steps_per_epoch
    dev_loss, dev_accuracy = model.evaluate(dev_data, verbose=0)
    model.save(os.path.join(output, MODEL_FILE))
    sample = {}
    if sample_sentences:
        tokenizer = tokenizer_lib.SentencePieceTokenizer(vocabulary_path)
        sample = _sample_translations(model, tokenizer, dev_pairs[:sample_sentences], log)
    summary = {
        "train_loss": history.history["loss"][-1] if history.history.get("loss") else None,
        "dev_loss": float(dev_loss),
        "dev_token_accuracy": float(dev_accuracy),
        "tokens_per_second": trained_steps * epoch_tokens / epoch_batches / fit_seconds,
        "padding_fraction": padding,
        "completed_steps": int(keras.ops.convert_to_numpy(model.optimizer.iterations)),
        "trained_steps_this_run": trained_steps,
        "fit_seconds": fit_seconds,
        "wall_seconds": time.time() - start,
        "parameters": model.count_params(),
        "backend": keras.backend.backend(),
        "input_pipeline": input_pipeline,
        "devices": placement.devices,
        **sample,
    }
    _write_json(os.path.join(output, SUMMARY_FILE), summary)
    return summary
