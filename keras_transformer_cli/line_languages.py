"""The languages of `translate`'s lines: a multi-target run's `>>xxx<<` token, or each line's detected source.

A multi-target OPUS-MT run needs a target-language token on every line
(`--target-language` adds it); an NLLB-200 or M2M-100 run given
`--source-language auto` needs each line's language, which a detector names
(`documents.languages`). A line that cannot have what it needs is refused
alone: a one-line reason on stderr naming it, an empty line in its place.
"""

import sys


class LineLanguages:
    """Checks each batch of lines for the languages the run needs, and translates them language by language.

    Args:
        translator: the run's translator.
        args: `translate`'s flags (`target_language`, `source_language`, `verbose`).

    Raises:
        UserInputError: `--target-language` is not one the run writes (every line would be refused), or
            `--source-language auto` without the detector installed.

    Example:

    >>> languages = LineLanguages(translator, args)  # doctest: +SKIP
    >>> texts, sources, refused = languages.checked(["Hola.", None], [1, 2])  # doctest: +SKIP
    """

    def __init__(self, translator, args):
        from keras_transformer_runtime.target_language import with_target_language

        tokenizer = getattr(translator, "tokenizer", None)
        self.args = args
        # An NLLB-200 / M2M-100 run's languages are its tokenizer's, not tokens in the text.
        self.target_codes = None if hasattr(tokenizer, "forced_first_id") else tuple(
            getattr(tokenizer, "language_codes", ()))
        if self.target_codes is not None:
            with_target_language([], self.target_codes, args.target_language)
        self.auto = getattr(args, "source_language", None) == "auto"
        self.detector = None
        if self.auto:
            from keras_transformer_runtime.documents.languages import LanguageDetector

            self.detector = LanguageDetector(tokenizer.language_codes)

    def checked(self, texts, numbers):
        """`(texts, sources, refused)`: the lines with their tokens (None where refused), each line's detected
        source language (None without `auto`), and how many were refused; each refusal said on stderr."""
        from keras_transformer_runtime.documents.languages import source_languages
        from keras_transformer_runtime.target_language import each_with_target_language

        refusals, sources = {}, [None] * len(texts)
        if self.target_codes is not None:
            texts, refusals = each_with_target_language(texts, self.target_codes, self.args.target_language)
        if self.auto:
            sources, detected_refusals = source_languages(texts, self.detector)
            refusals.update(detected_refusals)
            texts = [None if i in detected_refusals else text for i, text in enumerate(texts)]
            if self.args.verbose:
                for number, source, text in zip(numbers, sources, texts):
                    if text is not None and source is not None:
                        print(f"keras-transformer: line {number}: source language {source}", file=sys.stderr)
        for i, reason in sorted(refusals.items()):
            print(f"keras-transformer: line {numbers[i]}: {reason}; skipped", file=sys.stderr, flush=True)
        return texts, sources, len(refusals)

    def translated(self, translator, texts, sources, call):
        """`call(translator, texts)` over the texts not None, one call a source language; results in order."""
        given = [i for i, text in enumerate(texts) if text is not None]
        if not self.auto:
            return iter(call(translator, [texts[i] for i in given]))
        results = {}
        for source in dict.fromkeys(sources[i] for i in given):
            group = [i for i in given if sources[i] == source]
            speaking = translator if source is None else translator.with_languages(source, None)
            results.update(zip(group, call(speaking, [texts[i] for i in group])))
        return iter(results[i] for i in given)
