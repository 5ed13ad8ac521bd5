"""Where training runs: one device, or all visible devices, data or model parallel.

`distribute="data"` or `"model"` spreads training over the visible devices
with Keras' and TensorFlow's own engines: `keras.distribution.DataParallel`
or `ModelParallel` (the layout of `model_parallel_layout_map`) on JAX,
`tf.distribute.MirroredStrategy` on TensorFlow. Batches stay global
batches, split across the devices (`for_devices`).

Several processes (JAX: one per host, or several on one machine) join one
job through `join_processes`, from the `KERAS_DISTRIBUTION_*` variables,
before anything else touches JAX.
"""

import contextlib
import dataclasses
import os
import re

import keras
import numpy as np

from keras_transformer.errors import UserInputError

NUM_PROCESSES_VARIABLE = "KERAS_DISTRIBUTION_NUM_PROCESSES"
PROCESS_ID_VARIABLE = "KERAS_DISTRIBUTION_PROCESS_ID"
JOB_ADDRESSES_VARIABLE = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
# Seconds without a heartbeat before the job's coordinator declares a
# process lost and stops the others (JAX's default: 100).
HEARTBEAT_VARIABLE = "KERAS_TRANSFORMER_HEARTBEAT_SECONDS"


def join_processes():
    """Joins the multi-process JAX job that the `KERAS_DISTRIBUTION_*` variables describe.

    `KERAS_DISTRIBUTION_JOB_ADDRESSES` (the coordinator's `host:port`, or
    every process's, coordinator first), `KERAS_DISTRIBUTION_NUM_PROCESSES`
    and `KERAS_DISTRIBUTION_PROCESS_ID`, as `keras.distribution.initialize`
    reads them. JAX accepts this only before its first computation, device
    query or array, so the command line calls it first thing, and
    `train_translator` before it resolves its config. On a CPU the
    processes' collectives run over gloo. A process that stops sending
    heartbeats for `KERAS_TRANSFORMER_HEARTBEAT_SECONDS` (default 100) is
    declared lost, and the job's other processes stop with an error naming
    it instead of waiting for it forever.

    Does nothing with one process, or when the job is joined already.
    Several processes on another backend are refused, and so is a
    `TF_CONFIG` naming several workers on TensorFlow: Keras 3's `fit`
    fails under `MultiWorkerMirroredStrategy`.

    Returns:
        `(process_id, num_processes)`: `(0, 1)` when there is no job.

    Raises:
        UserInputError: the variables are malformed, name a job that
            this backend cannot run, or JAX was used before the job was
            joined.

    Example:

    >>> join_processes()  # no KERAS_DISTRIBUTION_NUM_PROCESSES: one process
    (0, 1)
    """
    try:
        num_processes = int(os.environ.get(NUM_PROCESSES_VARIABLE, "1"))
        process_id = int(os.environ.get(PROCESS_ID_VARIABLE, "0"))
        heartbeat = int(os.environ.get(HEARTBEAT_VARIABLE, "100"))
    except ValueError as error:
        raise UserInputError(f"{NUM_PROCESSES_VARIABLE}, {PROCESS_ID_VARIABLE} and {HEARTBEAT_VARIABLE} "
                             f"must be integers: {error}.") from None
    if keras.backend.backend() == "tensorflow":
        _refuse_tensorflow_workers()
    if num_processes > 1 and keras.backend.backend() != "jax":
        raise UserInputError(
            f"{NUM_PROCESSES_VARIABLE}={num_processes} asks for a job of several processes, which runs on JAX's "
            f"multi-process runtime only: set KERAS_BACKEND=jax (the backend is {keras.backend.backend()})."
        )
    if num_processes <= 1:
        return 0, 1
    import jax

    if in_a_job():
        return jax.process_index(), jax.process_count()
    addresses = [a for a in os.environ.get(JOB_ADDRESSES_VARIABLE, "").split(",") if a]
    if not addresses or not 0 <= process_id < num_processes:
        raise UserInputError(
            f"{NUM_PROCESSES_VARIABLE}={num_processes} needs {JOB_ADDRESSES_VARIABLE} (the coordinator's "
            f"host:port) and {PROCESS_ID_VARIABLE} between 0 and {num_processes - 1} "
            f"(got {addresses or 'no address'} and {process_id})."
        )
    # Only CPU collectives are chosen here; on GPUs JAX uses NCCL whatever this says.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        import inspect

        # Older JAX (0.4.30) has no heartbeat setting: its own default applies there.
        options = ({"heartbeat_timeout_seconds": heartbeat}
                   if "heartbeat_timeout_seconds" in inspect.signature(jax.distributed.initialize).parameters else {})
        jax.distributed.initialize(
            coordinator_address=addresses[0], num_processes=num_processes, process_id=process_id, **options
        )
    except RuntimeError as error:
        if "must be called before" not in str(error):
            raise
        raise UserInputError(
            f"{NUM_PROCESSES_VARIABLE}={num_processes} asks for a job of several processes, but JAX "
            "was used in this process before it could join one. Call "
            "keras_transformer.training.distribute.join_processes() (or keras.distribution.initialize()) "
            "first thing, before any Keras or JAX computation."
        ) from None
    _JOINED[0] = True
    return jax.process_index(), jax.process_count()


def in_a_job():
    """Whether this process has joined a JAX job of several processes.

    Older JAX (0.4.30, this package's lower bound) has no
    `jax.distributed.is_initialized`: there, only a job that
    `join_processes` joined counts.

    Example:

    >>> in_a_job()
    False
    """
    import sys

    jax = sys.modules.get("jax")
    if jax is None:
        return False
    is_initialized = getattr(jax.distributed, "is_initialized", None)
    return bool(is_initialized()) if is_initialized is not None else _JOINED[0]


# Set once join_processes has joined a job (for JAX without is_initialized).
_JOINED = [False]


def _refuse_tensorflow_workers():
    """TensorFlow's multi-worker training, which `TF_CONFIG` asks for, is refused with the reason."""
    import json

    try:
        workers = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {}).get("worker", [])
    except (ValueError, AttributeError):
        raise UserInputError(f"TF_CONFIG is not the JSON TensorFlow expects: {os.environ['TF_CONFIG']!r}.") from None
    if len(workers) > 1:
        raise UserInputError(
            f"TF_CONFIG names {len(workers)} workers, but TensorFlow's multi-worker training "
            "(MultiWorkerMirroredStrategy) is not supported: with Keras 3's fit both workers fail in their first "
            "step (keras-team/keras#20585). Train on several hosts with KERAS_BACKEND=jax and the "
            f"{NUM_PROCESSES_VARIABLE}, {PROCESS_ID_VARIABLE} and {JOB_ADDRESSES_VARIABLE} variables "
            "(docs/scaling-out.md), and unset TF_CONFIG."
        )


def agreed_epochs(epochs, placement):
    """The virtual epochs that every process of the job has backed up: the fewest of theirs.

    A process killed between its own backup of an epoch and another's is
    an epoch behind; the job resumes from the epoch they all have.

    Args:
        epochs: int, the virtual epochs this process has backed up.
        placement: the run's `Placement`.

    Returns:
        int, the smallest of the processes' `epochs` (with one process, `epochs`).

    Example:

    >>> agreed_epochs(3, Placement())  # one process
    3
    """
    if placement.num_processes < 2:
        return epochs
    from jax.experimental import multihost_utils

    return int(np.min(multihost_utils.process_allgather(np.int32(epochs))))


class LostProcessError(UserInputError):
    """A process of a multi-process job stopped answering while this one trained.

    The command line prints it and exits at once, as it does any error in
    such a job: JAX's own shutdown would wait at a barrier for the others.
    """


def lost_process_error(error, placement, epochs_done):
    """The `LostProcessError` for a failed collective in a job of several processes, else None.

    Args:
        error: the exception `fit` raised.
        placement: the run's `Placement`.
        epochs_done: int, the virtual epochs this process has backed up.

    Returns:
        A `LostProcessError` naming the lost process (by its index when the
        job has two, else by the address the collective lost), or None
        when `error` is not a lost peer.

    Example:

    >>> placement = Placement(devices=2, num_processes=2, process_id=0)
    >>> error = ValueError("Gloo AllReduce failed: Connection closed by peer [127.0.0.1]:5000")
    >>> "process 1" in str(lost_process_error(error, placement, 1))
    True
    """
    text = str(error)
    if placement.num_processes < 2 or not any(sign in text for sign in _LOST_PEER_SIGNS):
        return None
    address = re.search(r"peer (\[[^\]]*\]:\d+)", text)
    lost = (f"process {1 - placement.process_id}" if placement.num_processes == 2
            else f"the process at {address.group(1)}" if address else "another process")
    resume = (f"the backup of virtual epoch {epochs_done}" if epochs_done else "the start (no virtual epoch had finished)")
    return LostProcessError(
        f"process {placement.process_id} of {placement.num_processes}: {lost} stopped answering during training "
        f"({text.splitlines()[0][:200]}). Start the same command again for every process of the job to resume "
        f"from {resume}."
    )


# What a collective says when a process at its other end is gone (gloo on CPUs, NCCL and the coordinator on GPUs).
_LOST_PEER_SIGNS = ("Connection closed by peer", "Connection reset by peer", "Connection refused", "heartbeat timeout",
                    "Gloo AllGather failed", "Gloo AllReduce failed", "unhealthy", "NCCL")


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
    (`decoder_layer_0/cross_attention/query/kernel`).

    Args:
        device_mesh: a `keras.distribution.DeviceMesh` with a `"model"`
            axis (and usually `"batch"`), or None to fill in later.

    Returns:
        A `keras.distribution.LayoutMap`.

    Example:

    >>> layout_map = model_parallel_layout_map(None)
    >>> layout_map["encoder_layer_0/self_attention/query/kernel"].axes
    (None, 'model')
    >>> layout_map["decoder_layer_1/feed_forward/output/kernel"].axes
    ('model', None)
    >>> layout_map["encoder_embedding/embeddings"] is None  # replicated
    True
    """
    layout_map = keras.distribution.LayoutMap(device_mesh)
    layout_map[r".*attention/(query|key|value|qkv)/kernel"] = (None, "model")
    layout_map[r".*attention/(query|key|value|qkv)/bias"] = ("model",)
    layout_map[r".*attention/attention_output/kernel"] = ("model", None)
    layout_map[r".*feed_forward/hidden/kernel"] = (None, "model")
    layout_map[r".*feed_forward/hidden/bias"] = ("model",)
    layout_map[r".*feed_forward/output/kernel"] = ("model", None)
    return layout_map


@dataclasses.dataclass
class Placement:
    """Where training runs: the scope to build the model in, and how batches split."""

    scope: object = contextlib.nullcontext
    devices: int = 1
    batch_multiple: int = 1  # global batches are cut to a multiple of the data-parallel replicas
    num_processes: int = 1
    process_id: int = 0
    distribution: object = None  # the keras.distribution set for this run (JAX)


def place(mode, log, num_heads=1, ff_dim=1):
    """Where a run trains: one device, or the devices `mode` spreads it over.

    Args:
        mode: None (one device), `"data"` or `"model"` (as
            `TrainConfig.distribute`).
        log: callable for a one-line message saying how it trains.
        num_heads, ff_dim: the model's attention heads and feed-forward
            units, which `"model"` splits across each host's devices.

    Returns:
        A `Placement`.

    Raises:
        UserInputError: `"model"` cannot split the heads or units evenly.

    Example:

    >>> place(None, print).devices
    1
    """
    if not mode:
        return Placement()
    if keras.backend.backend() == "jax":
        return _place_on_jax(mode, log, num_heads, ff_dim)
    return _place_on_tensorflow(mode, log)


def _place_on_jax(mode, log, num_heads, ff_dim):
    import jax

    join_processes()
    devices = keras.distribution.list_devices()
    processes, process_id = jax.process_count(), jax.process_index()
    if len(devices) == 1:
        log(f"distribute: --distribute {mode} but only one device ({devices[0]}); training on it")
        return Placement()
    if mode == "data":
        distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
        replicas = len(devices)
        how = f"data parallel (keras.distribution.DataParallel) over {len(devices)} devices"
    else:
        per_host = len(devices) // processes
        if num_heads % per_host or ff_dim % per_host:
            raise UserInputError(
                f"--distribute model splits attention heads and feed-forward units over {per_host} devices: "
                f"--num-heads {num_heads} and --ff-dim {ff_dim} must be multiples of {per_host}."
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
    return Placement(
        devices=len(devices), batch_multiple=replicas, num_processes=processes, process_id=process_id,
        distribution=distribution,
    )


def _place_on_tensorflow(mode, log):
    import tensorflow as tf

    devices = [d.name for d in tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")]
    if len(devices) == 1:
        log(f"distribute: --distribute {mode} but only one device ({devices[0]}); training on it")
        return Placement()
    strategy = tf.distribute.MirroredStrategy(devices)
    log(f"distribute: data parallel (tf.distribute.MirroredStrategy) over {len(devices)} devices "
        f"({', '.join(devices)}); global batches split across them")
    return Placement(
        scope=strategy.scope, devices=len(devices), batch_multiple=strategy.num_replicas_in_sync
    )


def for_devices(dataset, placement):
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
    """`for_devices` for a `keras.utils.PyDataset`, in NumPy."""

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
