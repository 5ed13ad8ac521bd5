"""The package's layout holds: imports run one way between its halves, and every module stays readable.

`keras_transformer/` keeps what both halves use at its top (layers,
models, decoding, data, checkpoints, diagnostics, `model_file`, ...);
`training/` may use `translation/` (dev BLEU picks the kept weights), never
the other way; the top uses neither. `keras_transformer_runtime` runs
without Keras, so it imports nothing of `keras_transformer`.
"""

import ast
import pathlib
import re

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


# What code must not carry: the measurements behind it belong in benchmarks/findings/*.md or
# docs/measured.md, whose section the code names; code says what it does and why, in words.
MEASUREMENT_PATTERNS = {
    "a result folder": re.compile(r"benchmarks/results"),
    "a machine note": re.compile(r"\b\d+-core\b|\b\d+ (?:CPU )?cores\b|\bEPYC\b|\bXeon\b"),
    "a speed ratio": re.compile(r"(?<![\w.])(?:\d+(?:\.\d+)?-)?\d+\.\d+x\b"
                                r"|(?<![\w.-])\d+x (?:faster|slower|as fast|as long|longer|the )"),
}


def _measurements(line):
    return [kind for kind, pattern in MEASUREMENT_PATTERNS.items() if pattern.search(line)]


@pytest.mark.backend_independent
@pytest.mark.parametrize("line", [
    "            (benchmarks/results/cpu-beam-step-changes).",
    "# 2-core CPU; greedy stays at 8: 706.4 against 567.6 for 4 and 609.6 for 16;",
    "README's model, 2-core AMD EPYC, 2026-11-27: 0.84x the wall time, paired",
    "    2-core Xeon (benchmarks/results/cpu-xeon-amx/batch-a-core), calls of a",
    "# few million sentences. About 60 s on 2 cores at 8000 pieces.",
    "            # Compiling costs about as much as two eager scorings (tiny preset, 2 CPU cores: 28 s, then",
    "  on an Intel Xeon with AVX-512 it ran 0.97x and 0.93x as fast, so YNNPACK",
    "            one thread each ran 1.15-1.55x faster than 1 batch of two",
    "decodes 1.07x-1.18x faster where the decoding loop is compiled",
    "(TensorFlow, JAX), but 0.66x as fast in eager torch (one run each).",
    "# books over greedy search, with no loops, for 2.4x the decoding time",
    "# The narrowest model whose lone sentence gains by those rows (512 wide: 1.80x; 128: 0.83x).",
    "  sentences 1.22x (greedy) and 1.26x (beam 4) faster with XLA's own code;",
    "a step 2x faster than before",
])
def test_the_measurement_patterns_catch_what_was_removed(line):
    assert _measurements(line), line


@pytest.mark.backend_independent
@pytest.mark.parametrize("line", [
    "    ['www.acme.es', 'ACME-7x', '{n}', '%s']",
    "    'kept-beam4-alpha0.6-norepeat3-new127-shape8x64.jaxexport'",
    "  on a CPU, 16 x 100 steps of about 4,096 tokens a side;",
    '    return f"{cpu_model()}, {os.cpu_count()} cores" + "".join(f", {label}" for label in have) + lacking',
    "    >>> peak_flops(\"NVIDIA H100 80GB HBM3\")",
    "  `YNNPACK_FREE_WIDTH` wide, on a CPU without AVX-512, leaves YNNPACK.",
    "# a few times the decoding time (benchmarks/findings/decoding.md, \"The compiled engine on a CPU\").",
])
def test_the_measurement_patterns_leave_behaviour_alone(line):
    assert not _measurements(line), line


@pytest.mark.backend_independent
@pytest.mark.parametrize("folder", ["keras_transformer", "keras_transformer_runtime", "keras_transformer_cli"])
def test_no_module_carries_a_measurement(folder):
    found = [f"{path.relative_to(ROOT).as_posix()}:{number}: {', '.join(kinds)}: {line.strip()}"
             for path in _modules(ROOT / folder)
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if (kinds := _measurements(line))]
    assert not found, ("say what the code does and why in words, and name the findings section that holds the "
                       "figures (benchmarks/findings/*.md, docs/measured.md):\n" + "\n".join(found))


# What a results folder may hold: figures, tables, plots, logs and archives of logs.
RESULT_DATA_SUFFIXES = {".csv", ".json", ".jsonl", ".log", ".md", ".png", ".svg", ".tgz", ".txt"}


def _code_under_results(paths):
    """The paths among `paths` that are code, not data: a suffix outside `RESULT_DATA_SUFFIXES`, or a `#!` line."""
    return [path for path in paths
            if path.suffix not in RESULT_DATA_SUFFIXES or path.read_bytes()[:2] == b"#!"]


@pytest.mark.backend_independent
def test_results_folders_hold_data_only(tmp_path):
    (tmp_path / "run.sh").write_text("python -m benchmarks.x\n")
    (tmp_path / "wrapper").write_text("#!/usr/bin/env bash\nexec python x.py\n")
    (tmp_path / "disguised.txt").write_text("#!/usr/bin/env python\n")
    (tmp_path / "results.md").write_text("| a | b |\n")
    assert sorted(path.name for path in _code_under_results(tmp_path.iterdir())) == [
        "disguised.txt", "run.sh", "wrapper"]
    found = _code_under_results(path for path in (ROOT / "benchmarks" / "results").rglob("*") if path.is_file())
    assert not found, ("benchmarks/results/ holds data only: put code in benchmarks/ or retire it with the commit "
                       "that has it (benchmarks/README.md):\n" + "\n".join(map(str, found)))
