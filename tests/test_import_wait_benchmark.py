"""benchmarks/import_wait.py in miniature: every command it times runs, and its figures add up."""

import json
import math

import pytest

pytestmark = [pytest.mark.backend_independent, pytest.mark.end_to_end]


def test_the_import_wait_benchmark_times_every_command_and_its_own_memory(trained_run, tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("jax")
    from benchmarks import import_wait

    out = tmp_path / "out"
    import_wait.main(["--out", str(out), "--shape", "tiny", "--repeats", "1", "--readme-run", str(trained_run)])
    figures = json.loads((out / "results.json").read_text())
    numbers = {key: value for key, value in figures.items() if isinstance(value, (int, float))}
    assert all(math.isfinite(value) and value >= 0 for value in numbers.values()), numbers
    assert 0 < figures["transformers_from_pretrained_seconds"] < figures["transformers_process_seconds"]
    assert 0 < figures["import_work_seconds"] < figures["import_wall_seconds"]
    # Each process's own peak: the import holds the libraries and more, never less.
    assert figures["import_peak_mb"] > figures["libraries_alone_peak_mb"] > 50
    for label in ("imported", "readme"):
        first, again = figures[f"translate_{label}"]
        assert first["wall"] > 0 and again["before_decoding"] > 0
        # The first call compiles and writes the program (a few ms of writing: 0.00 s where the disk is fast),
        # the next reads it.
        assert first["wall"] > again["wall"] and again["write"] == 0
    assert "| import wall seconds |" in (out / "results.md").read_text()
