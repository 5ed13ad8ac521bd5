"""What a user waits for on a GPU, and where the time goes (issue 56, items 1 and 5).

    python -m benchmarks.gpu_user_wait --out DIR        # on a lent GPU (JAX), as a user runs the commands

Each step is a fresh process started as a user types the command, timed
from outside (start to exit), with `JAX_LOG_COMPILES=1` so that every XLA
compilation is logged with its seconds, and every line of its output
stamped with the seconds since the step began:

1. `train`, no flags (the GPU default), into a fresh `--run` folder: the
   wall, the compilations (seconds per function), the estimates the run
   printed, its summary (step time, MFU, dev BLEU);
2. `translate` of one sentence, twice: the first call ever (the engine's
   program written and compiled), then a second process (from the caches);
3. `evaluate --split test` (beam 4, 605 sentences, two references);
4. `benchmarks.translation_speed --loops engine`, twice: the 605 test
   sentences greedy and beam 4 in a first process (its first pass
   compiles the batch shapes) and a second (the compilation cache warm);
5. each `--variant "NAME=[VARIABLE=VALUE ...] [TRAIN FLAGS ...]"`: `train`
   again, into a folder of its own, with those environment variables (say
   `XLA_FLAGS=...`, or `KERAS_TRANSFORMER_CACHE_DIR=DIR` for an empty compilation
   cache) and flags, so that its compilations and times sit beside the
   first run's; in the order given.

`--train-flags` adds flags to every `train` (a miniature run on a CPU,
`tests/test_gpu_session_commands.py`). Writes `results.json`,
`results.md` and each step's stamped log (`NAME.log`) to `--out`; a step
that fails or outlasts its `--timeout` is reported as such and the next
one still runs; the results files are rewritten after each step.
"""

import argparse
import collections
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time

SENTENCE = "Y dijo Dios: Sea la luz; y fue la luz."
_COMPILED = re.compile(r"Finished XLA compilation of (.+?) in ([0-9.]+) ?s")
_TRACED = re.compile(r"Finished (?:tracing|jaxpr to MLIR module conversion) .+? in ([0-9.]+) ?s")
_CACHE_HIT = re.compile(r"[Pp]ersistent compilation cache hit for '?([^' ]+)")
_ESTIMATE = re.compile(r"time after virtual epoch \d+:.*")
_PHASES = re.compile(r"^time: (.*)$", re.MULTILINE)


def parse_args(argv=None):
    """The command line of `python -m benchmarks.gpu_user_wait`.

    Example:

    >>> args = parse_args(["--out", "/tmp/wait", "--variant", "explicit=--no-flash-attention"])
    >>> args.variant, args.steps
    (['explicit=--no-flash-attention'], ['train', 'translate', 'evaluate', 'speed', 'variant'])
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_user_wait", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for results.json, results.md and the logs")
    parser.add_argument("--run", default=None, help="the `train --output` folder (default: a fresh temporary one)")
    parser.add_argument("--train-flags", default="", help="more flags for every `train`, e.g. a miniature corpus")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=[VARIABLE=VALUE ...] [FLAGS ...]",
                        help="train again with these environment variables and flags (repeatable)")
    parser.add_argument("--steps", nargs="+", default=["train", "translate", "evaluate", "speed", "variant"],
                        choices=["train", "translate", "evaluate", "speed", "variant"])
    parser.add_argument("--speed-flags", default="", help="more flags for `benchmarks.translation_speed`")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a step may take (default: %(default)s)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for all the steps: each gets at most what is left, none starts with under 10")
    return parser.parse_args(argv)


def compilations(lines):
    """The XLA compilations a `JAX_LOG_COMPILES=1` log reports: seconds summed per function, and cache hits.

    Args:
        lines: the log's lines (stamped or not).

    Returns:
        dict: `count`, `seconds` (all of them), `by_function` (name ->
        [count, seconds], largest first), `cache_hits` and
        `tracing_seconds` (tracing and lowering to MLIR, before XLA).

    Example:

    >>> log = ["  3.1 Finished XLA compilation of jit(train_step) in 9.5 sec",
    ...        "  9.0 Finished XLA compilation of jit(train_step) in 2.5 sec",
    ...        " 10.2 Persistent compilation cache hit for 'jit_decode'",
    ...        " 10.3 Finished tracing decode for jit in 0.5 sec"]
    >>> found = compilations(log)
    >>> found["count"], found["seconds"], found["by_function"], found["cache_hits"], found["tracing_seconds"]
    (2, 12.0, {'jit(train_step)': [2, 12.0]}, 1, 0.5)
    """
    by_function = collections.defaultdict(lambda: [0, 0.0])
    hits, traced = 0, 0.0
    for line in lines:
        traced += sum(float(seconds) for seconds in _TRACED.findall(line))
        match = _COMPILED.search(line)
        if match:
            entry = by_function[match.group(1)]
            entry[0] += 1
            entry[1] = round(entry[1] + float(match.group(2)), 3)
        elif _CACHE_HIT.search(line):
            hits += 1
    ordered = dict(sorted(by_function.items(), key=lambda item: -item[1][1]))
    return {"count": sum(count for count, _ in ordered.values()),
            "seconds": round(sum(seconds for _, seconds in ordered.values()), 3),
            "by_function": ordered, "cache_hits": hits, "tracing_seconds": round(traced, 3)}


def variant_parts(variant):
    """`NAME=[VARIABLE=VALUE ...] [FLAGS ...]` as `(name, environment, flags)`.

    Example:

    >>> variant_parts("fresh=XDG_CACHE_HOME=/tmp/c XLA_FLAGS='--a=1 --b=2' --epochs 2")
    ('fresh', {'XDG_CACHE_HOME': '/tmp/c', 'XLA_FLAGS': '--a=1 --b=2'}, ['--epochs', '2'])
    """
    name, _, rest = variant.partition("=")
    words = shlex.split(rest)
    environment = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0], re.DOTALL):
        key, _, value = words.pop(0).partition("=")
        environment[key] = value
    return name, environment, words


def run_step(name, command, out, env=None, timeout=300):
    """Runs `command` as a fresh process, its output stamped into `out/NAME.log`; kills it after `timeout`.

    Args:
        name: the step's name (its log file's).
        command: list of arguments.
        out: the results folder.
        env: variables added to this process' environment.
        timeout: seconds before the process (and its children) are killed.

    Returns:
        dict: `command`, `seconds` (start to exit), `returncode` (None if
        killed), `lines` (the stamped output).

    Example:

    >>> step = run_step("echo", [sys.executable, "-c", "print('hi')"], tempfile.mkdtemp())
    >>> step["returncode"], step["lines"][-1].split()[-1]
    (0, 'hi')
    """
    environment = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    lines = []
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                               env=environment, start_new_session=True)

    def read():
        for line in process.stdout:  # universal newlines: a progress bar's "\r" ends a line too
            if line.strip():
                lines.append(f"{time.perf_counter() - start:7.1f} {line.rstrip()}")

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        returncode = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()
        returncode = None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, 9)
            process.wait()
    seconds = time.perf_counter() - start
    reader.join(timeout=10)
    with open(os.path.join(out, f"{name}.log"), "w") as log:
        log.write(f"$ {shlex.join(command)}\n" + "\n".join(lines) + "\n")
    return {"command": shlex.join(command), "seconds": round(seconds, 2), "returncode": returncode, "lines": lines}


def _read_json(path):
    try:
        with open(path) as file:
            return json.load(file)
    except (OSError, ValueError):
        return None


def _summary_of_train(step, run):
    summary = _read_json(os.path.join(run, "summary.json")) or {}
    keep = ("wall_seconds", "fit_seconds", "train_step_seconds", "mfu", "tokens_per_second", "dev_bleu", "kept",
            "completed_steps", "trained_steps_this_run", "device", "mixed_precision", "input_pipeline")
    return {"estimates": [_ESTIMATE.search(line).group(0) for line in step["lines"] if _ESTIMATE.search(line)],
            "first_step_at": next((float(line.split()[0]) for line in step["lines"] if re.search(r"\b1/\d+ ", line)),
                                  None),
            "summary": {key: summary.get(key) for key in keep}}


def main(argv=None):
    """Runs the steps and writes `results.json`, `results.md` and the logs to `--out`.

    Returns:
        0 if every step ran to a zero exit, else 1.
    """
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    run = args.run or tempfile.mkdtemp(prefix="gpu_user_wait_")
    cli = [sys.executable, "-m", "keras_transformer_cli"]
    logged = {"JAX_LOG_COMPILES": "1", "KERAS_TRANSFORMER_TIMINGS": "1", "KERAS_BACKEND": "jax"}
    results = {"run": run, "steps": {}, "skipped": []}
    deadline = time.perf_counter() + args.budget if args.budget else float("inf")

    def run_timed(name, command, env):
        left = deadline - time.perf_counter()
        if left < 10:
            results["skipped"].append(name)
            print(f"{name}: skipped, {left:.0f} s of the budget left", flush=True)
            return None
        return run_step(name, command, args.out, env, min(args.timeout, left))

    def record(name, step, **more):
        if step is not None:
            results["steps"][name] = {key: value for key, value in step.items() if key != "lines"} | {
                "compilations": compilations(step["lines"]), **more}
            print(f"{name}: {step['seconds']} s, exit {step['returncode']}", flush=True)
        # After every step: what a session's time limit cuts short is still reported.
        with open(os.path.join(args.out, "results.json"), "w") as file:
            json.dump(results, file, indent=1)
        with open(os.path.join(args.out, "results.md"), "w") as file:
            file.write(report(results))

    if "train" in args.steps:
        step = run_timed("train", cli + ["train", "--output", run, *shlex.split(args.train_flags)], logged)
        record("train", step, **(_summary_of_train(step, run) if step else {}))
    if "translate" in args.steps:
        for name in ("translate-first", "translate-again"):
            step = run_timed(name, cli + ["translate", "--model", run, SENTENCE], logged)
            phases = _PHASES.findall("\n".join(step["lines"])) if step else None
            record(name, step, phases=phases[-1] if phases else None)
    if "evaluate" in args.steps:
        step = run_timed("evaluate", cli + ["evaluate", "--model", run, "--split", "test"], logged)
        evaluation = _read_json(os.path.join(run, "evaluation-test-beam4-norepeat3.json")) or {}
        record("evaluate", step, evaluation={key: value for key, value in evaluation.items() if key != "translations"})
    if "speed" in args.steps:
        for name in ("speed-first", "speed-again"):
            folder = os.path.join(args.out, name)
            step = run_timed(name, [sys.executable, "-m", "benchmarks.translation_speed", "--model", run, "--loops",
                                    "engine", "--out", folder, *shlex.split(args.speed_flags)], logged)
            record(name, step, rows=_read_json(os.path.join(folder, "results.json")))
    if "variant" in args.steps:
        for variant in args.variant:
            name, environment, flags = variant_parts(variant)
            with tempfile.TemporaryDirectory(prefix="gpu_user_wait_variant_") as scratch:
                folder = os.path.join(scratch, "run")
                step = run_timed(f"variant-{name}", cli + ["train", "--output", folder,
                                                           *shlex.split(args.train_flags), *flags],
                                 dict(logged, **environment))
                record(f"variant-{name}", step, environment=environment, flags=flags,
                       **(_summary_of_train(step, folder) if step else {}))
    return 0 if all(step["returncode"] == 0 for step in results["steps"].values()) and not results["skipped"] else 1


def report(results):
    """`results.md`: a row per step (wall, exit, compilations), then each step's five costliest compilations.

    Example:

    >>> print(report({"steps": {"train": {"seconds": 60.0, "returncode": 0, "compilations": {
    ...     "count": 2, "seconds": 12.0, "by_function": {"jit(train_step)": [2, 12.0]}, "cache_hits": 0}}}}))
    | step | wall s | exit | XLA compilations | their seconds | tracing, lowering s | cache hits |
    |---|---:|---:|---:|---:|---:|---:|
    | train | 60.0 | 0 | 2 | 12.0 | 0 | 0 |
    <BLANKLINE>
    ## train: the costliest compilations
    <BLANKLINE>
    - jit(train_step): 2 x, 12.0 s
    <BLANKLINE>
    """
    lines = ["| step | wall s | exit | XLA compilations | their seconds | tracing, lowering s | cache hits |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, step in results["steps"].items():
        found = step["compilations"]
        lines.append(f"| {name} | {step['seconds']} | {step['returncode']} | {found['count']} | {found['seconds']} "
                     f"| {found.get('tracing_seconds', 0)} | {found['cache_hits']} |")
    if results.get("skipped"):
        lines += ["", f"Skipped, the budget spent: {', '.join(results['skipped'])}"]
    for name, step in results["steps"].items():
        top = list(step["compilations"]["by_function"].items())[:5]
        if top:
            lines += ["", f"## {name}: the costliest compilations", ""]
            lines += [f"- {function}: {count} x, {seconds} s" for function, (count, seconds) in top]
        for key in ("estimates", "summary", "phases", "rows", "evaluation"):
            if step.get(key):
                lines += ["", f"{name} {key}: `{json.dumps(step[key])}`"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
