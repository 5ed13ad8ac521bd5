"""What a user waits for around the work: each verb's whole command, cold and warm, and where its time goes.

    python -m benchmarks.verb_wait --model runs/es-en --out benchmarks/results/cpu-verb-wait
    python -m benchmarks.verb_wait --model runs/es-en --before OLD_CHECKOUT --out DIR   # and the code before

Each row is one command as a user types it, started as a fresh process and
timed from outside (start to exit: the wait), `--repeats` times; the table
gives the median wall (min-max) and the median of each phase the command
reports with `KERAS_TRANSFORMER_TIMINGS=1` (`keras_transformer_runtime.timings`:
start, import, load, compile, work, write, other). Rows:

- `translate` of one sentence: the default engine (compiled, the program
  cache in a fresh folder: *first* is the first call ever, *again* the
  later ones), and `--engine keras` under each Keras backend;
- the CTranslate2 anchor: the same sentence through the run's CTranslate2
  export (`ctranslate2` and `sentencepiece` only, as docs/translating.md
  shows), a fresh Python process each time;
- `evaluate --split test` (605 sentences, beam 4): default engine, and
  `--engine keras` per backend;
- `export` (SavedModel, and `--format ctranslate2`) and the start of
  `train` (one step of one virtual epoch, no dev BLEU) per backend: what
  comes before the work.

With `--before CHECKOUT` the translate and evaluate rows also run on an
older checkout (`PYTHONPATH`; its CLI has no `--engine`: it runs Keras on
the backend), in turn with this one, so before and after share the machine
and the hour. Writes `results.json` and `results.md` to `--out`.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

SENTENCE = "Y dijo Dios: Sea la luz; y fue la luz."
BACKENDS = ("tensorflow", "jax", "torch")
PHASES = ("start", "import", "load", "compile", "work", "write", "other")
_TIME_LINE = re.compile(r"time: (.*)$", re.MULTILINE)
_CTRANSLATE2_SCRIPT = """
import sys, ctranslate2, sentencepiece
folder, text = sys.argv[1], sys.argv[2]
processor = sentencepiece.SentencePieceProcessor(model_file=folder + "/vocabulary.spm")
translator = ctranslate2.Translator(folder, device="cpu")
pieces = processor.encode(text, out_type=str)
result = translator.translate_batch([pieces], beam_size=4, no_repeat_ngram_size=3,
                                    suppress_sequences=[["<pad>"], ["<s>"]])
print(processor.decode(result[0].hypotheses[0]))
"""


def parse_args(argv=None):
    """The command line of `python -m benchmarks.verb_wait`.

    Example:

    >>> args = parse_args(["--model", "runs/es-en"])
    >>> args.repeats, args.verbs
    (5, ['translate', 'evaluate', 'export', 'train'])
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.verb_wait", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a `keras-transformer train` output folder")
    parser.add_argument("--out", default="results/verb-wait", help="folder for results.json and results.md")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each translate row (default: %(default)s)")
    parser.add_argument("--evaluate-repeats", type=int, default=3, help="runs of each evaluate row")
    parser.add_argument("--verbs", nargs="+", default=["translate", "evaluate", "export", "train"],
                        choices=["translate", "evaluate", "export", "train"])
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--before", help="an older checkout to run the translate and evaluate rows on too")
    return parser.parse_args(argv)


def phases_of(stderr):
    """The phases of the last `time:` line a command printed, as a dict of seconds (empty if none).

    Example:

    >>> phases_of("x\\nkeras-transformer: time: start 0.03 s, import 0.32 s, wall 1.02 s\\n")
    {'start': 0.03, 'import': 0.32, 'wall': 1.02}
    """
    lines = _TIME_LINE.findall(stderr)
    if not lines:
        return {}
    pairs = (part.strip().split() for part in lines[-1].split(","))
    return {name: float(value) for name, value, _ in pairs}


def run_command(argv, env, timeout=900, cwd=None):
    """Runs one command as a fresh process: `(wall_seconds, phases, stdout, returncode)`.

    `cwd`: where it runs; `python -m` puts that folder first on the path,
    before PYTHONPATH, so an older checkout runs from its own folder.
    """
    start = time.perf_counter()
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    wall = time.perf_counter() - start
    if result.returncode:
        print(result.stderr[-2000:], file=sys.stderr)
    return wall, phases_of(result.stderr), result.stdout, result.returncode


def _env(backend=None, cache=None, pythonpath=None):
    env = {**os.environ, "KERAS_TRANSFORMER_TIMINGS": "1"}
    env.pop("KERAS_BACKEND", None)
    if backend:
        env["KERAS_BACKEND"] = backend
    if cache:
        env["KERAS_TRANSFORMER_CACHE_DIR"] = cache
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    return env


def summarize(label, runs):
    """One table row from runs of `run_command`: medians of the wall and of each phase."""
    walls = [wall for wall, _, _, _ in runs]
    row = {"row": label, "runs": len(runs), "wall": statistics.median(walls), "wall_min": min(walls),
           "wall_max": max(walls), "failed": sum(code != 0 for _, _, _, code in runs),
           "output": runs[-1][2].strip()[:200]}
    for name in PHASES:
        values = [phases.get(name) for _, phases, _, _ in runs if name in phases]
        row[name] = statistics.median(values) if values else None
    return row


def _cli(*args):
    return [sys.executable, "-m", "keras_transformer_cli", *args]


def translate_rows(args, cache):
    rows = []
    first = run_command(_cli("translate", "--model", args.model, SENTENCE), _env(cache=cache))
    rows.append(summarize("translate, default engine (compiled), first call", [first]))
    again = [run_command(_cli("translate", "--model", args.model, SENTENCE), _env(cache=cache))
             for _ in range(args.repeats)]
    rows.append(summarize("translate, default engine (compiled), again", again))
    for backend in args.backends:
        after, before = [], []
        for _ in range(args.repeats):
            after.append(run_command(_cli("translate", "--engine", "keras", "--model", args.model, SENTENCE),
                                     _env(backend, cache)))
            if args.before:
                before.append(run_command(_cli("translate", "--model", args.model, SENTENCE),
                                          _env(backend, pythonpath=args.before), cwd=args.before))
        rows.append(summarize(f"translate, --engine keras, {backend}", after))
        if before:
            rows.append(summarize(f"translate before (Keras), {backend}", before))
    with tempfile.TemporaryDirectory() as folder:
        exported = os.path.join(folder, "ct2")
        run_command(_cli("export", "--format", "ctranslate2", "--model", args.model, "--out", exported), _env())
        anchor = [run_command([sys.executable, "-c", _CTRANSLATE2_SCRIPT, exported, SENTENCE], _env())
                  for _ in range(args.repeats)]
    rows.append(summarize("CTranslate2 export, ctranslate2 + sentencepiece alone", anchor))
    return rows


def evaluate_rows(args, cache):
    command = ("evaluate", "--model", args.model, "--split", "test")
    rows = [summarize("evaluate test, default engine (compiled), first call",
                      [run_command(_cli(*command), _env(cache=cache))]),
            summarize("evaluate test, default engine (compiled), again",
                      [run_command(_cli(*command), _env(cache=cache)) for _ in range(args.evaluate_repeats)])]
    for backend in args.backends:
        rows.append(summarize(f"evaluate test, --engine keras, {backend}",
                              [run_command(_cli(*command, "--engine", "keras"), _env(backend, cache))
                               for _ in range(args.evaluate_repeats)]))
        if args.before:
            rows.append(summarize(f"evaluate test before (Keras), {backend}",
                                  [run_command(_cli(*command), _env(backend, pythonpath=args.before),
                                               cwd=args.before) for _ in range(args.evaluate_repeats)]))
    return rows


def export_rows(args, cache):
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for number, (label, extra) in enumerate((("export SavedModel", ()),
                                                 ("export --format ctranslate2", ("--format", "ctranslate2")))):
            out = os.path.join(folder, f"out-{number}")
            rows.append(summarize(label, [run_command(_cli("export", "--model", args.model, "--out", out, *extra),
                                                      _env(cache=cache))]))
    return rows


def train_rows(args, cache):
    rows = []
    for backend in args.backends:
        with tempfile.TemporaryDirectory() as folder:
            command = _cli("train", "--output", os.path.join(folder, "run"), "--epochs", "1", "--steps-per-epoch",
                           "1", "--dev-bleu-sentences", "0")
            rows.append(summarize(f"train to its first step, {backend}", [run_command(command, _env(backend))]))
    return rows


def write_table(rows, header, out):
    """`results.md`: the rows as a Markdown table, seconds."""
    def cell(value):
        return "" if value is None else f"{value:.2f}"

    lines = [header, "", "| command | runs | wall s, median (min-max) | " + " | ".join(PHASES) + " |",
             "|---|---:|---:|" + "---:|" * len(PHASES)]
    for row in rows:
        spread = f"{row['wall']:.2f} ({row['wall_min']:.2f}-{row['wall_max']:.2f})"
        failed = f", {row['failed']} failed" if row["failed"] else ""
        lines.append(f"| {row['row']} | {row['runs']}{failed} | {spread} | "
                     + " | ".join(cell(row[name]) for name in PHASES) + " |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "results.md"), "w") as file:
        file.write(text)
    return text


def main(argv=None):
    args = parse_args(argv)
    args.model = os.path.abspath(args.model)
    args.before = args.before and os.path.abspath(args.before)
    from keras_transformer.machine import describe_cpu

    os.makedirs(args.out, exist_ok=True)
    header = (f"# What the user waits for, per verb\n\n{describe_cpu()}; "
              f"{time.strftime('%Y-%m-%d', time.gmtime())}; `python -m benchmarks.verb_wait "
              f"{' '.join(argv if argv is not None else sys.argv[1:])}`. Wall: start to exit, from outside; "
              "phases: the command's own `time:` line (medians).")
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for verb in args.verbs:
            rows += {"translate": translate_rows, "evaluate": evaluate_rows, "export": export_rows,
                     "train": train_rows}[verb](args, cache)
            with open(os.path.join(args.out, "results.json"), "w") as file:
                json.dump(rows, file, indent=2, ensure_ascii=False)
    print(write_table(rows, header, args.out))


if __name__ == "__main__":
    main()
