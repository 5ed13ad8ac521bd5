"""One rule for text that no UTF-8 can hold: each lone surrogate becomes one U+FFFD.

A Python `str` may hold code points U+D800..U+DFFF on their own: Python
makes them of command-line bytes that are not UTF-8 (`surrogateescape`),
and JSON's `"\\ud800"` escapes decode to them. `sentencepiece` refuses such
strings, and no UTF-8 answer can hold them, so the translators
(`text_translator.TextTranslator`) and the server's request checks
(`serving.request_bodies`) replace them alike, one replacement character
each, and say how many they replaced.
"""

import re

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_lone_surrogates(text):
    """`text` with each lone surrogate (U+D800..U+DFFF) replaced by one U+FFFD, and how many were.

    Args:
        text: a `str`.

    Returns:
        `(cleaned, replaced)`: the text, and the number of lone surrogates
        replaced (0: `cleaned` is `text` itself).

    Example:

    >>> cleaned, replaced = replace_lone_surrogates("Sea \\udcff la \\ud800\\udc00luz")
    >>> cleaned == "Sea \\ufffd la \\ufffd\\ufffdluz", replaced
    (True, 3)
    >>> replace_lone_surrogates("Sea la luz")
    ('Sea la luz', 0)
    """
    if text.isascii():  # the common case: no regular expression to run
        return text, 0
    return _LONE_SURROGATE.subn("\ufffd", text)
