"""Where a training step's time goes: `KERAS_BACKEND=torch python -m benchmarks.profile_step`.

Runs `model.fit` steps of this package's model (a `benchmarks.run`
configuration, synthetic batches) under `torch.profiler` and sorts the
operators' own time into matmuls (what MFU counts), attention kernels,
normalization, softmax/cross-entropy, the optimizer, element-wise work and
the rest. The matmul share bounds MFU: if matmuls take 60 % of the step and
run at the device's peak, MFU is at most 60 %. Writes `results.json` and
`results.md` to `--out`.

Torch only: its profiler names every kernel the step runs, eagerly, with no
compiler fusing them out of sight.
"""

import argparse
import collections

import keras
import numpy as np

from keras_transformer.training import model_flops as flops
from benchmarks.machine import describe_device
from benchmarks.machine import limit_threads
from benchmarks.reference_models import CONFIGS
from benchmarks.reference_models import build_model
from benchmarks.report import OURS
from benchmarks.report import save_results

# Operator name fragments -> category; the first match wins.
CATEGORIES = (
    ("attention", ("scaled_dot_product", "flash", "efficient_attention", "_fused_sdp")),
    ("matmul", ("addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::linear", "baddbmm", "aten::einsum",
                "aten::tensordot")),
    ("normalization", ("layer_norm", "rms_norm")),
    ("softmax and cross-entropy", ("softmax", "nll_loss", "cross_entropy", "logsumexp")),
    ("optimizer", ("_foreach", "adam", "lerp", "addcmul", "addcdiv")),
    ("element-wise", ("aten::add", "aten::mul", "aten::sub", "aten::div", "aten::gelu", "aten::relu", "aten::where",
                      "aten::dropout", "bernoulli", "aten::sqrt", "aten::rsqrt", "aten::pow", "aten::neg",
                      "aten::exp", "aten::threshold", "aten::masked_fill")),
    ("copies and layout", ("aten::copy_", "aten::to", "aten::clone", "aten::cat", "aten::contiguous",
                           "aten::_to_copy", "aten::index", "aten::embedding", "aten::gather", "aten::scatter",
                           "aten::fill_", "aten::zero_", "aten::empty", "aten::stack")),
)


def category(name):
    """The category of a profiler operator name.

    Example:

    >>> category("aten::addmm"), category("aten::native_layer_norm_backward"), category("aten::foo")
    ('matmul', 'normalization', 'other')
    """
    for label, fragments in CATEGORIES:
        if any(fragment in name for fragment in fragments):
            return label
    return "other"


def parse_args(argv=None):
    """The command line of `python -m benchmarks.profile_step`.

    Example:

    >>> parse_args(["--config", "quick"]).steps
    3
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_step", description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small", help="(default: %(default)s)")
    parser.add_argument("--seq-len", type=int, default=128, help="(default: %(default)s)")
    parser.add_argument("--batch-tokens", type=int, default=4096,
                        help="source + target tokens per batch (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps (default: %(default)s)")
    parser.add_argument("--threads", type=int, help="CPU threads (default: torch's own)")
    parser.add_argument("--dropout", type=float, default=0.1, help="(default: %(default)s)")
    parser.add_argument("--out", default="benchmark_results/profile_step")
    return parser.parse_args(argv)


def profile(args):
    """Profiles `args.steps` training steps after one of warm-up; returns the report dict."""
    if keras.backend.backend() != "torch":
        raise RuntimeError("benchmarks.profile_step needs KERAS_BACKEND=torch.")
    import torch

    if args.threads:
        limit_threads(args.threads)
    config = CONFIGS[args.config]
    batch = max(1, args.batch_tokens // (2 * args.seq_len))
    keras.utils.set_random_seed(0)
    model = build_model(OURS, config, args.seq_len, args.dropout)
    model.compile(optimizer=keras.optimizers.Adam(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    tokens = rng.integers(4, config["vocabulary_size"], size=(batch * args.steps, args.seq_len)).astype("int32")
    data = dict(x={"encoder_tokens": tokens, "decoder_tokens": tokens}, y=tokens, batch_size=batch, verbose=0)
    model.fit(**{**data, "x": {k: v[:batch] for k, v in data["x"].items()}, "y": tokens[:batch]})  # warm-up
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]
                                + ([torch.profiler.ProfilerActivity.CUDA] if torch.cuda.is_available() else [])) as prof:
        model.fit(**data)
    on_gpu = torch.cuda.is_available()
    totals = collections.Counter()
    operators = collections.Counter()
    for event in prof.key_averages():
        own = (event.self_device_time_total if on_gpu else event.self_cpu_time_total) / 1e6
        if own <= 0:
            continue
        totals[category(event.key)] += own
        operators[event.key] += own
    total = sum(totals.values())
    per_step_flops = flops.training_flops(
        config["num_layers"], config["num_decoder_layers"], config["d_model"], config["ff_dim"],
        config["vocabulary_size"], args.seq_len, args.seq_len, batch,
    )
    return dict(
        meta=dict(device=describe_device(), config=args.config, seq_len=args.seq_len, batch_size=batch,
                  steps=args.steps, threads=args.threads, dropout=args.dropout,
                  clock="device time" if on_gpu else "CPU time"),
        seconds_per_step=total / args.steps,
        matmul_flops_per_step=per_step_flops,
        categories={name: seconds / args.steps for name, seconds in totals.most_common()},
        top_operators={name: seconds / args.steps for name, seconds in operators.most_common(15)},
    )


def markdown_table(report):
    """The category table, with shares and the matmul rate.

    Example:

    >>> print(markdown_table({"meta": {"config": "small", "seq_len": 128, "batch_size": 16, "steps": 3,
    ...     "device": {"name": "cpu"}, "clock": "CPU time"}, "seconds_per_step": 2.0,
    ...     "matmul_flops_per_step": 1e9, "categories": {"matmul": 1.5, "other": 0.5},
    ...     "top_operators": {}}).splitlines()[4])
    | matmul | 1,500.0 | 75.0 % |
    """
    meta = report["meta"]
    total = report["seconds_per_step"]
    matmul = report["categories"].get("matmul", 0.0)
    lines = [
        f"Config `{meta['config']}`, sequence length {meta['seq_len']}, batch {meta['batch_size']}, "
        f"{meta['steps']} profiled steps on {meta['device']['name']} (operators' own {meta['clock']}, per step).",
        "",
        "| category | ms per step | share |",
        "|---|---:|---:|",
    ]
    for name, seconds in report["categories"].items():
        lines.append(f"| {name} | {seconds * 1e3:,.1f} | {seconds / total:.1%} |".replace("%", " %"))
    lines += [
        "",
        f"Matmul FLOPs per step {report['matmul_flops_per_step'] / 1e9:,.1f} G; over the matmuls' own time "
        f"that is {report['matmul_flops_per_step'] / matmul / 1e9 if matmul else float('nan'):,.1f} GFLOP/s, "
        f"over the whole step {report['matmul_flops_per_step'] / total / 1e9:,.1f} GFLOP/s.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    """Profiles, writes `results.json` and `results.md`, prints the table; returns the report."""
    args = parse_args(argv)
    report = profile(args)
    print(save_results(report, markdown_table(report), args.out))
    return report


if __name__ == "__main__":
    main()
