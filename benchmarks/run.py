"""Speed and memory of this package against KerasHub's layers and a tutorial-style model.

    python -m benchmarks.run --config small --seq-len 128 --repeats 5 --out results_dir
    python -m benchmarks.run --quick --out /tmp/bench          # tiny config, 2 repeats: a smoke test
    KERAS_BACKEND=jax python -m benchmarks.run --config big --seq-len 512 --mixed-precision bfloat16 --jit-compile

The same encoder-decoder configuration is built three ways
(`benchmarks.reference_models`) and timed on the same synthetic batches:
`model.fit` steps, the encoder's `predict`, and greedy decoding cached and
uncached, with each phase's peak memory, retraces and FLOP/s (MFU on a GPU
whose bf16 peak is known). What each figure means, and why it is measured
that way, is in benchmarks/findings/training-speed.md, "What
`benchmarks.run` measures". All three share one process, or, with
`--process-per-implementation` (the default where a GPU is visible), each
has its own (`benchmarks.per_process`) and the results are merged. Every
implementation is warmed up before any is timed, then the repeats run
round-robin, one of each before the next of any, and medians are reported.

Writes `results.json` (every repeat, the settings) and `results.md`
(Markdown tables with ratios against this package) into `--out`, and prints
the tables. `--render results.json` rewrites `results.md` without measuring.

This module holds the command line and the order of a run (every sequence
length, every phase, the report); the device and the process are in
`benchmarks.machine`, how each phase is timed in `benchmarks.phases`.
"""

import argparse
import datetime
import gc
import json
import os
import platform
import sys
import time
import warnings

import keras

from benchmarks import per_process
from benchmarks.machine import describe_device
from benchmarks.machine import hide_gpus_from_tensorflow
from benchmarks.machine import limit_threads
from benchmarks.phases import Subject
from benchmarks.phases import time_decoding
from benchmarks.phases import time_encoders
from benchmarks.phases import time_training
from benchmarks.phases import warm_up_process
from benchmarks.reference_models import CONFIGS
from benchmarks.reference_models import IMPLEMENTATIONS
from benchmarks.report import write_report
from keras_transformer.training.train_config import check_jit_compile

QUICK = dict(
    config="quick", seq_len=[16], repeats=2, steps=2, batch_tokens=256, decode_batch=2, new_tokens=8, encode_repeats=2
)


def parse_args(argv=None, prog="python -m benchmarks.run"):
    """Parses the command line of `python -m benchmarks.run`.

    Args:
        argv: list of str, or None for `sys.argv[1:]`.
        prog: str, the program name in usage and errors.

    Returns:
        An `argparse.Namespace`; `--quick` changes the defaults of the size
        options (ones given explicitly still apply).

    Example:

    >>> args = parse_args(["--quick", "--repeats", "1", "--out", "/tmp/b"])
    >>> args.config, args.repeats
    ('quick', 1)
    """
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="small",
                        help="small: 4+4 layers, d_model 256; base: 6+6, 512; big: 6+6, 1024 (default: %(default)s)")
    parser.add_argument("--seq-len", type=int, nargs="+", default=[128],
                        help="source and target length of every example; several allowed (default: 128)")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats, median reported (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=4, help="training steps per repeat (default: %(default)s)")
    parser.add_argument("--batch-tokens", type=int,
                        help="source + target tokens per training batch (default: 4096 on a CPU, 65536 on a GPU)")
    parser.add_argument("--encode-repeats", type=int, default=10,
                        help="timed repeats of encoder inference, which is cheap (default: %(default)s)")
    parser.add_argument("--decode-batch", type=int, default=8, help="sources decoded together (default: %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=256,
                        help="tokens generated per source (default: %(default)s)")
    parser.add_argument("--decode-repeats", type=int,
                        help="timed repeats of each decoding loop (default: --repeats)")
    parser.add_argument("--uncached-new-tokens", type=int, default=32,
                        help="steps of the uncached loop timed, at most --new-tokens; each runs the whole model on "
                             "the full --new-tokens prefix, so each costs the same (default: %(default)s)")
    parser.add_argument("--implementations", nargs="+", choices=IMPLEMENTATIONS, default=list(IMPLEMENTATIONS))
    parser.add_argument("--uncached-implementations", nargs="+", choices=IMPLEMENTATIONS,
                        default=list(IMPLEMENTATIONS),
                        help="implementations whose uncached loop is timed; the tutorial's is the baseline of "
                             "cached decoding (default: all)")
    parser.add_argument("--encode-to-host-implementations", nargs="+", choices=IMPLEMENTATIONS,
                        default=list(IMPLEMENTATIONS),
                        help="implementations whose encoder is also timed with its whole outputs copied to the "
                             "host (default: all)")
    parser.add_argument("--phases", nargs="+", choices=("train", "encode", "decode"),
                        default=["train", "encode", "decode"])
    parser.add_argument("--mixed-precision", choices=("float16", "bfloat16"),
                        help="Keras mixed precision policy (softmax, layer norm and logits stay float32)")
    parser.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=None,
                        help="XLA for fit and the decoding step (default: Keras' 'auto' for fit; "
                             "the decoding step compiled on JAX and TensorFlow)")
    parser.add_argument("--dropout", type=float, default=0.1, help="(default: %(default)s, the paper's)")
    parser.add_argument("--fused-qkv", action=argparse.BooleanOptionalAction, default=True,
                        help="one Q/K/V kernel in this package's attention (default: on)")
    parser.add_argument("--threads", type=int,
                        help="CPU threads per backend (TensorFlow, torch, XLA); 1 makes CPU time a "
                             "stable measure on a shared machine (default: the backend's own)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny config, sequence 16, 2 repeats: checks that everything runs")
    parser.add_argument("--process-per-implementation", action=argparse.BooleanOptionalAction, default=None,
                        help="measure each implementation in its own process and merge the results "
                             "(default: on where a GPU is visible)")
    parser.add_argument("--resume", action="store_true",
                        help="with --process-per-implementation: keep the results of an implementation already "
                             "in --out/IMPLEMENTATION from the same command, measure the others")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmark_results", help="folder for results.json and results.md")
    parser.add_argument("--render", metavar="RESULTS_JSON",
                        help="measure nothing: rewrite results.md (and the derived numbers) from a results.json")
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--quick" in argv:
        parser.set_defaults(**QUICK)  # options given explicitly still win
    args = parser.parse_args(argv)
    args.argv = argv
    args.decode_repeats = args.decode_repeats or args.repeats
    for name in ("repeats", "steps", "encode_repeats", "decode_batch", "new_tokens", "decode_repeats",
                 "uncached_new_tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    if min(args.seq_len) < 1:
        parser.error(f"--seq-len must be >= 1, got {args.seq_len}")
    return args


def benchmark_seq_len(seq_len, args, device, log=print):
    """Every implementation and phase at one sequence length, repeats interleaved.

    All implementations are built first (each one's build, compile and
    warm-up epoch measured for memory; on a CPU after an untimed stand-in
    has taken the one-off growth), then each phase times them in turn, one
    repeat of each before the next repeat of any.

    Args:
        seq_len: int, source and target length.
        args: the parsed command line.
        device: dict from `describe_device`.
        log: function printing progress.

    Returns:
        list of dicts, one per implementation (see `results.json`).
    """
    started = time.perf_counter()
    subjects = []
    if device["accelerator"] is None and not args.quick:
        # A stand-in, built first and kept until the end, untimed and not
        # reported: on a CPU, where memory is the process's RSS growth, it
        # takes the one-off growth (allocator arenas, kernel caches) that
        # the first implementation would otherwise be charged (~0.5 GB on
        # TensorFlow at the small config).
        stand_in = Subject(args.implementations[0], seq_len, args, device)
        log(f"    built a stand-in {args.implementations[0]} for the one-off memory growth "
            f"({time.perf_counter() - started:.0f} s)")
    for implementation in args.implementations:
        subjects.append(Subject(implementation, seq_len, args, device))
        log(f"    built {implementation} ({time.perf_counter() - started:.0f} s)")
    phases = (
        ("train", lambda: time_training(subjects, args, device, seq_len)),
        ("encode", lambda: time_encoders(subjects, args, seq_len)),
        ("decode", lambda: time_decoding(subjects, args, seq_len)),
    )
    for phase, timed in phases:
        if phase in args.phases:
            timed()
            log(f"    {phase} timed ({time.perf_counter() - started:.0f} s)")
    results = [subject.result for subject in subjects]
    del subjects
    stand_in = None
    gc.collect()
    keras.backend.clear_session()
    return results


def run(args):
    """Runs every implementation and sequence length, writes results.json and results.md.

    Args:
        args: from `parse_args`.

    Returns:
        The report dict written to `results.json`.
    """
    check_jit_compile(args.jit_compile)  # torch: refused, benchmarks/findings/training-speed.md "torch.compile"
    if keras.backend.backend() != "tensorflow":
        hide_gpus_from_tensorflow()
    if args.threads:
        limit_threads(args.threads)
    # The uncached loops start from a one-token prefix: a softmax over one key.
    warnings.filterwarnings("ignore", message="You are using a softmax over axis")
    device = describe_device()
    import keras_hub

    results = []
    # With one implementation in the process there is no one else to charge
    # library start-up to, and its own warm-up epochs come before any timing.
    if not args.quick and len(args.implementations) > 1:
        started = time.perf_counter()
        warm_up_process(args)
        print(f"[{device['backend']}] process warmed up ({time.perf_counter() - started:.0f} s)", flush=True)
    for seq_len in args.seq_len:
        print(f"[{device['backend']}] seq_len {seq_len}: {', '.join(args.implementations)}", flush=True)
        results += benchmark_seq_len(seq_len, args, device, log=lambda text: print(text, flush=True))
    report = dict(
        meta=dict(
            date=datetime.datetime.now().isoformat(timespec="seconds"),
            arguments=args.argv,
            device=device,
            keras=keras.__version__,
            keras_hub=keras_hub.__version__,
            python=platform.python_version(),
            config=args.config,
            config_values=CONFIGS[args.config],
            precision=f"mixed_{args.mixed_precision}" if args.mixed_precision else "float32",
            jit_compile="auto" if args.jit_compile is None else args.jit_compile,
            **{name: getattr(args, name) for name in ("dropout", "fused_qkv", "repeats", "steps", "encode_repeats",
                                                      "decode_repeats", "uncached_new_tokens", "seed", "threads")},
        ),
        results=results,
    )
    print(write_report(report, args.out))
    print(f"written to {os.path.join(args.out, 'results.json')} and results.md", flush=True)
    return report


def main(argv=None, prog="python -m benchmarks.run"):
    """Entry point of `python -m benchmarks.run`.

    Args:
        argv: list of str, or None for `sys.argv[1:]`.
        prog: str, the program name in usage and errors.

    Returns:
        0, or 1 when an implementation measured in its own process failed.
    """
    args = parse_args(argv, prog)
    if args.render:
        with open(args.render) as f:
            report = json.load(f)
        print(write_report(report, os.path.dirname(os.path.abspath(args.render))))
        return 0
    if args.process_per_implementation is None:
        args.process_per_implementation = per_process.gpu_visible() and len(args.implementations) > 1
    if args.process_per_implementation:
        report = per_process.run_per_process(args)
        return 1 if report["meta"].get("failed") else 0
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
