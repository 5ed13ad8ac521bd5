"""Does `compile(jit_compile=True)` (torch.compile) train our model on torch, and faster?

Trains the translator of a preset on random bucketed batches (padding id 0,
so the padding masks flow; several batch sizes and lengths, cycled as the
trainer's buckets are) in one `model.fit`, once eagerly and once with Keras'
`torch.compile` of the train step, each in its own process. Reports the
seconds of each step of the first pass over the shapes (compilation), the
median step of the second half (steady state) and what torch._dynamo did:
frames compiled, graphs, recompiles, graph breaks.

Keras 3.15 / torch 2.11-2.13: the compiled run crashes in torch._dynamo
(`KeyError: 'mask'`) while it explains a recompilation to itself.
`--patch-recompile-reason` makes that explanation tolerate the missing
argument (only the reason text changes, not what is compiled), to measure
what compiling would give; `--recompile-limit` raises
`torch._dynamo.config.recompile_limit` (8), which Keras' shared
`Layer.forward` frame reaches.

    KERAS_BACKEND=torch python -m benchmarks.torch_compile --threads 1
    KERAS_BACKEND=torch python -m benchmarks.torch_compile --threads 1 --patch-recompile-reason
    KERAS_BACKEND=torch python -m benchmarks.torch_compile --threads 1 --patch-recompile-reason \\
        --recompile-limit 64 --modes compiled
"""

import argparse
import json
import os
import subprocess
import sys
import time

SHAPES = "16x32,8x64,16x32,4x96,8x64,16x32"


def _parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="tiny", help="TrainConfig preset (default: tiny)")
    parser.add_argument("--vocabulary-size", type=int, default=200)
    parser.add_argument("--shapes", default=SHAPES,
                        help=f"batch x length of the batches, cycled (default: {SHAPES})")
    parser.add_argument("--steps", type=int, default=36, help="training steps in all (default: 36)")
    parser.add_argument("--modes", nargs="+", choices=("eager", "compiled"), default=["eager", "compiled"])
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--patch-recompile-reason", action="store_true",
                        help="let torch._dynamo's recompilation reason skip arguments another layer's frame lacks")
    parser.add_argument("--recompile-limit", type=int, help="torch._dynamo.config.recompile_limit (torch: 8)")
    parser.add_argument("--one", choices=("eager", "compiled"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _patch_recompile_reason(guards):
    explain = guards.recompilation_reason_for_no_tensor_aliasing_guard

    def tolerant(guard_manager, scope):
        try:
            return explain(guard_manager, scope)
        except KeyError as missing:  # an argument of another layer's compiled frame
            return [f"no-tensor-aliasing guard of a frame with argument {missing}"]

    guards.recompilation_reason_for_no_tensor_aliasing_guard = tolerant


def _run_one(args):
    import numpy as np
    import torch
    import torch._dynamo.convert_frame as convert_frame
    import torch._dynamo.guards as guards
    from torch._dynamo.utils import counters

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.patch_recompile_reason:
        _patch_recompile_reason(guards)
    if args.recompile_limit:
        torch._dynamo.config.recompile_limit = args.recompile_limit
    recompiles = [0]
    explain = convert_frame.get_and_maybe_log_recompilation_reasons

    def counted(*a, **k):
        recompiles[0] += 1
        return explain(*a, **k)

    convert_frame.get_and_maybe_log_recompilation_reasons = counted

    import keras
    from keras_transformer.train_config import PRESETS
    from keras_transformer.trainer import build_translator

    shapes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(",")]
    vocabulary = args.vocabulary_size
    keras.utils.set_random_seed(0)
    model = build_translator(
        vocabulary, **PRESETS[args.preset], max_length=max(length for _, length in shapes), dropout=0.1,
        jit_compile=False,
    )
    # build_translator refuses jit_compile=True on torch (what this measures): set on the compiled model.
    model.jit_compile = args.one == "compiled"
    rng = np.random.default_rng(0)

    def tokens(batch, length):
        ids = rng.integers(1, vocabulary, (batch, length)).astype("int32")
        for row, end in zip(ids, rng.integers(1, length + 1, batch)):
            row[end:] = 0
        return ids

    class Buckets(keras.utils.PyDataset):
        def __len__(self):
            return args.steps

        def __getitem__(self, index):
            batch, length = shapes[index % len(shapes)]
            target = tokens(batch, length)
            return {"encoder_tokens": tokens(batch, length), "decoder_tokens": target}, target

    seconds = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            seconds.append(time.perf_counter() - self.start)

    result = dict(mode=args.one, torch=torch.__version__, keras=keras.__version__,
                  patch_recompile_reason=args.patch_recompile_reason,
                  recompile_limit=torch._dynamo.config.recompile_limit)
    try:
        model.fit(Buckets(), epochs=1, verbose=0, callbacks=[Clock()])
    except Exception as error:  # the crash is the result
        message = error.args[0] if error.args and isinstance(error.args[0], str) else str(error)
        result["error"] = f"{type(error).__name__}: {' '.join(message.split())[:160]}"
    result.update(
        steps=len(seconds),
        first_pass_s=[round(s, 2) for s in seconds[: len(shapes)]],
        steady_median_s=round(float(np.median(seconds[len(seconds) // 2:])), 4) if len(seconds) > 1 else None,
        frames_compiled=counters["frames"]["ok"],
        graphs=counters["stats"]["unique_graphs"],
        recompiles=recompiles[0],
        graph_breaks=sum(counters["graph_break"].values()),
    )
    print("RESULT " + json.dumps(result), flush=True)


def main(argv=None):
    args = _parse_args(argv)
    if args.one:
        return _run_one(args)
    forwarded = list(argv if argv is not None else sys.argv[1:])
    rows = []
    for mode in args.modes:
        process = subprocess.run(
            [sys.executable, "-m", "benchmarks.torch_compile", *forwarded, "--one", mode],
            capture_output=True, text=True, env={**os.environ, "KERAS_BACKEND": "torch"},
        )
        lines = [line for line in process.stdout.splitlines() if line.startswith("RESULT ")]
        if not lines:
            sys.stderr.write(process.stderr[-3000:])
            raise SystemExit(f"the {mode} process failed (status {process.returncode})")
        rows.append(json.loads(lines[-1][len("RESULT "):]))
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'mode':9} {'steps':>5} {'steady median s':>15} {'first pass s':>40} "
          f"{'frames':>6} {'graphs':>6} {'recompiles':>10} {'breaks':>6}  error")
    for row in rows:
        print(f"{row['mode']:9} {row['steps']:>5} {str(row['steady_median_s']):>15} "
              f"{str(row['first_pass_s']):>40} {row['frames_compiled']:>6} {row['graphs']:>6} "
              f"{row['recompiles']:>10} {row['graph_breaks']:>6}  {row.get('error', '')}")


if __name__ == "__main__":
    main()
