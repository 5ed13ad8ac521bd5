"""What a translator takes as texts: a string, bytes or a list of them, checked and cleaned in one place.

`TextTranslator` and the document splitting above it read their input
through `checked_texts`: one clear `TypeError` for anything else, bytes
decoded as UTF-8 with invalid sequences replaced, lone surrogates replaced
(`text_cleaning`), and each text's warning about it.
"""

import warnings

from keras_transformer_runtime.text_cleaning import replace_lone_surrogates


def checked_texts(texts, warn=True):
    """`(single, texts, replaced)`: whether one text was given, the texts as a list of `str`, and each one's
    warning about lone surrogates replaced (see `TextTranslator`); with `warn`, also one `UserWarning`.

    `sentencepiece` refuses lone surrogates with a TypeError; Python makes them
    of bytes that are not UTF-8 on a command line (`surrogateescape`).
    """
    single = isinstance(texts, (str, bytes))
    if not single and (texts is None or isinstance(texts, dict) or not hasattr(texts, "__iter__")):
        raise TypeError(
            f"texts must be a string, bytes or a list of them, got {type(texts).__name__}."
        )
    texts = [texts] if single else list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, (str, bytes)):
            raise TypeError(
                f"texts must be a string, bytes or a list of them, but texts[{i}] is "
                f"{type(text).__name__} ({text!r:.40})."
            )
    texts = [t.decode("utf-8", errors="replace") if isinstance(t, bytes) else t for t in texts]
    texts, counts = zip(*map(replace_lone_surrogates, texts)) if texts else ((), ())
    replaced = [(f"held {count} lone surrogate{'s' if count > 1 else ''} (bytes that are not UTF-8); each replaced "
                 "by U+FFFD",) if count else () for count in counts]
    held = sum(count > 0 for count in counts)
    if warn and held:
        warnings.warn(f"{held} of {len(texts)} inputs held bytes that are not UTF-8 (lone surrogates); "
                      "they were replaced by U+FFFD.", UserWarning, stacklevel=3)
    return single, list(texts), replaced


def warn_about_unknown_characters(unknown, shown=3):
    """One `UserWarning` naming the first `shown` of `unknown`'s `(text, unknown, characters)`, if any."""
    if not unknown:
        return
    named = [f"{text[:40]!r}{'...' if len(text) > 40 else ''}: {count} of {total} characters ({count / total:.0%})"
             for text, count, total in unknown[:shown]]
    more = f"; and {len(unknown) - shown} more inputs" if len(unknown) > shown else ""
    warnings.warn("mostly unknown to the vocabulary, so the translation is a guess: " + "; ".join(named) + more
                  + ".", UserWarning, stacklevel=5)
