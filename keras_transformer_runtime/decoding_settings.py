"""One decoding setting as one frozen object: every search option named once.

A setting travels from the command line or the server to the translator,
into the program cache (the program's file name), to the program's writer
(`translation_program.write_translation_program`) and back. Each hop took
ten keyword arguments before, under two sets of names; `DecodingSettings`
holds them under `Translator`'s names, checks them once, and names the
program file of the setting (`program_file`). Keras-free.
"""

import dataclasses
import numbers

# The beam searches: this package's (a finished hypothesis keeps its slot) and transformers'.
SEARCHES = ("kept", "pooled")
# This package's search (`Translator`'s defaults): a run trained here decodes with it (`search_defaults`).
PACKAGE_DEFAULTS = {"beam_width": 4, "beam_search": "kept", "length_penalty": 0.6, "early_stopping": False,
                    "no_repeat_ngram_size": 3, "max_new_tokens": None}
# The cap on run-away output (`keras_transformer.decoding.output_limit`): a translation writes at most
# `ratio * its source's ids + search_defaults.OUTPUT_SLACK` tokens. The default ratio cuts no translation of the
# corpus' test and held-out splits with the default search (benchmarks/findings/documents.md, "How long a
# translation").
DEFAULT_MAX_OUTPUT_RATIO = 3.5


@dataclasses.dataclass(frozen=True)
class DecodingSettings:
    """How a translator decodes: the search, its options, and what a call returns.

    Args:
        beam_width: int >= 1, the beam width; 1 is greedy search.
        beam_search: `"kept"` (this package's: a finished hypothesis keeps
            its slot) or `"pooled"` (transformers' beam search).
        length_penalty: float, the search's alpha.
        early_stopping: bool, with `"pooled"`: a source stops once
            `beam_width` hypotheses have finished.
        no_repeat_ngram_size: int >= 0, the loop guard's n-gram size (0: off).
        max_new_tokens: int >= 1, the longest translation in tokens, or None
            for the model's positions less one.
        max_output_ratio: float >= 0, the cap on run-away output (0: none);
            None: `DEFAULT_MAX_OUTPUT_RATIO`.
        n_best: None, or int >= 1: the program returns that many hypotheses
            a sentence with their scores.
        cross_attention: bool, with `n_best`: the program also returns the
            cross-attention (alignments). False without `n_best`.

    Raises:
        ValueError: an option out of its range.

    Example:

    >>> settings = DecodingSettings(beam_width=1, max_new_tokens=64)
    >>> settings.beam_search, settings.no_repeat_ngram_size, settings.max_output_ratio
    ('kept', 3, 3.5)
    >>> settings.program_file(end_at_limit=True)
    'kept-beam1-alpha0.6-norepeat3-new64-ratio3.5.jaxexport'
    >>> DecodingSettings(beam_search="sampled")
    Traceback (most recent call last):
    ...
    ValueError: beam_search 'sampled': expected one of kept, pooled.
    """

    beam_width: int = PACKAGE_DEFAULTS["beam_width"]
    beam_search: str = PACKAGE_DEFAULTS["beam_search"]
    length_penalty: float = PACKAGE_DEFAULTS["length_penalty"]
    early_stopping: bool = PACKAGE_DEFAULTS["early_stopping"]
    no_repeat_ngram_size: int = PACKAGE_DEFAULTS["no_repeat_ngram_size"]
    max_new_tokens: object = PACKAGE_DEFAULTS["max_new_tokens"]
    max_output_ratio: object = None
    n_best: object = None
    cross_attention: bool = False

    def __post_init__(self):
        if self.beam_search not in SEARCHES:
            raise ValueError(f"beam_search {self.beam_search!r}: expected one of {', '.join(SEARCHES)}.")
        for name, least in (("beam_width", 1), ("no_repeat_ngram_size", 0)):
            _require_int(name, getattr(self, name), least)
        for name in ("max_new_tokens", "n_best"):
            if getattr(self, name) is not None:
                _require_int(name, getattr(self, name), 1)
        # Frozen: the normalized values are set through object.__setattr__, once.
        normalized = {"beam_width": int(self.beam_width), "length_penalty": float(self.length_penalty),
                      "early_stopping": bool(self.early_stopping),
                      "no_repeat_ngram_size": int(self.no_repeat_ngram_size),
                      "max_output_ratio": checked_output_ratio(self.max_output_ratio),
                      "cross_attention": bool(self.n_best and self.cross_attention)}
        for name, value in normalized.items():
            object.__setattr__(self, name, value)

    def replace(self, **changes):
        """A copy with `changes` (checked as a new setting).

        A call's setting is the resolved search's with the call's own fields:
        `search_defaults.resolve_search(run).decoding.replace(n_best=1)`.

        Args:
            **changes: fields by their names (`beam_width`, `n_best`, ...).

        Returns:
            A `DecodingSettings`.

        Example:

        >>> DecodingSettings().replace(beam_width=2).beam_width
        2
        """
        return dataclasses.replace(self, **changes)

    def translator_arguments(self):
        """The keyword arguments of `Translator` / `Translator.from_directory` this setting decodes with.

        Example:

        >>> sorted(DecodingSettings().translator_arguments())[:3]
        ['beam_search', 'beam_width', 'early_stopping']
        """
        return {"beam_width": self.beam_width, "beam_search": self.beam_search,
                "length_penalty": self.length_penalty, "early_stopping": self.early_stopping,
                "no_repeat_ngram_size": self.no_repeat_ngram_size, "max_new_tokens": self.max_new_tokens,
                "max_output_ratio": self.max_output_ratio}

    def program_file(self, max_new_tokens=None, end_at_limit=True, refill_slots=None):
        """The file name of this setting's program in a cache entry.

        The search's kind comes first, so an entry keeps the kept and the
        pooled programs of one beam width side by side; a pooled search whose
        hypotheses open at the limit count no closing `</s>` (`end_at_limit`
        False: NLLB-200's) is a program of its own, and so is a search
        refilling `refill_slots` sources (`compiled_translator.REFILL_SLOTS`);
        a cap on run-away output is named after the length limit.

        Args:
            max_new_tokens: int, the length limit the program was written
                with; None: this setting's own (which must then be set).
            end_at_limit: bool, the run's (`search_defaults.run_ends_at_limit`).
            refill_slots: None, or int, the refilling program's sources at a time.

        Returns:
            str, a `.jaxexport` file name.

        Example:

        >>> DecodingSettings(n_best=2, cross_attention=True, max_output_ratio=0).program_file(127)
        'kept-beam4-alpha0.6-norepeat3-new127-nbest2-attention.jaxexport'
        >>> DecodingSettings(beam_search="pooled", early_stopping=True, max_output_ratio=0,
        ...                  length_penalty=1.0, no_repeat_ngram_size=0).program_file(126)
        'pooled-early-beam4-alpha1.0-norepeat0-new126.jaxexport'
        >>> DecodingSettings(beam_width=1, max_output_ratio=2).program_file(127, refill_slots=8)
        'refill8-kept-beam1-alpha0.6-norepeat3-new127-ratio2.0.jaxexport'
        """
        limit = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        if limit is None:
            raise ValueError("A program file names its length limit: pass max_new_tokens.")
        pooled = self.beam_search == "pooled"
        kind = f"{self.beam_search}{'-early' if pooled and self.early_stopping else ''}"
        kind += "-noforcedend" if pooled and not end_at_limit else ""
        kind = f"refill{int(refill_slots)}-{kind}" if refill_slots else kind
        ratio = f"-ratio{self.max_output_ratio!r}" if self.max_output_ratio else ""
        n_best = f"-nbest{int(self.n_best)}{'-attention' if self.cross_attention else ''}" if self.n_best else ""
        return f"{kind}-beam{self.beam_width}-alpha{self.length_penalty!r}-norepeat{self.no_repeat_ngram_size}" \
               f"-new{int(limit)}{ratio}{n_best}.jaxexport"


def checked_output_ratio(ratio):
    """The cap on run-away output as a float >= 0: `ratio`, or `DEFAULT_MAX_OUTPUT_RATIO` for None.

    Args:
        ratio: a number >= 0 (0: no cap), or None.

    Returns:
        float.

    Raises:
        ValueError: `ratio` is not a number >= 0.

    Example:

    >>> checked_output_ratio(None) == DEFAULT_MAX_OUTPUT_RATIO, checked_output_ratio(0)
    (True, 0.0)
    """
    if ratio is None:
        return float(DEFAULT_MAX_OUTPUT_RATIO)
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not ratio >= 0:
        raise ValueError(f"max_output_ratio must be a number >= 0 (0: no cap), got {ratio!r}.")
    return float(ratio)


def _require_int(name, value, least):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}.")
