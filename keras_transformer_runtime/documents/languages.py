"""Which of a run's source languages each input is written in: `--source-language auto`.

An NLLB-200 or M2M-100 run needs each input's source language. Here
py3langid, whose model ships inside its wheel (never a download at run
time; chosen by the comparison in benchmarks/findings/documents.md, "Which
language detector"), ranks the languages it knows for each input, and the
best one the run translates from is mapped to the run's code: NLLB-200's
`spa_Latn` by the ISO 639-3 code (langcodes) and the script of the text,
M2M-100's `es` by the ISO 639-1 code. An input with no letters, or one
clearly in a language the run does not translate from (its best language
holds `UNSUPPORTED_SHARE` of the probability or more), is refused alone,
with the reason.
"""

import collections
import unicodedata

# NLLB-200 names an individual language where py3langid and langcodes name its macrolanguage, or another code.
_INDIVIDUAL = {"ara": ("arb", "ars", "ary", "arz", "apc", "ajp", "acm", "acq", "aeb"), "msa": ("zsm",),
               "fas": ("pes", "prs"), "lav": ("lvs",), "mon": ("khk",), "sqi": ("als",), "aze": ("azj", "azb"),
               "swa": ("swh",), "est": ("ekk",), "uzb": ("uzn",), "nep": ("npi",), "mlg": ("plt",),
               "yid": ("ydd",), "que": ("quy",), "orm": ("gaz",), "zho": ("zho", "yue"), "kur": ("kmr", "ckb"),
               "pus": ("pbt",), "ori": ("ory",), "fil": ("tgl",), "nor": ("nob", "nno"), "gug": ("grn",)}
# Scripts by the Unicode names of letters, for a language NLLB-200 writes in several (arb_Arab, arb_Latn, ...).
_SCRIPTS = {"LATIN": "Latn", "CYRILLIC": "Cyrl", "ARABIC": "Arab", "DEVANAGARI": "Deva", "HEBREW": "Hebr",
            "GREEK": "Grek", "CJK": "Hans", "HANGUL": "Hang", "HIRAGANA": "Jpan", "KATAKANA": "Jpan",
            "TIBETAN": "Tibt", "BENGALI": "Beng", "GEORGIAN": "Geor", "ETHIOPIC": "Ethi", "THAI": "Thai"}
# An input is refused as written in a language the run lacks only when that language is this sure.
UNSUPPORTED_SHARE = 0.9
EXTRA = "documents"


class LanguageDetector:
    """Names the language of a text among a run's source languages: the run's code, or a reason it has none.

    Args:
        codes: the run's language codes (the tokenizer's `language_codes`: `spa_Latn`, ... or `es`, ...).

    Raises:
        UserInputError: the detector is not installed (the extra to install named).

    Example:

    >>> detector = LanguageDetector(("eng_Latn", "spa_Latn"))  # doctest: +SKIP
    >>> detector("¿Dónde está el niño? Tiene hambre.")  # doctest: +SKIP
    ('spa_Latn', None)
    """

    def __init__(self, codes):
        try:
            import langcodes
            from py3langid.langid import MODEL_FILE
            from py3langid.langid import LanguageIdentifier
        except ImportError:
            from keras_transformer_runtime.errors import UserInputError

            raise UserInputError("--source-language auto needs a language detector: pip install "
                                 f"\"keras-transformer[{EXTRA}]\" (py3langid, langcodes)") from None
        self.codes = tuple(codes)
        self._identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        self._iso_639_3 = {label: langcodes.Language.get(label).to_alpha3() for label in self._identifier.labels}

    def __call__(self, text):
        """`(code, None)` for the run's code of `text`'s language, or `(None, reason)`."""
        if not any(character.isalpha() for character in text):
            return None, "its language cannot be told (no letters); pass --source-language CODE"
        for place, (language, share, code) in enumerate(self.ranked(text)):
            if code is not None:
                return code, None
            if place == 0 and language != "zxx" and share >= UNSUPPORTED_SHARE:
                return None, f"its language ({language}) is not one this model translates from"
        return None, "its language cannot be told; pass --source-language CODE"

    def ranked(self, text):
        """Every language the detector knows, likeliest first: `(ISO 639-3, probability, the run's code or None)`."""
        return [(self._iso_639_3[label], float(share), run_code(label, self._iso_639_3[label], self.codes, text))
                for label, share in self._identifier.rank(text)]


def run_code(label, iso_639_3, codes, text=""):
    """The run's code for a detected language: NLLB-200's (`spa_Latn`) or M2M-100's (`es`), or None.

    Args:
        label: the detector's name of the language (ISO 639-1, or ISO 639-3 where it has none).
        iso_639_3: the language's ISO 639-3 code.
        codes: the run's language codes (the tokenizer's `language_codes`).
        text: the input, whose letters choose among a language's scripts.

    Example:

    >>> run_code("es", "spa", ("eng_Latn", "spa_Latn")), run_code("es", "spa", ("en", "es"))
    ('spa_Latn', 'es')
    >>> run_code("ar", "ara", ("acm_Arab", "arb_Arab", "arb_Latn"), "مرحبا"), run_code("zu", "zul", ("en", "es"))
    ('arb_Arab', None)
    """
    if label in codes:
        return label
    # The language's own code first, then its individual languages in `_INDIVIDUAL`'s order (arb before acm).
    matching = [code for name in (iso_639_3, *_INDIVIDUAL.get(iso_639_3, ())) for code in codes
                if code.split("_")[0] == name and "_" in code]
    if len(matching) <= 1:
        return matching[0] if matching else None
    script = text_script(text)
    return next((code for code in matching if code.endswith("_" + script)), matching[0])


def text_script(text):
    """The ISO 15924 script most of `text`'s letters are written in (`Latn`, `Cyrl`, `Hans`, ...), or `""`.

    Example:

    >>> text_script("Привет, мир"), text_script("Hola"), text_script("123")
    ('Cyrl', 'Latn', '')
    """
    counts = collections.Counter()
    for character in text:
        if character.isalpha():
            name = unicodedata.name(character, "").split(" ")[0]
            counts[_SCRIPTS.get(name, name)] += 1
    return counts.most_common(1)[0][0] if counts else ""


def source_languages(texts, detector):
    """Each text's source-language code, and the reasons of those refused.

    Args:
        texts: list of str (None for a text already refused: it stays None).
        detector: callable, text -> `(code, None)` or `(None, reason)` (`LanguageDetector`).

    Returns:
        `(languages, refused)`: a code (or None) a text, and a dict of each
        refused text's index -> its one-line reason.

    Example:

    >>> answers = {"Hola.": ("es", None), "Sawubona.": (None, "its language (zul) is not one this model ...")}
    >>> source_languages(["Hola.", "Sawubona.", None, " "], answers.get)
    (['es', None, None, None], {1: 'its language (zul) is not one this model ...'})
    """
    languages, refused = [], {}
    for i, text in enumerate(texts):
        code, reason = (None, None) if text is None or not text.strip() else detector(text)
        languages.append(code)
        if reason is not None:
            refused[i] = reason
    return languages, refused
