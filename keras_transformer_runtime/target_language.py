"""Which language a multi-target model writes: each source starts with its token, or the user is told the codes.

A multi-target OPUS-MT model (opus-mt-en-ROMANCE, en-mul, the tc-big
multi-target ones) reads the language to write from a token at the start
of the source, `>>fra<<`, which its tokenizer keeps as one piece
(`marian_tokenizer.split_language_code`). `translate --target-language
fra` and the server's `target_language` field add it; a sentence given to
such a model without one, or with a code the model lacks, is refused with
the codes it knows, where the Python API (as transformers' tokenizer)
would translate it into whichever language the model guesses.
"""

import difflib

from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.marian_tokenizer import split_language_code

_SHOWN = 12


def with_target_language(texts, language_codes, code=None):
    """`texts`, each non-blank one starting with its target-language token; checked against the model's codes.

    Args:
        texts: list of str, the sources.
        language_codes: the codes the model knows (`MarianTokenizer.language_codes`);
            empty for a model that writes one language.
        code: str or None, the language to write (`fra`, or `>>fra<<`),
            added to each text that has no token of its own.

    Returns:
        A list of str.

    Raises:
        UserInputError: `code` is given to a model that writes one
            language, or is not among `language_codes` (close matches
            named); or a multi-target model gets a text without a code.

    Example:

    >>> with_target_language(["Hello.", ">>por<< Hi.", ""], ("fra", "por"), "fra")
    ['>>fra<< Hello.', '>>por<< Hi.', '']
    >>> with_target_language(["Hello."], ("fra", "por"))
    Traceback (most recent call last):
    ...
    keras_transformer_runtime.errors.UserInputError: this model writes 2 languages: start each sentence with its \
code (>>fra<< Hello.) or pass --target-language CODE (the server: "target_language"); its codes: fra, por
    """
    codes = tuple(language_codes or ())
    if code is not None:
        code = code[2:-2] if code.startswith(">>") and code.endswith("<<") else code
        if not codes:
            raise UserInputError(f"--target-language {code}: this model writes one language; it has no "
                                 "target-language tokens (>>xxx<<) to choose with.")
        _check_code(code, codes)
    checked = []
    for text in texts:
        given, _ = split_language_code(text)
        if given:
            _check_code(given[2:-2], codes)
        elif text.strip() and code is not None:
            text = f">>{code}<< {text}"
        elif text.strip() and codes:
            raise UserInputError(
                f"this model writes {len(codes)} languages: start each sentence with its code (>>{codes[0]}<< "
                f"{text[:30]}) or pass --target-language CODE (the server: \"target_language\"); its codes: "
                + _listed(codes)
            )
        checked.append(text)
    return checked


def each_with_target_language(texts, language_codes, code=None):
    """`with_target_language` text by text: a text the model cannot take is refused alone, the others go on.

    Args:
        texts, language_codes, code: as `with_target_language`; a None in
            `texts` (a line already refused) stays None.

    Returns:
        `(checked, refused)`: each text with its token (None for a refused
        one), and a dict of each refused text's index -> its one-line reason.

    Raises:
        UserInputError: `code` itself is wrong for the model (every text would be refused).

    Example:

    >>> checked, refused = each_with_target_language(["Hello.", ">>xxx<< Hi.", ">>por<< Hi."], ("fra", "por"))
    >>> checked[2], sorted(refused)
    ('>>por<< Hi.', [0, 1])
    """
    with_target_language([], language_codes, code)
    checked, refused = [], {}
    for i, text in enumerate(texts):
        if text is None:
            checked.append(None)
            continue
        try:
            checked.append(with_target_language([text], language_codes, code)[0])
        except UserInputError as error:
            checked.append(None)
            refused[i] = str(error)
    return checked, refused


def _check_code(code, codes):
    if codes and code not in codes:
        close = difflib.get_close_matches(code, codes, n=5, cutoff=0.5)
        raise UserInputError(f"target language {code!r} is not one this model writes"
                             + (f"; close: {', '.join(close)}" if close else "") + f"; its codes: {_listed(codes)}")


def _listed(codes):
    return ", ".join(codes[:_SHOWN]) + (f" and {len(codes) - _SHOWN} more" if len(codes) > _SHOWN else "")
