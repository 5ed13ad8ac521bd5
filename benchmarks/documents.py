"""Paragraphs against their verses: BLEU and length when consecutive verses come as one text.

    python -m benchmarks.documents --model runs/es-en --out benchmarks/results/cpu-documents

For each split (`--splits`, the embedded corpus' test and held-out books)
and each paragraph size (`--verses`, 1, 3 and 6), consecutive verses of the
split are joined with a space into one text (a last, shorter group is left
out), their references likewise, and each paragraph is translated three
ways by the run's compiled engine (`load_compiled_translator`, the run's
own search unless `--beams` says otherwise): its verses one by one, joined
(`verse by verse`); the paragraph whole, as the translator took it before
sentence splitting (`split_sentences=False`: `whole`); and the paragraph
through the default sentence splitting (`sentences`). Scored with
sacrebleu against both references: BLEU, chrF, and the length ratio
(the translation's words over the reference's, sacrebleu's `sys_len /
ref_len`). With one verse a paragraph, `whole` is what `evaluate` gave
before sentence splitting and `sentences` what it gives now.
`--sentence-tokens N ...` measures `sentences` with each of those limits
(a sentence longer than N tokens cut at its clauses) instead of the run's
own: how the default was chosen, on `--splits dev`. Writes
`results.json` and `results.md` to `--out` (rows of several runs add up).
"""

import argparse
import datetime
import json
import time

import sacrebleu

from benchmarks.machine import cpu_name
from benchmarks.results_folder import add_rows
from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer.translation.evaluation import score_translations

MODES = ("verse by verse", "whole", "sentences")


def paragraphs(pairs, verses):
    """`(sources, references)`: `pairs` in groups of `verses` consecutive ones, each group joined with a space.

    Example:

    >>> from keras_transformer.data.corpus import TranslationPair
    >>> pairs = [TranslationPair(str(i), "Gen", "test", f"s{i}.", f"t{i}.", (f"t{i}.", f"k{i}.")) for i in range(5)]
    >>> paragraphs(pairs, 2)
    ([['s0.', 's1.'], ['s2.', 's3.']], [('t0. t1.', 'k0. k1.'), ('t2. t3.', 'k2. k3.')])
    """
    groups = [pairs[start:start + verses] for start in range(0, len(pairs) - verses + 1, verses)]
    sources = [[pair.source for pair in group] for group in groups]
    references = [tuple(" ".join(pair.references[k] for pair in group) for k in range(len(group[0].references)))
                  for group in groups]
    return sources, references


def translate(translator, sources, mode):
    """Each paragraph of `sources` (lists of verses) translated the way `mode` (of `MODES`) says."""
    if mode == "verse by verse":
        verses = [verse for group in sources for verse in group]
        translated = iter(translator(verses, split_sentences=False))
        return [" ".join(next(translated) for _ in group) for group in sources]
    texts = [" ".join(group) for group in sources]
    return translator(texts, split_sentences=mode == "sentences")


def measure(translator, splits, verse_counts, sentence_tokens=(None,), limit=None, log=print):
    """One row per split, paragraph size, mode (`MODES`) and, for `sentences`, each of `sentence_tokens`
    (None: the translator's own): BLEU, chrF, length ratio, seconds. `limit`: the first verses of a split only."""
    rows = []
    own = translator.sentence_tokens
    for split in splits:
        pairs = load_bible_pairs(split)[:limit]
        for verses in verse_counts:
            sources, references = paragraphs(pairs, verses)
            runs = [(mode, own) for mode in MODES[:2] if verses > 1 or mode == "whole"]  # 1 verse: the same
            runs += [("sentences", own if tokens is None else tokens) for tokens in sentence_tokens]
            for mode, tokens in runs:
                translator.sentence_tokens = tokens
                start = time.perf_counter()
                translations = translate(translator, sources, mode)
                seconds = time.perf_counter() - start
                scores = score_translations(translations, references)
                bleu = sacrebleu.corpus_bleu(translations, [list(column) for column in zip(*references)])
                row = dict(split=split, verses=verses, mode=mode, paragraphs=len(sources),
                           sentence_tokens=tokens if mode == "sentences" else None,
                           bleu=round(scores["bleu"], 2), chrf=round(scores["chrf"], 2),
                           length_ratio=round(bleu.sys_len / bleu.ref_len, 3), seconds=round(seconds, 2))
                log(json.dumps(row))
                rows.append(row)
    translator.sentence_tokens = own
    return rows


def markdown(rows):
    """The rows as one table a run (its header: date, machine, command)."""
    lines = ["# Paragraphs against their verses", "",
             "`python -m benchmarks.documents --model MODEL --out DIR` (see the module's docstring).", ""]
    for header, group in _runs(rows):
        lines += [f"## {header}", "",
                  "| split | verses a paragraph | paragraphs | mode | BLEU | chrF | length ratio | seconds |",
                  "|---|---:|---:|---|---:|---:|---:|---:|"]
        lines += [f"| {r['split']} | {r['verses']} | {r['paragraphs']} | {_mode(r)} | {r['bleu']:.2f} | "
                  f"{r['chrf']:.2f} | {r['length_ratio']:.3f} | {r['seconds']} |" for r in group]
        lines.append("")
    return "\n".join(lines)


def _mode(row):
    """A row's mode, with the sentence limit it split with."""
    tokens = row.get("sentence_tokens")
    return f"{row['mode']} (cut over {tokens} tokens)" if row["mode"] == "sentences" and tokens else row["mode"]


def _runs(rows):
    """`(header, rows)` for each run's rows, in order."""
    runs = []
    for row in rows:
        header = f"{row['date']}, {row['machine']}: `{row['command']}`"
        if not runs or runs[-1][0] != header:
            runs.append((header, []))
        runs[-1][1].append(row)
    return runs


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.documents", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a `keras-transformer train` output folder")
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--splits", nargs="+", default=["test", "heldout"])
    parser.add_argument("--verses", nargs="+", type=int, default=[1, 3, 6], help="verses a paragraph")
    parser.add_argument("--beams", nargs="+", type=int, default=[None],
                        help="beam widths (default: the run's own search)")
    parser.add_argument("--sentence-tokens", nargs="+", type=int, default=[None],
                        help="measure sentence splitting with each of these limits (default: the run's own)")
    parser.add_argument("--limit", type=int, help="the first N verses of each split only (default: all)")
    args = parser.parse_args(argv)
    from keras_transformer_cli.serve import write_program_in_a_child
    from keras_transformer_runtime.compiled_translator import load_compiled_translator
    from keras_transformer_runtime.program_cache import ProgramCache
    from keras_transformer_runtime.search_defaults import resolve_search

    command = "python -m benchmarks.documents " + " ".join(argv if argv is not None else __import__("sys").argv[1:])
    for beam in args.beams:
        search = resolve_search(args.model, beam_width=beam)
        translator = load_compiled_translator(args.model, ProgramCache(), search.decoding,
                                              write=write_program_in_a_child)
        rows = measure(translator, args.splits, args.verses, args.sentence_tokens, args.limit)
        stamp = dict(date=datetime.date.today().isoformat(), machine=cpu_name(),
                     command=command, beam=translator.beam_width)
        add_rows(args.out, [{**row, **stamp} for row in rows], markdown)


if __name__ == "__main__":
    main()
