"""Every tutorial runs end to end (`--smoke`: tiny model, two steps) and reports."""

import pathlib
import runpy
import sys

import keras
import pytest

from conftest import FIXTURE_CORPUS

pytestmark = pytest.mark.tutorials

TUTORIALS = pathlib.Path(__file__).parent.parent / "tutorials"
SCRIPTS = ["sinusoid", "attention_scale", "embedding_scale", "add_vs_concat", "qkv_init"]


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="the scripts run once per CI, under TensorFlow (their commands' backend); "
    "the diagnostics and ablation they call are tested under every backend",
)
@pytest.mark.parametrize("name", SCRIPTS)
def test_tutorial_runs_and_writes_its_table_and_plots(name, tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(TUTORIALS))
    monkeypatch.setattr(sys, "argv", [name, "--smoke", "--corpus", FIXTURE_CORPUS, "--out", str(tmp_path)])
    runpy.run_path(str(TUTORIALS / f"{name}.py"), run_name="__main__")
    report = (tmp_path / "results.md").read_text()
    assert report.startswith("# ") and "| " in report
    assert capsys.readouterr().out.strip().endswith(report.strip().splitlines()[-1])
    plots = list(tmp_path.glob("*.png"))
    assert plots and all(plot.stat().st_size > 1000 for plot in plots)
    # Numbers, not placeholders: no table cell left empty or NaN.
    for line in report.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            assert all(cells) and not any(cell in ("nan", "nan ± nan") for cell in cells), line
