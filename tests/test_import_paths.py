"""Every import the README, the docs and the tutorials show runs, and every API page names a real object.

The package keeps one documented place for each public name (`kt.layers`,
`kt.models`, `kt.checkpoints`, `kt.training`, `kt.translation`, ...); a
module that moves must take the pages that show it along.
"""

import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The pages a user reads; benchmarks/results/ holds records of past commands, kept as they ran.
PAGES = sorted(
    {ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "api").glob("*.md"),
     *(ROOT / "tutorials").glob("*.md"), *(ROOT / "benchmarks").glob("*.md"), *(ROOT / "benchmarks" / "findings").glob("*.md")}
)
# One import statement on one line, as a page shows it (a doctest prompt allowed).
IMPORT_LINE = re.compile(r"^\s*(?:>>> )?((?:from keras_transformer\S* import [^#(]+)|(?:import [^#]*\bkeras_transformer[^#]*))$")
API_REFERENCE = re.compile(r"^::: (\S+)$", re.M)


def _shown_imports():
    shown = {}
    for page in PAGES:
        for line in _code_lines(page.read_text(encoding="utf-8")):
            match = IMPORT_LINE.match(line)
            if match:
                shown.setdefault(match.group(1).strip().rstrip(";"), page.relative_to(ROOT).as_posix())
    return shown


def _code_lines(markdown):
    """The lines inside the page's fenced code blocks."""
    inside = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside:
            yield line


def _api_references():
    return sorted({name for page in (ROOT / "docs" / "api").glob("*.md")
                   for name in API_REFERENCE.findall(page.read_text(encoding="utf-8"))})


@pytest.mark.backend_independent
def test_the_pages_show_imports_of_each_half_of_the_package():
    shown = _shown_imports()
    assert any("keras_transformer.training" in line for line in shown), sorted(shown)
    assert any("keras_transformer.translation" in line for line in shown), sorted(shown)


@pytest.mark.backend_independent
@pytest.mark.parametrize("statement", sorted(_shown_imports()))
def test_an_import_a_page_shows_runs(statement):
    try:
        exec(compile(statement, "<page>", "exec"), {})
    except ImportError as error:
        pytest.fail(f"{_shown_imports()[statement]} shows `{statement}`, which fails: {error}")


@pytest.mark.backend_independent
@pytest.mark.parametrize("name", _api_references())
def test_an_api_page_names_an_object_that_exists(name):
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            assert hasattr(found, attribute), f"docs/api names {name}, but {found.__name__} has no {attribute!r}"
            found = getattr(found, attribute)
        return
    pytest.fail(f"docs/api names {name}, whose module does not import")
