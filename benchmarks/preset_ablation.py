"""Training-recipe ablations: whole `keras-transformer train` runs that differ in a few settings.

    python -m benchmarks.preset_ablation --out benchmarks/results/cpu-default-ablation \\
        --variant "default:" --variant "vocab4000:vocabulary_size=4000,epochs=12"

Each variant is a `TrainConfig` (the defaults, then `--base`, then the
variant's own `field=value` settings) trained in its own folder under
`--out`, then scored on the test and held-out splits with the package's
defaults (beam 4 and the 3-gram guard since 2026-11-24, greedy before;
sacrebleu with the corpus' references).
A variant whose folder holds a finished run is not trained again, and one
that `ablation.json` scored already (with the same settings) is skipped, so
the same command resumes after an interruption or a device's time limit,
and a GPU session can run one variant per call. Writes `ablation.json` and
`ablation.md` (one row per variant: wall time, tokens/s, best dev BLEU and
what was kept, test and held-out BLEU/chrF/loops) to `--out`.

`ablation.md`'s wall times are each run's own, so they compare only runs
made on the same machine under the same load.
"""

import argparse
import dataclasses
import json
import os
import time

from keras_transformer.translation.evaluation import evaluate_pairs
from keras_transformer.training.train_config import TrainConfig

SPLITS = ("test", "heldout")


def parse_settings(text, option="--base"):
    """`"field=value,..."` -> `{field: value}` of `TrainConfig` fields, values parsed as JSON where they can be.

    Args:
        text: comma-separated `field=value` items; empty for none.
        option: the command-line option that gave `text`, for the error.

    Returns:
        dict.

    Example:

    >>> parse_settings("preset=small,dropout=0.3,tie_embeddings=false")
    {'preset': 'small', 'dropout': 0.3, 'tie_embeddings': False}
    """
    fields = {field.name for field in dataclasses.fields(TrainConfig)}
    values = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if key not in fields:
            raise SystemExit(f"{option}: {key!r} is not a TrainConfig field (in {text!r})")
        try:
            values[key] = json.loads(value)
        except ValueError:
            values[key] = value
    return values


def parse_variant(text):
    """`"name:field=value,..."` -> `(name, {field: value})`, as `parse_settings`.

    Example:

    >>> parse_variant("small-drop:preset=small,dropout=0.3")
    ('small-drop', {'preset': 'small', 'dropout': 0.3})
    """
    name, _, settings = text.partition(":")
    return name, parse_settings(settings, option=f"--variant {name}")


def run_variant(name, settings, out, log=print):
    """Trains one variant (unless finished) and scores it; returns its row."""
    from keras_transformer.training import run_folder
    from keras_transformer.data.parallel_corpus import ParallelCorpus
    from keras_transformer.translation.translator import Translator

    output = os.path.join(out, name)
    summary_path = os.path.join(output, run_folder.SUMMARY_FILE)
    config = TrainConfig(output=output, **settings)
    if not os.path.exists(summary_path):
        from keras_transformer.training.trainer import train_translator

        train_translator(config, verbose=2, log=log)
    summary = run_folder.read_json(summary_path)
    splits = ParallelCorpus.from_config(config).read()
    translator = Translator.from_directory(output, jit_compile=True)
    row = dict(variant=name, settings=settings, wall_minutes=round(summary["wall_seconds"] / 60, 1),
               tokens_per_second=round(summary["tokens_per_second"]), steps=summary["completed_steps"],
               dev_loss=round(summary["dev_loss"], 3), dev_bleu=round(summary.get("dev_bleu", float("nan")), 2),
               kept=summary.get("kept"), beam=translator.beam_width)
    for split in SPLITS:
        if not splits[split]:
            continue
        result = evaluate_pairs(translator, splits[split], verbose=0)
        row[split] = dict(sentences=result["sentences"], bleu=round(result["bleu"], 2),
                          chrf=round(result["chrf"], 2), loop_rate=round(result["loop_rate"], 4))
    log(json.dumps(row))
    return row


def prune(output):
    """Deletes a run folder's model, backups and checkpoints; keeps what is small."""
    import shutil

    from keras_transformer.training import run_folder

    for folder in (run_folder.BACKUP_FOLDER, run_folder.CHECKPOINT_FOLDER):
        shutil.rmtree(os.path.join(output, folder), ignore_errors=True)
    if os.path.exists(os.path.join(output, run_folder.MODEL_FILE)):
        os.remove(os.path.join(output, run_folder.MODEL_FILE))


def markdown(rows):
    """The rows as a markdown table."""
    lines = ["| variant | settings | wall min | tokens/s | steps | dev loss | best dev BLEU (greedy) | kept | "
             "beam | test BLEU | test chrF | test loops | held-out BLEU | held-out chrF |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        test, heldout = r.get("test", {}), r.get("heldout", {})
        settings = ", ".join(f"{k}={v}" for k, v in r["settings"].items()) or "defaults"
        lines.append(
            f"| {r['variant']} | {settings} | {r['wall_minutes']} | {r['tokens_per_second']:,} | {r['steps']} | "
            f"{r['dev_loss']} | {r['dev_bleu']} | {r['kept']} | {r.get('beam', 1)} | {test.get('bleu', '')} | "
            f"{test.get('chrf', '')} | "
            f"{test.get('loop_rate', 0):.1%} | {heldout.get('bleu', '')} | {heldout.get('chrf', '')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for the runs, ablation.json and ablation.md")
    parser.add_argument("--variant", action="append", required=True,
                        help="NAME:field=value,... (TrainConfig fields); repeat for several")
    parser.add_argument("--base", default="", help="field=value,... applied to every variant")
    parser.add_argument("--prune", action="store_true",
                        help="after scoring a variant, delete its model, backups and checkpoints (keep the logs, "
                             "summary, scores and plot): for a device whose files must travel back small")
    args = parser.parse_args(argv)
    base = parse_settings(args.base)
    os.makedirs(args.out, exist_ok=True)
    results_path = os.path.join(args.out, "ablation.json")
    rows = {}
    if os.path.exists(results_path):
        with open(results_path) as f:
            rows = {row["variant"]: row for row in json.load(f)}
    variants = [(name, {**base, **settings}) for name, settings in map(parse_variant, args.variant)]
    for name, settings in variants:
        if name in rows and rows[name]["settings"] != settings:
            raise SystemExit(f"--variant {name}: ablation.json scored it with other settings "
                             f"({rows[name]['settings']}); give it another name")
    for name, settings in variants:
        if name in rows:
            print(f"{name}: scored already (ablation.json)", flush=True)
            continue
        start = time.time()
        rows[name] = run_variant(name, settings, args.out)
        if args.prune:
            prune(os.path.join(args.out, name))
        print(f"{name}: {time.time() - start:.0f} s with scoring", flush=True)
        with open(results_path, "w") as f:
            json.dump(list(rows.values()), f, indent=2)
        with open(os.path.join(args.out, "ablation.md"), "w") as f:
            f.write(markdown(list(rows.values())))
    print(markdown(list(rows.values())))


if __name__ == "__main__":
    main()
