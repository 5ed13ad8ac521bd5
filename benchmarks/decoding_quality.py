"""Greedy vs beam search, with and without the loop guard: BLEU, chrF and loop rate.

    python -m benchmarks.decoding_quality --model runs/es-en --out benchmarks/results/decoding-quality-cpu-tiny

Translates the test and held-out splits of the embedded corpus with every
combination of beam width (1, 4) and `no_repeat_ngram_size` (0 = off, 3, 4),
beam search with each of `--length-penalties` (alpha, 0.6 by default),
and scores them with sacrebleu (2 references) and
`keras_transformer.translation.evaluation.loop_rate` (the share of translations in which
a word or a phrase of up to 3 words occurs 4 times in a row). Writes
`results.json` and `results.md` to `--out`. `--splits dev` measures on
the split that settings should be chosen on.
"""

import argparse
import json
import os
import time

from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer.translation.evaluation import evaluate_pairs
from keras_transformer.translation.translator import Translator

SETTINGS = ((1, 0), (1, 3), (1, 4), (4, 0), (4, 3), (4, 4))


def measure(model, splits=("test", "heldout"), settings=SETTINGS, length_penalties=(0.6,), log=print):
    """One row per split, `(beam, no_repeat_ngram)` setting and, for beam search, length penalty."""
    rows = []
    for split in splits:
        pairs = load_bible_pairs(split)
        for beam, guard in settings:
            for alpha in length_penalties if beam > 1 else (None,):
                translator = Translator.from_directory(
                    model, beam_width=beam, no_repeat_ngram_size=guard, jit_compile=True,
                    **({} if alpha is None else {"length_penalty": alpha}),
                )
                start = time.perf_counter()
                result = evaluate_pairs(translator, pairs, verbose=0)
                row = dict(split=split, beam=beam, length_penalty=alpha, no_repeat_ngram=guard,
                           sentences=result["sentences"], bleu=round(result["bleu"], 2),
                           chrf=round(result["chrf"], 2), loop_rate=round(result["loop_rate"], 4),
                           seconds=round(time.perf_counter() - start, 1))
                log(json.dumps(row))
                rows.append(row)
    return rows


def markdown(rows):
    """The rows as a markdown table."""
    lines = ["| split | beam | length penalty | no-repeat n-gram | sentences | BLEU | chrF | loops | seconds |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        guard = r["no_repeat_ngram"] or "off"
        alpha = "" if r.get("length_penalty") is None else r["length_penalty"]
        lines.append(f"| {r['split']} | {r['beam']} | {alpha} | {guard} | {r['sentences']} | {r['bleu']:.2f} | "
                     f"{r['chrf']:.2f} | {r['loop_rate']:.1%} | {r['seconds']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the --output folder of a training run")
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--splits", default="test,heldout",
                        help="comma-separated splits of the embedded corpus (default: %(default)s)")
    parser.add_argument("--length-penalties", default="0.6",
                        help="comma-separated alphas for beam search (default: %(default)s)")
    args = parser.parse_args(argv)
    rows = measure(args.model, splits=tuple(args.splits.split(",")),
                   length_penalties=tuple(float(x) for x in args.length_penalties.split(",")))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(rows, f, indent=2)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown(rows))


if __name__ == "__main__":
    main()
