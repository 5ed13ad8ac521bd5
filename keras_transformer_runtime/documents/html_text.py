"""HTML: every text translated, every tag, attribute, comment and entity kept, inline tags carried by the alignments.

The page is parsed with lxml's HTML parser (a fragment, or a whole document
with its doctype) and written back with lxml, so the output is well formed
whatever the input's sloppiness. A block (an element whose content is text
and inline elements only: a `<p>`, an `<li>`, a `<td>`...) is one text for the
translator; an inline element inside it (`<b>`, `<a href>`...) is carried to
the words of the translation that the cross-attention aligns with its own
words (`Hypothesis.alignment`), its tag and attributes copied. Nothing is
translated inside `<script>`, `<style>`, `<pre>`, `<code>`, `<kbd>`,
`<samp>`, `<textarea>`, `<svg>`, `<math>`, or an element marked
`translate="no"`; such an element inside a block is kept in place, the
block's text translated in the pieces around it (as `kept_spans` does).
Text directly inside an element that also holds blocks is translated
without inline tags to carry.
"""

import copy
import re

# Elements whose content is never translated.
UNTOUCHED = frozenset({"script", "style", "pre", "code", "kbd", "samp", "textarea", "svg", "math", "template",
                       "noscript"})
# Elements that sit inside a line of text (HTML's phrasing content).
INLINE = frozenset({"a", "abbr", "b", "bdi", "bdo", "br", "cite", "code", "data", "del", "dfn", "em", "font", "i",
                    "img", "ins", "kbd", "label", "mark", "q", "s", "samp", "small", "span", "strong", "sub", "sup",
                    "time", "u", "var", "wbr", "big", "tt", "abbr", "acronym", "input", "output", "meter"})
_WORD = re.compile(r"\S+")


class HtmlError(ValueError):
    """An HTML text lxml cannot read (an empty fragment, bytes that are not text)."""


def parse_html(text):
    """`(root, is_document)`: `text` parsed by lxml, a whole document (it has `<html>` or a doctype) or a fragment
    (then `root` is a `<div>` holding it).

    Raises:
        HtmlError: lxml cannot read it.

    Example:

    >>> root, whole = parse_html("<p>Hola <b>mundo</b></p>")
    >>> root.tag, whole, root[0].tag
    ('div', False, 'p')
    """
    import lxml.etree
    import lxml.html

    whole = re.match(r"\s*(<!--.*?-->\s*)*<(!doctype|html)\b", text, re.IGNORECASE | re.DOTALL) is not None
    try:
        if whole:
            return lxml.html.document_fromstring(text), True
        return lxml.html.fragment_fromstring(text, create_parent="div"), False
    except (lxml.etree.ParserError, ValueError) as error:
        raise HtmlError(f"not HTML lxml can read: {error}") from None


def write_html(root, whole):
    """The HTML of `root` as `parse_html` gave it: the document with its doctype, or the fragment's content."""
    import lxml.etree
    import lxml.html

    if whole:
        tree = root.getroottree()
        return lxml.etree.tostring(tree, method="html", encoding="unicode", doctype=tree.docinfo.doctype or None)
    inner = root.text or ""
    return inner + "".join(lxml.html.tostring(child, encoding="unicode") for child in root)


def untouched(element):
    """Whether `element`'s content is left as it is: a tag of `UNTOUCHED`, or `translate="no"` on it."""
    return not isinstance(element.tag, str) or element.tag.lower() in UNTOUCHED \
        or element.get("translate", "").lower() == "no"


def _inline(element):
    """Whether `element` sits inside a line of text (a comment or a processing instruction does too)."""
    return not isinstance(element.tag, str) or element.tag.lower() in INLINE


def blocks(root):
    """The places text is translated, in document order: `("block", element)` for an element of text and inline
    elements only, `("text", element)` / `("tail", element)` for text beside blocks.

    Example:

    >>> root, _ = parse_html("<div>Hola <p>Sea <b>la</b> luz.</p> y adiós</div>")
    >>> [(kind, element.tag) for kind, element in blocks(root)]
    [('text', 'div'), ('block', 'p'), ('tail', 'p')]
    """
    found = []

    def visit(element):
        if untouched(element):
            return
        if all(_inline(child) for child in element.iterdescendants()):
            if any(text.strip() for text, _ in block_runs(element)):
                found.append(("block", element))
            return
        if (element.text or "").strip():
            found.append(("text", element))
        for child in element:
            if isinstance(child.tag, str):
                visit(child)
            if (child.tail or "").strip():
                found.append(("tail", child))

    visit(root)
    return found


def block_runs(element):
    """A block's content as runs to translate, cut at the elements kept as they are.

    Returns:
        A list of `(text, spans)` runs, one between two untouched elements:
        `text` the run's text, `spans` each inline element in it as `(start,
        end, element)` (character offsets in `text`, outer elements first). An
        inline element cut by an untouched one ends where its run ends.

    Example:

    >>> root, _ = parse_html("<p>Sea <b>la luz</b> y <code>x</code> fue.</p>")
    >>> [(text, [(s, e, el.tag) for s, e, el in spans]) for text, spans in block_runs(root[0])]
    [('Sea la luz y ', [(4, 10, 'b')]), (' fue.', [])]
    """
    runs = [["", []]]

    def walk(node):
        for child in node:
            if isinstance(child.tag, str) and untouched(child):
                runs.append(["", []])
            elif isinstance(child.tag, str):
                number, start = len(runs) - 1, len(runs[-1][0])
                span = [start, None, child]
                runs[-1][1].append(span)
                runs[-1][0] += child.text or ""
                walk(child)
                span[1] = len(runs[number][0])
                if child.tag.lower() == "br":  # a line break parts the words on either side
                    runs[-1][0] += " "
            runs[-1][0] += child.tail or ""

    runs[-1][0] += element.text or ""
    walk(element)
    return [(text, [tuple(span) for span in spans]) for text, spans in runs]


def carried_spans(source, spans, translation, alignment):
    """Each inline span of `source` moved onto `translation`'s words: `(start, end, element)` in `translation`.

    A span covers the target words aligned with its source words (from the
    first to the last); a span none of whose words is aligned covers the
    target word nearest its share of the source, and an element without text
    goes to the word edge nearest its share. Spans stay nested as they were: an inner one is clamped
    inside its outer one, and one overlapping a sibling moves past it.

    Args:
        source: the run's text.
        spans: `(start, end, element)` in `source`, outer elements first.
        translation: the run's translation.
        alignment: `(source word, target word)` pairs (`Hypothesis.alignment`), or None.

    Example:

    >>> carried_spans("Sea la luz", [(4, 10, "b")], "Let there be light", [(0, 0), (0, 1), (0, 2), (2, 3)])
    [(13, 18, 'b')]
    """
    source_words = [match.span() for match in _WORD.finditer(source)]
    target_words = [match.span() for match in _WORD.finditer(translation)]
    edges = sorted({edge for word in target_words for edge in word} | {0, len(translation)})
    by_source = {}
    for source_word, target_word in alignment or ():
        if target_word < len(target_words):
            by_source.setdefault(source_word, []).append(target_word)
    carried = []
    for start, end, element in spans:
        covered = [i for i, (a, b) in enumerate(source_words) if a < end and b > start]
        aligned = sorted(j for i in covered for j in by_source.get(i, ()))
        if aligned and end > start:
            first, last = target_words[aligned[0]][0], target_words[aligned[-1]][1]
            # The punctuation its first and last words hold outside the span (`luz` of `luz.`) stays outside.
            head = source[source_words[covered[0]][0]:start] if source_words[covered[0]][0] < start else ""
            tail = source[end:source_words[covered[-1]][1]] if end < source_words[covered[-1]][1] else ""
            if head and translation.startswith(head, first) and first + len(head) < last:
                first += len(head)
            if tail and translation.endswith(tail, first, last) and last - len(tail) > first:
                last -= len(tail)
            carried.append([first, last])
        elif end > start and target_words:  # the word nearest its share of the source
            middle = (start + end) / 2 / max(len(source), 1) * len(translation)
            carried.append(list(min(target_words, key=lambda word: abs((word[0] + word[1]) / 2 - middle))))
        else:  # an element without text (`<br>`, `<img>`): on the word edge nearest its share
            at = min(edges, key=lambda edge: abs(edge - start / max(len(source), 1) * len(translation)))
            carried.append([at, at])
    _keep_nested(carried, spans)
    return [(start, end, element) for (start, end), (_, _, element) in zip(carried, spans)]


def _keep_nested(carried, spans):
    """Moves the carried places so that they nest as the source's spans did (in place)."""
    parents = []
    for i, (start, end, _) in enumerate(spans):
        parent = next((k for k in range(i - 1, -1, -1)
                       if spans[k][0] <= start and end <= spans[k][1] and spans[k][1] > spans[k][0]), None)
        parents.append(parent)
        low, high = carried[parent] if parent is not None else (0, float("inf"))
        first = min(max(carried[i][0], low), high)
        last = min(max(carried[i][1], first), high)
        for k in range(i):
            if parents[k] == parent and carried[k][0] < last and first < carried[k][1]:
                first = min(max(first, carried[k][1]), high)
                last = min(max(last, first), high)
        carried[i] = [first, last]


def rebuild_block(element, translations):
    """Replaces `element`'s content with its runs' translations, inline elements carried, untouched ones in place.

    Args:
        element: the block (an lxml element), as `block_runs` read it.
        translations: `(text, spans)` a run of `block_runs(element)`: its
            translation and its `carried_spans`.
    """
    kept = [copy.deepcopy(child) for child in element.iterdescendants()
            if isinstance(child.tag, str) and untouched(child) and not _inside_untouched(child, element)]
    for child in list(element):
        element.remove(child)
    element.text = None
    for number, (text, spans) in enumerate(translations):
        _append_run(element, text, spans)
        if number < len(kept):
            kept[number].tail = None
            element.append(kept[number])


def _inside_untouched(child, block):
    parent = child.getparent()
    while parent is not None and parent is not block:
        if untouched(parent):
            return True
        parent = parent.getparent()
    return False


def _append_run(parent, text, spans):
    """Appends `text` to `parent`'s content, each `(start, end, element)` of `spans` as a copy of its element's
    tag and attributes around its characters (spans nest as `carried_spans` left them)."""

    def add_text(node, piece):
        if not piece:
            return
        if len(node):
            node[-1].tail = (node[-1].tail or "") + piece
        else:
            node.text = (node.text or "") + piece

    def fill(node, start, end, inner):
        position, index = start, 0
        while index < len(inner):
            first, last, element = inner[index]
            index += 1
            children = []
            while index < len(inner) and inner[index][1] <= last and (inner[index][0] < last or first == last):
                children.append(inner[index])
                index += 1
            add_text(node, text[position:first])
            made = element.makeelement(element.tag, dict(element.attrib))
            node.append(made)
            fill(made, first, last, children)
            position = last
        add_text(node, text[position:end])

    fill(parent, 0, len(text), sorted(spans, key=lambda span: (span[0], -span[1])))


def html_passages(text):
    """The texts `translate_html` hands the translator for `text`, in order (their count: a progress bar's total).

    Raises:
        HtmlError: lxml cannot read `text`.

    Example:

    >>> html_passages("<p>Sea <b>la</b> luz.</p><pre>x</pre><p>Y fue.</p>")
    ['Sea la luz.', 'Y fue.']
    """
    return _texts(_jobs(parse_html(text)[0])) if text.strip() else []


def translate_html(text, translate, chunk=64):
    """`text` (an HTML document or fragment) translated, its markup kept; yields `(piece, passages)`.

    The pieces are `""` while the passages are translated (`passages`: how
    many each call finished, for a progress bar), then the whole translated
    HTML, which is written at the end: a page is only well formed whole.

    Args:
        text: str, the HTML.
        translate: callable, a list of texts -> one `(translation, alignment)` a text (alignment: the
            `(source word, target word)` pairs, or None).
        chunk: texts a call of `translate`.

    Raises:
        HtmlError: lxml cannot read `text`.

    Example:

    >>> fake = lambda texts: [(t.upper(), [(i, i) for i in range(len(t.split()))]) for t in texts]
    >>> "".join(piece for piece, _ in translate_html('<p class="x">Sea <a href="/luz">la luz</a>.</p>', fake))
    '<p class="x">SEA <a href="/luz">LA LUZ</a>.</p>'
    """
    if not text.strip():  # nothing to parse: an empty page stays empty
        yield text, 0
        return
    root, whole = parse_html(text)
    jobs = _jobs(root)
    texts = _texts(jobs)
    results = []
    for first in range(0, len(texts), chunk):
        results.extend(translate(texts[first:first + chunk]))
        yield "", len(texts[first:first + chunk])
    results = iter(results)
    for kind, element, runs in jobs:
        translated = []
        for run, spans in runs:
            lead, core, trail = _edges(run)
            translation, alignment = next(results) if core else ("", None)
            inner = [(max(s - len(lead), 0), max(min(e - len(lead), len(core)), 0), el) for s, e, el in spans]
            carried = carried_spans(core, inner, translation, alignment)
            moved = [(s + len(lead), e + len(lead), el) for s, e, el in carried]
            translated.append((lead + translation + trail, moved))
        if kind == "block":
            rebuild_block(element, translated)
        elif kind == "text":
            element.text = translated[0][0]
        else:
            element.tail = translated[0][0]
    yield write_html(root, whole), 0


def _jobs(root):
    """`(kind, element, runs)` of each place `blocks` finds: a block's `block_runs`, or one run of its text."""
    return [(kind, element, block_runs(element) if kind == "block"
             else [((element.text if kind == "text" else element.tail) or "", [])]) for kind, element in blocks(root)]


def _texts(jobs):
    """The texts of `jobs`' runs that hold more than whitespace, stripped: what the translator is given."""
    return [core for _, _, runs in jobs for run, _ in runs for core in [_edges(run)[1]] if core]


def _edges(run):
    """`(leading whitespace, the rest stripped, trailing whitespace)` of a run."""
    core = run.strip()
    if not core:
        return run, "", ""
    start = run.index(core)
    return run[:start], core, run[start + len(core):]
