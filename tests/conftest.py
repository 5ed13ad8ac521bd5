"""Shared fixtures and helpers; every test runs under the backend in KERAS_BACKEND."""

import keras
import numpy as np
import pytest


def to_numpy(x):
    """Any backend tensor (or KerasVariable) as a NumPy array."""
    return keras.ops.convert_to_numpy(x)


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Seeds every test and restores the float32 policy after it."""
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session()


@pytest.fixture
def rng():
    return np.random.default_rng(0)
