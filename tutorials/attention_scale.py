"""Why divide attention logits by sqrt(d_k)? Measured, not asserted.

1. Var(q . k) for unit-variance q, k, swept over d_k = 8 .. 1024.
2. The trap: the variance of one small logit matrix scatters widely.
3. What the variance does to the softmax: entropy, largest weight and the
   norm of its Jacobian (the gradient that reaches the logits), with and
   without the 1/sqrt(d_k) scale.
4. A real model: the translator trained with logit_scale "sqrt" (1/sqrt(d_k)),
   "linear" (1/d_k) and 1.0 (no scale); attention-logit statistics at init
   and after training, and the dev loss, over several seeds.

    python tutorials/attention_scale.py --quick     # minutes on a CPU
    python tutorials/attention_scale.py             # full size (GPU)
"""

import os

import keras
import numpy as np

import common
from keras_transformer.training import ablation
from keras_transformer import diagnostics

KEY_DIMS = [8, 16, 32, 64, 128, 256, 512, 1024]
SCALES = {"sqrt": "logit_scale_sqrt", "linear": "logit_scale_linear", 1.0: "logit_scale_none"}


def variance_sweep(samples):
    rows = []
    for d in KEY_DIMS:
        raw = diagnostics.dot_product_variance(d, num_samples=samples)
        scaled = diagnostics.dot_product_variance(d, num_samples=samples, scale=d**-0.5)
        rows.append({"d_k": d, "Var(q.k)": raw, "Var(q.k)/d_k": raw / d, "Var(q.k/sqrt(d_k))": scaled})
    return rows


def small_matrix_effect(trials):
    rows, estimates = [], {}
    for n in (4, 16, 64, 256):
        values = diagnostics.logit_variance_estimates(64, n, n, trials=trials, seed=n)
        estimates[n] = values
        rows.append({
            "matrix": f"{n}x{n}", "mean estimate": float(values.mean()),
            "std of estimate": float(values.std()), "5th pct": float(np.percentile(values, 5)),
            "95th pct": float(np.percentile(values, 95)),
            "naive std (iid entries)": 64 * np.sqrt(2 / (n * n - 1)),
        })
    return rows, estimates


def softmax_sweep(num_keys=64, queries=2000, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for d in KEY_DIMS:
        q = rng.standard_normal((queries, d))
        k = rng.standard_normal((num_keys, d))
        logits = q @ k.T
        for label, scale in (("none", 1.0), ("1/sqrt(d_k)", d**-0.5)):
            scaled = logits * scale
            jacobian = diagnostics.softmax_jacobian_norm(scaled)
            rows.append({
                "d_k": d, "scale": label,
                "entropy (nats)": float(diagnostics.softmax_entropy(scaled).mean()),
                "max weight": float(diagnostics.softmax_max_weight(scaled).mean()),
                "saturated rows (max > 0.99)": float((diagnostics.softmax_max_weight(scaled) > 0.99).mean()),
                "Jacobian norm": float(jacobian.mean()),
                # The chain rule through the scale: what reaches q . k itself.
                "d softmax / d(q.k)": float(scale * jacobian.mean()),
            })
    return rows


def plot_sweeps(variance_rows, estimates, softmax_rows, folder):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    d = [row["d_k"] for row in variance_rows]
    axes[0].loglog(d, [row["Var(q.k)"] for row in variance_rows], "o-", label="Var(q.k)")
    axes[0].loglog(d, [row["Var(q.k/sqrt(d_k))"] for row in variance_rows], "s-", label="Var(q.k / sqrt(d_k))")
    axes[0].loglog(d, d, "k--", lw=0.8, label="d_k")
    axes[0].set_xlabel("d_k")
    axes[0].set_title("dot-product variance")
    axes[0].legend()
    for n, values in estimates.items():
        axes[1].hist(values, bins=40, histtype="step", density=True, label=f"{n}x{n}")
    axes[1].axvline(64, color="k", ls="--", lw=0.8)
    axes[1].set_xlabel("estimated Var(q.k), d_k = 64")
    axes[1].set_title("one matrix, many trials")
    axes[1].legend()
    for label, style in (("none", "o-"), ("1/sqrt(d_k)", "s-")):
        rows = [row for row in softmax_rows if row["scale"] == label]
        axes[2].semilogx([r["d_k"] for r in rows], [r["Jacobian norm"] for r in rows], style, label=f"Jacobian, scale {label}")
        axes[2].semilogx([r["d_k"] for r in rows], [r["max weight"] for r in rows], style, alpha=0.5, label=f"max weight, scale {label}")
    axes[2].set_xlabel("d_k (64 keys)")
    axes[2].set_title("softmax saturation")
    axes[2].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(os.path.join(folder, "variance_and_softmax.png"), dpi=120)
    plt.close(figure)


def trained_models(args, folder):
    settings = common.settings(args)
    variants = common.subset(args, {name: {"logit_scale": scale} for scale, name in SCALES.items()})
    data_probe = {}

    def measure(row, model):
        stats = diagnostics.attention_statistics(model, data_probe["inputs"])
        row["after"] = {k: float(np.mean([s[k] for s in stats.values()])) for k in ("logit_std", "entropy", "max_weight")}

    # Statistics at init: the same builds, untrained.
    data = ablation.SharedData(settings, folder)
    data_probe["inputs"] = data.probe[0]
    at_init = {}
    for name, options in variants.items():
        model = ablation.build_variant(settings, options, seed=0)
        stats = diagnostics.attention_statistics(model, data.probe[0])
        at_init[name] = {k: float(np.mean([s[k] for s in stats.values()])) for k in ("logit_std", "entropy", "max_weight")}
        keras.backend.clear_session()
    rows = ablation.run_ablation(variants, seeds=common.seeds(args), settings=settings,
                                 workdir=folder, on_model=measure, data=data)
    return rows, at_init


def main(argv=None):
    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    folder = common.output_folder(args, "attention_scale")
    clock = common.Clock()
    samples = 2000 if args.smoke else 100_000
    variance_rows = variance_sweep(samples)
    small_rows, estimates = small_matrix_effect(trials=20 if args.smoke else 500)
    softmax_rows = softmax_sweep(queries=50 if args.smoke else 2000)
    plot_sweeps(variance_rows, estimates, softmax_rows, folder)

    rows, at_init = trained_models(args, folder)
    summary = {entry["variant"]: entry for entry in ablation.summarize(rows)}
    model_rows = []
    for name in at_init:
        group = [row for row in rows if row["variant"] == name]
        after = [row["after"] for row in group]
        entry = summary[name]
        model_rows.append({
            "logit_scale": name.replace("logit_scale_", ""),
            "logit std at init": at_init[name]["logit_std"],
            "entropy at init": at_init[name]["entropy"],
            "logit std trained": float(np.mean([a["logit_std"] for a in after])),
            "entropy trained": float(np.mean([a["entropy"] for a in after])),
            "max weight trained": float(np.mean([a["max_weight"] for a in after])),
            "dev loss": f"{entry.get('dev_loss_mean', float('nan')):.3f} ± {entry.get('dev_loss_std', float('nan')):.3f}",
            "runs (diverged)": f"{entry['runs']} ({entry['diverged']})",
        })
    common.plot_curves(rows, os.path.join(folder, "logit_scale_dev_loss.png"), "dev loss by logit scale")
    settings = common.settings(args)
    common.report(folder, "Why divide attention logits by sqrt(d_k)?", [
        ("Var(q . k) for unit-variance q, k (100k pairs each)", common.table(
            variance_rows, ["d_k", "Var(q.k)", "Var(q.k)/d_k", "Var(q.k/sqrt(d_k))"])),
        ("The small-matrix trap: Var over the entries of one n x n logit matrix, d_k = 64", common.table(
            small_rows, ["matrix", "mean estimate", "std of estimate", "5th pct", "95th pct", "naive std (iid entries)"])),
        ("Softmax over 64 keys, q and k unit-variance", common.table(
            softmax_rows, ["d_k", "scale", "entropy (nats)", "max weight", "saturated rows (max > 0.99)",
                           "Jacobian norm", "d softmax / d(q.k)"])),
        (f"Translator (d_model {settings.d_model}, {settings.num_layers}+{settings.num_layers} layers, "
         f"{settings.steps} steps, seeds {list(common.seeds(args))}); self-attention statistics on one dev batch",
         common.table(model_rows, list(model_rows[0]))),
        ("Run", f"{clock}, backend {keras.backend.backend()}; plots: variance_and_softmax.png, logit_scale_dev_loss.png"),
    ])


if __name__ == "__main__":
    main()
