"""Two language identifiers whose model ships inside their wheel, py3langid and lingua: accuracy, coverage, cost.

    python -m benchmarks.language_detectors --out benchmarks/results/cpu-language-detectors

Each detector is called as `--source-language auto` would call it, one
input at a time: `py3langid.classify(text)` (its label: an ISO 639-1 code,
or ISO 639-3 where the language has none) and lingua's
`LanguageDetectorBuilder.from_all_languages().build().detect_language_of(text)`
(a `Language`, named by `.iso_code_639_1.name` lower-cased, or None).
lingua is measured as built by default (models loaded lazily, the language
of each input's candidates on first need) and in its low-accuracy mode
(`.with_low_accuracy_mode()`: trigrams only); for timing also with every
model loaded at build (`.with_preloaded_language_models()`), which answers
as the default build does. Both are also scored restricted to the
languages that are NLLB-200's (`nllb_labels`; py3langid's
`set_languages`, lingua's `from_languages`), as a run could restrict them
to its own codes. lingua's `compute_language_confidence_values(text)`
gives a confidence a language (a threshold could refuse unsure inputs);
it is not measured here.

- Accuracy, compared in ISO 639-1, per language and pooled (`all`):
  the hand-made passages of `benchmarks.sentence_splitters.GOLD` (es, en,
  de, fr, it, pt, ja, zh, hi, ar, ru), each passage joined into one text;
  each of their gold sentences alone (one short sentence, as a subtitle
  line); and the corpus (`load_bible_pairs`, splits `test` and `heldout`):
  every Spanish source and first English reference, whole and cut to its
  first `SHORT_WORDS` words. An input left undetected counts as wrong and
  the rows count them (`none`): lingua's None, and py3langid's `zxx` (its
  label for no linguistic content) or an answer scored at its floor
  (`RAW_FLOOR`: the text had no feature it knows, and it names its first
  label). Each row keeps the most frequent wrong answers and a few examples.
- Coverage: how many languages each detector knows (py3langid: the
  `labels` of `LanguageIdentifier.from_model_file(MODEL_FILE)`, less
  `zxx`; lingua: `Language.all()`), and how many of NLLB-200's 202 codes
  and M2M-100's 100 codes (transformers' `FAIRSEQ_LANGUAGE_CODES`) name a
  language each knows. A code is compared by its ISO 639-3 language part
  (`spa_Latn` -> `spa`); lingua names each language's ISO 639-3 code, and
  py3langid's two-letter labels (and M2M-100's codes) are turned into ISO
  639-3 by the pairs lingua's `Language` list holds, completed by
  `ISO_639_1_TO_3` for the codes lingua does not know. NLLB-200 names
  individual languages where the detectors name their macrolanguage (arb
  for ara, zsm for msa, ...): by code alone those do not match, so the rows
  count the matches again once each code is mapped to its macrolanguage by
  `MACROLANGUAGES`, and list the codes that match only so.
- Speed and cost: the first call in a fresh interpreter (import, model
  load and one detection, timed inside it, and the whole process from
  outside; peak resident memory then, and after detecting every gold
  sentence; median of `--first-call-repeats`, 3, or 1 with `--limit`), the
  warm time an input over the Spanish verses of `test` (a warm-up pass,
  then `--repeats` passes, the detectors in turn, median), and the size on
  disk of each package's installed files (`importlib.metadata.files`).

Every row carries `run` (the date it was measured); the `machine` row
names the CPU (`/proc/cpuinfo`, with or without avx512f), the package
versions and the date. Rows are added to `--out/results.json` and
`results.md` (`benchmarks.results_folder.add_rows`), a section a run.
`--limit N` takes the first N verses of each split: a smoke test.
"""

import argparse
import collections
import datetime
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from benchmarks.sentence_splitters import GOLD
from benchmarks.sentence_splitters import JOINERS
from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer_runtime.cpu import cpu_flags
from keras_transformer_runtime.cpu import cpu_model

SPLITS = ("test", "heldout")
#: Words kept of a verse for the very short inputs.
SHORT_WORDS = 3
#: py3langid's labels that name no language.
NO_LANGUAGE = ("zxx", "und")
#: The text each fresh interpreter detects on its first call.
FIRST_TEXT = "Y dijo Dios: Sea la luz; y fue la luz."

#: NLLB-200's (and a detector's) individual languages -> their ISO 639-3 macrolanguage.
MACROLANGUAGES = {
    "arb": "ara", "ars": "ara", "ary": "ara", "arz": "ara", "apc": "ara", "ajp": "ara", "acm": "ara",
    "acq": "ara", "aeb": "ara",
    "zsm": "msa", "pes": "fas", "prs": "fas", "lvs": "lav", "khk": "mon", "als": "sqi", "azj": "aze",
    "azb": "aze", "swh": "swa", "ekk": "est", "uzn": "uzb", "uzs": "uzb", "npi": "nep", "plt": "mlg",
    "ydd": "yid", "quy": "que", "gug": "grn", "gaz": "orm", "kmr": "kur", "ckb": "kur", "sdh": "kur",
    "pbt": "pus", "ory": "ori", "knc": "kau", "twi": "aka", "fuv": "ful", "nob": "nor", "nno": "nor",
    "yue": "zho", "wuu": "zho", "cmn": "zho",
}

#: ISO 639-1 -> ISO 639-3 for the two-letter codes of py3langid and M2M-100 that lingua's list lacks.
ISO_639_1_TO_3 = {
    "am": "amh", "an": "arg", "as": "asm", "ba": "bak", "br": "bre", "dz": "dzo", "fo": "fao", "ff": "ful",
    "fy": "fry", "gd": "gla", "gl": "glg", "ha": "hau", "ht": "hat", "ig": "ibo", "jv": "jav", "km": "khm",
    "kn": "kan", "ku": "kur", "ky": "kir", "lb": "ltz", "ln": "lin", "lo": "lao", "mg": "mlg", "ml": "mal",
    "mt": "mlt", "my": "mya", "ne": "nep", "no": "nor", "oc": "oci", "om": "orm", "or": "ori", "ps": "pus",
    "qu": "que", "rw": "kin", "sa": "san", "sd": "snd", "se": "sme", "si": "sin", "ss": "ssw", "su": "sun",
    "tg": "tgk", "tk": "tuk", "tt": "tat", "ug": "uig", "uz": "uzb", "vo": "vol", "wa": "wln", "wo": "wol",
    "yi": "yid",
    "ns": "nso",  # M2M-100's own code for Northern Sotho (not ISO 639-1)
}


class Py3langid:
    """py3langid, called as `py3langid.classify(text)` -> `(label, score)`.

    Args:
        nllb_only: classify with an identifier of its own
            (`LanguageIdentifier.from_model_file(MODEL_FILE)`) restricted by
            `set_languages` to the labels that name an NLLB-200 language (`nllb_labels`).
    """

    distribution = "py3langid"
    #: What a fresh interpreter runs before its first call, `detect(TEXT)`.
    first_call = "import py3langid\ndetect = py3langid.classify"
    #: How the list of languages is read.
    languages_api = "py3langid.langid.LanguageIdentifier.from_model_file(py3langid.langid.MODEL_FILE).labels"

    def __init__(self, nllb_only=False):
        import py3langid
        from py3langid import langid

        self.name = "py3langid" + (", NLLB-200 languages" if nllb_only else "")
        self._classify = py3langid.classify
        if nllb_only:
            identifier = langid.LanguageIdentifier.from_model_file(langid.MODEL_FILE)
            identifier.set_languages(nllb_labels(identifier.labels))
            self._classify = identifier.classify
        self._floor = langid.RAW_FLOOR
        self.version = importlib.metadata.version(self.distribution)

    def detect(self, text):
        """`text`'s language as its ISO 639-1 code (ISO 639-3 where it has none), or None where undetected."""
        label, score = self._classify(text)
        return None if label in NO_LANGUAGE or score <= self._floor else label

    def languages(self):
        """The labels of py3langid's model (script aliases merged), less those that name no language."""
        from py3langid import langid

        labels = langid.LanguageIdentifier.from_model_file(langid.MODEL_FILE).labels
        return [label for label in labels if label not in NO_LANGUAGE]


class Lingua:
    """lingua, built `from_all_languages()` (on the first detection) and called as `detect_language_of(text)`.

    Args:
        preloaded: build `.with_preloaded_language_models()` (every model loaded at build).
        low_accuracy: build `.with_low_accuracy_mode()` (trigram models only).
        nllb_only: build `from_languages(...)` with the languages that are NLLB-200's (`nllb_labels`).
    """

    distribution = "lingua-language-detector"
    languages_api = "lingua.Language.all()"

    def __init__(self, preloaded=False, low_accuracy=False, nllb_only=False):
        self.name = ("lingua" + (" low accuracy" if low_accuracy else "") + (" preloaded" if preloaded else "")
                     + (", NLLB-200 languages" if nllb_only else ""))
        self._preloaded, self._low_accuracy, self._nllb_only = preloaded, low_accuracy, nllb_only
        self._builder_calls = ((".with_preloaded_language_models()" if preloaded else "")
                               + (".with_low_accuracy_mode()" if low_accuracy else ""))
        self._detector = None
        self.version = importlib.metadata.version(self.distribution)

    def _build(self):
        from lingua import Language
        from lingua import LanguageDetectorBuilder

        builder = LanguageDetectorBuilder.from_all_languages()
        if self._nllb_only:
            keep = set(nllb_labels(self.languages()))
            builder = LanguageDetectorBuilder.from_languages(
                *[language for language in Language.all() if language.iso_code_639_1.name.lower() in keep])
        if self._preloaded:
            builder = builder.with_preloaded_language_models()
        if self._low_accuracy:
            builder = builder.with_low_accuracy_mode()
        return builder.build()

    @property
    def first_call(self):
        """What a fresh interpreter runs before its first call, `detect(TEXT)`."""
        return ("from lingua import LanguageDetectorBuilder\n"
                f"detect = LanguageDetectorBuilder.from_all_languages(){self._builder_calls}.build()"
                ".detect_language_of")

    def detect(self, text):
        """`text`'s language as its ISO 639-1 code, or None where lingua cannot tell."""
        if self._detector is None:
            self._detector = self._build()
        language = self._detector.detect_language_of(text)
        if language is None or language.iso_code_639_1 is None:
            return None
        return language.iso_code_639_1.name.lower()

    def languages(self):
        """The ISO 639-1 codes of `Language.all()`."""
        from lingua import Language

        return sorted(language.iso_code_639_1.name.lower() for language in Language.all())


#: The detectors whose answers are scored; the first three are timed, with the preloaded build (it answers as
#: the default one).
SCORED = (Py3langid, Lingua, lambda: Lingua(low_accuracy=True), lambda: Py3langid(nllb_only=True),
          lambda: Lingua(nllb_only=True))
TIMED = SCORED[:3] + (lambda: Lingua(preloaded=True),)


def first_words(text, count=SHORT_WORDS):
    """The first `count` whitespace-separated words of `text`, joined with a space.

    Example:

    >>> first_words("Y dijo Dios: Sea la luz.")
    'Y dijo Dios:'
    """
    return " ".join(text.split()[:count])


def input_sets(limit=None, gold=None):
    """The inputs by set name, each a list of `(gold ISO 639-1 code, text)`.

    Args:
        limit: the first N verses of each split (None: all).
        gold: passages as `GOLD` holds them (None: `GOLD`).
    """
    gold = GOLD if gold is None else gold
    sets = {"gold passages": [(language, JOINERS.get(language, " ").join(sentences))
                              for language, passages in gold.items() for sentences in passages],
            "gold sentences": [(language, sentence) for language, passages in gold.items()
                               for sentences in passages for sentence in sentences]}
    for split in SPLITS:
        pairs = load_bible_pairs(split)[:limit]
        verses = [("es", pair.source) for pair in pairs] + [("en", pair.references[0]) for pair in pairs]
        sets[f"{split} verses"] = verses
        sets[f"{split} verses, first {SHORT_WORDS} words"] = [(language, first_words(text))
                                                               for language, text in verses]
    return sets


def score(detector, name, items, examples=5, top=5):
    """Rows of accuracy on `items` (`(gold code, text)` pairs): one a language, in order, then `language="all"`.

    A row counts the inputs, the right answers and the undetected ones
    (`none`, counted wrong), and keeps the `top` most frequent wrong answers
    (`"none"` for undetected) and up to `examples` wrong inputs with their answer.
    """
    by_language = collections.defaultdict(lambda: dict(inputs=0, correct=0, none=0,
                                                       wrong=collections.Counter(), examples=[]))
    for language, text in items:
        answer = detector.detect(text)
        for key in (language, "all"):
            counts = by_language[key]
            counts["inputs"] += 1
            counts["correct"] += answer == language
            counts["none"] += answer is None
            if answer != language:
                counts["wrong"][answer or "none"] += 1
                if len(counts["examples"]) < examples:
                    counts["examples"].append(f"{text[:80]} -> {answer}")
    order = [key for key in by_language if key != "all"] + ["all"]
    return [dict(kind="accuracy", detector=detector.name, set=name, language=key,
                 inputs=by_language[key]["inputs"], correct=by_language[key]["correct"],
                 none=by_language[key]["none"],
                 accuracy=round(by_language[key]["correct"] / by_language[key]["inputs"], 4),
                 wrong=dict(by_language[key]["wrong"].most_common(top)),
                 wrong_examples=by_language[key]["examples"]) for key in order]


def iso_639_1_to_3(extra=True):
    """ISO 639-1 -> ISO 639-3: the pairs lingua's `Language.all()` holds, and `ISO_639_1_TO_3` where `extra`.

    Example:

    >>> iso_639_1_to_3()["es"], iso_639_1_to_3()["km"], "km" in iso_639_1_to_3(extra=False)
    ('spa', 'khm', False)
    """
    from lingua import Language

    table = {language.iso_code_639_1.name.lower(): language.iso_code_639_3.name.lower()
             for language in Language.all()}
    if extra:
        for one, three in ISO_639_1_TO_3.items():
            table.setdefault(one, three)
    return table


def to_639_3(code, table):
    """A code (two letters: ISO 639-1 by `table`; else ISO 639-3 as it is, `spa_Latn` by its language part) as ISO 639-3, or None.

    Example:

    >>> to_639_3("es", {"es": "spa"}), to_639_3("arb_Arab", {}), to_639_3("km", {})
    ('spa', 'arb', None)
    """
    code = code.split("_")[0].lower()
    return table.get(code) if len(code) == 2 else code


def macrolanguage(code):
    """The ISO 639-3 macrolanguage of `code` by `MACROLANGUAGES`, or `code` itself.

    Example:

    >>> macrolanguage("arb"), macrolanguage("spa")
    ('ara', 'spa')
    """
    return MACROLANGUAGES.get(code, code)


def match(codes, known, table):
    """How `codes` (a model's language codes) meet `known` (a detector's ISO 639-3 codes).

    Returns:
        dict: `by_code` (those whose ISO 639-3 code the detector knows),
        `with_macrolanguage` (those matching once both sides are mapped to
        their macrolanguage), `via_macrolanguage` (the codes that match only
        so) and `unmatched` (the rest).

    Example:

    >>> match(["spa_Latn", "arb_Arab", "zul_Latn"], {"spa", "ara"}, {})["via_macrolanguage"]
    ['arb_Arab']
    """
    known_macro = {macrolanguage(code) for code in known}
    direct, via, unmatched = [], [], []
    for code in codes:
        three = to_639_3(code, table)
        if three in known:
            direct.append(code)
        elif three is not None and macrolanguage(three) in known_macro:
            via.append(code)
        else:
            unmatched.append(code)
    return dict(by_code=len(direct), with_macrolanguage=len(direct) + len(via), via_macrolanguage=via,
                unmatched=unmatched)


def nllb_labels(labels):
    """Those of a detector's `labels` (ISO 639-1, else ISO 639-3) that name an NLLB-200 language, by code or macrolanguage.

    Example:

    >>> nllb_labels(["es", "ar", "no", "la", "ext", "zxx"])
    ['es', 'ar', 'no']
    """
    table = iso_639_1_to_3()
    nllb = {to_639_3(code, table) for code in model_codes()["NLLB-200"]}
    nllb |= {macrolanguage(code) for code in nllb}
    return [label for label in labels
            if to_639_3(label, table) in nllb or macrolanguage(to_639_3(label, table)) in nllb]


def model_codes():
    """NLLB-200's and M2M-100's language codes, as transformers lists them (`FAIRSEQ_LANGUAGE_CODES`)."""
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES as M2M100
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES as NLLB

    return {"NLLB-200": list(NLLB), "M2M-100": list(M2M100["m2m100"])}


def coverage(detector, codes):
    """One row: the languages `detector` knows, and how each model's codes in `codes` map to them."""
    table = iso_639_1_to_3()
    listed = detector.languages()
    known = {to_639_3(code, table) for code in listed}
    row = dict(kind="coverage", detector=detector.name, version=detector.version, api=detector.languages_api,
               languages=len(listed), listed=listed,
               unresolved=sorted(code for code in listed if to_639_3(code, table) is None))
    for model, model_list in codes.items():
        row[model] = dict(codes=len(model_list), **match(model_list, known, table))
    lingua_only = iso_639_1_to_3(extra=False)
    known_lingua_only = {to_639_3(code, lingua_only) for code in listed} - {None}
    row["nllb_by_code_with_lingua_pairs_only"] = match(codes["NLLB-200"], known_lingua_only, lingua_only)["by_code"]
    row["labels_resolved_with_lingua_pairs_only"] = len(known_lingua_only)
    return row


def speed(detectors, texts, repeats=3):
    """Rows of the warm time an input: a warm-up pass, then `repeats` passes over `texts`, the detectors in turn, median."""
    seconds = {detector.name: [] for detector in detectors}
    for detector in detectors:
        for text in texts:
            detector.detect(text)
    for _ in range(repeats):
        for detector in detectors:
            start = time.perf_counter()
            for text in texts:
                detector.detect(text)
            seconds[detector.name].append(time.perf_counter() - start)
    characters = sum(len(text) for text in texts)
    rows = []
    for detector in detectors:
        median = statistics.median(seconds[detector.name])
        rows.append(dict(kind="speed", detector=detector.name, language="es", inputs=len(texts),
                         characters=characters, repeats=repeats,
                         seconds=[round(s, 4) for s in seconds[detector.name]],
                         microseconds_per_input=round(1e6 * median / len(texts), 1),
                         inputs_per_second=round(len(texts) / median)))
    return rows


# The peak resident memory is read from /proc/self/status (VmHWM): getrusage's ru_maxrss keeps the parent's across exec.
_FIRST_CALL = """import json, time
TEXT = {text!r}
start = time.perf_counter()
{snippet}
answer = detect(TEXT)
seconds = time.perf_counter() - start
with open("/proc/self/status") as f:
    peak_kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
for text in {sentences!r}:
    detect(text)
with open("/proc/self/status") as f:
    peak_after_gold_kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print(json.dumps(dict(seconds=seconds, answer=str(answer), peak_kib=peak_kib, peak_after_gold_kib=peak_after_gold_kib)))
"""


def first_call(detector, repeats=3, text=FIRST_TEXT):
    """One row: `repeats` fresh interpreters each importing, loading and detecting once (inside and whole process), median.

    The peak memory is read after that first detection, and again after
    detecting every sentence of `GOLD` (11 languages, 6 scripts): a lazily
    loading detector grows as inputs bring other languages.
    """
    sentences = [sentence for passages in GOLD.values() for sentences in passages for sentence in sentences]
    code = _FIRST_CALL.format(text=text, snippet=detector.first_call, sentences=sentences)
    inside, whole, memory, memory_gold, answers = [], [], [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        whole.append(time.perf_counter() - start)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        inside.append(result["seconds"])
        memory.append(result["peak_kib"] / 1024)
        memory_gold.append(result["peak_after_gold_kib"] / 1024)
        answers.append(result["answer"])
    return dict(kind="first_call", detector=detector.name, call=detector.first_call.replace("\n", "; ") + "; detect(TEXT)",
                seconds=[round(s, 3) for s in inside], median_seconds=round(statistics.median(inside), 3),
                process_seconds=[round(s, 3) for s in whole],
                median_process_seconds=round(statistics.median(whole), 3),
                peak_rss_mib=round(statistics.median(memory), 1),
                peak_rss_after_gold_mib=round(statistics.median(memory_gold), 1), answer=answers[0])


def installed_size(distribution):
    """One row: the files a package installed (`importlib.metadata.files`), their total size, and what it requires (no extras)."""
    files = importlib.metadata.files(distribution) or []
    size = 0
    for file in files:
        path = file.locate()
        if os.path.isfile(path):
            size += os.path.getsize(path)
    return dict(kind="size", distribution=distribution, version=importlib.metadata.version(distribution),
                files=len(files), bytes=size, mib=round(size / 2**20, 2),
                requires=[r for r in importlib.metadata.requires(distribution) or [] if "extra ==" not in r])


def machine(detectors, run):
    """The row that names the machine, the packages and the date."""
    return dict(kind="machine", run=run, date=run, cpu=cpu_model(), avx512f="avx512f" in cpu_flags(),
                cores=os.cpu_count(), python=platform.python_version(),
                versions={detector.distribution: detector.version for detector in detectors})


def measure(limit=None, repeats=3, first_call_repeats=3, log=print):
    """Every row of one run: the machine, accuracy, coverage, first call, warm speed and installed size."""
    run = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    scored = [make() for make in SCORED]
    rows = [machine(scored, run)]
    rows[0]["limit"] = limit
    for name, items in input_sets(limit).items():
        for detector in scored:
            rows += score(detector, name, items)
            log(json.dumps({k: v for k, v in rows[-1].items() if k != "wrong_examples"}, ensure_ascii=False))
    codes = model_codes()
    for detector in scored[:2]:
        rows.append(coverage(detector, codes))
        log(json.dumps({k: v for k, v in rows[-1].items() if k != "listed"}))
    timed = scored[:len(TIMED) - 1] + [TIMED[-1]()]
    texts = [pair.source for pair in load_bible_pairs("test")[:limit]]
    rows += speed(timed, texts, repeats=repeats)
    for row in rows[-len(timed):]:
        log(json.dumps(row))
    for detector in timed:
        rows.append(first_call(detector, repeats=first_call_repeats))
        log(json.dumps(rows[-1]))
    for distribution in dict.fromkeys(detector.distribution for detector in scored):
        rows.append(installed_size(distribution))
        log(json.dumps(rows[-1]))
    for row in rows:
        row["run"] = run
    return rows


def _answers(counter):
    return ", ".join(f"{answer}×{count}" for answer, count in counter.items())


def _codes(codes):
    return ", ".join(f"`{code}`" for code in codes) or "none"


def _section(rows):
    head = next(r for r in rows if r["kind"] == "machine")
    versions = ", ".join(f"{name} {version}" for name, version in head["versions"].items())
    limit = f"; first {head['limit']} verses of each split" if head.get("limit") else ""
    accuracy = {(r["detector"], r["set"], r["language"]): r for r in rows if r["kind"] == "accuracy"}
    names = list(dict.fromkeys(r["detector"] for r in rows if r["kind"] == "accuracy"))
    lines = [f"## {head['date']}: {head['cpu']}, {head['cores']} cores, "
             f"{'AVX-512' if head['avx512f'] else 'no AVX-512'}; Python {head['python']}, {versions}{limit}", "",
             "### Accuracy (ISO 639-1; an undetected input counts as wrong)", "",
             "Gold: the hand-made passages of `benchmarks.sentence_splitters.GOLD`, whole and each sentence "
             f"alone. Verses: every Spanish source (es) and English reference (en), whole and their first "
             f"{SHORT_WORDS} words. Undetected: lingua's None; py3langid's `zxx`, or an answer at its score "
             "floor (no known feature in the text). Wrong: the most frequent wrong answers. *NLLB-200 languages*: "
             "the detector restricted to the languages that are NLLB-200's (`nllb_labels`: py3langid's "
             "`set_languages`, lingua's `from_languages`).", "",
             "| set | language | inputs | " + " | ".join(f"{n} (undetected) | {n} wrong" for n in names) + " |",
             "|---|---|---:|" + "---:|---|" * len(names)]
    for name_set, language in dict.fromkeys((s, language) for _, s, language in accuracy):
        first = accuracy[(names[0], name_set, language)]
        cells = []
        for name in names:
            r = accuracy[(name, name_set, language)]
            cells.append(f"{r['accuracy']:.1%} ({r['none']}) | {_answers(r['wrong'])}")
        label = "**all**" if language == "all" else language
        lines.append(f"| {name_set} | {label} | {first['inputs']} | " + " | ".join(cells) + " |")
    lines += ["", "### Coverage", "",
              "Codes compared by their ISO 639-3 language part; py3langid's two-letter labels and M2M-100's codes "
              "turned into ISO 639-3 by lingua's `Language` pairs and `ISO_639_1_TO_3`. NLLB-200 names individual "
              "languages where the detectors name their macrolanguage (arb for ara, zsm for msa, pes for fas, ...): "
              "those do not match by code alone; *with macrolanguages* maps both sides by `MACROLANGUAGES`.", "",
              "| detector | version | languages | list read by | NLLB-200 codes by code | NLLB-200 with macrolanguages "
              "| M2M-100 codes by code | M2M-100 with macrolanguages |", "|---|---|---:|---|---:|---:|---:|---:|"]
    cover = [r for r in rows if r["kind"] == "coverage"]
    for r in cover:
        nllb, m2m = r["NLLB-200"], r["M2M-100"]
        lines.append(f"| {r['detector']} | {r['version']} | {r['languages']} | `{r['api']}` | "
                     f"{nllb['by_code']} of {nllb['codes']} | {nllb['with_macrolanguage']} | "
                     f"{m2m['by_code']} of {m2m['codes']} | {m2m['with_macrolanguage']} |")
    lines.append("")
    for r in cover:
        lines.append(f"- {r['detector']}: NLLB-200 codes matched only through a macrolanguage: "
                     f"{_codes(r['NLLB-200']['via_macrolanguage'])}; M2M-100's: "
                     f"{_codes(r['M2M-100']['via_macrolanguage'])}.")
        if r["unresolved"]:
            lines.append(f"- {r['detector']}: labels with no ISO 639-3 code here: {', '.join(r['unresolved'])}.")
        if r["detector"] == "py3langid":
            lines.append(f"- py3langid with lingua's ISO 639-1/639-3 pairs alone (no `ISO_639_1_TO_3`): "
                         f"{r['labels_resolved_with_lingua_pairs_only']} of its {r['languages']} labels resolve, "
                         f"{r['nllb_by_code_with_lingua_pairs_only']} NLLB-200 codes match by code.")
    macro = collections.defaultdict(list)
    for individual, group in MACROLANGUAGES.items():
        macro[group].append(individual)
    lines.append("- `MACROLANGUAGES`: " + "; ".join(f"{group} ← {', '.join(members)}"
                                                   for group, members in macro.items()) + ".")
    lines += ["", "### Speed and cost", "",
              "First call: a fresh interpreter imports the package, loads the model and detects one sentence "
              "(timed inside it, and the whole process from outside; median of "
              f"{len(next(r for r in rows if r['kind'] == 'first_call')['seconds'])}); its peak resident memory "
              "then, and after it has also detected every gold sentence (11 languages). Warm: time an input over "
              "the Spanish verses of `test` after a warm-up pass (median of the passes).", "",
              "| detector | first call, s | whole process, s | peak memory, MiB | after the gold sentences, MiB "
              "| warm inputs | warm µs an input | inputs a second |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    speeds = {r["detector"]: r for r in rows if r["kind"] == "speed"}
    for r in rows:
        if r["kind"] == "first_call":
            s = speeds.get(r["detector"])
            warm = f"{s['inputs']} | {s['microseconds_per_input']:,} | {s['inputs_per_second']:,}" if s else " | | "
            lines.append(f"| {r['detector']} | {r['median_seconds']:.3f} | {r['median_process_seconds']:.3f} | "
                         f"{r['peak_rss_mib']:,.0f} | {r['peak_rss_after_gold_mib']:,.0f} | {warm} |")
    lines += ["", "| package | version | installed files | size on disk, MiB | requires |", "|---|---|---:|---:|---|"]
    for r in rows:
        if r["kind"] == "size":
            lines.append(f"| {r['distribution']} | {r['version']} | {r['files']} | {r['mib']} | "
                         f"{', '.join(r['requires']) or 'nothing'} |")
    return lines


def markdown(rows):
    """The rows as Markdown: a section a run (its machine and packages), each with accuracy, coverage and cost tables."""
    runs = list(dict.fromkeys(r["run"] for r in rows))
    lines = ["# Language detectors: py3langid and lingua", "",
             "`python -m benchmarks.language_detectors --out DIR` (see the module's docstring)."]
    for run in runs:
        lines += [""] + _section([r for r in rows if r["run"] == run])
    return "\n".join(lines) + "\n"


def main(argv=None):
    """Measures, then adds the rows to `results.json` and `results.md` in `--out` (several runs share a folder)."""
    from benchmarks.results_folder import add_rows

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--limit", type=int, default=None, help="the first N verses of each split (a smoke test)")
    parser.add_argument("--repeats", type=int, default=3, help="timed warm passes (default: %(default)s)")
    parser.add_argument("--first-call-repeats", type=int, default=None,
                        help="fresh interpreters for the first call (default: 3; 1 with --limit)")
    args = parser.parse_args(argv)
    first_call_repeats = args.first_call_repeats or (1 if args.limit else 3)
    add_rows(args.out, measure(limit=args.limit, repeats=args.repeats, first_call_repeats=first_call_repeats),
             markdown)


if __name__ == "__main__":
    main()
