"""A results folder that several runs of one benchmark share: their rows in `results.json`, one table in `results.md`."""

import json
import os


def add_rows(out, rows, markdown):
    """Adds `rows` to those of `out/results.json` and writes all of them there and, as `markdown(rows)`, to `results.md`.

    Args:
        out: the folder (made if missing).
        rows: a list of JSON-able dicts, this run's.
        markdown: callable turning every row, old and new, into the table.

    Returns:
        Every row of the folder, the new ones last.

    Example:

    >>> import tempfile
    >>> out = tempfile.mkdtemp()
    >>> _ = add_rows(out, [{"x": 1}], lambda rows: f"{len(rows)} rows")
    >>> add_rows(out, [{"x": 2}], lambda rows: f"{len(rows)} rows")
    [{'x': 1}, {'x': 2}]
    >>> open(os.path.join(out, "results.md")).read()
    '2 rows'
    """
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "results.json")
    if os.path.exists(path):
        with open(path) as f:
            rows = json.load(f) + rows
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(markdown(rows))
    return rows
