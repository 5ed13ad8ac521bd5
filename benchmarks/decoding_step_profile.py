"""Where a compiled decoding step's time goes: XLA's CPU work items (thunks), timed one by one.

    XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true KERAS_BACKEND=jax \
        python -m benchmarks.decoding_step_profile --model runs/es-en --search beam --out DIR

JAX only (its profiler names each of XLA's CPU thunks). Takes `--sentences`
test sentences of middling length, padded as `Translator` pads them, and
runs the whole decoding loop (loop guard on) for exactly `--steps` steps,
untraced to time a step, then under `jax.profiler` to time each thunk.
Prints, and writes to `--out/profile.json` and `profile.md`, the step's time,
the thunks a step and their time grouped by kind (`ynn_fusion`: the
matrix products XLA hands to YNNPACK; `dot`: Eigen's; `transpose_copy_fusion`,
`copy`: data moved; ...), each with what XLA's metadata says it computes.
A kind's time is summed over both CPU threads, so the kinds can add up to
more than the step's wall time.
"""

import argparse
import collections
import glob
import json
import os
import re
import tempfile
import time

import numpy as np


def parse_args(argv=None):
    """The command line of `python -m benchmarks.decoding_step_profile`."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decoding_step_profile",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a `keras-transformer train` output folder")
    parser.add_argument("--search", choices=["greedy", "beam"], default="greedy")
    parser.add_argument("--sentences", type=int, default=8, help="sentences decoded together (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=127, help="decoding steps a run (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=10, help="timed runs, then as many traced (default: %(default)s)")
    parser.add_argument("--out", default="benchmark_results/decoding_step_profile", help="folder for the results")
    return parser.parse_args(argv)


def _thunk_times(trace_folder):
    """Total nanoseconds and counts per thunk name, over XLA's CPU worker threads."""
    from jax._src.lib import _profile_data

    path = glob.glob(f"{trace_folder}/**/*.xplane.pb", recursive=True)[0]
    totals, counts = collections.Counter(), collections.Counter()
    for plane in _profile_data.ProfileData.from_file(path).planes:
        for line in plane.lines:
            if not line.name.startswith("tf_XLAEigen"):
                continue
            for event in line.events:
                if event.name.startswith(("ThunkExecutor", "while", "SlinkyThreadPool")):
                    continue  # containers and waits, not work
                totals[event.name] += event.duration_ns
                counts[event.name] += 1
    return totals, counts


def main(argv=None):
    args = parse_args(argv)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import jax
    import keras

    from keras_transformer.data.corpus import load_bible_pairs
    from keras_transformer.decoding.choices import BeamChoice
    from keras_transformer.decoding.choices import GreedyChoice
    from keras_transformer.decoding.sampler import run_search
    from keras_transformer.translation.translator import Translator

    if keras.backend.backend() != "jax":
        raise SystemExit("decoding_step_profile needs KERAS_BACKEND=jax (its profiler names XLA's thunks).")
    translator = Translator.from_directory(args.model)
    ids = translator._token_ids([pair.source for pair in load_bible_pairs("test")])
    middle = sorted(ids, key=len)[len(ids) // 2 :][: args.sentences]
    source = translator._padded_batch(middle)
    choice = GreedyChoice() if args.search == "greedy" else BeamChoice(4, 0.6)

    def run():
        return run_search(translator.decoder, source, choice, args.steps, stop_at_end=False, no_repeat_ngram_size=3)

    run()
    start = time.perf_counter()
    for _ in range(args.runs):
        run()
    step_us = (time.perf_counter() - start) / args.runs / args.steps * 1e6
    trace_folder = tempfile.mkdtemp(prefix="decoding_step_profile_")
    jax.profiler.start_trace(trace_folder)
    for _ in range(args.runs):
        run()
    jax.profiler.stop_trace()
    totals, counts = _thunk_times(trace_folder)
    steps = args.runs * args.steps
    kinds = collections.Counter()
    for name, ns in totals.items():
        kinds[re.sub(r"[.][0-9]+$", "", name)] += ns
    result = dict(search=args.search, rows=int(source.shape[0]) * choice.width, source_length=int(source.shape[1]),
                  steps=args.steps, step_microseconds=round(step_us, 1),
                  thunks_per_step=round(sum(counts.values()) / steps, 1),
                  thunk_microseconds_per_step=round(sum(totals.values()) / steps / 1e3, 1),
                  kinds={kind: round(ns / steps / 1e3, 1) for kind, ns in kinds.most_common()},
                  thunks={name: round(ns / steps / 1e3, 1) for name, ns in totals.most_common(25)})
    lines = [f"{args.search}, {result['rows']} rows, source {result['source_length']} tokens: "
             f"{result['step_microseconds']} us a step untraced; {result['thunks_per_step']} thunks a step, "
             f"{result['thunk_microseconds_per_step']} us of thunk time (both threads)", "",
             "| kind | us a step |", "|---|---:|"]
    lines += [f"| {kind} | {us} |" for kind, us in list(result["kinds"].items())[:15]]
    print("\n".join(lines))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "profile.json"), "w") as file:
        json.dump(result, file, indent=1)
    with open(os.path.join(args.out, "profile.md"), "w") as file:
        file.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
