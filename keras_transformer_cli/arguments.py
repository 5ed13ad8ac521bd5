"""The flags the verbs share, the types their values must have, and their help texts.

`keras_transformer_cli.build_parser` assembles the verbs from these; a
constant that mirrors the package's (a preset name, a quantization) is
here so that `--help` never imports Keras, and a test checks that the two
agree.
"""

import argparse

from keras_transformer_runtime.search_defaults import DEFAULT_MAX_OUTPUT_RATIO
from keras_transformer_runtime.search_defaults import OUTPUT_SLACK

# The choices of `train --preset`; `keras_transformer.training.presets.PRESETS`
# holds their sizes (a test checks that the two agree).
PRESET_NAMES = ("tiny", "small", "base", "big")
# Translator's DEFAULT_NO_REPEAT_NGRAM_SIZE, DEFAULT_BEAM_WIDTH and
# DEFAULT_BATCH_SIZE (a test checks they agree).
NO_REPEAT_NGRAM = 3
BEAM_WIDTH = 4
BATCH_SIZE = "auto"
# keras_transformer.translation.ctranslate2_model.QUANTIZATIONS (a test checks they agree).
CTRANSLATE2_QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16",
                             "float32")
# keras_transformer.training.fine_tuning.FINE_TUNING_DEFAULTS and LORA_DEFAULTS (a test checks they agree).
FINE_TUNING_SUMMARY = "3 x 100 steps, 50 warm-up steps, peak learning rate 0.002"
LORA_LEARNING_RATE = 1e-2
LORA_TARGETS = ("query", "value", "embeddings")
# keras_transformer.lora.TARGETS (a test checks they agree).
LORA_TARGET_NAMES = ("query", "key", "value", "output", "embeddings")
# keras_transformer_runtime.documents.sentences.TRAINED_RUN_SENTENCE_TOKENS (a test checks they agree).
TRAINED_RUN_SENTENCE_TOKENS = 32
# keras_transformer.quantization.MODES (a test checks they agree).
KERAS_QUANTIZATIONS = ("int8", "int4")
QUANTIZE_HELP = ("quantize the model with Keras after loading it: int8 keeps BLEU at a quarter of the weights' "
                 "bytes and decodes faster on the compiled engine, slower on the Keras engine on torch; int4 "
                 "costs some BLEU (see docs/translating.md and docs/keras-workflows.md)")
TARGET_LANGUAGE_HELP = ("a multi-target model's language to write (fra: >>fra<< before each sentence without a "
                        "code of its own; an NLLB-200 run: eng_Latn; an M2M-100 run: en); such a model refuses a "
                        "sentence without one")
SOURCE_LANGUAGE_HELP = ("an NLLB-200 or M2M-100 run's source language (spa_Latn, es), or auto (translate: each "
                        "line's own, detected; needs keras-transformer[documents]); other runs read any source "
                        "they were trained on")
TRAIN_DESCRIPTION = """\
Trains a translator on the Spanish -> English Bible verse pairs embedded in
the package, or on your own --corpus (a TSV file, or two aligned text
files), and leaves the model, its vocabulary, its config and its logs in
--output. Run the same command again to resume an interrupted run; raise
--epochs to train a finished one further. --from RUN_FOLDER fine-tunes a
trained run on your corpus instead of starting from random weights.
After two virtual epochs the run logs how long it should take in all.

The default preset is tiny: 2+2 layers, d_model 128, 4 heads,
feed-forward 512, a 4,000-piece vocabulary, 1.95 M parameters. Its
training fits the hardware:
  on a CPU, 16 x 100 steps of about 4,096 tokens a side;
  on a GPU, 12 x 250 steps of about 8,192 tokens a side in bfloat16.
How long that takes and what it scores, per machine: see docs/training.md.
base (6+6 layers, d_model 512) trains with --preset base.
"""
TRANSLATE_DESCRIPTION = """\
Translates each argument, or each line of stdin as it arrives, with a run
folder: one trained here, or one imported from Hugging Face
(`keras-transformer import`).

With no search flag, a run decodes with its own defaults: a run trained
here with this package's beam search (kept, beam 4, length penalty 0.6,
the 3-gram guard); an imported run as transformers' generate() does with
the model's generation_config.json (pooled: its num_beams, max_length,
length_penalty, early_stopping, no_repeat_ngram_size), kept in the run as
generation.json. Each flag given overrides its setting; --verbose says
which search ran and where its settings came from.
"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the descriptions' line breaks and appends every real default."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(default)" in text or any(action.default is nothing for nothing in (None, False, argparse.SUPPRESS)):
            return text
        if action.option_strings and action.nargs != 0:
            return f"{text} (default: %(default)s)"
        return text


def _int_at_least(low, wording):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"expected {wording}, got {text!r}")
        return value

    return parse


positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "an integer >= 0")


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _non_negative_float(text):
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _regular_expression(text):
    import re

    try:
        re.compile(text)
    except re.error as error:
        raise argparse.ArgumentTypeError(f"not a regular expression: {error}") from None
    return text


def _lora_targets(text):
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in LORA_TARGET_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected names among {', '.join(LORA_TARGET_NAMES)}, comma-separated; got {text!r}")
    return names


def batch_size_value(text):
    """`--batch-size`: "auto" or a positive integer."""
    return "auto" if text == "auto" else positive_int(text)


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value


class _OneOrTwoPaths(argparse.Action):
    """`--corpus FILE` (a TSV) or `--corpus SOURCE_FILE TARGET_FILE` (aligned text files)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if len(values) > 2:
            raise argparse.ArgumentError(
                self, f"takes one TSV file or two aligned text files (source, target), got {len(values)} paths"
            )
        setattr(namespace, self.dest, values[0] if len(values) == 1 else list(values))


def add_corpus_arguments(parser, from_run=False, languages=True):
    """The flags of `ParallelCorpus`; with `from_run`, a flag not given takes the run's setting."""
    run = " (default: the run's, from its config.json)" if from_run else ""
    paths = dict(nargs="+", action=_OneOrTwoPaths, metavar=("FILE", "TARGET_FILE"))
    parser.add_argument("--corpus", **paths, help=(
        "your parallel corpus, UTF-8, gzipped or not: one TSV file (source<TAB>target, no header; further "
        "columns are more references) or two aligned text files, source then target, one sentence a line"
        + (run or " (default: the embedded Spanish -> English Bible corpus)")))
    for split in ("dev", "test"):
        parser.add_argument(f"--{split}", **paths, help=(
            f"{split} pairs in the format of --corpus" + (run or f" (default: --{split}-fraction of --corpus)")))
    for split in ("dev", "test"):
        parser.add_argument(f"--{split}-fraction", type=_fraction, help=(
            f"share of --corpus sent to {split}, picked by a hash of the source text, so the same in every run"
            + (run or " (default: 0.02)")))
    flag = dict(action="store_true", default=None if from_run else False)
    parser.add_argument("--header", **flag, help="the TSV's first line is a header (skipped)" + run)
    parser.add_argument("--skip-bad-lines", **flag, help=(
        "skip lines with the wrong number of columns, an empty side or invalid UTF-8, and report how many, "
        "instead of stopping at the first" + run))
    if languages:
        for side, example in (("source", "de"), ("target", "en")):
            parser.add_argument(f"--{side}-language", help=(
                f"name of the {side} language, e.g. {example}: a label for --output's default and the summary"))


def add_train_arguments(parser):
    """The flags of `train`: the corpus, the model's sizes, the schedule, `--from` and `--lora`."""
    parser.add_argument("--output", help="folder for the model, vocabulary, config and logs (default: "
                                         "runs/SOURCE-TARGET, e.g. runs/es-en for the embedded corpus; "
                                         "runs/NAME after the corpus file without --source/target-language)")
    add_corpus_arguments(parser)
    parser.add_argument("--preset", choices=PRESET_NAMES, help="model size (default: tiny)")
    parser.add_argument("--num-layers", type=positive_int, help="encoder and decoder layers (default: the preset's)")
    parser.add_argument("--d-model", type=positive_int, help="model width (default: the preset's)")
    parser.add_argument("--num-heads", type=positive_int, help="attention heads; must divide --d-model "
                        "(default: the preset's)")
    parser.add_argument("--ff-dim", type=positive_int, help="feed-forward hidden units (default: the preset's)")
    parser.add_argument("--dropout", type=_fraction, default=0.1, help="residual and embedding dropout")
    parser.add_argument("--max-length", type=positive_int,
                        help="tokens per sequence; longer pairs are truncated (default: 128, or the --from run's)")
    parser.add_argument("--vocabulary-size", type=positive_int,
                        help="pieces of the joint source-target SentencePiece vocabulary (default: 4000 for tiny, "
                             "8000 for the other presets)")
    parser.add_argument("--batch-tokens", type=positive_int,
                        help="tokens per batch and side, padding included (default: 4096; 8192 for tiny on a GPU)")
    parser.add_argument("--epochs", type=positive_int,
                        help="virtual epochs; a backup is kept after each (default: 16 for tiny, 8 for small, "
                             "20 for base and big; 12 for tiny on a GPU)")
    parser.add_argument("--steps-per-epoch", type=positive_int,
                        help="optimizer steps per virtual epoch (default: 100 for tiny and small, "
                             "500 for base and big; 250 for tiny on a GPU)")
    parser.add_argument("--warmup-steps", type=positive_int,
                        help="linear warm-up of the paper's learning-rate schedule (default: 400 for tiny and "
                             "small, 4000 for base and big; 1000 for tiny on a GPU)")
    parser.add_argument("--label-smoothing", type=_fraction, default=0.1, help="as in the paper")
    parser.add_argument("--mixed-precision", choices=("float32", "float16", "bfloat16"),
                        help="compute in this dtype, keep float32 weights (default: bfloat16 on a GPU with bf16 "
                             "tensor cores: A100, L4, L40S, H100, H200; float32 elsewhere)")
    parser.add_argument("--jit-compile", action=argparse.BooleanOptionalAction, default=None,
                        help="XLA-compile the train step (jax, tensorflow; refused on torch; default: Keras decides, "
                             "which is eager on torch and on TensorFlow without a GPU)")
    parser.add_argument("--bucket", action=argparse.BooleanOptionalAction, default=True,
                        help="batch sequences of similar length (default: on)")
    parser.add_argument("--bucket-width", type=positive_int,
                        help="padded lengths are multiples of this (and --max-length); one compiled program "
                             "per length on JAX (default: 32 on a GPU or TPU, 8 elsewhere)")
    parser.add_argument("--input-pipeline", choices=("auto", "tf.data", "python"), default="auto",
                        help="tf.data, or python: a keras.utils.PyDataset and the sentencepiece library, "
                             "no TensorFlow; the same batches (auto = tf.data where TensorFlow imports)")
    parser.add_argument("--stream", action="store_true", default=False,
                        help="read and tokenize the train pairs in chunks of lines inside the input pipeline "
                             "(tf.data or python) instead of holding the corpus in memory: for a corpus larger "
                             "than memory (default: in memory)")
    parser.add_argument("--vocabulary-sample", type=positive_int, default=200_000, metavar="SENTENCES",
                        help="learn the vocabulary from at most this many train sentences, a uniform sample "
                             "seeded by --seed")
    parser.add_argument("--flash-attention", action=argparse.BooleanOptionalAction, default=None,
                        help="--no-flash-attention: the explicit float32-softmax attention instead of the "
                             "backend's fused kernel, the fallback if a fused kernel gives NaN; a resumed "
                             "run may change it (default: the backend decides)")
    parser.add_argument("--dev-bleu-sentences", type=_non_negative_int, default=200, metavar="N",
                        help="after each virtual epoch, translate the first N dev sentences (greedy) and keep "
                             "the weights with the best BLEU as model.keras; 0 keeps the last weights")
    parser.add_argument("--average-last", type=positive_int, default=1, metavar="K",
                        help="average the weights of the last K virtual epochs after training, as the paper "
                             "does, and keep the average if its dev BLEU is better; 1 averages nothing")
    parser.add_argument("--seed", type=int, default=0, help="seeds the weights, dropout and the data order")
    parser.add_argument("--distribute", choices=("data", "model"),
                        help="train on all visible devices: data = data parallel (JAX DataParallel, "
                             "TensorFlow MirroredStrategy), model = attention/feed-forward kernels split "
                             "across devices (JAX ModelParallel); the batch stays the global batch "
                             "(default: one device). Several hosts (JAX): the same command on each, with "
                             "KERAS_DISTRIBUTION_JOB_ADDRESSES, _NUM_PROCESSES and _PROCESS_ID set "
                             "(docs/scaling-out.md)")
    parser.add_argument("--from", dest="start_from", metavar="RUN_FOLDER",
                        help="fine-tune: start from this trained run's weights and vocabulary (its sizes kept), "
                             f"with a fresh optimizer and the fine-tuning defaults: {FINE_TUNING_SUMMARY} "
                             "(default: --output is RUN_FOLDER-fine-tuned)")
    parser.add_argument("--lora", dest="lora_rank", type=positive_int, metavar="RANK",
                        help="with --from: train only LoRA adapters of this rank on --lora-targets (peak learning "
                             f"rate {LORA_LEARNING_RATE:g}); model.keras holds the merged weights")
    parser.add_argument("--lora-targets", type=_lora_targets, metavar="NAMES",
                        help="with --lora: what the adapters adapt, comma-separated among query, key, value, output "
                             f"(each attention layer's projections) and embeddings (default: {','.join(LORA_TARGETS)})")
    parser.add_argument("--learning-rate", type=_positive_float, metavar="PEAK",
                        help="peak of the learning-rate schedule, reached after --warmup-steps, then 1/sqrt(step) "
                             "decay (default: the paper's d_model^-0.5 * warmup^-0.5; the fine-tuning default "
                             "with --from)")
    parser.add_argument("--overwrite", action="store_true", help="start again even if --output holds a run")


ENGINE_HELP = (
    "what runs the model: compiled = the run's decoding loop as an XLA program kept in the cache "
    "(~/.cache/keras-transformer; JAX, no Keras from the second call on); keras = the Keras model on "
    "KERAS_BACKEND; auto = compiled where JAX is installed and the cache is on (KERAS_TRANSFORMER_CACHE=0 "
    "turns it off), else keras. The same translations either way (docs/translating.md)")


def _alignment_layer(text):
    """`--alignment-layer`: "mean" or a layer index."""
    if text == "mean":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'"mean" or a decoder layer index (e.g. -1, the last), not {text!r}')


def add_attention_arguments(parser):
    """The flags that ask `translate` for what the cross-attention shows: alignments, weights, a heatmap."""
    parser.add_argument("--alignments", action="store_true",
                        help="word alignments from cross-attention: `TEXT ||| i-j ...` (source word i - target "
                             "word j, from 0), an alignment field after NORMALIZED with --n-best, `alignment` "
                             "and `source_tokens` in --format jsonl (docs/alignments.md)")
    parser.add_argument("--alignment-layer", type=_alignment_layer, default="mean", metavar="K",
                        help='the decoder layer whose cross-attention the alignments and the map read: an index '
                             '(-1 the last) or "mean" of all, the measured best (default: %(default)s)')
    parser.add_argument("--attention-weights", action="store_true",
                        help="with --format jsonl: --alignments and each hypothesis' cross-attention, a row of "
                             "weights over the source pieces for each of its pieces")
    parser.add_argument("--attention-map", metavar="FILE.png",
                        help="draw the translation's cross-attention as a heatmap, source words against target "
                             "words, to FILE.png (one sentence given as an argument; needs matplotlib)")


def add_sentence_arguments(parser):
    """The flags that say how a text is split into the sentences the model translates (docs/documents.md)."""
    parser.add_argument("--no-sentence-splitting", dest="split_sentences", action="store_false", default=True,
                        help="hand each input to the model whole, cut to its positions; by default each input is "
                             "split into sentences, translated together and put back with its own whitespace")
    parser.add_argument("--sentence-tokens", type=positive_int, metavar="N",
                        help="cut a sentence longer than N tokens at its clauses (default: "
                             f"{TRAINED_RUN_SENTENCE_TOKENS} for a run trained here; the model's positions for an "
                             "imported run)")
    parser.add_argument("--keep", type=_regular_expression, action="append", metavar="REGEX",
                        help="copy every span matching REGEX into the translation as it is, never translated "
                             "(repeatable); URLs, e-mail addresses, numbers and {name} / %%s placeholders always are")


SEARCH_DEFAULTS_HELP = ("a run trained here: kept, beam 4, 0.6, the 3-gram guard; a run imported from Hugging Face: "
                        "what generate() does with the model's generation_config.json (pooled, its num_beams, ...)")


def _integer_or_text(text):
    """`--max-new-tokens`: an int, or the text as given, which the search's resolution refuses in one line."""
    try:
        return int(text)
    except ValueError:
        return text


def add_search_arguments(parser, several_limits=False):
    """The search's flags that `translate`, `evaluate` and `serve` share; each left out takes the run's default.

    With `several_limits` (`serve`), `--max-new-tokens` takes several
    limits, which requests choose from (the first the default).
    """
    parser.add_argument("--beam-search", choices=("kept", "pooled"),
                        help="kept: a finished hypothesis keeps its beam slot (GNMT's length penalty "
                             "((5 + length) / 6) ** alpha); pooled: set aside, num_beams kept open, "
                             "log-probability / length ** alpha, as transformers' generate (default: the run's: "
                             "pooled for a run imported from Hugging Face, kept for one trained here)")
    parser.add_argument("--length-penalty", type=float, metavar="ALPHA",
                        help="the beam's length penalty (default: the run's: 0.6 for kept, generation_config.json's "
                             "length_penalty, else 1.0, for pooled)")
    parser.add_argument("--early-stopping", action=argparse.BooleanOptionalAction, default=None,
                        help="with --beam-search pooled: stop a sentence once --beam hypotheses have finished "
                             "(default: the run's: generation_config.json's early_stopping, else off)")
    several = "; several: the limits requests may ask for, the default first, each one decoding program" \
        if several_limits else ""
    parser.add_argument("--max-new-tokens", type=_integer_or_text, metavar="N", nargs="+" if several_limits else None,
                        help="the longest translation in tokens, at most the model's positions less one (default: "
                             "the run's: the model's positions less one; for an imported run generation_config.json's "
                             f"max_length less two, as generate counts the start token and forces </s>){several}")
    parser.add_argument("--max-output-ratio", type=_non_negative_float, metavar="R",
                        help="the cap on run-away output: a sentence's translation ends after R times its source's "
                             f"tokens plus {OUTPUT_SLACK}; 0 turns it off (default: {DEFAULT_MAX_OUTPUT_RATIO:g})")


def add_decoding_arguments(parser):
    """The search's flags, shared by `translate` and `evaluate`: beam, search kind, n-gram guard, batch size."""
    parser.add_argument("--beam", type=positive_int,
                        help=f"beam width; 1 is greedy search, the faster (default: the run's; {SEARCH_DEFAULTS_HELP})")
    add_search_arguments(parser)
    parser.add_argument("--no-repeat-ngram", type=_non_negative_int,
                        help=f"never repeat an n-gram of this many tokens, a guard against loops; 0 turns it off "
                             f"(default: {NO_REPEAT_NGRAM} for a run trained here, generation_config.json's "
                             "no_repeat_ngram_size, else 0, for an imported one)")
    parser.add_argument("--batch-size", type=batch_size_value, default=BATCH_SIZE,
                        help="sentences decoded at once, in batches of similar lengths (default: auto: 8 when "
                             "decoding compiles on a CPU, TensorFlow or JAX (the compiled engine: 4 for beam search, "
                             "16 for greedy search over a token matrix as large as NLLB-200's); else 64)")


def add_engine_argument(parser):
    """`--engine`: the compiled program, the Keras model, or auto."""
    parser.add_argument("--engine", choices=("auto", "compiled", "keras"), default="auto", help=ENGINE_HELP)
