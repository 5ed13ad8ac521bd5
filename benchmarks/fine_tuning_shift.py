"""Fine-tuning on a real shift: the embedded Spanish -> WEB translator taught KJV English, measured.

    KERAS_BACKEND=tensorflow python -m benchmarks.fine_tuning_shift --start runs/es-en --out /tmp/kjv

The embedded corpus holds two English translations of each verse: the
modern World English Bible (WEB, what `keras-transformer train` learns) and
the 1611 King James Version (KJV: "thee", "hath", "unto"). This writes the
Spanish -> KJV and Spanish -> WEB pairs as TSV files per split
(`keras_transformer.data.bible_tsv`), then runs the command line a user
would, each as its own process, timed end to end:

- `before`: the `--start` run (trained on WEB), untouched;
- `full`: `train --from START` on the KJV train pairs (every weight);
- `lora`: the same with `--lora RANK` (adapters on W_Q and W_V only);
- `scratch-same-time`: `train` from random weights on the KJV pairs for
  as many steps as `full` trained (the same wall time, give or take the
  vocabulary it learns);
- `scratch-default`: `train` from random weights with the default budget.

Each model is scored (`evaluate`, beam 4, the test split, 605 verses)
against the KJV text alone and against the WEB text alone (what
fine-tuning forgot). `--variant NAME=FLAGS` adds runs (e.g. other
learning rates). Writes `results.json` and `results.md` to `--out`; the
runs stay in `--out/runs`.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

DEFAULT_VARIANTS = {
    "full": "--from {start}",
    "lora": "--from {start} --lora 8",
    "scratch-same-time": "--epochs {same_epochs}",
    "scratch-default": "",
}
_CORPUS = "--corpus {data}/train.tsv --dev {data}/dev.tsv --test {data}/test.tsv"


def parse_args(argv=None):
    """The command line of `python -m benchmarks.fine_tuning_shift`.

    Example:

    >>> args = parse_args(["--start", "runs/es-en", "--out", "/tmp/kjv", "--variant", "lr2=--from {start} --learning-rate 2e-3"])
    >>> args.variant, args.only
    (['lr2=--from {start} --learning-rate 2e-3'], None)
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fine_tuning_shift", description=__doc__.split("\n")[0])
    parser.add_argument("--start", required=True, help="the trained run to fine-tune (the README's default: runs/es-en)")
    parser.add_argument("--out", required=True, help="folder for the data, the runs and the results")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=FLAGS: one more run ({start}, {same_epochs} are filled in); repeatable")
    parser.add_argument("--only", nargs="+", help="run only these of the default variants (and the --variant ones)")
    parser.add_argument("--beam", type=int, default=4)
    return parser.parse_args(argv)


def _command(*arguments):
    return [sys.executable, "-m", "keras_transformer_cli", *arguments]


def _timed(command, log_path):
    started = time.perf_counter()
    with open(log_path, "w") as log:
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"failed ({result.returncode}): {shlex.join(command)}; see {log_path}")
    return seconds


def _score(model, data, beam, log_path):
    command = _command("evaluate", "--model", model, "--split", "test", "--beam", str(beam),
                       *shlex.split(_CORPUS.format(data=data)))
    _timed(command, log_path)
    name = f"evaluation-test-beam{beam}-norepeat3.json"
    with open(os.path.join(model, name)) as f:
        result = json.load(f)
    os.replace(os.path.join(model, name), log_path.replace(".log", ".json"))
    return result


def main(argv=None):
    args = parse_args(argv)
    from benchmarks.machine import cpu_name
    from keras_transformer.data.bible_tsv import write_bible_tsv

    data = {reference: os.path.join(args.out, "data", reference) for reference in ("kjv", "web")}
    for reference, folder in data.items():
        write_bible_tsv(folder, reference)
    start_config = json.load(open(os.path.join(args.start, "config.json")))
    from keras_transformer.training.fine_tuning import FINE_TUNING_DEFAULTS

    variants = {name: flags for name, flags in DEFAULT_VARIANTS.items() if not args.only or name in args.only}
    variants.update(dict(text.split("=", 1) for text in args.variant))
    rows = []
    models = {"before": args.start}
    seconds = {"before": None}
    for name, flags in variants.items():
        output = os.path.join(args.out, "runs", name)
        flags = flags.format(start=args.start, same_epochs=FINE_TUNING_DEFAULTS["epochs"])
        command = _command("train", "--output", output, "--overwrite", *shlex.split(_CORPUS.format(data=data["kjv"])),
                           *shlex.split(flags))
        print("running:", shlex.join(command[2:]), flush=True)
        seconds[name] = _timed(command, os.path.join(args.out, f"{name}-train.log"))
        models[name] = output
    for name, model in models.items():
        summary_path = os.path.join(model, "summary.json")
        summary = json.load(open(summary_path)) if name != "before" else {}
        scores = {reference: _score(model, folder, args.beam, os.path.join(args.out, f"{name}-{reference}.log"))
                  for reference, folder in data.items()}
        config = json.load(open(os.path.join(model, "config.json")))
        rows.append({
            "name": name,
            "flags": variants.get(name, ""),
            "wall_seconds": seconds[name],
            "steps": summary.get("trained_steps_this_run"),
            "train_step_seconds": summary.get("train_step_seconds"),
            "trainable_parameters": summary.get("trainable_parameters"),
            "parameters": summary.get("parameters"),
            "learning_rate": config.get("learning_rate"),
            "warmup_steps": config.get("warmup_steps"),
            "kjv_bleu": scores["kjv"]["bleu"], "kjv_chrf": scores["kjv"]["chrf"],
            "web_bleu": scores["web"]["bleu"], "web_chrf": scores["web"]["chrf"],
            "sentences": scores["kjv"]["sentences"],
        })
        print(json.dumps(rows[-1]), flush=True)
    import keras

    result = {"machine": cpu_name(), "backend": keras.backend.backend(), "start": args.start,
              "start_summary": json.load(open(os.path.join(args.start, "summary.json"))), "beam": args.beam,
              "start_config": {key: start_config.get(key) for key in ("preset", "vocabulary_size", "epochs")},
              "command": "python -m benchmarks.fine_tuning_shift " + shlex.join(argv or sys.argv[1:]), "rows": rows}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(result, f, indent=2)
    lines = [f"Spanish -> KJV, test split ({rows[0]['sentences']} verses), beam {args.beam}; {result['machine']}, "
             f"backend {result['backend']}; `{result['command']}`", "",
             "| run | steps | wall time | s a step | trainable parameters | KJV BLEU | KJV chrF | WEB BLEU | WEB chrF |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        wall = f"{row['wall_seconds'] / 60:.1f} min" if row["wall_seconds"] else "-"
        step = f"{row['train_step_seconds']:.3f}" if row["train_step_seconds"] else "-"
        trainable = f"{row['trainable_parameters']:,}" if row["trainable_parameters"] else "-"
        lines.append(f"| {row['name']} | {row['steps'] or '-'} | {wall} | {step} | {trainable} | {row['kjv_bleu']:.2f} | "
                     f"{row['kjv_chrf']:.2f} | {row['web_bleu']:.2f} | {row['web_chrf']:.2f} |")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
