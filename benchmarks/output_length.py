"""How long a translation runs against its source: what a cap on run-away output may cut.

    KERAS_BACKEND=jax python -m benchmarks.output_length --model runs/es-en --out benchmarks/results/cpu-output-length

Every verse of each split (`--splits`, the embedded corpus' test and
held-out books) is cut into the units `translate` decodes (its sentences,
`TextTranslator.split_texts`), and each unit is translated whole
(`split_sentences=False`) by the run's compiled engine, with the run's own
search and each beam width of `--beams`, and no cap (`--max-output-ratio
0`). For each unit: its source ids (the tokenizer's, with the end token and
any language token), and the pieces the translation wrote before its end
token. A cap lets a unit write at most `ratio * source ids + slack`
pieces (`keras_transformer.decoding.output_limit`); each row says, for each
ratio of `--ratios` with the package's slack, how many units that cap
would have cut, and the largest `(pieces - slack) / source ids` seen (the
smallest ratio that cuts none). Then the units are translated again with
the default cap (`DEFAULT_MAX_OUTPUT_RATIO`): how many translations it
changed (a beam's hypothesis cut at its limit may also outrank others). Rows go to `--out/results.json` and
`results.md` (`benchmarks.results_folder.add_rows`), a section a run.
"""

import argparse
import datetime
import sys

from benchmarks.machine import cpu_name
from benchmarks.results_folder import add_rows
from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer_runtime.search_defaults import DEFAULT_MAX_OUTPUT_RATIO
from keras_transformer_runtime.search_defaults import OUTPUT_SLACK


def unit_lengths(translator, texts):
    """`[(source ids, pieces written, unit, translation)]`, a unit of each of `texts` as `translate` cuts them."""
    units = [unit for split in translator.split_texts(texts) for unit in split.units()]
    translations = translator.n_best(units, 1, split_sentences=False, warn=False)
    sources = translator.tokenizer.tokenize(units)
    return [(len(source), sum(piece != "</s>" for piece in translation.hypotheses[0].tokens), unit,
             translation.hypotheses[0].text) for source, translation, unit in zip(sources, translations, units)]


def measure(translator, capped, splits, ratios, limit=None, examples=3, log=print):
    """One row a split: the units' lengths, what each cap of `ratios` would cut, and what `capped` changed."""
    rows = []
    for split in splits:
        texts = [pair.source for pair in load_bible_pairs(split)[:limit]]
        lengths = unit_lengths(translator, texts)
        with_cap = unit_lengths(capped, texts)
        changed = [(free, cut) for free, cut in zip(lengths, with_cap) if free[3] != cut[3]]
        needed = max((pieces - OUTPUT_SLACK) / source for source, pieces, *_ in lengths)
        longest = sorted(lengths, key=lambda unit: (unit[1] - OUTPUT_SLACK) / unit[0], reverse=True)[:examples]
        rows.append(dict(split=split, beam=translator.beam_width, units=len(lengths), slack=OUTPUT_SLACK,
                         longest_source=max(source for source, *_ in lengths),
                         longest_output=max(pieces for _, pieces, *_ in lengths),
                         largest_ratio=round(max(pieces / source for source, pieces, *_ in lengths), 3),
                         ratio_that_cuts_none=round(needed, 3),
                         cut={str(ratio): sum(pieces > ratio * source + OUTPUT_SLACK for source, pieces, *_ in lengths)
                              for ratio in ratios},
                         longest_for_their_source=[dict(ids=ids, pieces=pieces, source=unit, translation=text)
                                                   for ids, pieces, unit, text in longest],
                         default_ratio=DEFAULT_MAX_OUTPUT_RATIO, changed_by_default=len(changed),
                         changed=[dict(source=free[2], free=free[3], capped=cut[3]) for free, cut in changed]))
        log(rows[-1])
    return rows


def markdown(rows):
    """The rows as Markdown: one table a run."""
    lines = ["# How long a translation runs against its source", "",
             "`KERAS_BACKEND=jax python -m benchmarks.output_length --model RUN --out DIR` (see the module's "
             "docstring). A cap lets a unit write `ratio * source ids + slack` pieces."]
    for run in dict.fromkeys(row["run"] for row in rows):
        these = [row for row in rows if row["run"] == run]
        ratios = list(these[0]["cut"])
        lines += ["", f"## {run}: {these[0]['machine']}; `{these[0]['command']}`", "",
                  "| split | beam | units | longest source, ids | longest output, pieces | largest pieces / ids | "
                  f"smallest ratio cutting none (slack {these[0]['slack']}) | "
                  + " | ".join(f"cut at ratio {ratio}" for ratio in ratios)
                  + f" | translations changed by the default, {these[0]['default_ratio']} |",
                  "|---|---:|---:|---:|---:|---:|---:|" + "---:|" * (len(ratios) + 1)]
        for row in these:
            lines.append(f"| {row['split']} | {row['beam']} | {row['units']} | {row['longest_source']} | "
                         f"{row['longest_output']} | {row['largest_ratio']} | {row['ratio_that_cuts_none']} | "
                         + " | ".join(str(row["cut"][ratio]) for ratio in ratios)
                         + f" | {row['changed_by_default']} |")
        lines += ["", "The units longest for their source (ids, pieces: source -> translation):", ""]
        for row in these:
            for unit in row["longest_for_their_source"]:
                lines.append(f"- {row['split']}, beam {row['beam']}: {unit['ids']} ids, {unit['pieces']} pieces: "
                             f"{unit['source']!r} -> {unit['translation']!r}")
        lines += ["", "Changed by the default cap (source: without -> with):", ""]
        lines += [f"- {row['split']}, beam {row['beam']}: {unit['source']!r}: {unit['free']!r} -> {unit['capped']!r}"
                  for row in these for unit in row["changed"]] or ["- none"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    """Measures each beam width, then adds the rows to `results.json` and `results.md` in `--out`."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.output_length", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a `keras-transformer train` output folder")
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--splits", nargs="+", default=["test", "heldout"])
    parser.add_argument("--beams", nargs="+", type=int, default=[None, 1],
                        help="beam widths (default: the run's own search, then greedy)")
    parser.add_argument("--ratios", nargs="+", type=float, default=[1.5, 2.0, 3.0, 3.5, 4.0])
    parser.add_argument("--limit", type=int, help="the first N verses of each split only (default: all)")
    args = parser.parse_args(argv)
    from keras_transformer_cli.serve import write_program_in_a_child
    from keras_transformer_runtime.compiled_translator import load_compiled_translator
    from keras_transformer_runtime.program_cache import ProgramCache
    from keras_transformer_runtime.search_defaults import resolve_search

    command = "python -m benchmarks.output_length " + " ".join(argv if argv is not None else sys.argv[1:])
    run = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    for beam in args.beams:
        search = resolve_search(args.model, beam_width=beam)
        free, capped = (load_compiled_translator(
            args.model, ProgramCache(), search.decoding.replace(n_best=1, max_output_ratio=ratio),
            write=write_program_in_a_child) for ratio in (0, None))
        rows = measure(free, capped, args.splits, args.ratios, args.limit)
        stamp = dict(run=run, date=datetime.date.today().isoformat(), machine=cpu_name(), command=command)
        add_rows(args.out, [{**row, **stamp} for row in rows], markdown)


if __name__ == "__main__":
    main()
