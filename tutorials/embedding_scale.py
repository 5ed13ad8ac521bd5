"""Why multiply token embeddings by sqrt(d_model)? Measured, not asserted.

1. Magnitudes at init: token vectors drawn with std d_model**-0.5 (norm
   about 1) next to sinusoidal position vectors (entries in [-1, 1], norm
   sqrt(d_model / 2)); the token/position norm ratio with and without the
   factor, for several d_model.
2. The link to weight tying: the tied output projection reuses the same
   matrix, and its logits are only O(1) when the matrix is small. Logit std
   at init for a small (d_model**-0.5) and a unit-variance embedding.
3. Training: the translator with and without the factor, with tying on and
   off, over several seeds: dev loss curves with their spread.

    python tutorials/embedding_scale.py --quick     # minutes on a CPU
    python tutorials/embedding_scale.py             # full size (GPU)
"""

import math
import os

import keras
import numpy as np

import common
import keras_transformer as kt
from keras_transformer.training import ablation
from keras_transformer import diagnostics

D_MODELS = [64, 128, 256, 512, 1024]
VARIANTS = {
    "tied, scaled (paper)": {},
    "tied, unscaled": {"embedding_scale": None},
    "untied, scaled": {"tie_embeddings": False},
    "untied, unscaled": {"tie_embeddings": False, "embedding_scale": None},
}


def magnitudes():
    rows = []
    for d in D_MODELS:
        row = {"d_model": d}
        for label, scale in (("with sqrt(d)", "sqrt"), ("without", None)):
            layer = kt.layers.PositionalEmbedding(4000, d, max_length=256, scale=scale)
            layer.build()
            tokens = keras.ops.convert_to_numpy(layer.embeddings) * layer.scale_factor
            row[f"token norm {label}"] = float(np.linalg.norm(tokens, axis=-1).mean())
            row[f"token/position {label}"] = diagnostics.embedding_position_ratio(layer)
        row["position norm"] = math.sqrt(d / 2)
        rows.append(row)
    return rows


def tied_logits(seed=0):
    """Logit std of the tied projection on unit-variance hidden states."""
    rng = np.random.default_rng(seed)
    rows = []
    for d in D_MODELS:
        hidden = rng.standard_normal((256, d))  # what a final LayerNorm gives
        for label, std in (("d_model**-0.5 (ours)", d**-0.5), ("1.0", 1.0)):
            embeddings = rng.standard_normal((4000, d)) * std
            logits = hidden @ embeddings.T
            rows.append({
                "d_model": d, "embedding std": label, "logit std": float(logits.std()),
                "softmax max weight": float(diagnostics.softmax_max_weight(logits).mean()),
            })
    return rows


def plot_magnitudes(rows, folder):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5, 4))
    d = [row["d_model"] for row in rows]
    axes.loglog(d, [row["token/position with sqrt(d)"] for row in rows], "o-", label="with sqrt(d_model)")
    axes.loglog(d, [row["token/position without"] for row in rows], "s-", label="without")
    axes.axhline(1.0, color="k", ls="--", lw=0.8)
    axes.set_xlabel("d_model")
    axes.set_ylabel("token norm / position norm at init")
    axes.legend()
    figure.tight_layout()
    figure.savefig(os.path.join(folder, "magnitudes.png"), dpi=120)
    plt.close(figure)


def main(argv=None):
    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    folder = common.output_folder(args, "embedding_scale")
    clock = common.Clock()
    magnitude_rows = magnitudes()
    plot_magnitudes(magnitude_rows, folder)
    logit_rows = tied_logits()

    settings = common.settings(args)
    data = ablation.SharedData(settings, folder)
    ratios = {}

    def measure(row, model):
        layer = model.get_layer("decoder_embedding")
        ratios.setdefault(row["variant"], []).append(diagnostics.embedding_position_ratio(layer))

    rows = ablation.run_ablation(common.subset(args, VARIANTS), seeds=common.seeds(args), settings=settings,
                                 workdir=folder, on_model=measure, data=data)
    summary = ablation.summarize(rows)
    for entry in summary:
        entry["token/position after training"] = float(np.mean(ratios[entry["variant"]]))
    common.plot_curves(rows, os.path.join(folder, "dev_loss.png"), "embedding scale and tying")
    common.report(folder, "Why multiply token embeddings by sqrt(d_model)?", [
        ("Norms at init (token std d_model**-0.5, sinusoidal positions)", common.table(
            magnitude_rows, ["d_model", "token norm with sqrt(d)", "token norm without", "position norm",
                             "token/position with sqrt(d)", "token/position without"])),
        ("Tied output projection: logits of unit-variance hidden states, 4000-token vocabulary",
         common.table(logit_rows, ["d_model", "embedding std", "logit std", "softmax max weight"])),
        (f"Training (d_model {settings.d_model}, {settings.num_layers}+{settings.num_layers} layers, "
         f"{settings.steps} steps, seeds {list(common.seeds(args))})",
         ablation.markdown_table(summary) + "\n\n" + common.table(
             summary, ["variant", "token/position after training"])),
        ("Run", f"{clock}, backend {keras.backend.backend()}; plots: magnitudes.png, dev_loss.png"),
    ])


if __name__ == "__main__":
    main()
