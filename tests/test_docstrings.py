"""Every docstring example in the package runs and prints what it says."""

import doctest
import importlib
import pkgutil

import pytest

import keras_transformer

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(keras_transformer.__path__, "keras_transformer.")
    if not info.name.startswith("keras_transformer.data.build_")
) + ["keras_transformer_cli"]


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {module_name}"
