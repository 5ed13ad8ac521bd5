"""The compiled engine of several checkouts, timed in turn on the same machine: before/after for one change at a time.

    git worktree add /tmp/before COMMIT
    python -m benchmarks.engine_before_after --model runs/es-en --checkouts before=/tmp/before after=. \\
        --rounds 2 --out DIR

For each round, beam width and checkout (in that order, so the checkouts
alternate and a drifting machine hits them alike), a fresh process with
`PYTHONPATH=CHECKOUT` loads the run's compiled engine the way `translate`
does (`load_compiled_translator`; a program missing from the cache is
written by a child `keras-transformer translate` of that checkout, since a
checkout's programs are keyed by its source), translates all `--sentences`
test sentences once (compiling what it meets), then `--passes` more times,
in one call or in calls of `--calls-of` sentences (quantized with
`--quantize`, cut at `--max-new-tokens`).
A row is the median of those passes: translating alone, tokenizing
included. The translations of every process are compared with the first
checkout's: a change must not change a token. Writes `results.json` and
`results.md` to `--out`.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

# Run in each checkout's process: only what every checkout since the engine has.
MEASURE = r"""
import json, sys, time
from keras_transformer_cli.serve import write_program_in_a_child
from keras_transformer_runtime.compiled_translator import load_compiled_translator
from keras_transformer_runtime.program_cache import ProgramCache
from keras_transformer.data.corpus import load_bible_pairs
model, beam, sentences, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
calls_of = sys.argv[5] if len(sys.argv) > 5 else "all"
options = {"quantize": sys.argv[6]} if len(sys.argv) > 6 and sys.argv[6] != "none" else {}
if len(sys.argv) > 7 and sys.argv[7] != "none":
    options["max_new_tokens"] = int(sys.argv[7])
sources = [pair.source for pair in load_bible_pairs("test")][:sentences]
translator = load_compiled_translator(model, ProgramCache(), beam_width=beam, write=write_program_in_a_child,
                                      **options)
size = {"all": len(sources), "batch": translator.batch_size}.get(calls_of) or int(calls_of)
def translate():
    return [text for start in range(0, len(sources), size) for text in translator(sources[start:start + size])]
translations = translate()
seconds = []
for _ in range(passes):
    start = time.perf_counter()
    again = translate()
    seconds.append(time.perf_counter() - start)
    assert again == translations, "a pass translated differently"
print("RESULT " + json.dumps({"seconds": seconds, "translations": translations}))
"""


def parse_args(argv=None):
    """The command line of `python -m benchmarks.engine_before_after`.

    Example:

    >>> args = parse_args(["--model", "runs/es-en", "--checkouts", "before=/tmp/b", "after=."])
    >>> args.checkouts, args.beams, args.rounds, args.passes
    ([('before', '/tmp/b'), ('after', '.')], [1, 4], 2, 5)
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine_before_after",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a `keras-transformer train` output folder")
    parser.add_argument("--checkouts", nargs="+", required=True, type=_checkout,
                        help="LABEL=FOLDER of each checkout (the first is the reference)")
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--rounds", type=int, default=2, help="times each checkout is measured (default: %(default)s)")
    parser.add_argument("--passes", type=int, default=5, help="timed passes a process (default: %(default)s)")
    parser.add_argument("--sentences", type=int, default=605)
    parser.add_argument("--calls-of", default="all",
                        help='sentences a call: "all" (one call), "batch" (the engine\'s batch size: 8 greedy, '
                             '4 beam on a CPU, as a server\'s requests) or a number (default: %(default)s)')
    parser.add_argument("--quantize", default="none", help='"none" or a Keras quantization mode ("int8")')
    parser.add_argument("--max-new-tokens", default="none",
                        help='"none" (the model\'s positions less one) or the longest translation in tokens')
    parser.add_argument("--timeout", type=float, default=900, help="seconds a process may take")
    parser.add_argument("--out", default="benchmark_results/engine_before_after")
    return parser.parse_args(argv)


def _checkout(text):
    label, separator, folder = text.partition("=")
    if not separator or not label or not folder:
        raise argparse.ArgumentTypeError(f"expected LABEL=FOLDER, got {text!r}")
    return label, folder


def measure_once(model, folder, beam, sentences, passes, timeout, calls_of="all", quantize="none",
                 max_new_tokens="none"):
    """`(seconds of each pass, translations)` of one process of the checkout in `folder`."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(folder)}
    done = subprocess.run([sys.executable, "-c", MEASURE, model, str(beam), str(sentences), str(passes), calls_of,
                           quantize, str(max_new_tokens)],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=os.path.abspath(folder))
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"{folder}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    return result["seconds"], result["translations"]


def markdown(rows):
    """The rows as a Markdown table, each checkout's median sentences/s against the first's.

    Example:

    >>> rows = [dict(label="before", beam=4, round=1, sentences=10, median_seconds=2.0, same_translations=True),
    ...         dict(label="after", beam=4, round=1, sentences=10, median_seconds=1.0, same_translations=True)]
    >>> print(markdown(rows))
    | beam | checkout | sentences/s, each round | median | against the first | same translations |
    |---:|---|---|---:|---:|---|
    | 4 | before | 5.0 | 5.0 | 1.00x | yes |
    | 4 | after | 10.0 | 10.0 | 2.00x | yes |
    <BLANKLINE>
    """
    lines = ["| beam | checkout | sentences/s, each round | median | against the first | same translations |",
             "|---:|---|---|---:|---:|---|"]
    for beam in sorted({row["beam"] for row in rows}):
        labels = list(dict.fromkeys(row["label"] for row in rows if row["beam"] == beam))
        rates = {label: [row["sentences"] / row["median_seconds"] for row in rows
                         if row["beam"] == beam and row["label"] == label] for label in labels}
        first = statistics.median(rates[labels[0]])
        for label in labels:
            same = all(row["same_translations"] for row in rows if row["beam"] == beam and row["label"] == label)
            median = statistics.median(rates[label])
            lines.append(f"| {beam} | {label} | {', '.join(f'{rate:.1f}' for rate in rates[label])} | {median:.1f} | "
                         f"{median / first:.2f}x | {'yes' if same else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    rows, reference = [], {}
    for number in range(1, args.rounds + 1):
        for beam in args.beams:
            for label, folder in args.checkouts:
                seconds, translations = measure_once(os.path.abspath(args.model), folder, beam, args.sentences, args.passes,
                                                     args.timeout, args.calls_of, args.quantize,
                                                     args.max_new_tokens)
                reference.setdefault(beam, translations)
                row = dict(label=label, folder=folder, beam=beam, round=number, sentences=len(translations),
                           calls_of=args.calls_of, quantize=args.quantize, max_new_tokens=args.max_new_tokens,
                           seconds=[round(value, 4) for value in seconds],
                           median_seconds=round(statistics.median(seconds), 4),
                           same_translations=translations == reference[beam])
                print(json.dumps(row), flush=True)
                rows.append(row)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as file:
        json.dump(rows, file, indent=1)
    with open(os.path.join(args.out, "results.md"), "w") as file:
        file.write(markdown(rows))
    print(markdown(rows))
    if not all(row["same_translations"] for row in rows):
        raise SystemExit("Some translations changed: see same_translations in results.json.")


if __name__ == "__main__":
    main()
