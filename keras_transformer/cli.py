"""`keras-transformer`: the command line.

    keras-transformer train [--preset tiny|small|base|big] [--output DIR] [--distribute data|model] ...
    keras-transformer translate --model DIR [--beam N] "texto" ...
    keras-transformer evaluate --model DIR [--split test|heldout|dev] [--beam N]
    keras-transformer export --model DIR --out DIR
    keras-transformer ablate --variant baseline --variant no_embedding_scale [--seeds 3] ...
    keras-transformer bench [--quick] [--config small|base|big] [--seq-len 128 512] ...   (source checkout only)

Errors in the user's input print one line and exit with status 2; anything
else is a bug and keeps its traceback.
"""

import argparse
import json
import sys


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value


def _add_train_arguments(parser):
    from keras_transformer.trainer import PRESETS

    parser.add_argument("--output", default="runs/es-en", help="folder for model, vocabulary, config, logs (default: %(default)s)")
    parser.add_argument("--corpus", help="gzipped TSV corpus (default: the embedded Bible corpus)")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="model size (default: base on a GPU, tiny on a CPU)")
    for name in ("num-layers", "d-model", "num-heads", "ff-dim"):
        parser.add_argument(f"--{name}", type=_positive_int, help="overrides the preset")
    parser.add_argument("--dropout", type=_fraction, default=0.1)
    parser.add_argument("--max-length", type=_positive_int, default=128, help="tokens per sequence (default: %(default)s)")
    parser.add_argument("--vocabulary-size", type=_positive_int, default=8000)
    parser.add_argument("--batch-tokens", type=_positive_int, default=4096, help="tokens per batch (default: %(default)s)")
    parser.add_argument("--epochs", type=_positive_int, help="virtual epochs (default depends on the preset)")
    parser.add_argument("--steps-per-epoch", type=_positive_int, help="steps per virtual epoch; a backup is kept after each")
    parser.add_argument("--warmup-steps", type=_positive_int)
    parser.add_argument("--label-smoothing", type=_fraction, default=0.1)
    parser.add_argument("--mixed-precision", choices=("float16", "bfloat16"))
    parser.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=None,
                        help="XLA-compile the train step (default: Keras decides)")
    parser.add_argument("--bucket", action=argparse.BooleanOptionalAction, default=True,
                        help="batch sequences of similar length (default: on)")
    parser.add_argument("--bucket-width", type=_positive_int, default=8,
                        help="padded lengths are multiples of this (and --max-length); one compiled program "
                             "per length on JAX, so 32 on a GPU (default: %(default)s)")
    parser.add_argument("--input-pipeline", choices=("auto", "tf.data", "python"), default="auto",
                        help="tf.data, or python: a keras.utils.PyDataset and the sentencepiece library, "
                             "no TensorFlow; the same batches (default: auto = tf.data where TensorFlow "
                             "imports)")
    parser.add_argument("--flash-attention", action=argparse.BooleanOptionalAction, default=None,
                        help="--no-flash-attention: the explicit float32-softmax attention instead of the "
                             "backend's fused kernel, the fallback if a fused kernel gives NaN; a resumed "
                             "run may change it (default: the backend decides)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--distribute", choices=("data", "model"),
                        help="train on all visible devices: data = data parallel (JAX DataParallel, "
                             "TensorFlow MirroredStrategy), model = attention/feed-forward kernels split "
                             "across devices (JAX ModelParallel); the batch stays the global batch")
    parser.add_argument("--overwrite", action="store_true", help="start again even if --output holds a run")


def _train(args):
    from keras_transformer.trainer import TrainConfig
    from keras_transformer.trainer import train_translator

    options = {k: v for k, v in vars(args).items() if k not in ("command", "overwrite", "handler")}
    options["jit_compile"] = "auto" if args.jit_compile is None else args.jit_compile
    summary = train_translator(TrainConfig(**options), overwrite=args.overwrite)
    print("summary: " + json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()}))
    print(
        f"train loss {summary['train_loss']:.3f} | dev loss {summary['dev_loss']:.3f} | "
        f"dev token accuracy {summary['dev_token_accuracy']:.1%} | "
        f"{summary['tokens_per_second']:,.0f} tokens/s | {summary['wall_seconds'] / 60:.1f} min | "
        f"saved in {args.output}"
    )


def _translator(args):
    from keras_transformer.translator import Translator

    try:
        return Translator.from_directory(args.model, beam_width=args.beam)
    except (FileNotFoundError, ValueError) as error:
        from keras_transformer.trainer import TrainingError

        raise TrainingError(str(error))


def _translate(args):
    translator = _translator(args)
    texts = args.text or [line.rstrip("\n") for line in sys.stdin]
    for translation in translator(texts):
        print(translation)


def _evaluate(args):
    import os

    from keras_transformer.data.corpus import load_bible_pairs
    from keras_transformer.evaluation import evaluate_pairs

    pairs = load_bible_pairs(args.split, path=args.corpus)[: args.limit]
    result = evaluate_pairs(_translator(args), pairs)
    print(f"{'split':<10}{'beam':>6}{'sentences':>11}{'BLEU':>8}{'chrF':>8}")
    print(f"{args.split:<10}{args.beam:>6}{result['sentences']:>11}{result['bleu']:>8.2f}{result['chrf']:>8.2f}")
    print(result["bleu_signature"])
    path = os.path.join(args.model, f"evaluation-{args.split}-beam{args.beam}.json")
    with open(path, "w") as f:
        json.dump({**result, "split": args.split, "beam": args.beam}, f, indent=2, ensure_ascii=False)
    print(f"written to {path}")


def _export(args):
    import os
    import subprocess

    import keras

    from keras_transformer.trainer import TrainingError

    if not all(_importable(name) for name in ("tensorflow", "tensorflow_text")):
        raise TrainingError(
            "export writes a TensorFlow SavedModel and needs tensorflow and tensorflow-text "
            "(pip install tensorflow tensorflow-text); train, translate and evaluate run without them."
        )
    if not os.path.isfile(os.path.join(args.model, "model.keras")):
        raise TrainingError(f"--model {args.model!r} holds no model.keras: pass the --output folder of a training run.")
    if keras.backend.backend() != "tensorflow":
        # Export goes through TensorFlow whatever backend trained the model.
        command = [sys.executable, "-m", "keras_transformer.cli", "export", "--model", args.model, "--out", args.out]
        if args.max_new_tokens:
            command += ["--max-new-tokens", str(args.max_new_tokens)]
        result = subprocess.run(command, env={**os.environ, "KERAS_BACKEND": "tensorflow"})
        if result.returncode:
            raise TrainingError(f"export under the TensorFlow backend failed (exit code {result.returncode}).")
        return
    from keras_transformer.export import export_translator

    export_translator(args.model, args.out, args.max_new_tokens)
    print(f"SavedModel written to {args.out} (signature 'serving_default': texts -> translations; "
          f"raw logits model in {os.path.join(args.out, 'logits')})")


def _importable(name):
    """Whether `import name` can find the package, without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[name] is None (import blocked)
        return False


def _ablate(args):
    import dataclasses

    from keras_transformer import ablation
    from keras_transformer.trainer import TrainingError

    try:
        variants = dict(ablation.parse_variant(text) for text in args.variant or ["baseline"])
    except ValueError as error:
        raise TrainingError(f"--variant: {error}")
    settings = ablation.QUICK if args.quick else ablation.AblationSettings()
    overrides = {
        key: getattr(args, key)
        for key in ("corpus", "steps", "eval_every", "d_model", "num_layers", "num_heads", "ff_dim",
                    "max_length", "vocabulary_size", "batch_tokens", "train_pairs", "dev_pairs")
        if getattr(args, key) is not None
    }
    settings = dataclasses.replace(settings, **overrides)
    if settings.d_model % settings.num_heads:
        raise TrainingError(f"--d-model {settings.d_model} is not divisible by --num-heads {settings.num_heads}.")
    rows = ablation.run_ablation(
        variants, seeds=range(args.seeds), settings=settings, workdir=args.out,
        bleu_sentences=args.bleu_sentences,
    )
    print(ablation.write_results(rows, args.out))
    print(f"runs, summary and table in {args.out}/results.json and results.md")


def _bench(args):
    """Forwards to `python -m benchmarks.run`, which lives beside the package, not in it."""
    import os

    from keras_transformer.trainer import TrainingError

    # `benchmarks/` is a top-level folder of the repository, not installed
    # with the package: an editable install (`pip install -e .`) finds it
    # next to `keras_transformer/`; a wheel install has no benchmarks.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isfile(os.path.join(root, "benchmarks", "run.py")):
        raise TrainingError(
            f"bench needs a source checkout: no benchmarks/run.py next to {os.path.dirname(__file__)} "
            "(the benchmarks are not part of the installed package). Clone the repository, "
            "`pip install -e .`, and run `keras-transformer bench` or `python -m benchmarks.run` there."
        )
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks import run

    run.main(args.bench_arguments, prog="keras-transformer bench")


def build_parser():
    """The argument parser of `keras-transformer`.

    Example:

    >>> args = build_parser().parse_args(["train", "--preset", "tiny"])
    >>> args.command, args.preset
    ('train', 'tiny')
    """
    parser = argparse.ArgumentParser(prog="keras-transformer", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train a Spanish -> English translator on the embedded corpus")
    _add_train_arguments(train)
    train.set_defaults(handler=_train)

    translate = commands.add_parser("translate", help="translate Spanish text (arguments, or stdin one per line)")
    translate.add_argument("--model", required=True, help="the --output folder of a training run")
    translate.add_argument("--beam", type=_positive_int, default=1, help="beam width; 1 is greedy (default)")
    translate.add_argument("text", nargs="*", help="sentences to translate (default: read stdin)")
    translate.set_defaults(handler=_translate)

    evaluate = commands.add_parser("evaluate", help="BLEU and chrF on a split of the corpus")
    evaluate.add_argument("--model", required=True, help="the --output folder of a training run")
    evaluate.add_argument("--split", choices=("dev", "test", "heldout"), default="test",
                          help="heldout: whole books never trained on (default: %(default)s)")
    evaluate.add_argument("--beam", type=_positive_int, default=1)
    evaluate.add_argument("--limit", type=_positive_int, help="score only the first N sentences")
    evaluate.add_argument("--corpus", help="gzipped TSV corpus (default: the embedded one)")
    evaluate.set_defaults(handler=_evaluate)

    export = commands.add_parser("export", help="write a TensorFlow SavedModel that maps strings to translations")
    export.add_argument("--model", required=True, help="the --output folder of a training run")
    export.add_argument("--out", required=True, help="folder for the SavedModel")
    export.add_argument("--max-new-tokens", type=_positive_int, help="longest translation (default: max_length - 1)")
    export.set_defaults(handler=_export)

    ablate = commands.add_parser("ablate", help="train model variants with several seeds; mean ± std table")
    ablate.add_argument("--variant", action="append",
                        help="a named variant (baseline, no_embedding_scale, untied, pre_ln, ...) or "
                             "'name:key=value,...' of model options; repeat for several (default: baseline)")
    ablate.add_argument("--seeds", type=_positive_int, default=3, help="seeds per variant (default: %(default)s)")
    ablate.add_argument("--out", default="runs/ablate", help="folder for the runs and the table (default: %(default)s)")
    ablate.add_argument("--quick", action="store_true", help="a minutes-long CPU setting (d_model 64, 300 steps)")
    ablate.add_argument("--bleu-sentences", type=int, default=0, help="dev sentences translated for BLEU per run")
    ablate.add_argument("--corpus", help="gzipped TSV corpus (default: the embedded one)")
    for flag in ("steps", "eval-every", "d-model", "num-layers", "num-heads", "ff-dim", "max-length",
                 "vocabulary-size", "batch-tokens", "train-pairs", "dev-pairs"):
        ablate.add_argument(f"--{flag}", type=_positive_int)
    ablate.set_defaults(handler=_ablate)

    # Its options belong to benchmarks/run.py and are passed through as they are.
    bench = commands.add_parser("bench", add_help=False,
                                help="speed and memory against KerasHub and a tutorial-style model "
                                     "(python -m benchmarks.run; `bench --help` for its options)")
    bench.set_defaults(handler=_bench)
    return parser


def main(argv=None):
    """Entry point of the `keras-transformer` console script."""
    from keras_transformer.trainer import TrainingError

    parser = build_parser()
    args, unparsed = parser.parse_known_args(argv)
    if args.command == "bench":
        args.bench_arguments = unparsed
    elif unparsed:
        parser.error(f"unrecognized arguments: {' '.join(unparsed)}")
    try:
        args.handler(args)
    except TrainingError as error:
        parser.exit(2, f"keras-transformer: error: {error}\n")
    except KeyboardInterrupt:
        parser.exit(130, "keras-transformer: interrupted; run the same command again to resume.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
