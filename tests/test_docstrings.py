"""Every docstring example in the package runs and prints what it says.

Under one backend (`backend_independent`: torch, tests/conftest.py): an
example is the documentation's promise that its text runs; what it shows is
tested under every backend by the tests of its module, and the examples that
build and decode models were a sixth of the TensorFlow and JAX lanes.
"""

import doctest
import importlib
import pkgutil

import pytest

import keras_transformer
import keras_transformer_cli
import keras_transformer_runtime

MODULES = sorted(
    info.name
    for package in (keras_transformer, keras_transformer_runtime, keras_transformer_cli)
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")
    if not info.name.startswith("keras_transformer.data.build_") and info.name != "keras_transformer_cli.__main__"
) + ["keras_transformer_cli", "keras_transformer_runtime"]


@pytest.mark.backend_independent
@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {module_name}"
