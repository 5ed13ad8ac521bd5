"""The layers, models, training objects and decoding run where TensorFlow is absent."""

import os
import subprocess
import sys

import keras
import pytest

BLOCK_TENSORFLOW_THEN_DECODE = """
import sys
sys.modules["tensorflow"] = None  # any `import tensorflow` now raises ImportError
import numpy as np
import keras
import keras_transformer as kt
keras.utils.set_random_seed(0)
from keras_transformer.decoding import CachedDecoder, greedy_search
model = kt.models.transformer(20, 20, num_layers=1, d_model=8, num_heads=2, ff_dim=16, max_length=8)
model.compile(optimizer="adam", loss=kt.training.MaskedSparseCrossentropy())
model.fit({"encoder_tokens": np.array([[4, 5, 0]]), "decoder_tokens": np.array([[2, 6, 0]])},
          np.array([[6, 3, 0]]), epochs=1, verbose=0)
print(greedy_search(CachedDecoder(model), np.array([[4, 5, 0]]), max_new_tokens=3, stop_at_end=False).shape)
"""


@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="needs a backend other than TensorFlow")
def test_package_trains_and_decodes_with_tensorflow_blocked():
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_TENSORFLOW_THEN_DECODE],
        env=dict(os.environ), capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("(1, 3)")
