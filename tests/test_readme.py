"""The README's example runs as written and prints what it promises."""

import contextlib
import io
import os
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_builds_and_fits_a_model():
    section = README.read_text().split("## A tiny model, built and fitted", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(README), "exec"), {})
    assert printed.getvalue().strip() == "(2, 8, 50)"


@pytest.mark.backend_independent
def test_readme_own_data_example_trains_on_the_french_english_fixture(tmp_path, monkeypatch):
    section = README.read_text().split("## Train on your own data", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    # Run where the example's relative paths hold: tests/fixtures beside it, runs/ written in tmp_path.
    (tmp_path / "tests").mkdir()
    os.symlink(README.parent / "tests" / "fixtures", tmp_path / "tests" / "fixtures")
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(README), "exec"), {})
    promised = re.search(r"# (.*)$", code.strip().splitlines()[-1]).group(1)
    assert printed.getvalue().strip() == promised == f"{os.path.join('runs', 'fr-en')} 222 29 2"
    assert (tmp_path / "runs" / "fr-en" / "model.keras").is_file()
