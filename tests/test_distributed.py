"""Training on several devices gives the losses of one device with the same global batch.

The device count must be fixed before the backend starts, so each check runs
in a subprocess: JAX with `--xla_force_host_platform_device_count=2`,
TensorFlow with two logical CPU devices. Each runs in the CI pass of its own
backend only (CI runs the suite once per backend), so it costs CI time once.

Tolerance: the same float32 arithmetic, only summed in another order
(per-device partial sums, then an all-reduce), moves the loss of 3 Adam
steps by at most 9.4e-7 relative (measured: JAX data parallel 9.4e-7, model
parallel 1.7e-7, TensorFlow 8.8e-8). `rel=1e-5` sits 10x above that and
below what a wrong split gives: averaging the devices'
token means instead of taking the global one moved the losses of steps 2
and 3 by 1.7e-4 (TensorFlow), a loss scaled by the device count moves them
by 100 %, other batches by about 1e-2.

The dev loss is Keras' mean of per-batch losses weighted by rows. Data
parallel pads a pass's last, smaller batches with all-padding rows so they
split evenly; those rows add no loss but weight, which moved the dev loss by
2.7e-4 (JAX) and 1.6e-3 (TensorFlow, other initial weights) here, hence
`rel=5e-3` for it. The training losses carry the claim.
"""

import json
import os
import pathlib
import subprocess
import sys

import keras
import pytest

import keras_transformer_cli as cli
from keras_transformer.training import distribute
from keras_transformer.training.train_config import TrainConfig
from keras_transformer.errors import UserInputError

FIXTURE = str(pathlib.Path(__file__).parent / "fixtures" / "bible_es_en_small.tsv.gz")
TINY = dict(
    corpus=FIXTURE, preset="tiny", num_layers=1, d_model=32, num_heads=2, ff_dim=64, dropout=0.0,
    max_length=48, vocabulary_size=200, batch_tokens=960, warmup_steps=2, epochs=1, steps_per_epoch=3,
)
# Trains TINY with each --distribute mode named on the command line (none =
# one device) and prints the loss after each step, the dev loss and where
# the weights live.
DISTRIBUTED_RUN = r"""
import json, os, sys
if os.environ["KERAS_BACKEND"] == "tensorflow":
    import tensorflow as tf  # two logical CPU devices, before TensorFlow starts
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from keras_transformer.training.train_config import TrainConfig
from keras_transformer.training.trainer import train_translator

class Record(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.losses = []
    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(keras.ops.convert_to_numpy(logs["loss"])))
    def on_train_end(self, logs=None):
        kernel = next(v for v in self.model.weights if v.path == "encoder_layer_0/self_attention/query/kernel")
        sharding = getattr(kernel.value, "sharding", None)
        self.kernel = str(getattr(sharding, "spec", sharding))

results = {}
for mode in sys.argv[2:]:  # "data", "model", "none" (one device); ":python" for the PyDataset pipeline
    record = Record()
    distribute, _, pipeline = mode.partition(":")
    config = TrainConfig(output=os.path.join(sys.argv[1], mode), input_pipeline=pipeline or "auto",
                         distribute=None if distribute == "none" else distribute, **json.loads(os.environ["TINY"]))
    summary = train_translator(config, verbose=0, callbacks=[record], sample_sentences=0)
    results[mode] = dict(losses=record.losses, dev_loss=summary["dev_loss"], devices=summary["devices"],
                         kernel=record.kernel)
print("RESULTS " + json.dumps(results))
"""


def _distributed_run(tmp_path, backend, *modes):
    env = {**os.environ, "KERAS_BACKEND": backend, "TINY": json.dumps(TINY)}
    if backend == "jax":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    run = subprocess.run(
        [sys.executable, "-c", DISTRIBUTED_RUN, str(tmp_path), "none", *modes],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    line = next(line for line in run.stdout.splitlines() if line.startswith("RESULTS "))
    return json.loads(line[len("RESULTS "):])


def _assert_same_losses(got, want, dev_rel=1e-5):
    assert len(got["losses"]) == len(want["losses"]) == TINY["steps_per_epoch"]
    assert got["losses"] == pytest.approx(want["losses"], rel=1e-5)
    assert got["dev_loss"] == pytest.approx(want["dev_loss"], rel=dev_rel)


@pytest.mark.processes
@pytest.mark.skipif(keras.backend.backend() != "jax", reason="runs once, in the jax pass of the suite")
def test_jax_data_and_model_parallel_on_two_devices_match_one_device(tmp_path):
    results = _distributed_run(tmp_path, "jax", "data", "model", "data:python")
    one, data, model = results["none"], results["data"], results["model"]
    assert data["devices"] == model["devices"] == 2 and one["devices"] == 1
    _assert_same_losses(data, one, dev_rel=5e-3)
    _assert_same_losses(model, one)  # one data replica: nothing padded
    # The keras.utils.PyDataset pipeline pads and splits the batches as tf.data does.
    assert results["data:python"]["devices"] == 2
    _assert_same_losses(results["data:python"], data)
    # The layout map was applied: query kernels split by output feature
    # (attention head) across the "model" axis; data parallel replicates.
    assert "'model'" in model["kernel"], model["kernel"]
    assert "model" not in data["kernel"], data["kernel"]


@pytest.mark.processes
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="runs once, in the tensorflow pass of the suite")
def test_tensorflow_mirrored_strategy_on_two_devices_matches_one_device(tmp_path):
    results = _distributed_run(tmp_path, "tensorflow", "data")
    assert results["data"]["devices"] == 2 and results["none"]["devices"] == 1
    _assert_same_losses(results["data"], results["none"], dev_rel=5e-3)


def test_unsupported_distribute_modes_are_clear_errors():
    backend = keras.backend.backend()
    unsupported = {"torch": ("data", "model"), "tensorflow": ("model",), "jax": ()}[backend]
    for mode in unsupported:
        with pytest.raises(UserInputError, match="--distribute.* needs the jax"):
            TrainConfig(output="unused", distribute=mode, **TINY).resolved()
    with pytest.raises(UserInputError, match="--distribute must be data or model"):
        TrainConfig(output="unused", distribute="pipeline", **TINY).resolved()
    args = cli.build_parser().parse_args(["train", "--distribute", "model"])
    assert args.distribute == "model"


@pytest.mark.skipif(keras.backend.backend() == "torch", reason="--distribute needs jax or tensorflow")
def test_distribute_on_one_device_says_so_and_trains_there():
    if len(keras.distribution.list_devices()) > 1 and keras.backend.backend() == "jax":
        pytest.skip("this process sees more than one device")
    messages = []
    placement = distribute.place("data", messages.append)
    assert placement.devices == 1 and placement.distribution is None and placement.batch_multiple == 1
    assert messages and "only one device" in messages[0]


def test_model_parallel_layout_map_splits_attention_and_feed_forward_kernels():
    layout_map = distribute.model_parallel_layout_map(None)
    column, row = (None, "model"), ("model", None)
    for path, axes in [
        ("encoder_layer_0/self_attention/query/kernel", column),
        ("decoder_layer_1/cross_attention/value/kernel", column),
        ("decoder_layer_0/self_attention/qkv/kernel", column),
        ("encoder_layer_0/self_attention/attention_output/kernel", row),
        ("encoder_layer_0/feed_forward/hidden/kernel", column),
        ("decoder_layer_0/feed_forward/output/kernel", row),
    ]:
        assert layout_map[path].axes == axes, path
    replicated = ("encoder_embedding/embeddings", "output_projection/kernel", "encoder_layer_0/self_attention_norm/gamma")
    for path in replicated:
        assert layout_map[path] is None, path
