"""The README's example runs as written and prints what it promises."""

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_builds_and_fits_a_model():
    section = README.read_text().split("## A tiny model, built and fitted", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(README), "exec"), {})
    assert printed.getvalue().strip() == "(2, 8, 50)"
