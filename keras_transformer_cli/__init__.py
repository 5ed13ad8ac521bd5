"""`keras-transformer`: train, use and study a Transformer translator from the shell.

    keras-transformer train [--corpus FILE | --corpus SOURCE_FILE TARGET_FILE] [--preset tiny|small|base|big] ...
    keras-transformer translate --model DIR [--beam N] [--beam-search kept|pooled] [--max-new-tokens N] "texto" ...
    keras-transformer evaluate --model DIR [--split test|heldout|dev] [--beam N]
    keras-transformer export --model DIR --out DIR [--format savedmodel|ctranslate2]
    keras-transformer serve --model DIR [--model NAME=DIR ...] [--host 127.0.0.1 --port 8080]
    keras-transformer cache [--clear | --prune]
    keras-transformer ablate --variant baseline --variant no_embedding_scale [--seeds 3] ...

This package sits beside the `keras_transformer` package, not inside it, so
that `--help` and a mistyped flag answer at once: importing the package
imports Keras, and Keras imports its backend (TensorFlow takes seconds).
The package is imported only after the arguments are parsed, by the verb
that needs it, and TensorFlow's and XLA's C++ start-up logging is kept out
of the terminal unless `--verbose` or `KERAS_TRANSFORMER_VERBOSE=1`.

When stdout is not a terminal, progress bars and log lines go to stderr and
stdout carries only the results (translations, the score table, the
training summary). Errors in the user's input print one line and exit with
status 2; anything else is a bug and keeps its traceback.
"""

import argparse
import contextlib
import os
import sys
import warnings

from keras_transformer_cli.arguments import add_attention_arguments
from keras_transformer_cli.arguments import add_corpus_arguments
from keras_transformer_cli.arguments import add_decoding_arguments
from keras_transformer_cli.arguments import add_engine_argument
from keras_transformer_cli.arguments import add_search_arguments
from keras_transformer_cli.arguments import add_sentence_arguments
from keras_transformer_cli.arguments import add_train_arguments
from keras_transformer_cli.arguments import batch_size_value
from keras_transformer_cli.arguments import BEAM_WIDTH
from keras_transformer_cli.arguments import CTRANSLATE2_QUANTIZATIONS
from keras_transformer_cli.arguments import ENGINE_HELP
from keras_transformer_cli.arguments import HelpFormatter
from keras_transformer_cli.arguments import KERAS_QUANTIZATIONS
from keras_transformer_cli.arguments import NO_REPEAT_NGRAM
from keras_transformer_cli.arguments import positive_int
from keras_transformer_cli.arguments import QUANTIZE_HELP
from keras_transformer_cli.arguments import SOURCE_LANGUAGE_HELP
from keras_transformer_cli.arguments import TARGET_LANGUAGE_HELP
from keras_transformer_cli.arguments import TRAIN_DESCRIPTION
from keras_transformer_cli.arguments import TRANSLATE_DESCRIPTION
from keras_transformer_cli import cache_command
from keras_transformer_cli import commands
from keras_transformer_cli import search_flags
from keras_transformer_cli import serve
from keras_transformer_cli import startup
from keras_transformer_cli.commands import ABLATE_SETTINGS

PROG = "keras-transformer"
VERBOSE_VARIABLE = "KERAS_TRANSFORMER_VERBOSE"
def build_parser():
    """The argument parser of `keras-transformer`.

    Example:

    >>> args = build_parser().parse_args(["train", "--preset", "tiny"])
    >>> args.command, args.preset
    ('train', 'tiny')
    """
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=HelpFormatter,
        description="Train, use and study a Keras 3 Transformer translator (Spanish -> English by default).",
        epilog=f"`{PROG} VERB --help` describes each verb. Set KERAS_BACKEND=tensorflow, jax or torch "
               "to choose the Keras backend.",
    )
    parser.add_argument("--verbose", action="store_true", default=False,
                        help=f"show TensorFlow's and XLA's start-up logging (also {VERBOSE_VARIABLE}=1)")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="VERB")

    def verb(name, handler, summary, description=None):
        command = subparsers.add_parser(name, help=summary, description=description or summary,
                                      formatter_class=HelpFormatter)
        command.set_defaults(handler=handler)
        # Also after the verb; SUPPRESS keeps the verb from resetting the top-level flag.
        command.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                             help="show TensorFlow's and XLA's start-up logging")
        return command

    train = verb("train", commands.train, "train a translator (Spanish -> English on the embedded corpus by default)",
                 TRAIN_DESCRIPTION)
    add_train_arguments(train)

    translate = verb("translate", commands.translate, "translate text with a trained run (arguments, or stdin one line each)",
                     TRANSLATE_DESCRIPTION)
    translate.add_argument("--model", required=True, help="the --output folder of a training run")
    add_decoding_arguments(translate)
    translate.add_argument("--quantize", choices=KERAS_QUANTIZATIONS, help=QUANTIZE_HELP)
    translate.add_argument("--n-best", type=positive_int, metavar="N",
                           help="the N best translations of each input with their scores, N lines "
                                "`INPUT ||| TEXT ||| SCORE ||| NORMALIZED` an input (INPUT counts from 0, SCORE is "
                                "the log-probability, NORMALIZED the length-normalized score the beam ranked by); "
                                "at most --beam")
    translate.add_argument("--format", choices=("text", "jsonl"), default="text",
                           help="text: a translation a line (or the --n-best lines); jsonl: a JSON object an input, "
                                "with source and hypotheses (text, score, normalized_score), as "
                                "Translator.n_best gives them")
    translate.add_argument("--token-scores", action="store_true",
                           help="with --n-best or --format jsonl: each hypothesis' subword pieces and their "
                                "log-probabilities too")
    translate.add_argument("--source-language", metavar="CODE", help=SOURCE_LANGUAGE_HELP)
    translate.add_argument("--target-language", metavar="CODE", help=TARGET_LANGUAGE_HELP)
    add_attention_arguments(translate)
    add_sentence_arguments(translate)
    add_engine_argument(translate)
    translate.add_argument("--invalid-input", choices=("skip", "replace"), default="skip",
                           help="a line that is not UTF-8 or holds a NUL byte: skip it (an empty output line, "
                                "a one-line error naming the line and byte on stderr, exit status 1), or replace "
                                "the bad bytes by U+FFFD and translate it (counted on stderr)")
    translate.add_argument("--input", metavar="FILE",
                           help="translate a document file, its structure kept, by its extension: plain text "
                                "(paragraphs, blank lines, line breaks), SubRip .srt (cue numbers, timings), HTML "
                                "(.html, .htm: every tag and attribute; inline tags follow their words) or Markdown "
                                "(.md: code, link targets, images)")
    translate.add_argument("--output", metavar="FILE", help="with --input: where the translation goes (default: "
                                                            "stdout); written as it goes")
    translate.add_argument("--input-format", choices=("txt", "srt", "html", "md"),
                           help="with --input: the kind of document, whatever its extension")
    translate.add_argument("text", nargs="*", help="sentences to translate (default: stdin, one line each, "
                                                  "each answered as it arrives)")

    evaluate = verb("evaluate", commands.evaluate, "BLEU and chrF (sacrebleu) on a split of the run's corpus")
    evaluate.add_argument("--model", required=True, help="the --output folder of a training run")
    evaluate.add_argument("--split", choices=("dev", "test", "heldout"), default="test",
                          help="heldout: whole books never trained on (the embedded Bible corpus only)")
    add_decoding_arguments(evaluate)
    evaluate.add_argument("--limit", type=positive_int, help="score only the first N sentences (default: all)")
    add_engine_argument(evaluate)
    add_sentence_arguments(evaluate)
    evaluate.add_argument("--source-language", metavar="CODE", help=SOURCE_LANGUAGE_HELP)
    evaluate.add_argument("--target-language", metavar="CODE", help=TARGET_LANGUAGE_HELP)
    evaluate.add_argument("--quantize", choices=KERAS_QUANTIZATIONS, help=QUANTIZE_HELP)
    add_corpus_arguments(evaluate, from_run=True, languages=False)

    export = verb("export", commands.export,
                  "write a TensorFlow SavedModel that maps strings to translations, or a CTranslate2 model")
    export.add_argument("--model", required=True, help="the --output folder of a training run")
    export.add_argument("--out", required=True, help="folder for the exported model")
    export.add_argument("--format", choices=("savedmodel", "ctranslate2", "marian", "nllb"), default="savedmodel",
                        help="savedmodel (default): strings in, strings out, needs only tensorflow and "
                             "tensorflow-text to serve; ctranslate2: a model directory for the CTranslate2 engine; "
                             "marian: a Hugging Face MarianMTModel folder; nllb: an NLLB-200 or M2M-100 run back "
                             "as its Hugging Face folder (docs/pretrained.md)")
    export.add_argument("--force", action="store_true", help="replace --out if it holds files")
    export.add_argument("--max-new-tokens", type=positive_int,
                        help="savedmodel: longest translation (default: the model's max_length - 1)")
    export.add_argument("--quantize", choices=KERAS_QUANTIZATIONS, help="savedmodel: " + QUANTIZE_HELP)
    export.add_argument("--quantization", choices=CTRANSLATE2_QUANTIZATIONS,
                        help="ctranslate2: weight type on disk (default: float32; CTranslate2 can also "
                             "quantize when it loads the model)")

    imports = verb("import", commands.import_model,
                   "turn a Hugging Face Marian (OPUS-MT), NLLB-200 or M2M-100 model into a run folder")
    imports.add_argument("source", help="a MarianMTModel, NLLB-200 or M2M-100 folder, or a hub id (Helsinki-NLP/"
                                        "opus-mt-es-en, facebook/nllb-200-distilled-600M, facebook/m2m100_418M) "
                                        "when online")
    imports.add_argument("--output", required=True, help="the run folder to write; every verb takes it as --model")
    imports.add_argument("--overwrite", action="store_true", help="replace --output if it holds files")

    serving = verb("serve", serve.serve, "serve translations over HTTP, batching concurrent requests",
                   serve.SERVE_DESCRIPTION)
    serve.add_arguments(serving, positive_int, batch_size_value, ENGINE_HELP, BEAM_WIDTH, NO_REPEAT_NGRAM)
    add_search_arguments(serving, several_limits=True)

    cached = verb("cache", cache_command.cache, "show what the translation program cache holds, or clear it",
                  cache_command.CACHE_DESCRIPTION)
    cache_command.add_arguments(cached)

    ablate = verb("ablate", commands.ablate, "train model variants with several seeds; a mean +- std table")
    ablate.add_argument("--variant", action="append",
                        help="a named variant (baseline, no_embedding_scale, untied, pre_ln, ...) or "
                             "'name:key=value,...' of model options; repeat for several (default: baseline)")
    ablate.add_argument("--seeds", type=positive_int, default=3, help="seeds per variant")
    ablate.add_argument("--out", default="runs/ablate", help="folder for the runs and the table")
    ablate.add_argument("--quick", action="store_true", help="a minutes-long CPU setting (d_model 64, 300 steps)")
    ablate.add_argument("--bleu-sentences", type=int, default=0,
                        help="dev sentences translated for BLEU per run (0: none)")
    for key, text in ABLATE_SETTINGS.items():
        ablate.add_argument(f"--{key.replace('_', '-')}", type=positive_int, help=text)
    add_corpus_arguments(ablate, languages=False)
    return parser


def _resolve_search(args, parser, verbose):
    """The search flags left out take the run's defaults; a bad one exits in one line; `--verbose` says the search."""
    from keras_transformer_runtime.errors import UserInputError

    try:
        search = search_flags.apply_search_defaults(args)
    except UserInputError as error:
        parser.exit(2, f"{PROG}: error: {error}\n")
    if verbose:
        print(f"{PROG}: {search.describe()}", file=sys.stderr, flush=True)


def _in_a_job_of_several_processes():
    package = sys.modules.get("keras_transformer.training.distribute")
    return package is not None and package.in_a_job()


def _one_line_warning(message, category, filename, lineno, line=None):
    return f"{PROG}: warning: {message}\n"


def main(argv=None):
    """Entry point of the `keras-transformer` console script.

    Args:
        argv: the arguments (default: `sys.argv[1:]`).

    Returns:
        0; 1 when `translate` skipped a line it could not read; user errors
        exit with status 2, Ctrl-C with 130.
    """
    from keras_transformer_runtime import timings

    timings.begin()
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = args.verbose = args.verbose or os.environ.get(VERBOSE_VARIABLE, "") not in ("", "0")
    args.start_keras = lambda: startup.start_keras(args, verbose)
    if args.command in ("translate", "evaluate"):
        _resolve_search(args, parser, verbose)
    if args.command == "translate":
        startup.check_translate_arguments(args, parser)
    if hasattr(args, "engine"):
        args.engine = startup.translation_engine(args, parser)
    startup.choose_import_backend(args)
    results = sys.stdout
    # Keras' progress bars assume a terminal: when stdout is a file or a pipe
    # they go, with the log lines, to stderr, and stdout keeps the results.
    progress = sys.stdout if sys.stdout.isatty() else sys.stderr
    format_warning = warnings.formatwarning
    with contextlib.redirect_stdout(progress):
        warnings.formatwarning = _one_line_warning
        try:
            compiled = getattr(args, "engine", None) == "compiled" and args.command in ("translate", "serve")
            if not compiled and args.command != "cache":
                args.start_keras()  # a compiled translate starts Keras only to write its program
            status = args.handler(args, results)
        except KeyboardInterrupt:
            parser.exit(130, f"{PROG}: interrupted; run the same command again to resume.\n")
        except Exception as error:
            from keras_transformer_runtime.errors import UserInputError

            if not isinstance(error, UserInputError):
                raise
            if _in_a_job_of_several_processes():  # JAX's shutdown would wait for the job's other processes
                sys.stderr.write(f"{PROG}: error: {error}\n")
                sys.stderr.flush()
                sys.stdout.flush()
                os._exit(2)
            parser.exit(2, f"{PROG}: error: {error}\n")
        finally:
            warnings.formatwarning = format_warning
    if verbose or timings.wanted():
        print(f"{PROG}: {timings.summary()}", file=sys.stderr)
    return status or 0
