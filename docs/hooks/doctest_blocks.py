"""A griffe extension for the API reference: docstring examples render as code.

The package's docstrings follow Keras' style (an `Example:` line, a blank
line, then doctest lines), which the Google-style parser keeps as plain
text; this wraps each run of `>>>` lines and their output in a `pycon`
fence, so the examples show as code and `x[0]` is not read as a link.
"""

import griffe


def fence_doctests(text):
    """`text` with every doctest block (from a `>>>` line to the next blank line) in a `pycon` fence."""
    out, in_block = [], False
    for line in text.split("\n"):
        if not in_block and line.lstrip().startswith(">>>"):
            out.append("```pycon")
            in_block = True
        elif in_block and not line.strip():
            out.append("```")
            in_block = False
        out.append(line)
    if in_block:
        out.append("```")
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    """Fences the doctest blocks of every docstring griffe loads."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)
