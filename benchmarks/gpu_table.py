"""The whole GPU table of `benchmarks.run`, per backend, in at most two calls of a time budget each.

    python -m benchmarks.gpu_table --out $OUT --done benchmarks/results/gpu-h100-table   # on the GPU machine
    python -m benchmarks.gpu_table --dry-run     # the steps' commands and expected times, nothing run

Every step is one `benchmarks.run --process-per-implementation --resume`
(no process holds two models; a step cut short goes on where it stopped)
in bf16 (`--mixed-precision bfloat16`), decoding 256 new tokens, the uncached
loop timed for the tutorial only (the baseline of cached decoding; every
loop is one more compilation on JAX) on its first 32 steps. Expected on one
H100 (benchmarks/findings/gpu.md derives them from what was seen there: ~626k
training tokens/s at base@256 on JAX, ~205k on torch, the first JAX
training step of base compiling for about a minute; ~20 s of start-up per
process, ~20 s per forward-only program on JAX):

- `jax-base-256`, base@256 training, encoder inference (on the device;
  this package's also with its outputs copied to the host, one more
  program) and greedy decoding: 420 s (per implementation 60 s of them
  compiling the training step, 40 s the encoder and the decoding loop;
  20 s more for this package's second encoder);
- `torch-base-256`, the same on torch, eager: 150 s;
- `jax-big-512`, big@512 training: 310 s (60 s a compilation again);
- `torch-big-512`, the same on torch: 135 s.

About 1,015 s in all (about 815 s if JAX compiles in the ~30 s a program
of `benchmarks.gpu_check`'s training): two calls of the default
`--budget 510`. Each call runs the steps not done yet, in order, and stops
the one still running when its budget is spent (the step's process group
killed; the implementations it finished are kept). Between the calls,
copy the first call's `OUT` into the `--done` folder, which travels with
the repository: the second call copies it into its `OUT` and measures only
what is left. A step's output goes to `OUT/STEP/log.txt`, its results to
`OUT/STEP/results.{json,md}` (each implementation's in
`OUT/STEP/IMPLEMENTATION/`), the summary of all steps to
`OUT/gpu_table.{json,md}`.

Only the standard library is imported here: TensorFlow is not needed (the
harness feeds `fit` NumPy arrays when TensorFlow is absent), and this
process never touches the GPU. JAX steps run with
`XLA_PYTHON_CLIENT_MEM_FRACTION=0.9` (unless set): JAX's default pool, 75 %
of the GPU (~59 GiB on an H100), is about what big@512's training step
asked for (a 55.9 GiB buffer).
"""

import argparse
import dataclasses
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from benchmarks.per_process import REPOSITORY
from benchmarks.per_process import stop_process_group

# benchmarks.reference_models.IMPLEMENTATIONS (not imported: it imports Keras).
IMPLEMENTATIONS = ("keras_transformer", "keras_hub", "tutorial")
# Options of every step: the bf16 and 256 new tokens; of the uncached
# loops only the tutorial's, the baseline of cached decoding (each loop is one
# more compilation on JAX).
COMMON = ("--mixed-precision", "bfloat16", "--new-tokens", "256")
# Of the encoders with their whole outputs copied to the host (what issue 13's
# table timed), only this package's: one more compilation each on JAX.
SHARED = ("--uncached-implementations", "tutorial", "--encode-to-host-implementations", "keras_transformer",
          "--process-per-implementation", "--resume")
# A step started with less budget left than this could not finish one implementation.
MIN_START_SECONDS = 60


@dataclasses.dataclass(frozen=True)
class Step:
    """One `benchmarks.run` of the table.

    Attributes:
        name: str, also the folder of its results under `--out`.
        backend: `"jax"` or `"torch"`, its `KERAS_BACKEND`.
        config: str, `--config`.
        seq_len: int, `--seq-len`.
        phases: tuple of str, `--phases`.
        expected_seconds: int, what it should take on one H100 (see above).
    """

    name: str
    backend: str
    config: str
    seq_len: int
    phases: tuple
    expected_seconds: int


ALL_PHASES = ("train", "encode", "decode")
STEPS = (
    Step("jax-base-256", "jax", "base", 256, ALL_PHASES, 420),
    Step("torch-base-256", "torch", "base", 256, ALL_PHASES, 150),
    Step("jax-big-512", "jax", "big", 512, ("train",), 310),
    Step("torch-big-512", "torch", "big", 512, ("train",), 135),
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_table", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_table", help="folder of the steps' results (default: %(default)s)")
    parser.add_argument("--done", help="folder of an earlier call's results: copied into --out, its finished "
                                       "steps and implementations not measured again")
    parser.add_argument("--budget", type=float, default=510,
                        help="seconds this call may take; the step running at the end is stopped "
                             "(default: %(default)s)")
    parser.add_argument("--steps", nargs="+", choices=[step.name for step in STEPS],
                        default=[step.name for step in STEPS], help="steps to run, in the table's order")
    parser.add_argument("--quick", action="store_true",
                        help="every step on `benchmarks.run --quick` sizes, float32: a smoke test of the driver")
    parser.add_argument("--dry-run", action="store_true", help="print the steps' commands, run nothing")
    return parser.parse_args(argv)


def step_command(step, out, quick=False):
    """The command line of `step`, writing to `out/step.name`.

    Example:

    >>> step_command(STEPS[2], "/o")[3:]
    ['--config', 'big', '--seq-len', '512', '--phases', 'train', '--mixed-precision', 'bfloat16', \
'--new-tokens', '256', '--uncached-implementations', 'tutorial', '--encode-to-host-implementations', \
'keras_transformer', '--process-per-implementation', '--resume', '--out', '/o/jax-big-512']
    """
    sizes = ["--quick"] if quick else ["--config", step.config, "--seq-len", str(step.seq_len)]
    arguments = [*sizes, "--phases", *step.phases, *(() if quick else COMMON), *SHARED]
    return [sys.executable, "-m", "benchmarks.run", *arguments, "--out", os.path.join(out, step.name)]


def step_state(folder):
    """What a step's folder holds: `"done"`, `"incomplete"` or `"not run"`, and the failures.

    A step is done when every implementation was measured or failed (an
    out-of-memory is not retried); a step stopped by the budget is
    incomplete.

    Returns:
        `(state, failed)`: str and a dict `{implementation: reason}`.
    """
    try:
        with open(os.path.join(folder, "results.json")) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return "not run", {}
    failed = report["meta"].get("failed", {})
    measured = {row["implementation"] for row in report["results"]}
    missing = set(IMPLEMENTATIONS) - measured - set(failed)
    return ("incomplete" if missing else "done"), failed


def _environment(step):
    environment = dict(os.environ, KERAS_BACKEND=step.backend)
    if step.backend == "jax":
        environment.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9")
    return environment


def run_step(command, environment, folder, seconds):
    """Runs `command` for at most `seconds`, its output appended to `folder/log.txt`.

    Returns:
        `(exit code or None when stopped, seconds taken)`.
    """
    os.makedirs(folder, exist_ok=True)
    started = time.perf_counter()
    with open(os.path.join(folder, "log.txt"), "a") as log:
        log.write(f"\n=== {datetime.datetime.now().isoformat(timespec='seconds')}: {' '.join(command)}\n")
        log.flush()
        process = subprocess.Popen(command, cwd=REPOSITORY, env=environment, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            code = process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            stop_process_group(process)
            code = None
            log.write(f"=== stopped after {seconds:.0f} s: the call's budget is spent\n")
        except BaseException:  # interrupted, or terminated (see main): never leave a step holding the GPU
            stop_process_group(process)
            raise
    return code, time.perf_counter() - started


def _print(text):
    print(text, flush=True)


def run_steps(steps, out, budget, command=step_command, environment=_environment, log=_print,
              min_start=MIN_START_SECONDS):
    """Runs the steps not yet done, in order, until `budget` seconds are spent.

    Args:
        steps: list of `Step`.
        out: str, folder; each step writes to `out/step.name`.
        budget: float, seconds for all of them.
        command: function `(step, out) -> list of str`.
        environment: function `step -> dict` of environment variables.
        log: function printing progress.
        min_start: seconds; a step is not started with less budget left.

    Returns:
        list of dicts, one per step: `step`, `backend`, `command`, `state`
        (`"done"`, `"incomplete"`, `"not run"`), `failed`, `seconds` (this
        call), `note`.
    """
    started = time.perf_counter()
    summary = []
    for step in steps:
        folder = os.path.join(out, step.name)
        line = command(step, out)
        entry = dict(step=step.name, backend=step.backend, command=f"KERAS_BACKEND={step.backend} python "
                     + " ".join(line[1:]), seconds=0.0, note="")
        state, failed = step_state(folder)
        left = budget - (time.perf_counter() - started)
        if state == "done":
            entry["note"] = "done in an earlier call"
        elif left < min_start:
            entry["note"] = f"not started: {max(left, 0):.0f} s of the budget left"
        else:
            log(f"[gpu_table] {step.name}: {entry['command']} (expected ~{step.expected_seconds} s, "
                f"{left:.0f} s left)")
            code, entry["seconds"] = run_step(line, environment(step), folder, left)
            state, failed = step_state(folder)
            entry["note"] = ("stopped by the budget" if code is None else
                             f"exit code {code}" if code else "")
            log(f"[gpu_table] {step.name}: {state} in {entry['seconds']:.0f} s {entry['note']}")
        summary.append(dict(entry, state=state, failed=failed))
    return summary


def markdown_summary(summary, out):
    """The calls' summary: one row per step, then each step's `results.md`."""
    lines = ["| step | state | seconds (this call) | note | command |", "|---|---|---:|---|---|"]
    for entry in summary:
        note = "; ".join(filter(None, [entry["note"]] + [f"`{k}` failed: {v}" for k, v in entry["failed"].items()]))
        lines.append(f"| `{entry['step']}` | {entry['state']} | {entry['seconds']:.0f} | {note} | "
                     f"`{entry['command']}` |")
    for entry in summary:
        path = os.path.join(out, entry["step"], "results.md")
        if os.path.exists(path):
            with open(path) as f:
                lines += ["", f"## `{entry['step']}`", "", f.read().rstrip()]
    return "\n".join(lines) + "\n"


def _device_description(out):
    try:
        text = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv"],
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return
    with open(os.path.join(out, "device.txt"), "w") as f:
        f.write(text)


def main(argv=None):
    """Entry point of `python -m benchmarks.gpu_table`; returns 0 when every step is done."""
    args = parse_args(argv)
    out = os.path.abspath(args.out)
    steps = [step for step in STEPS if step.name in args.steps]
    command = (lambda step, folder: step_command(step, folder, quick=args.quick))
    if args.dry_run:
        for step in steps:
            print(f"KERAS_BACKEND={step.backend} python {' '.join(command(step, out)[1:])}  "
                  f"# expected ~{step.expected_seconds} s")
        print(f"expected in all: ~{sum(step.expected_seconds for step in steps) / 60:.1f} min")
        return 0
    os.makedirs(out, exist_ok=True)
    # `timeout` or the machine's time limit sends SIGTERM to this process only:
    # exit through run_step, which stops the running step's process group.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.done and os.path.isdir(args.done) and os.path.abspath(args.done) != out:
        for step in steps:
            if os.path.isdir(os.path.join(args.done, step.name)):
                shutil.copytree(os.path.join(args.done, step.name), os.path.join(out, step.name), dirs_exist_ok=True)
    _device_description(out)
    summary = run_steps(steps, out, args.budget, command=command)
    with open(os.path.join(out, "gpu_table.json"), "w") as f:
        json.dump(dict(date=datetime.datetime.now().isoformat(timespec="seconds"), budget=args.budget,
                       steps=summary), f, indent=2)
    table = markdown_summary(summary, out)
    with open(os.path.join(out, "gpu_table.md"), "w") as f:
        f.write(table)
    print(table)
    left = [entry["step"] for entry in summary if entry["state"] != "done"]
    if left:
        print(f"[gpu_table] not done: {', '.join(left)}. Copy {out}/* into the --done folder and run the same "
              "command again.", flush=True)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
