"""The README's links lead somewhere, and the docs site's API pages show examples as code.

`mkdocs build --strict` (in .ci/run) checks the site's own links and API
references; these checks cover the README, which the site does not build.
"""

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(markdown_file):
    """The heading anchors Python-Markdown's toc gives a page (its default slugs)."""
    anchors = set()
    for line in markdown_file.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"#+ (.*)", line)
        if heading:
            slug = re.sub(r"[^\w\s-]", "", heading.group(1)).strip().lower()
            anchors.add(re.sub(r"[\s-]+", "-", slug))
    return anchors


@pytest.mark.backend_independent
def test_every_relative_link_of_the_readme_leads_to_a_file_and_heading_that_exist():
    links = [link for link in LINK.findall(README.read_text(encoding="utf-8")) if "://" not in link]
    assert len(links) >= 10
    for link in links:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), f"README links to {link!r}, which does not exist"
        if anchor:
            assert anchor in _anchors(target), f"README links to {link!r}: no such heading in {path}"


@pytest.mark.backend_independent
def test_the_readme_is_a_front_door_of_at_most_150_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 150


@pytest.mark.backend_independent
def test_doctest_blocks_are_fenced_and_the_rest_is_left_alone():
    spec = importlib.util.spec_from_file_location("doctest_blocks", ROOT / "docs" / "hooks" / "doctest_blocks.py")
    if importlib.util.find_spec("griffe") is None:
        pytest.skip("griffe (the docs extra) is not installed")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "Summary.\n\nExample:\n\n>>> x = [1][0]\n>>> x\n1\n\nMore text [a][b]."
    assert module.fence_doctests(text) == (
        "Summary.\n\nExample:\n\n```pycon\n>>> x = [1][0]\n>>> x\n1\n```\n\nMore text [a][b]."
    )
    assert module.fence_doctests("    >>> 1\n    1") == "```pycon\n    >>> 1\n    1\n```"


@pytest.mark.backend_independent
def test_inside_names_every_module_with_its_docstrings_first_line():
    spec = importlib.util.spec_from_file_location("module_table", ROOT / "docs" / "hooks" / "module_table.py")
    module_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module_table)
    rows = module_table.module_rows()
    text = module_table.INSIDE.read_text(encoding="utf-8")
    assert len(rows) > 100 and all(line for _, line in rows), [name for name, line in rows if not line]
    assert text == module_table.refreshed(text, rows), (
        "docs/inside.md's module table is out of date: run python docs/hooks/module_table.py")
