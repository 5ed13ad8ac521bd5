"""`benchmarks.run` with each implementation measured in its own process, the results merged.

    python -m benchmarks.run --config big --seq-len 512 --mixed-precision bfloat16 --process-per-implementation

Why, and how the merged report reads: benchmarks/findings/training-speed.md,
"What `benchmarks.run` measures" (no process ever holds two models, and
JAX cannot reset its allocator's peak between two). Each implementation
runs as `python -m benchmarks.run <the same arguments> --implementations
NAME --no-process-per-implementation --out OUT/NAME`, one after the other;
after each, the rows so far are merged into `OUT/results.json` and
`OUT/results.md`, so a run stopped half-way keeps what it measured. A
failed process is reported as not measured, with the last line of its
output; `--resume` keeps an implementation whose `OUT/NAME/results.json`
came from the same arguments (`--out` aside).

Only the standard library is imported here: the parent process never
touches the GPU.
"""

import collections
import glob
import json
import os
import pathlib
import signal
import subprocess
import sys

from benchmarks.report import save_results
from benchmarks.report import write_report

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]


def stop_process_group(process, wait=5.0):
    """Stops a process started with `start_new_session=True` and everything it started.

    SIGTERM to its process group, then SIGKILL if it has not ended within
    `wait` seconds; returns once it is reaped (or `wait` after SIGKILL).
    """
    for sent in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sent)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def gpu_visible():
    """Whether an NVIDIA GPU is visible, asked of the system, not of a backend.

    Asking JAX would start its GPU client, which reserves most of the
    GPU's memory for this process; the processes doing the work need it.

    Returns:
        bool: a `/dev/nvidiaN` device exists and `CUDA_VISIBLE_DEVICES` does
        not hide every GPU (nor `JAX_PLATFORMS=cpu` under JAX).

    Example:

    >>> isinstance(gpu_visible(), bool)
    True
    """
    if os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return False
    if os.environ.get("KERAS_BACKEND") == "jax" and os.environ.get("JAX_PLATFORMS", "").strip() == "cpu":
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def without_out(argv):
    """`argv` without `--out FOLDER` / `--out=FOLDER` and `--resume`: what makes two runs the same.

    Example:

    >>> without_out(["--quick", "--out", "/tmp/a", "--resume", "--repeats", "1", "--out=/tmp/b"])
    ['--quick', '--repeats', '1']
    """
    kept, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == "--out":
            skip = True
        elif not item.startswith("--out=") and item != "--resume":
            kept.append(item)
    return kept


def child_arguments(argv, implementation):
    """The command line of the process measuring `implementation` alone, `--out` left to add.

    Example:

    >>> child_arguments(["--quick", "--out", "/tmp/b"], "tutorial")
    ['--quick', '--implementations', 'tutorial', '--no-process-per-implementation']
    """
    # argparse keeps the last --implementations given.
    return [*without_out(argv), "--implementations", implementation, "--no-process-per-implementation"]


def _stream(command, lines_kept=20):
    """Runs `command` from the repository root, passing its output through; returns (exit code, last lines)."""
    tail = collections.deque(maxlen=lines_kept)
    with subprocess.Popen(command, cwd=REPOSITORY, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace") as process:
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if line.strip():
                tail.append(line.rstrip())
    return process.returncode, list(tail)


def _load(folder):
    try:
        with open(os.path.join(folder, "results.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _why(code, tail):
    """A one-line reason for a failed process: its exit code and the last line that names an error."""
    errors = [line for line in tail if "Error" in line or "error" in line or "out of memory" in line.lower()]
    last = (errors or tail or ["no output"])[-1].strip()
    return f"exit code {code}: {last[:300]}"


def run_per_process(args, log=print, launch=None):
    """Measures each of `args.implementations` in its own process; merges their results into `args.out`.

    Args:
        args: from `benchmarks.run.parse_args`.
        log: function printing progress.
        launch: function `command -> (exit code, last lines of output)`
            running a child's command line; defaults to a new process.

    Returns:
        The merged report, as written to `args.out/results.json`; its
        `meta.failed` maps an implementation not measured to the reason.
    """
    out = os.path.abspath(args.out)
    meta, results, failed = None, [], {}
    report = None
    for implementation in args.implementations:
        folder = os.path.join(out, implementation)
        arguments = child_arguments(args.argv, implementation)
        part = _load(folder) if args.resume else None
        if part is not None and without_out(part["meta"].get("arguments", [])) == arguments:
            log(f"[{implementation}] kept from {folder}/results.json (--resume)")
        else:
            command = [sys.executable, "-m", "benchmarks.run", *arguments, "--out", folder]
            log(f"[{implementation}] {' '.join(command)}")
            if os.path.exists(os.path.join(folder, "results.json")):
                os.remove(os.path.join(folder, "results.json"))  # never merge a stale one
            code, tail = (launch or _stream)(command)
            part = _load(folder) if code == 0 else None
            if part is None:
                failed[implementation] = _why(code, tail)
                log(f"[{implementation}] not measured: {failed[implementation]}")
        if part is not None:
            meta = meta or part["meta"]
            results += part["results"]
        if meta is not None:
            report = dict(
                meta=dict(meta, arguments=args.argv, implementations=list(args.implementations),
                          process_per_implementation=True, failed=dict(failed)),
                results=results,
            )
            table = write_report(report, out)
    if report is None:  # every process failed: nothing to tabulate
        report = dict(meta=dict(arguments=args.argv, implementations=list(args.implementations),
                                process_per_implementation=True, failed=failed), results=[])
        save_results(report, "Not measured: " + "; ".join(f"`{k}`: {v}" for k, v in failed.items()) + "\n",
                             out)
        return report
    print(table)
    print(f"written to {os.path.join(out, 'results.json')} and results.md", flush=True)
    return report
