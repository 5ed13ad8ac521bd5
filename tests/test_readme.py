"""The README's examples, and the docs' own-data and Keras-workflow examples, run as written and print what they promise."""

import contextlib
import io
import os
import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
OWN_DATA = README.parent / "docs" / "own-data.md"
KERAS_WORKFLOWS = README.parent / "docs" / "keras-workflows.md"


def test_readme_layers_examples_fit_a_model_and_build_one_of_your_own():
    section = README.read_text().split("## The layers in your own Keras model", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    printed = io.StringIO()
    namespace = {}
    with contextlib.redirect_stdout(printed):
        for code in blocks:  # the second continues the first, as a reader would run them
            exec(compile(code, str(README), "exec"), namespace)
    promised = [re.search(r"# (.*)$", code.strip().splitlines()[-1]).group(1) for code in blocks]
    assert printed.getvalue().split() == " ".join(promised).split() == ["(2,", "8,", "50)", "(1,", "3)"]


def test_keras_workflow_examples_print_what_they_promise():
    blocks = re.findall(r"```python\n(.*?)```", KERAS_WORKFLOWS.read_text(), re.S)
    assert len(blocks) == 2
    for code in blocks:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, str(KERAS_WORKFLOWS), "exec"), {})
        promised = re.search(r"# (\S+)", code.strip().splitlines()[-1]).group(1)
        assert printed.getvalue().split() == [promised]


@pytest.mark.end_to_end
@pytest.mark.backend_independent
def test_readme_own_data_example_trains_on_the_french_english_fixture(tmp_path, monkeypatch):
    section = OWN_DATA.read_text()
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    # Run where the example's relative paths hold: tests/fixtures beside it, runs/ written in tmp_path.
    (tmp_path / "tests").mkdir()
    os.symlink(README.parent / "tests" / "fixtures", tmp_path / "tests" / "fixtures")
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(OWN_DATA), "exec"), {})
    promised = re.search(r"# (.*)$", code.strip().splitlines()[-1]).group(1)
    assert printed.getvalue().strip() == promised == f"{os.path.join('runs', 'fr-en')} 222 29 2"
    assert (tmp_path / "runs" / "fr-en" / "model.keras").is_file()
