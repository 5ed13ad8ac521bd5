"""`--source-language auto` as it runs: the package's `LanguageDetector` on the corpus and the gold passages.

    python -m benchmarks.source_language_auto --out benchmarks/results/cpu-source-language-auto

For an NLLB-200 run's codes and an M2M-100 run's (transformers'
`FAIRSEQ_LANGUAGE_CODES`), each input is given to
`keras_transformer_runtime.documents.languages.LanguageDetector` and its
answer counted: `right` (the expected code, or a refusal where the run
lacks the language), `wrong` (another code, the most frequent listed), and
`refused` (by reason). Inputs: every
Spanish source and first English reference of the `test` and `heldout`
splits, whole; the hand-made passages of `benchmarks/data/passages.json`
(11 languages), whole and each sentence alone; and `OTHER_LANGUAGES`, a
few sentences in languages NLLB-200 lacks (M2M-100 has two of them): where
the run lacks the language, refusing is the right answer. Each row also
keeps the largest probability a language the run lacks held as the
detector's first choice (`largest_unsupported_share`): at or above
`UNSUPPORTED_SHARE` an input is refused, so on inputs the run translates
it must stay below. Rows go to `--out/results.json`
and `results.md` (`benchmarks.results_folder.add_rows`), a section a run.
"""

import argparse
import collections
import datetime
import importlib.metadata
import json
import os
import pathlib
import platform

from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer_runtime.cpu import cpu_flags
from keras_transformer_runtime.cpu import cpu_model
from keras_transformer_runtime.documents.languages import UNSUPPORTED_SHARE
from keras_transformer_runtime.documents.languages import LanguageDetector

# Languages NLLB-200 lacks: Latin (Genesis 1:1-3, the Vulgate; M2M-100 lacks it too), Breton and West Frisian.
OTHER_LANGUAGES = {
    "la": ["In principio creavit Deus caelum et terram.",
            "Terra autem erat inanis et vacua, et tenebrae erant super faciem abyssi.",
            "Dixitque Deus: Fiat lux. Et facta est lux."],
    "br": ["Demat deoc'h, penaos emaoc'h hiziv?", "Me a zo o chom e Brest abaoe daou vloaz."],
    "fy": ["It is net altyd maklik om in goede baan te finen yn Fryslân.",
            "Wy geane moarn mei de bern nei de see ta."],
}


def model_codes():
    """NLLB-200's and M2M-100's language codes, as transformers lists them."""
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES as M2M100
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES as NLLB

    return {"NLLB-200": tuple(NLLB), "M2M-100": tuple(M2M100["m2m100"])}


def input_sets(limit=None):
    """`{set: {language: [texts]}}`: the verses, the gold passages and sentences, and `OTHER_LANGUAGES`."""
    sets = {}
    for split in ("test", "heldout"):
        pairs = load_bible_pairs(split)[:limit]
        sets[f"{split} verses"] = {"es": [pair.source for pair in pairs], "en": [pair.target for pair in pairs]}
    gold = json.loads((pathlib.Path(__file__).parent / "data" / "passages.json").read_text(encoding="utf-8"))
    passages, joiners = gold["passages"], gold["joiners"]
    sets["gold passages"] = {language: [joiners.get(language, " ").join(passage) for passage in texts]
                             for language, texts in passages.items()}
    sets["gold sentences"] = {language: [sentence for passage in texts for sentence in passage]
                              for language, texts in passages.items()}
    sets["other languages"] = OTHER_LANGUAGES
    return sets


def expected_code(detector, language, text):
    """The run's code for texts written in `language` (ISO 639-1, or 639-3), or None where the run lacks it."""
    import langcodes

    from keras_transformer_runtime.documents.languages import run_code

    return run_code(language, langcodes.Language.get(language).to_alpha3(), detector.codes, text)


def score(detector, model, name, language, texts, top=5):
    """One row: how `detector` answered `texts` written in `language`."""
    counts, wrong, refused, largest = collections.Counter(), collections.Counter(), collections.Counter(), 0.0
    for text in texts:
        expected = expected_code(detector, language, text)
        code, reason = detector(text)
        first_language, share, first_code = detector.ranked(text)[0]
        if first_code is None and first_language != "zxx":
            largest = max(largest, share)
        if code is None:
            counts["refused"] += 1
            counts["right"] += expected is None
            refused["not one this model translates from" if "not one" in reason else "cannot be told"] += 1
        elif code == expected:
            counts["right"] += 1
        else:
            counts["wrong"] += 1
            wrong[code] += 1
    return dict(kind="answers", model=model, set=name, language=language, inputs=len(texts),
                expected=expected_code(detector, language, texts[0]) if texts else None, right=counts["right"],
                wrong=counts["wrong"], wrong_answers=dict(wrong.most_common(top)), refused=counts["refused"],
                refusals=dict(refused), largest_unsupported_share=round(largest, 4))


def measure(limit=None, log=print):
    """Every row of one run: the machine, then one row a model, set and language."""
    run = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    rows = [dict(kind="machine", run=run, cpu=cpu_model(), avx512f="avx512f" in cpu_flags(), cores=os.cpu_count(),
                 python=platform.python_version(), limit=limit, unsupported_share=UNSUPPORTED_SHARE,
                 versions={name: importlib.metadata.version(name) for name in ("py3langid", "langcodes")})]
    sets = input_sets(limit)
    for model, codes in model_codes().items():
        detector = LanguageDetector(codes)
        for name, languages in sets.items():
            for language, texts in languages.items():
                rows.append(score(detector, model, name, language, texts))
                log(rows[-1])
    for row in rows:
        row["run"] = run
    return rows


def markdown(rows):
    """The rows as Markdown: a section a run, one table a model."""
    lines = ["# `--source-language auto`: the package's detector on the corpus and the gold passages", "",
             "`python -m benchmarks.source_language_auto --out DIR` (see the module's docstring)."]
    for run in dict.fromkeys(r["run"] for r in rows):
        head = next(r for r in rows if r["run"] == run and r["kind"] == "machine")
        versions = ", ".join(f"{name} {version}" for name, version in head["versions"].items())
        limit = f"; first {head['limit']} verses of each split" if head.get("limit") else ""
        lines += ["", f"## {run}: {head['cpu']}, {head['cores']} cores, "
                      f"{'AVX-512' if head['avx512f'] else 'no AVX-512'}; Python {head['python']}, {versions}, "
                      f"UNSUPPORTED_SHARE {head['unsupported_share']}{limit}"]
        for model in dict.fromkeys(r["model"] for r in rows if r["run"] == run and r["kind"] == "answers"):
            lines += ["", f"### {model}", "", "| set | language | expected | inputs | right | wrong (answers) | "
                      "refused (why) | largest unsupported share |", "|---|---|---|---:|---:|---|---|---:|"]
            for r in rows:
                if r["run"] == run and r.get("model") == model:
                    wrong = ", ".join(f"{code}×{count}" for code, count in r["wrong_answers"].items())
                    why = ", ".join(f"{reason}×{count}" for reason, count in r["refusals"].items())
                    lines.append(f"| {r['set']} | {r['language']} | {r['expected'] or '— (refused)'} | {r['inputs']} | "
                                 f"{r['right']} | {r['wrong']}{f' ({wrong})' if wrong else ''} | "
                                 f"{r['refused']}{f' ({why})' if why else ''} | {r['largest_unsupported_share']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    """Measures, then adds the rows to `results.json` and `results.md` in `--out`."""
    from benchmarks.results_folder import add_rows

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--limit", type=int, default=None, help="the first N verses of each split (a smoke test)")
    args = parser.parse_args(argv)
    add_rows(args.out, measure(limit=args.limit), markdown)


if __name__ == "__main__":
    main()
