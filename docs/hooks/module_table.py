"""docs/inside.md's table of every module, drawn from the tree: each module's dotted name and its docstring's first line.

    python docs/hooks/module_table.py    # rewrites the table between the markers in docs/inside.md

The table sits between `START` and `END` in docs/inside.md;
tests/test_docs.py fails when it is not what this script would write (a
module added, removed or its first line changed), naming the command.
Modules are read with `ast`, never imported.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("keras_transformer", "keras_transformer_runtime", "keras_transformer_cli")
INSIDE = ROOT / "docs" / "inside.md"
START = "<!-- modules: start (python docs/hooks/module_table.py writes this table) -->"
END = "<!-- modules: end -->"


def module_rows(root=ROOT):
    """`(dotted name, first line of its docstring)` of every module of `PACKAGES`, in path order.

    Example:

    >>> rows = dict(module_rows())
    >>> rows["keras_transformer_runtime.documents.kept_spans"].startswith("Spans a translation must carry")
    True
    """
    rows = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            rows.append((name, docstring.strip().split("\n")[0].strip()))
    return rows


def table(rows):
    """The Markdown table of `rows`, between the markers."""
    lines = [START, "", "| module | what it does |", "|---|---|"]
    escaped = [(name, line.replace("|", "\\|")) for name, line in rows]
    lines += [f"| `{name}` | {line} |" for name, line in escaped]
    return "\n".join(lines + ["", END])


def refreshed(text, rows):
    """`text` (docs/inside.md) with its table replaced by that of `rows`.

    Raises:
        ValueError: the markers are missing.
    """
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{INSIDE} has no {START!r} ... {END!r} markers")
    return text[:start] + table(rows) + text[end + len(END):]


if __name__ == "__main__":
    INSIDE.write_text(refreshed(INSIDE.read_text(encoding="utf-8"), module_rows()), encoding="utf-8")
