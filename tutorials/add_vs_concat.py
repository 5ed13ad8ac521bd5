"""Why add positional encodings instead of concatenating them? Measured.

1. Train the translator with positions added (the paper) and concatenated:
   at equal total width (`position_dim` d_model/4 and d_model/2, so the
   token part shrinks) and at equal token width (d_model grows by the
   position part). Several seeds each; quality, parameters and speed.
   Tying is off in every variant, since a concatenated embedding is
   narrower than d_model and cannot serve as the output projection.
2. With `merge="add"` tokens and positions share one space. How much of the
   learned token embeddings lies in the positions' principal subspace, at
   init and after training, against the share a random subspace of the
   same rank would hold? And the principal angles between the two.

    python tutorials/add_vs_concat.py --quick     # minutes on a CPU
    python tutorials/add_vs_concat.py             # full size (GPU)
"""

import os

import keras
import numpy as np

import common
from keras_transformer.training import ablation
from keras_transformer import diagnostics


def variants(d_model):
    return {
        "add": {"tie_embeddings": False},
        f"concat {d_model // 4} of {d_model}": {
            "tie_embeddings": False, "merge": "concat", "position_dim": d_model // 4},
        f"concat {d_model // 2} of {d_model}": {
            "tie_embeddings": False, "merge": "concat", "position_dim": d_model // 2},
        f"concat {d_model // 2}, tokens {d_model} wide": {
            "tie_embeddings": False, "merge": "concat", "position_dim": d_model // 2,
            "d_model": d_model + d_model // 2},
    }


def subspace(layer):
    energy = diagnostics.positional_subspace_energy(layer)
    positions = np.asarray(keras.ops.convert_to_numpy(layer.position_table()), dtype="float64")
    tokens = keras.ops.convert_to_numpy(layer.embeddings).astype("float64")
    tokens = tokens - tokens.mean(axis=0)
    rank = energy["rank"]
    token_basis = np.linalg.svd(tokens, full_matrices=False)[2][:rank].T
    position_basis = np.linalg.svd(positions, full_matrices=False)[2][:rank].T
    angles = np.degrees(diagnostics.principal_angles(token_basis, position_basis))
    return {**energy, "smallest angle (deg)": float(angles[0]), "median angle (deg)": float(np.median(angles))}


def main(argv=None):
    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    folder = common.output_folder(args, "add_vs_concat")
    clock = common.Clock()
    settings = common.settings(args)
    data = ablation.SharedData(settings, folder)
    grid = common.subset(args, variants(settings.d_model))
    energy_rows = []
    model = ablation.build_variant(settings, grid["add"], seed=0)
    for name in ("encoder_embedding", "decoder_embedding"):
        energy_rows.append({"when": "init", "layer": name, **subspace(model.get_layer(name))})
    keras.backend.clear_session()

    def measure(row, model):
        if row["variant"] == "add":
            for name in ("encoder_embedding", "decoder_embedding"):
                energy_rows.append({"when": f"trained, seed {row['seed']}", "layer": name,
                                    **subspace(model.get_layer(name))})

    rows = ablation.run_ablation(grid, seeds=common.seeds(args), settings=settings,
                                 workdir=folder, on_model=measure, data=data)
    summary = ablation.summarize(rows)
    common.plot_curves(rows, os.path.join(folder, "dev_loss.png"), "positions added vs concatenated")
    common.report(folder, "Why add positional encodings instead of concatenating?", [
        (f"Training (base d_model {settings.d_model}, {settings.num_layers}+{settings.num_layers} layers, "
         f"{settings.steps} steps, seeds {list(common.seeds(args))}, untied)",
         ablation.markdown_table(summary)),
        ("Token embeddings in the positions' subspace (merge='add'; rank: 99% of the positions' energy)",
         common.table(energy_rows, ["when", "layer", "rank", "energy", "chance",
                                    "smallest angle (deg)", "median angle (deg)"])),
        ("Run", f"{clock}, backend {keras.backend.backend()}; plot: dev_loss.png"),
    ])


if __name__ == "__main__":
    main()
