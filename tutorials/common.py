"""What the tutorial scripts share: arguments, ablation settings, tables, plots."""

import argparse
import dataclasses
import os
import time

import numpy as np

from keras_transformer.training import ablation


def parser(description):
    """The arguments every tutorial takes."""
    result = argparse.ArgumentParser(description=description)
    result.add_argument("--quick", action="store_true", help="a few minutes on a CPU")
    result.add_argument("--smoke", action="store_true",
                        help="seconds: a tiny model, a few steps (for the tests)")
    result.add_argument("--out", default=None, help="results folder (default: tutorials/results/<name>)")
    result.add_argument("--seeds", type=int, default=None, help="seeds per variant")
    result.add_argument("--steps", type=int, default=None, help="training steps per run")
    result.add_argument("--corpus", default=None, help="gzipped TSV corpus (default: the embedded one)")
    return result


def output_folder(args, name):
    folder = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", name)
    os.makedirs(folder, exist_ok=True)
    return folder


SMOKE = ablation.AblationSettings(
    d_model=16, num_heads=2, ff_dim=32, num_layers=1, max_length=24, vocabulary_size=400,
    batch_tokens=240, steps=2, eval_every=2, train_pairs=200, dev_pairs=20,
)


def settings(args, **overrides):
    """The ablation settings for `--smoke`, `--quick` or full size, plus overrides."""
    if args.smoke:
        base = SMOKE
        overrides = {k: v for k, v in overrides.items() if k not in dataclasses.asdict(SMOKE)}
    else:
        base = ablation.QUICK if args.quick else ablation.AblationSettings()
    chosen = dataclasses.replace(base, corpus=args.corpus, **overrides)
    if args.steps:
        chosen = dataclasses.replace(chosen, steps=args.steps, eval_every=min(chosen.eval_every, args.steps))
    return chosen


def seeds(args, quick=2, full=3):
    if args.seeds:
        return range(args.seeds)
    return range(1 if args.smoke else quick if args.quick else full)


def subset(args, variants):
    """All variants, or only the first two for `--smoke`."""
    return dict(list(variants.items())[:2]) if args.smoke else variants


def table(rows, columns):
    """A Markdown table from dicts; floats with 4 significant digits."""
    def cell(value):
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell(row.get(column, "")) for column in columns) + " |")
    return "\n".join(lines)


def report(folder, title, sections):
    """Prints the sections (heading, Markdown) and writes them to `results.md`."""
    text = f"# {title}\n\n" + "\n\n".join(f"## {heading}\n\n{body}" for heading, body in sections)
    with open(os.path.join(folder, "results.md"), "w") as f:
        f.write(text + "\n")
    print(text)


def plot_curves(rows, path, title, metric="dev_loss_curve", ylabel="dev loss (nats/token)"):
    """Mean dev-loss curve per variant, with the seeds' min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for name in dict.fromkeys(row["variant"] for row in rows):
        group = [row for row in rows if row["variant"] == name and row[metric]]
        if not group:
            continue
        length = min(len(row[metric]) for row in group)
        curves = np.array([row[metric][:length] for row in group], dtype=float)
        steps = group[0]["steps"][:length]
        axes.plot(steps, np.nanmean(curves, axis=0), marker="o", label=name)
        axes.fill_between(steps, np.nanmin(curves, axis=0), np.nanmax(curves, axis=0), alpha=0.2)
    axes.set_xlabel("training step")
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


class Clock:
    """Wall time since the script started, for the report."""

    def __init__(self):
        self.start = time.time()

    def __str__(self):
        return f"{time.time() - self.start:.0f} s"
