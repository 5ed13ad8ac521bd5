"""A model saved under one backend loads to the same outputs under the others."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from conftest import to_numpy
import keras_transformer as kt

BACKENDS = ("tensorflow", "jax", "torch")
LOAD_AND_PREDICT = """
import sys, numpy as np, keras
import keras_transformer  # registers the layers
model = keras.saving.load_model(sys.argv[1])
batch = dict(np.load(sys.argv[2]))
np.save(sys.argv[3], keras.ops.convert_to_numpy(model(batch)))
"""


# A fresh process of each other backend (5-11 s, most of it importing that backend): CI runs it
# under every backend (end_to_end), and the lower-bound job with the oldest JAX.
@pytest.mark.end_to_end
@pytest.mark.parametrize(
    "other", [b for b in BACKENDS if b != keras.backend.backend()]
)
def test_other_backend_reloads_to_the_same_logits(other, tmp_path):
    model = kt.models.transformer(
        30, 40, num_layers=2, d_model=16, num_heads=4, ff_dim=32, max_length=12,
        tie_embeddings=True, norm_first=True,
    )
    batch = {
        "encoder_tokens": np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32"),
        "decoder_tokens": np.array([[1, 11, 12], [1, 13, 0]], "int32"),
    }
    model.save(tmp_path / "model.keras")
    np.savez(tmp_path / "batch.npz", **batch)
    env = dict(os.environ, KERAS_BACKEND=other)
    subprocess.run(
        [sys.executable, "-c", LOAD_AND_PREDICT, str(tmp_path / "model.keras"),
         str(tmp_path / "batch.npz"), str(tmp_path / "logits.npy")],
        env=env, check=True, capture_output=True, timeout=300,
    )
    np.testing.assert_allclose(
        np.load(tmp_path / "logits.npy"), to_numpy(model(batch)), rtol=1e-4, atol=1e-4
    )
