"""Spans kept as they are: does a run copy a URL, a number or a placeholder, and what does keeping them cost?

    KERAS_BACKEND=jax python -m benchmarks.kept_spans --model runs/es-en --out benchmarks/results/cpu-kept-spans

Into the middle of each verse of a split (`--split`, the first `--limit`)
one span of a kind (`SPANS`: a URL, an e-mail address, a number with its
separators, `{name}`, `%s`) is put between two words, and the verses are
translated by the run's compiled engine with its own search three ways:
the verses as they are (`plain`: the reference point), with the span handed
to the model (`split_sentences=False`: `shown`), and with the span kept out
of the model (the default: `kept`, `documents.kept_spans`). For each kind
and way: how many translations hold the span exactly once, and the BLEU of
the translations with the span taken out, against the verses' references.
Rows go to `--out/results.json` and `results.md`, a section a run.
"""

import argparse
import datetime
import sys

import sacrebleu

from benchmarks.machine import cpu_name
from benchmarks.results_folder import add_rows
from keras_transformer.data.corpus import load_bible_pairs

SPANS = {"url": "https://example.org/a?b=1", "e-mail": "ana@example.org", "number": "1.234,56",
         "{name}": "{name}", "%s": "%s"}


def with_span(source, span):
    """`source` with `span` between its two middle words.

    Example:

    >>> with_span("Y dijo Dios: Sea la luz.", "{name}")
    'Y dijo Dios: {name} Sea la luz.'
    """
    words = source.split()
    middle = len(words) // 2
    return " ".join(words[:middle] + [span] + words[middle:])


def measure(translator, split, limit, log=print):
    """One row a kind and way: spans kept exactly once, and BLEU without the span."""
    pairs = load_bible_pairs(split)[:limit]
    references = [list(refs) for refs in zip(*(pair.references for pair in pairs))]
    plain = translator([pair.source for pair in pairs])
    rows = [dict(kind="none", way="plain", verses=len(pairs), kept=None,
                 bleu=round(sacrebleu.corpus_bleu(plain, references).score, 2))]
    log(rows[-1])
    for kind, span in SPANS.items():
        sources = [with_span(pair.source, span) for pair in pairs]
        for way, split_sentences in (("shown", False), ("kept", None)):
            outputs = translator(sources, split_sentences=split_sentences)
            without = [" ".join(output.replace(span, " ").split()) for output in outputs]
            rows.append(dict(kind=kind, way=way, verses=len(pairs), kept=sum(o.count(span) == 1 for o in outputs),
                             bleu=round(sacrebleu.corpus_bleu(without, references).score, 2)))
            log(rows[-1])
    return rows


def markdown(rows):
    """The rows as Markdown: one table a run."""
    lines = ["# Spans kept as they are", "", "`KERAS_BACKEND=jax python -m benchmarks.kept_spans --model RUN --out DIR` "
             "(see the module's docstring)."]
    for run in dict.fromkeys(row["run"] for row in rows):
        these = [row for row in rows if row["run"] == run]
        lines += ["", f"## {run}: {these[0]['machine']}; `{these[0]['command']}`", "",
                  "| span | way | verses | translations holding it once | BLEU, the span taken out |",
                  "|---|---|---:|---:|---:|"]
        lines += [f"| {row['kind']} | {row['way']} | {row['verses']} | "
                  f"{'—' if row['kept'] is None else row['kept']} | {row['bleu']} |" for row in these]
    return "\n".join(lines) + "\n"


def main(argv=None):
    """Measures, then adds the rows to `results.json` and `results.md` in `--out`."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kept_spans", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a `keras-transformer train` output folder")
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=200, help="the first N verses (default: %(default)s)")
    args = parser.parse_args(argv)
    from keras_transformer_cli.serve import write_program_in_a_child
    from keras_transformer_runtime.compiled_translator import load_compiled_translator
    from keras_transformer_runtime.program_cache import ProgramCache
    from keras_transformer_runtime.search_defaults import resolve_search

    search = resolve_search(args.model)
    translator = load_compiled_translator(args.model, ProgramCache(), search.decoding,
                                          write=write_program_in_a_child)
    stamp = dict(run=datetime.datetime.now().astimezone().isoformat(timespec="seconds"), machine=cpu_name(),
                 command="python -m benchmarks.kept_spans " + " ".join(argv if argv is not None else sys.argv[1:]),
                 split=args.split)
    add_rows(args.out, [{**row, **stamp} for row in measure(translator, args.split, args.limit)], markdown)


if __name__ == "__main__":
    main()
