"""What the machine is comes from one module, and inference does not depend on the training job's settings."""

import ast
import pathlib

import pytest

from keras_transformer import machine

PACKAGE = pathlib.Path(machine.__file__).parent


def _imported_modules(path):
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.backend_independent
def test_the_translator_reads_the_machine_not_the_training_configuration():
    imports = _imported_modules(PACKAGE / "translation" / "translator.py")
    assert "keras_transformer.training.train_config" not in imports
    assert "keras_transformer.machine" in imports


@pytest.mark.backend_independent
def test_the_cpu_is_described_with_its_cores_and_whether_it_has_avx512(monkeypatch):
    monkeypatch.setattr(machine, "cpu_model", lambda: "Some CPU")
    monkeypatch.setattr(machine.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"sse2", "avx2"})
    assert machine.describe_cpu() == "Some CPU, 2 cores, no AVX-512"
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx512f", "avx512_bf16", "amx_tile"})
    assert machine.describe_cpu() == "Some CPU, 2 cores, AVX-512, AVX512_BF16, AMX"
