"""How long `keras-transformer` takes to answer `--help` and a mistyped flag.

    python -m benchmarks.cli_startup [--repeats 5]

Runs each command in a fresh process, `--repeats` times, and prints the
median wall time and whether Keras or TensorFlow was imported. The command
line imports Keras only after its flags are read, so these should take a
fraction of a second whatever the backend.
"""

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "--help": ["--help"],
    "train --help": ["train", "--help"],
    "bad flag": ["train", "--bogus"],
}
PROBE = (
    "import sys, keras_transformer_cli\n"
    "try:\n"
    "    keras_transformer_cli.main(sys.argv[1:])\n"
    "except SystemExit:\n"
    "    pass\n"
    "sys.stderr.write(f\"\\nIMPORTED keras={'keras' in sys.modules} tensorflow={'tensorflow' in sys.modules}\\n\")\n"
)


def time_command(argv, repeats):
    """Median seconds of `keras-transformer ARGV` in fresh processes, and what it imported.

    Returns:
        `(median_seconds, all_seconds, imported)`.
    """
    seconds, imported = [], ""
    for _ in range(repeats):
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True)
        seconds.append(time.perf_counter() - start)
        imported = result.stderr.rsplit("IMPORTED ", 1)[-1].strip()
    return statistics.median(seconds), seconds, imported


def main(argv=None):
    """Entry point of `python -m benchmarks.cli_startup`."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cli_startup", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per command (default: 5)")
    args = parser.parse_args(argv)
    print(f"| command | median of {args.repeats} (s) | all (s) | imported |")
    print("|---|---|---|---|")
    for name, command in COMMANDS.items():
        median, seconds, imported = time_command(command, args.repeats)
        print(f"| `keras-transformer {name}` | {median:.2f} | {', '.join(f'{s:.2f}' for s in seconds)} | {imported} |")


if __name__ == "__main__":
    main()
