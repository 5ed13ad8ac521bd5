"""`benchmarks.loss_speed` times two formulations of the package's loss: they must be that loss."""

import json

import keras
import numpy as np
import pytest

from benchmarks import loss_speed
from keras_transformer.training import MaskedSparseCrossentropy

LABELS = np.array([[5, 2, 7, 0, 0], [3, 1, 0, 0, 0]], "int32")


def value_and_gradient(function, logits):
    """`function(logits)` and its gradient with respect to `logits`, as NumPy."""
    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        tensor = torch.tensor(logits, requires_grad=True)
        value = function(tensor)
        value.backward()
        return float(value.detach()), tensor.grad.numpy()
    if backend == "jax":
        import jax

        value, gradient = jax.value_and_grad(function)(logits)
        return float(value), np.asarray(gradient)
    import tensorflow as tf

    tensor = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(tensor)
        value = function(tensor)
    return float(value), tape.gradient(value, tensor).numpy()


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_both_formulations_are_the_package_loss_in_value_and_gradient(label_smoothing, rng):
    logits = (rng.normal(size=(2, 5, 9)) * 3).astype("float32")
    package = MaskedSparseCrossentropy(label_smoothing=label_smoothing)
    expected = value_and_gradient(lambda z: package(LABELS, z), logits)
    for name, formulation in loss_speed.FORMULATIONS.items():
        value, gradient = value_and_gradient(lambda z: formulation(LABELS, z, label_smoothing), logits)
        assert value == pytest.approx(expected[0], rel=1e-6), name
        np.testing.assert_allclose(gradient, expected[1], atol=1e-6, err_msg=name)
        assert np.all(gradient[LABELS == 0] == 0), name  # padding gets no gradient


def test_quick_run_writes_a_row_per_setting(tmp_path):
    report = loss_speed.main(["--quick", "--repeats", "1", "--dtype", "float32", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "results.json").read_text())
    losses = [row for row in saved["rows"] if row["label_smoothing"] is not None]
    assert len(losses) == 1 and set(losses[0]["median_wall"]) == {"log_softmax", "logsumexp"}
    assert losses[0]["loss"]["log_softmax"] == pytest.approx(losses[0]["loss"]["logsumexp"], rel=1e-5)
    assert "logsumexp / log_softmax" in (tmp_path / "results.md").read_text()
    assert report["meta"]["backend"] == keras.backend.backend()
