"""How should W_Q, W_K, W_V and W_O be initialized? Measured.

Initializations compared, in post-LN (the paper) and pre-LN stacks:
- Glorot per projection (fan_in = fan_out = d_model for each of W_Q, W_K,
  W_V: this package's default);
- a fused [W_Q | W_K | W_V] kernel with the per-slice-correct initializer
  (`fused_qkv=True`, same variance as separate projections);
- the common mistake: Glorot on the fused (d_model, 3 d_model) matrix,
  which counts fan_out three times and halves each slice's variance;
- a depth-scaled output projection W_O (std / sqrt(2 * num_layers), GPT-2);
- a deliberately bad init: N(0, 1) entries in W_Q and W_K.

For each: the attention-logit std at init, the gradient norm of every
layer on one batch at init, and, for a subset, training from there (dev
loss, the gradient norms over the first steps, divergences).

    python tutorials/qkv_init.py --quick     # minutes on a CPU (4 + 4 layers)
    python tutorials/qkv_init.py             # full size (GPU; 12 + 12 layers)
"""

import os

import keras
import numpy as np

import common
from keras_transformer.training import ablation
from keras_transformer import diagnostics
from keras_transformer import training
from keras_transformer.initializers import DepthScaled


def inits(num_layers):
    bad = keras.initializers.RandomNormal(stddev=1.0)
    return {
        "glorot": {},
        "fused, per-slice": {"fused_qkv": True},
        "fused, glorot on fused (mistake)": {"fused_qkv": True, "qkv_initializer": "glorot_uniform"},
        "depth-scaled W_O": {"output_initializer": DepthScaled(num_layers)},
        "bad: N(0,1) W_Q, W_K": {"query_initializer": bad, "key_initializer": bad},
    }


TRAINED = [
    ("post-LN", "glorot"),
    ("post-LN", "fused, glorot on fused (mistake)"),
    ("post-LN", "depth-scaled W_O"),
    ("post-LN", "bad: N(0,1) W_Q, W_K"),
    ("pre-LN", "glorot"),
    ("pre-LN", "bad: N(0,1) W_Q, W_K"),
]


def grid(num_layers):
    result = {}
    for norm, norm_first in (("post-LN", False), ("pre-LN", True)):
        for name, options in inits(num_layers).items():
            result[f"{norm}, {name}"] = {**options, "norm_first": norm_first, "num_layers": num_layers}
    return result


def layer_gradients(norms, prefix):
    names = [name for name in norms if name.startswith(prefix)]
    return [norms[name] for name in sorted(names, key=lambda n: int(n.rsplit("_", 1)[1]))]


def plot_gradients(histories, folder):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, history in histories.items():
        if not history:
            continue
        steps = [entry["step"] for entry in history]
        total = [np.sqrt(sum(v**2 for k, v in entry.items() if k.startswith("gradient_norm/"))) for entry in history]
        axes.semilogy(steps, total, marker="o", label=name)
    axes.set_xlabel("training step")
    axes.set_ylabel("global gradient norm on a fixed dev batch")
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(os.path.join(folder, "gradient_norms.png"), dpi=120)
    plt.close(figure)


def main(argv=None):
    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    folder = common.output_folder(args, "qkv_init")
    clock = common.Clock()
    num_layers = 1 if args.smoke else 4 if args.quick else 12
    settings = common.settings(args, num_layers=num_layers)
    data = ablation.SharedData(settings, folder)
    inputs, labels = data.probe
    loss = training.MaskedSparseCrossentropy()
    variants = grid(num_layers)
    trained = common.subset(args, {f"{norm}, {name}": variants[f"{norm}, {name}"] for norm, name in TRAINED})
    if args.smoke:
        variants = trained

    init_rows = []
    for name, options in variants.items():
        model = ablation.build_variant(settings, options, seed=0)
        stats = diagnostics.attention_statistics(model, inputs)
        norms = diagnostics.gradient_norms(model, inputs, labels, loss)
        encoder = layer_gradients(norms, "encoder_layer_")
        init_rows.append({
            "variant": name,
            "logit std": float(np.mean([s["logit_std"] for s in stats.values()])),
            "attention entropy": float(np.mean([s["entropy"] for s in stats.values()])),
            "grad norm, first encoder layer": encoder[0],
            "grad norm, last encoder layer": encoder[-1],
            "first / last": encoder[0] / encoder[-1],
        })
        keras.backend.clear_session()

    loggers = {}
    every = max(1, settings.steps // 10)

    def callbacks(name, seed):
        logger = diagnostics.DiagnosticsLogger(inputs, labels, loss=loss, every_n_batches=every)
        loggers[(name, seed)] = logger
        return [logger]

    rows = ablation.run_ablation(trained, seeds=common.seeds(args, quick=1), settings=settings,
                                 workdir=folder, callbacks=callbacks, data=data)
    histories = {name: logger.history for (name, seed), logger in loggers.items() if seed == 0}
    plot_gradients(histories, folder)
    common.plot_curves(rows, os.path.join(folder, "dev_loss.png"), f"init, {num_layers}+{num_layers} layers")
    common.report(folder, "How should W_Q, W_K, W_V, W_O be initialized?", [
        (f"At init ({num_layers}+{num_layers} layers, d_model {settings.d_model}; one dev batch)",
         common.table(init_rows, list(init_rows[0]))),
        (f"Trained ({settings.steps} steps, seeds {list(common.seeds(args, quick=1))})",
         ablation.markdown_table(ablation.summarize(rows))),
        ("Run", f"{clock}, backend {keras.backend.backend()}; plots: gradient_norms.png, dev_loss.png"),
    ])


if __name__ == "__main__":
    main()
