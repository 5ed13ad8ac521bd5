"""Several training recipes at once on one device: `benchmarks.preset_ablation` variants, each in its own process.

    python -m benchmarks.recipe_race --out $OUT/race --budget 480 \\
        --base "preset=base,epochs=6,steps_per_epoch=250,batch_tokens=8192" \\
        --variant "jax/d03-w1k:dropout=0.3,warmup_steps=1000" \\
        --variant "torch/d03-w1k-torch:dropout=0.3,warmup_steps=1000"

A GPU is lent for minutes, not hours, and one recipe's training leaves most
of it idle (the base model's step is bound by the host, not the GPU:
benchmarks/findings/gpu.md). So the variants run side by side, each as
`KERAS_BACKEND=BACKEND python -m benchmarks.preset_ablation --prune` in
its own process group, folder and log (`OUT/NAME/`, `OUT/NAME.log`), JAX
without preallocating the GPU's memory. Every process is stopped when the
budget is spent, whatever happens to this one.

Every variant's folder is pruned at the end (models, backups,
checkpoints), so that what is left travels back from a device call.
Scores are the runs' own (a run's steps do not depend on the load); their
wall times are upper bounds of a run alone, which `race.md` says. Writes
`race.json` (each variant's row from its `ablation.json`, with its backend,
state and seconds from start to exit) and `race.md` to `--out`.

Only the standard library is imported here: this process never touches the
device.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

from benchmarks.per_process import REPOSITORY
from benchmarks.per_process import stop_process_group

BACKENDS = ("jax", "torch", "tensorflow")
# keras_transformer.training.run_folder's BACKUP_FOLDER, CHECKPOINT_FOLDER and
# MODEL_FILE (not imported: it imports Keras; a test checks they agree). A
# variant that failed or was stopped keeps them, and the base model's backup
# alone is over what a device call may send back (16 MiB a file).
HEAVY_FOLDERS = ("backup", "checkpoints")
HEAVY_FILES = ("model.keras",)


def parse_variant(text, default_backend="jax"):
    """`"[BACKEND/]NAME:field=value,..."` -> `(backend, name, settings text)`.

    Example:

    >>> parse_variant("torch/small:preset=small")
    ('torch', 'small', 'preset=small')
    >>> parse_variant("base:")
    ('jax', 'base', '')
    """
    head, separator, settings = text.partition(":")
    backend, _, name = head.rpartition("/")
    backend = backend or default_backend
    if not separator or not name:
        raise SystemExit(f"--variant {text!r}: expected [BACKEND/]NAME:field=value,...")
    if backend not in BACKENDS:
        raise SystemExit(f"--variant {text!r}: backend must be one of {', '.join(BACKENDS)}")
    return backend, name, settings


def _environment(backend):
    environment = dict(os.environ, KERAS_BACKEND=backend, PYTHONUNBUFFERED="1")
    if backend == "jax":
        # Several JAX processes share the GPU: none may take 75 % of it up front.
        environment.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return environment


def ablation_command(name, settings, base, out):
    """The command that trains and scores one variant in `out/name`, pruned once scored.

    Example:

    >>> ablation_command("tiny", "epochs=2", "preset=tiny", "out")[2:6]
    ['benchmarks.preset_ablation', '--prune', '--out', 'out/tiny']
    """
    return [sys.executable, "-m", "benchmarks.preset_ablation", "--prune", "--out", os.path.join(out, name),
            "--base", base, "--variant", f"{name}:{settings}"]


def race(variants, base, out, budget, poll=1.0, command=ablation_command):
    """Runs the variants side by side for at most `budget` seconds.

    Args:
        variants: list of `(backend, name, settings text)`.
        base: settings text applied to every variant (`--base`).
        out: folder.
        budget: seconds from the first start to the last stop.
        poll: seconds between looks at the processes.
        command: function `(name, settings, base, out) -> list of str`,
            run from the repository's root with `KERAS_BACKEND` set.

    Returns:
        list of dicts, one per variant: `variant`, `backend`, `state`
        (`"scored"`, `"failed"`, `"stopped by the budget"`), `seconds`,
        `exit_code`, `row` (its `ablation.json` row, or None).
    """
    os.makedirs(out, exist_ok=True)
    started = time.perf_counter()
    running = {}
    try:
        for backend, name, settings in variants:
            line = command(name, settings, base, out)
            log = open(os.path.join(out, f"{name}.log"), "w")
            log.write(f"KERAS_BACKEND={backend} {' '.join(line)}\n")
            log.flush()
            process = subprocess.Popen(line, cwd=REPOSITORY, env=_environment(backend), stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
            running[name] = (process, log, time.perf_counter(), backend)
        results = {}
        while len(results) < len(running):
            for name, (process, log, start, backend) in running.items():
                if name in results:
                    continue
                code = process.poll()
                over = time.perf_counter() - started >= budget
                if code is None and over:
                    stop_process_group(process, wait=10)
                if code is not None or over:
                    results[name] = dict(variant=name, backend=backend, exit_code=code,
                                         seconds=round(time.perf_counter() - start, 1))
            if len(results) < len(running):
                time.sleep(poll)
    finally:
        for process, log, _, _ in running.values():
            stop_process_group(process, wait=10)
            log.close()
    summary = []
    for backend, name, _ in variants:
        _prune(os.path.join(out, name))
        entry = results[name]
        row = _scored_row(os.path.join(out, name), name)
        entry["state"] = ("scored" if row else "stopped by the budget" if entry["exit_code"] is None else "failed")
        summary.append(dict(entry, row=row))
    return summary


def _prune(folder):
    """Deletes the models, backups and checkpoints under a variant's folder, whatever its state."""
    for root, folders, files in os.walk(folder):
        for heavy in set(folders) & set(HEAVY_FOLDERS):
            shutil.rmtree(os.path.join(root, heavy), ignore_errors=True)
            folders.remove(heavy)
        for heavy in set(files) & set(HEAVY_FILES):
            os.remove(os.path.join(root, heavy))


def _scored_row(folder, name):
    path = os.path.join(folder, "ablation.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        rows = {row["variant"]: row for row in json.load(f)}
    return rows.get(name)


def markdown(summary, budget):
    """The race as a table: one row per variant, scores where it got that far."""
    lines = [f"Variants run side by side on one device (budget {budget:.0f} s): wall times are under "
             "that load, upper bounds of a run alone.", "",
             "| variant | backend | state | seconds (start to exit) | train wall min | tokens/s | steps kept | "
             "dev BLEU (greedy) | test BLEU | held-out BLEU | settings |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for entry in summary:
        row = entry["row"] or {}
        settings = ", ".join(f"{k}={v}" for k, v in row.get("settings", {}).items())
        lines.append(
            f"| {entry['variant']} | {entry['backend']} | {entry['state']} | {entry['seconds']:.0f} | "
            f"{row.get('wall_minutes', '')} | {row.get('tokens_per_second', '')} | {row.get('steps', '')} | "
            f"{row.get('dev_bleu', '')} | {row.get('test', {}).get('bleu', '')} | "
            f"{row.get('heldout', {}).get('bleu', '')} | {settings} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for the variants, their logs, race.json and race.md")
    parser.add_argument("--variant", action="append", required=True,
                        help="[BACKEND/]NAME:field=value,... (TrainConfig fields; backend jax unless named)")
    parser.add_argument("--base", default="", help="field=value,... applied to every variant")
    parser.add_argument("--budget", type=float, default=480.0,
                        help="seconds before every variant still running is stopped (default: 480)")
    args = parser.parse_args(argv)
    variants = [parse_variant(text) for text in args.variant]
    names = [name for _, name, _ in variants]
    if len(set(names)) != len(names):
        raise SystemExit(f"--variant names must differ, got {names}")
    # `timeout` sends SIGTERM to this process only: leave through race()'s
    # `finally`, which stops every variant's process group.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    summary = race(variants, args.base, args.out, args.budget)
    with open(os.path.join(args.out, "race.json"), "w") as f:
        json.dump(dict(budget=args.budget, base=args.base, variants=summary), f, indent=2)
    table = markdown(summary, args.budget)
    with open(os.path.join(args.out, "race.md"), "w") as f:
        f.write(table)
    print(table)
    return 0 if all(entry["state"] == "scored" for entry in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
