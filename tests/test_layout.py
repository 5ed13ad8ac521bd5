"""The package's layout holds: imports run one way between its halves, and every module stays readable.

`keras_transformer/` keeps what both halves use at its top (layers,
models, decoding, data, checkpoints, diagnostics, `model_file`, ...);
`training/` may use `translation/` (dev BLEU picks the kept weights), never
the other way; the top uses neither. `keras_transformer_runtime` runs
without Keras, so it imports nothing of `keras_transformer`.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "keras_transformer"
MAX_LINES = 480


def _modules(folder):
    return sorted(path for path in folder.rglob("*.py") if "__pycache__" not in path.parts)


def _imported(path):
    """Every module name `path` imports, at its top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _reaches(path, prefix):
    return sorted(name for name in _imported(path) if name == prefix or name.startswith(prefix + "."))


def _shared_modules():
    halves = (PACKAGE / "training", PACKAGE / "translation")
    return [path for path in _modules(PACKAGE)
            if path != PACKAGE / "__init__.py" and not any(half in path.parents for half in halves)]


@pytest.mark.backend_independent
def test_the_shared_top_imports_neither_half():
    assert len(_shared_modules()) > 20
    for path in _shared_modules():
        for half in ("keras_transformer.training", "keras_transformer.translation"):
            assert not _reaches(path, half), f"{path.relative_to(ROOT)} imports {_reaches(path, half)}"


@pytest.mark.backend_independent
def test_translation_never_imports_training():
    modules = _modules(PACKAGE / "translation")
    assert modules
    for path in modules:
        reached = _reaches(path, "keras_transformer.training")
        assert not reached, f"{path.relative_to(ROOT)} imports {reached}: read a run through keras_transformer.model_file"


@pytest.mark.backend_independent
def test_the_runtime_imports_nothing_of_the_keras_package():
    for path in _modules(ROOT / "keras_transformer_runtime"):
        assert not _reaches(path, "keras_transformer"), f"{path.relative_to(ROOT)} imports {_reaches(path, 'keras_transformer')}"


@pytest.mark.backend_independent
@pytest.mark.parametrize("folder", ["keras_transformer", "keras_transformer_runtime", "keras_transformer_cli"])
def test_every_module_is_at_most_480_lines(folder):
    long = {path.relative_to(ROOT).as_posix(): lines for path in _modules(ROOT / folder)
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split these along a seam a reader would name: {long}"
