"""Where training runs: one device, or all visible devices, data or model parallel.

`distribute="data"` or `"model"` spreads training over the visible devices
with Keras' and TensorFlow's own engines: `keras.distribution.DataParallel`
or `ModelParallel` (the layout of `model_parallel_layout_map`) on JAX,
`tf.distribute.MirroredStrategy` on TensorFlow. Batches stay global
batches, split across the devices (`for_devices`).
"""

import contextlib
import dataclasses
import os

import keras
import numpy as np

from keras_transformer.errors import UserInputError

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
class Placement:
    """Where training runs: the scope to build the model in, and how batches split."""

    scope: object = contextlib.nullcontext
    devices: int = 1
    batch_multiple: int = 1  # global batches are cut to a multiple of the data-parallel replicas
    num_processes: int = 1
    process_id: int = 0
    distribution: object = None  # the keras.distribution set for this run (JAX)


def place(config, log):
    if not config.distribute:
        return Placement()
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
        return Placement()
    if config.distribute == "data":
        distribution = keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)
        replicas = len(devices)
        how = f"data parallel (keras.distribution.DataParallel) over {len(devices)} devices"
    else:
        per_host = len(devices) // processes
        if config.num_heads % per_host or config.ff_dim % per_host:
            raise UserInputError(
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
    return Placement(
        devices=len(devices), batch_multiple=replicas, num_processes=processes, process_id=process_id,
        distribution=distribution,
    )


def _place_on_tensorflow(config, log):
    import tensorflow as tf

    devices = [d.name for d in tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")]
    if len(devices) == 1:
        log(f"distribute: --distribute {config.distribute} but only one device ({devices[0]}); training on it")
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
