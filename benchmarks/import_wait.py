"""What importing a Hugging Face translator costs, against transformers loading it, and what its run then waits for.

Builds, offline, a random `MarianMTModel` of opus-mt-es-en's shape
(`tests/marian_fixtures.py`; `--shape tiny` checks the script in a minute),
then, each command a fresh process (its wall time, and its own peak
resident memory, `run_process`):

- transformers' load of the folder: the whole process (imports included)
  and `from_pretrained` alone, as transformers' users wait for it;
- the libraries alone: a process that imports what `keras-transformer
  import` imports (Keras on JAX, and this package) and starts JAX's
  device, so that the import's own memory is its peak less this;
- `keras-transformer import FOLDER --output RUN`, with its phases
  (`KERAS_TRANSFORMER_TIMINGS=1`: `import` is Python's imports, `work`
  reading, building and saving);
- `keras-transformer translate` of one sentence on the imported run, the
  first call (which writes the program) and `--repeats` later ones, and
  the same on a run of the README's shape (`--readme-run`, or one trained
  here for one step: the phases before decoding do not depend on training):
  what each spends before its first decoding step (import, load, compile).

    python -m benchmarks.import_wait --out benchmarks/results/cpu-import-wait

Writes `results.json` (every run) and `results.md` to `--out`.
"""

import argparse
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.machine import cpu_name
from benchmarks.verb_wait import phases_of

SENTENCE = "¿Dónde está el niño? Tiene 123 ovejas."
SHAPES = {"opus-mt": dict(d_model=512, encoder_layers=6, decoder_layers=6, heads=8, ffn_dim=2048,
                          max_position_embeddings=512, vocabulary_size=65001),
          "tiny": dict(d_model=16, encoder_layers=1, decoder_layers=1, heads=2, ffn_dim=32,
                       max_position_embeddings=64, vocabulary_size=None)}
BEFORE_DECODING = ("import", "load", "compile")

_TRANSFORMERS = """
import sys, time
start = time.perf_counter()
from transformers import MarianMTModel
imported = time.perf_counter()
MarianMTModel.from_pretrained(sys.argv[1], local_files_only=True).eval()
print(time.perf_counter() - imported)
"""
# What `keras-transformer import` imports: Keras on JAX (`startup.choose_import_backend`), this package, no TensorFlow.
_LIBRARIES = """
import os
os.environ["KERAS_BACKEND"] = "jax"
import keras
from keras_transformer.checkpoints.hub_import import import_hugging_face
keras.ops.convert_to_numpy(keras.ops.zeros(()))
"""


# A small parent between this process and the command: Linux counts the memory a child was forked
# from in its peak (`ru_maxrss`), so the command is forked from this one (a few MB), never from
# the measuring process (a gigabyte), and its peak and wall time are read here when it ends.
_MEASURED_CHILD = """
import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.call(sys.argv[2:])
wall = time.perf_counter() - start
with open(sys.argv[1], "w") as out:
    out.write(f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss} {wall}")
sys.exit(code if code >= 0 else 128 - code)
"""


def run_process(argv, env=None, timeout=3600):
    """One command in a fresh process: `(wall seconds, its own peak resident MB, stdout, stderr)`.

    The peak is the command's own high-water mark (`ru_maxrss` of a child
    forked from a small parent, `_MEASURED_CHILD`), every byte of it
    counted however briefly it was held. The command and its parent are
    killed after `timeout` seconds.

    Raises:
        RuntimeError: the command failed (its stderr's end quoted).
        TimeoutError: it ran past `timeout`.
    """
    with tempfile.TemporaryDirectory() as work:
        measured = os.path.join(work, "measured")
        process = subprocess.Popen([sys.executable, "-S", "-c", _MEASURED_CHILD, measured, *map(str, argv)],
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{' '.join(map(str, argv))} ran past {timeout} s") from None
        finally:
            if process.poll() is None:  # out of time or interrupted: never leave it running
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
        stdout, stderr = stdout.decode(errors="replace"), stderr.decode(errors="replace")
        if process.returncode:
            raise RuntimeError(f"{' '.join(map(str, argv))} failed ({process.returncode}): {stderr[-3000:]}")
        with open(measured) as figures:
            peak_kb, wall = figures.read().split()
    return float(wall), int(peak_kb) / 1024, stdout, stderr


def _environment(cache):
    env = {**os.environ, "KERAS_TRANSFORMER_TIMINGS": "1", "KERAS_TRANSFORMER_CACHE_DIR": str(cache)}
    env.pop("KERAS_BACKEND", None)  # the command's own choice, as a user runs it
    return env


def _cli(*arguments):
    return [sys.executable, "-m", "keras_transformer_cli", *map(str, arguments)]


def translate_waits(run, cache, repeats):
    """The first `translate` of `run` with a fresh cache, then `repeats` more: each one's wall and phases."""
    runs = []
    for _ in range(1 + repeats):
        wall, peak, _, stderr = run_process(_cli("translate", "--model", run, "--max-new-tokens", 16, SENTENCE),
                                            _environment(cache))
        phases = phases_of(stderr)
        runs.append({"wall": wall, "peak_mb": peak, **phases,
                     "before_decoding": sum(phases.get(name, 0.0) for name in BEFORE_DECODING)})
    return runs


def _median(runs, key):
    return statistics.median(run[key] for run in runs if run.get(key) is not None)


def measure(work, shape, repeats, readme_run=None):
    """Every figure of the module's docstring, as a dict."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
    from marian_fixtures import make_marian_folder

    folder = make_marian_folder(work / f"{shape}-shape", **{key: value for key, value in SHAPES[shape].items()
                                                              if value is not None})
    weights_mb = (pathlib.Path(folder) / "model.safetensors").stat().st_size / 2**20
    figures = {"shape": shape, "cpu": cpu_name(), "weights_file_mb": weights_mb, "repeats": repeats}

    their_wall, their_peak, stdout, _ = run_process([sys.executable, "-c", _TRANSFORMERS, str(folder)],
                                                    _environment(work / "cache"))
    figures.update(transformers_process_seconds=their_wall, transformers_from_pretrained_seconds=float(stdout),
                   transformers_peak_mb=their_peak)
    _, libraries_peak, _, _ = run_process([sys.executable, "-c", _LIBRARIES], _environment(work / "cache"))
    figures["libraries_alone_peak_mb"] = libraries_peak

    imports = []
    for attempt in range(repeats):
        run = work / f"run-{attempt}"
        wall, peak, _, stderr = run_process(_cli("import", folder, "--output", run), _environment(work / "cache"))
        imports.append({"wall": wall, "peak_mb": peak, **phases_of(stderr)})
    figures["imports"] = imports
    figures["import_wall_seconds"] = _median(imports, "wall")
    figures["import_work_seconds"] = _median(imports, "work")
    figures["import_python_imports_seconds"] = _median(imports, "import")
    figures["import_peak_mb"] = _median(imports, "peak_mb")
    figures["import_own_memory_over_weights"] = (figures["import_peak_mb"] - libraries_peak) / weights_mb
    figures["import_work_over_from_pretrained"] = (figures["import_work_seconds"]
                                                   / figures["transformers_from_pretrained_seconds"])

    if readme_run is None:
        readme_run = work / "readme-shape"
        run_process(_cli("train", "--epochs", 1, "--steps-per-epoch", 1, "--output", readme_run),
                    _environment(work / "cache"))
    for label, run in (("imported", work / "run-0"), ("readme", readme_run)):
        waits = translate_waits(run, work / f"cache-{label}", repeats)
        figures[f"translate_{label}"] = waits
        figures[f"translate_{label}_first_wall_seconds"] = waits[0]["wall"]
        figures[f"translate_{label}_again_wall_seconds"] = _median(waits[1:], "wall")
        for name in (*BEFORE_DECODING, "before_decoding"):
            figures[f"translate_{label}_again_{name}_seconds"] = _median(waits[1:], name)
    return figures


def write_report(figures, out, command):
    """`results.json` and `results.md` in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(figures, indent=2) + "\n")
    lines = [f"# Importing a model of {figures['shape']} shape, and what its run then waits for", "",
             f"`{command}` on {figures['cpu']}; medians of {figures['repeats']} runs, each a fresh process.", "",
             "| what | figure |", "|---|---:|"]
    for key, value in figures.items():
        if isinstance(value, (int, float)) and key != "repeats":
            lines.append(f"| {key.replace('_', ' ')} | {value:.2f} |" if isinstance(value, float)
                         else f"| {key.replace('_', ' ')} | {value} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for results.json and results.md")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="opus-mt")
    parser.add_argument("--repeats", type=int, default=3, help="imports, and translate calls after the first")
    parser.add_argument("--readme-run", help="a run of the README's shape (default: one trained here for a step)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        figures = measure(pathlib.Path(work), args.shape, args.repeats, args.readme_run)
    command = "python -m benchmarks.import_wait " + " ".join(argv if argv is not None else sys.argv[1:])
    print(write_report(figures, pathlib.Path(args.out), command))


if __name__ == "__main__":
    main()
