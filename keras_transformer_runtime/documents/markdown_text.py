"""Markdown: every block's words translated, everything else kept byte for byte.

markdown-it-py (CommonMark, with GFM tables) finds the blocks: each
paragraph, heading, list item's or blockquote's paragraph, and each table
row. Nothing is rendered back from its tokens (that would rewrite the
file's own style): the output is the source's lines, a block's lines giving
their text to its translation and keeping their prefixes (`# `, `- `, `1. `,
`> `, indentation, an ATX heading's closing `#`s, a setext underline). Code
blocks, HTML blocks, reference definitions, front matter, blank lines and
line endings are copied as they are.

Inside a block, Markdown's inline syntax (`INLINE_SYNTAX`: code spans,
images, link targets, HTML, emphasis markers, hard breaks...) is never shown
to the model: it goes to the translator as `keep=` patterns and comes back
exactly as it was, between the translated words (`kept_spans`); so does a
shortcut reference link's `[label]`, which a translation would unlink.

A paragraph of several lines is one text, its soft line breaks spaces (a
sentence may run over lines); its translation is written on its first line,
each hard break's next part on the line after that break, and the other
lines are dropped: the same paragraph in fewer lines, in the same
containers. A translation never adds a block: a line break in it becomes a
space, a `|` in a table cell is escaped, and a start that would open a block
of its own (`- `, `1. `, `#`, a setext underline) is escaped with `\\`.
"""

import collections
import re

from markdown_it import MarkdownIt

_TARGET = r"""\(\s*(?:<[^<>\n]*>|(?:[^\s()]|\([^\s()]*\))*)(?:\s+(?:"[^"]*"|'[^']*'|\([^()]*\)))?\s*\)"""
# Markdown's inline syntax, kept as it is; where two start at one place, the first listed wins.
INLINE_SYNTAX = (
    r"\\[!-/:-@\[-`{-~]",  # a backslash escape
    r"(?P<md_ticks>`+)(?!`)[\s\S]*?(?<!`)(?P=md_ticks)(?!`)|`+",  # a code span; an unmatched run of backticks
    r"!\[(?:[^\[\]]|\[[^\[\]]*\])*\](?:" + _TARGET + r"|\[[^\[\]]*\])?",  # an image, whole
    r"\]" + _TARGET,  # a link's target
    r"\]\[[^\[\]]*\]",  # a reference link's label
    r"[\[\]]",
    r"<(?:[A-Za-z][\w+.-]*:[^\s<>]*|[^\s<>@]+@[^\s<>]+|/?[A-Za-z][\w-]*(?:\s[^<>]*)?/?|!--[\s\S]*?--|[?!][^<>]*)>",
    r"&(?:#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});",  # an entity
    r"\*+|~~|(?<!\w)_+|_+(?!\w)",  # emphasis: `_` inside a word (snake_case) is the word's
    r"(?:[ ]{2,}|\\)(?=\n|$)",  # a hard line break
)

_MD = MarkdownIt("commonmark").enable("table")
_LINE = re.compile(r"([^\r\n]*)(\r\n|\r|\n|$)")
_FRONT_MATTER = re.compile(r"(---|\+\+\+)[ \t]*(?:\r\n?|\n)[^\r\n]*\S.*?(?:\r\n?|\n)(?:\1|\.\.\.)[ \t]*(?:\r\n?|\n|$)",
                           re.DOTALL)
# A table row's container prefix: blockquote markers, a list item's marker, indentation.
_ROW_PREFIX = re.compile(r"(?:[ \t]*(?:>|(?:[-+*]|\d{1,9}[.)])(?=[ \t])))*[ \t]*")
_PIPE = re.compile(r"(?<!\\)\|")
_HARD_BREAK = re.compile(r"(?:(?<=  )|(?<=\\))\n")
# After a paragraph's line, a line of these would make it a setext heading or a table's header.
_UNDERLINE = re.compile(r"=+|[|:\s-]*-[|:\s-]*")

_Block = collections.namedtuple("_Block", "begin end texts write")


def translate_markdown(text, translate, chunk=64):
    """A Markdown document's blocks translated in chunks, its structure kept; yields the output piece by piece.

    Args:
        text: str, the whole document.
        translate: callable, `translate(texts, keep=patterns)` -> one translation a text (a translator); the
            spans `keep` matches (regular expressions) must come back as they are (`kept_spans`).
        chunk: blocks a call of `translate`.

    Yields:
        `(piece, blocks)`: the next piece of the output, and how many blocks
        (a paragraph, heading, table row...) it finished, as `markdown_units`
        counts them; the pieces joined are the translated document.

    Example:

    >>> upper = lambda texts, keep=(): [text.upper() for text in texts]
    >>> document = "Luz\\n===\\n\\n- Sea la\\n  luz.\\n\\n```\\ncódigo\\n```\\n"
    >>> "".join(piece for piece, _ in translate_markdown(document, upper))
    'LUZ\\n===\\n\\n- SEA LA LUZ.\\n\\n```\\ncódigo\\n```\\n'
    """
    lines, blocks, keep = _document(text)
    written = 0
    for first in range(0, len(blocks), chunk):
        part = blocks[first:first + chunk]
        translations = iter(translate([source for block in part for source in block.texts], keep=keep))
        pieces = []
        for block in part:
            pieces += [_copied(lines, written, block.begin), block.write([next(translations) for _ in block.texts])]
            written = block.end
        yield "".join(pieces), len(part)
    yield _copied(lines, written, len(lines)), 0


def markdown_units(text):
    """How many blocks `translate_markdown` translates in `text` (a progress bar's total).

    Args:
        text: str, the whole document.

    Returns:
        int: its paragraphs, headings and table rows that hold words.

    Example:

    >>> markdown_units("# Hola\\n\\n| a | b |\\n|---|---|\\n| c | d |\\n\\n    código\\n")
    3
    """
    return len(_document(text)[1])


def _document(text):
    """`(lines, blocks, keep)`: `text`'s lines as `(text, ending)`, its `_Block`s in order, the `keep` patterns."""
    lines = [match.groups() for match in _LINE.finditer(text) if match.group()]
    matter = _FRONT_MATTER.match(text)
    if matter:  # parsed as blank lines, so that its lines keep their numbers
        text = "\n" * len(re.findall(r"\r\n?|\n", matter.group())) + text[matter.end():]
    env = {}
    blocks, in_row = [], False
    for token in _MD.parse(text, env):
        in_row = token.type == "tr_open" or (in_row and token.type != "tr_close")
        if token.type == "tr_open" and token.map:
            blocks.append(_row_block(lines, token.map[0]))
        elif token.type == "inline" and token.map and not in_row:
            blocks.append(_text_block(lines, token))
    # A shortcut reference link (`[label]`, `[label][]`) links by its words: they are kept as they are.
    labels = sorted(env.get("references", {}), key=len, reverse=True)
    keep = tuple(r"\[(?i:" + r"\s+".join(map(re.escape, label.split())) + r")\](?:\[\])?(?![\[(])"
                 for label in labels)
    return lines, [block for block in blocks if block], keep + INLINE_SYNTAX


def _copied(lines, begin, end):
    return "".join(body + ending for body, ending in lines[begin:end])


def _text_block(lines, token):
    """The `_Block` of an inline token's lines (a paragraph, a heading), or None when its text is not found there."""
    begin, end = token.map
    contents = token.content.split("\n")
    if len(contents) != end - begin or not token.content.strip():
        return None
    places = []  # where each line's part of the text lies in the line: what is before it is the line's prefix
    for (body, _), content in zip(lines[begin:end], contents):
        start = body.rfind(content.strip()) if content.strip() else -1
        if start < 0:
            return None
        places.append((start, start + len(content.strip())))
    source, starts = "", [0]  # the text to translate, and the lines where a hard break's next part starts
    for k, ((body, _), (start, stop)) in enumerate(zip(lines[begin:end], places)):
        core, tail = body[start:stop], body[stop:]
        source += core
        if k + 1 == len(places):
            break
        if tail.endswith("  ") or (not tail and (len(core) - len(core.rstrip("\\"))) % 2):
            source += tail + "\n"
            starts.append(k + 1)
        else:
            source += " "

    def write(translations):
        translation = re.sub(r"\r\n?", "\n", translations[0])
        parts, at = [part.replace("\n", " ").lstrip() for part in _HARD_BREAK.split(translation)], starts
        parts[-1] = parts[-1].rstrip()
        if len(parts) != len(starts) or not all(part.strip() for part in parts):
            parts, at = [re.sub(r"[ \t]*\n[ \t]*", " ", translation).strip()], [0]
        if not parts[0]:
            return _copied(lines, begin, end)
        written = []
        for j, (first, part) in enumerate(zip(at, parts)):
            last = at[j + 1] - 1 if j + 1 < len(at) else len(places) - 1
            prefix = lines[begin + first][0][:places[first][0]]
            tail = lines[begin + last][0][places[last][1]:] if j + 1 == len(at) else ""
            written.append(prefix + _unblocked(part, first > 0) + tail + lines[begin + last][1])
        return "".join(written)

    return _Block(begin, end, [source], write)


def _row_block(lines, index):
    """The `_Block` of a table row's line: each cell's text between its unescaped pipes; None without one."""
    body, ending = lines[index]
    cells, position = [], _ROW_PREFIX.match(body).end()
    for stop in [match.start() for match in _PIPE.finditer(body, position)] + [len(body)]:
        cell = body[position:stop]
        if cell.strip():
            start = position + len(cell) - len(cell.lstrip())
            cells.append((start, start + len(cell.strip())))
        position = stop + 1
    if not cells:
        return None

    def write(translations):
        written, position = [], 0
        for (start, stop), translation in zip(cells, translations):
            translation = _PIPE.sub(r"\\|", re.sub(r"\s*[\r\n]+\s*", " ", translation).strip())
            written += [body[position:start], translation or body[start:stop]]
            position = stop
        return "".join(written) + body[position:] + ending

    return _Block(index, index + 1, [body[start:stop] for start, stop in cells], write)


def _unblocked(text, continued):
    """`text` as the text of a line of a paragraph or heading, escaped with a `\\` where it would open a block of
    its own there (a list, a heading, a fence...; after the paragraph's line before it, an underline)."""
    alone = [token.type for token in _MD.parse(text)] == ["paragraph_open", "inline", "paragraph_close"]
    if alone and not (continued and _UNDERLINE.fullmatch(text.rstrip())):
        return text
    digits = re.match(r"\d*", text).end()  # `1. ` is escaped at its `.`
    return text[:digits] + "\\" + text[digits:]
