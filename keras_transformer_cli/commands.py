"""The verbs of `keras-transformer`: one handler per verb, `handler(args, out)`.

Each handler imports Keras and the package itself, so that the parser (in
`keras_transformer_cli`) answers `--help` and bad flags without them. `out`
is where results go (stdout); progress goes to stderr when stdout is piped.
"""

import dataclasses
import json
import os
import shutil
import sys

from keras_transformer_cli.engines import reads_attention as _alignments
from keras_transformer_cli.engines import scored as _scored
from keras_transformer_cli.engines import translator as _translator
from keras_transformer_cli.search_flags import SEARCH_FLAGS
from keras_transformer_cli.search_flags import apply_search_defaults


def train(args, out):
    """`train`: `train_translator` on the flags' `TrainConfig`; prints the summary to `out`."""
    from keras_transformer.training.train_config import TrainConfig
    from keras_transformer.training.trainer import train_translator

    not_config = ("command", "overwrite", "handler", "verbose", "start_keras")
    options = {k: v for k, v in vars(args).items() if k not in not_config}
    options["jit_compile"] = "auto" if args.jit_compile is None else args.jit_compile
    from keras_transformer_runtime.timings import phase

    _keep_compiled_steps()

    with phase("work"):
        summary = train_translator(TrainConfig(**options), overwrite=args.overwrite)
    print("summary: " + json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()}),
          file=out)
    print(
        f"train loss {summary['train_loss']:.3f} | dev loss {summary['dev_loss']:.3f} | "
        f"dev token accuracy {summary['dev_token_accuracy']:.1%} | "
        f"{summary['tokens_per_second']:,.0f} tokens/s | "
        + (f"MFU {summary['mfu'] * 100:.1f} % | " if summary.get("mfu") is not None else "")
        + f"{summary['wall_seconds'] / 60:.1f} min | "
        f"saved in {summary['output']}",
        file=out,
    )


def _keep_compiled_steps():
    """On JAX, XLA's code of the training steps goes to the program cache's folder, for the next `train`.

    Compiling was most of the GPU default's first `train`
    (benchmarks/findings/gpu.md, "The user's wait"); a run of the same
    model size on the same machine then loads the code instead. Every
    program is kept: the steps compiled ahead (`compile_ahead`) reach `fit`
    only through the cache.
    """
    import keras

    if keras.backend.backend() != "jax":
        return
    from keras_transformer_runtime.compiled_translator import use_compilation_cache
    from keras_transformer_runtime.program_cache import ProgramCache
    from keras_transformer_runtime.program_cache import cache_enabled

    if cache_enabled():  # KERAS_TRANSFORMER_CACHE=0 turns it off, as for `translate`
        use_compilation_cache(ProgramCache())


def translate(args, out):
    """`translate`: each argument (or stdin line, as it arrives) translated, one line each on `out`.

    Returns:
        1 when a line was skipped (not UTF-8, or a NUL byte), else 0.
    """
    from keras_transformer_cli.input_lines import BadLine
    from keras_transformer_cli.input_lines import arriving_batches
    from keras_transformer_cli.input_lines import decode_argument
    from keras_transformer_cli.input_lines import decode_line
    from keras_transformer_cli.line_languages import LineLanguages
    from keras_transformer_runtime.timings import phase

    if args.input:
        from keras_transformer_cli.document_files import translate_file

        return translate_file(args, out, _translator)
    if args.output or args.input_format:
        from keras_transformer_runtime.errors import UserInputError

        raise UserInputError("--output and --input-format go with --input FILE")
    translator = _translator(args)
    languages = LineLanguages(translator, args)  # a wrong --target-language stops before any line
    if args.text:
        batches = [[(number, text) for number, text in enumerate(args.text, 1)]]
        decode = decode_argument
    else:
        batches = arriving_batches(sys.stdin.buffer)
        decode = decode_line
    alignments, scored = _alignments(args), _scored(args)
    if alignments:
        _check_alignment_layer(translator, args.alignment_layer)
    skipped = replaced = refused = 0
    for batch in batches:
        texts = []
        for number, raw in batch:
            try:
                text, was_replaced = decode(raw, number, args.invalid_input)
            except BadLine as error:
                print(f"keras-transformer: {error}", file=sys.stderr, flush=True)
                text, was_replaced = None, False
                skipped += 1
            replaced += was_replaced
            texts.append(text)
        # A line the model cannot take (no or an unknown >>xxx<<, a language not told) loses only itself.
        texts, sources, refusals = languages.checked(texts, [number for number, _ in batch])
        refused += refusals
        split = None if args.split_sentences else False  # None: the translator's own default

        def call(speaking, given):
            if scored:
                return speaking.n_best(given, args.n_best or 1, alignments=alignments,
                                       alignment_layer=args.alignment_layer, split_sentences=split)
            return speaking(given, split_sentences=split)

        with phase("work"):
            translations = languages.translated(translator, texts, sources, call)
        for (number, _), text, source in zip(batch, texts, sources):
            translation = None if text is None else next(translations)
            if args.attention_map and translation is not None:
                _draw_attention_map(translation, args)
            if scored:
                _print_scored(translation, number - 1, args, out, source)
            else:
                print("" if text is None else translation, file=out)
        out.flush()
    if replaced:
        print(f"keras-transformer: {replaced} lines held bytes that are not UTF-8 (or NUL); they were replaced "
              "by U+FFFD and translated.", file=sys.stderr)
    if skipped:
        print(f"keras-transformer: {skipped} lines were skipped (an empty line in their place); "
              "--invalid-input replace translates them with U+FFFD for the bad bytes.", file=sys.stderr)
    if refused:
        print(f"keras-transformer: {refused} lines this model cannot take were skipped (an empty line in their "
              "place).", file=sys.stderr)
    return 1 if skipped or refused else 0


def _print_scored(translation, index, args, out, source_language=None):
    """One input's `--format jsonl` object (with the detected `source_language`), its `--n-best` lines (none for a
    skipped line), or its text."""
    from keras_transformer_runtime.alignment import format_alignment

    if args.format == "jsonl":
        record = (translation.to_json(args.token_scores, args.attention_weights) if translation
                  else {"source": None, "hypotheses": []})
        if source_language is not None:
            record["source_language"] = source_language
        print(json.dumps(record, ensure_ascii=False), file=out)
        return
    if not args.n_best:  # --alignments or --attention-map alone
        text = translation.text if translation else ""
        print(f"{text} ||| {format_alignment(translation.hypotheses[0].alignment) if translation else ''}"
              if args.alignments else text, file=out)
        return
    for hypothesis in translation.hypotheses if translation else ():
        line = f"{index} ||| {hypothesis.text} ||| {hypothesis.score:.4f} ||| {hypothesis.normalized_score:.4f}"
        if args.alignments:
            line += f" ||| {format_alignment(hypothesis.alignment)}"
        if args.token_scores:
            line += " ||| " + " ".join(f"{token}={score:.4f}"
                                       for token, score in zip(hypothesis.tokens, hypothesis.token_scores))
        print(line, file=out)


def _check_alignment_layer(translator, layer):
    from keras_transformer_runtime.alignment import check_layer
    from keras_transformer_runtime.errors import UserInputError

    try:
        check_layer(layer, translator.decoder_layer_count())
    except ValueError as error:
        raise UserInputError(f"--alignment-layer: {error}")


def _draw_attention_map(translation, args):
    from keras_transformer_runtime.attention_map import draw_attention_map
    from keras_transformer_runtime.errors import UserInputError

    layer = args.alignment_layer
    layer = "the mean of the decoder layers" if layer == "mean" else f"decoder layer {layer}"
    try:
        draw_attention_map(translation, args.attention_map, title=f"{translation.source}\n({layer})")
    except (OSError, ValueError) as error:  # a folder that does not exist, an unknown image format
        raise UserInputError(f"--attention-map {args.attention_map!r}: {error}")
    print(f"keras-transformer: drew the cross-attention to {args.attention_map}", file=sys.stderr)


def evaluate(args, out):
    """`evaluate`: BLEU and chrF on a split; prints a table to `out` and writes a JSON beside the model."""
    from keras_transformer.training import run_folder
    from keras_transformer.data.parallel_corpus import ParallelCorpus
    from keras_transformer.translation.evaluation import evaluate_pairs
    from keras_transformer.training.train_config import CORPUS_FIELDS
    from keras_transformer_runtime.target_language import with_target_language
    from keras_transformer_runtime.errors import UserInputError
    from keras_transformer_runtime.timings import phase

    apply_search_defaults(args)
    if args.source_language == "auto":
        raise UserInputError("--source-language auto detects each line's language for translate; name the "
                             "corpus' language here")
    # The run's own corpus and splits, unless a flag says otherwise.
    config_path = os.path.join(args.model, run_folder.CONFIG_FILE)
    run_config = run_folder.read_json(config_path) if os.path.isfile(config_path) else {}
    settings = {key: run_config.get(key) for key in CORPUS_FIELDS}
    settings.update({key: getattr(args, key) for key in CORPUS_FIELDS if getattr(args, key, None) is not None})
    with phase("load"):
        corpus = ParallelCorpus.from_config(settings)
        if run_config.get("stream"):
            pairs = _split_pairs(corpus, args.split, args.limit)
        else:
            pairs = corpus.read().require(args.split)[: args.limit]
    translator = _translator(args)
    sources = [pair.source for pair in pairs]
    if _language_codes(translator) is not None:
        sources = with_target_language(sources, _language_codes(translator), args.target_language)
    pairs = [dataclasses.replace(pair, source=source) for pair, source in zip(pairs, sources)]
    with phase("work"):
        result = evaluate_pairs(translator, pairs)
    print(f"{'split':<10}{'beam':>6}{'sentences':>11}{'BLEU':>8}{'chrF':>8}{'loops':>8}", file=out)
    print(f"{args.split:<10}{args.beam:>6}{result['sentences']:>11}{result['bleu']:>8.2f}{result['chrf']:>8.2f}"
          f"{result['loop_rate']:>8.1%}", file=out)
    print(result["bleu_signature"], file=out)
    quantized = f"-{args.quantize}" if args.quantize else ""
    pooled = "-pooled" if args.beam_search == "pooled" and args.beam > 1 else ""
    path = os.path.join(args.model, f"evaluation-{args.split}-beam{args.beam}{pooled}-norepeat{args.no_repeat_ngram}"
                                    f"{quantized}.json")
    search = {key: getattr(args, key) for key in SEARCH_FLAGS}
    with phase("write"), open(path, "w") as f:
        json.dump({**result, "split": args.split, **search}, f, indent=2, ensure_ascii=False)
    print(f"written to {path}", file=out)


def _language_codes(translator):
    """The target-language codes of a multi-target run's tokenizer; () for a run that writes one language.

    An NLLB-200 run's languages are its tokenizer's own (`--source-language`,
    `--target-language`), not tokens in the text: None, no text is changed.
    """
    tokenizer = getattr(translator, "tokenizer", None)
    if hasattr(tokenizer, "forced_first_id"):
        return None
    return tuple(getattr(tokenizer, "language_codes", ()))


def _split_pairs(corpus, split, limit):
    """The first `limit` pairs (None: all) of one split, read one at a time: a streamed run's corpus is never held."""
    import itertools

    from keras_transformer.data.parallel_corpus import CorpusSplits
    from keras_transformer.errors import UserInputError

    format_ = corpus.check()
    if split == "heldout" and format_ != "bible":
        CorpusSplits({}, format_).require(split)  # raises: only the Bible corpus has a heldout split
    pairs = list(itertools.islice(corpus.iter_pairs(split), limit))
    if not pairs:
        advice = {"dev": "raise --dev-fraction, or pass --dev with dev pairs",
                  "test": "raise --test-fraction, or pass --test with test pairs"}.get(split, "pass another --split")
        raise UserInputError(f"the corpus has no {split} pairs; {advice}.")
    return pairs


def export(args, out):
    """`export`: the SavedModel, written by a TensorFlow-backend process if this one is not,
    or with `--format ctranslate2` a CTranslate2 model (any backend)."""
    import subprocess

    from keras_transformer import model_file
    from keras_transformer.errors import UserInputError
    from keras_transformer.training import run_folder

    _check_export_folder(args)
    if args.format == "ctranslate2":
        return _export_ctranslate2(args, out)
    if args.format == "nllb":
        from keras_transformer.checkpoints.nllb.export import export_nllb

        config = export_nllb(args.model, args.out, force=args.force)
        print(f"Hugging Face NLLB-200 / M2M-100 folder written to {args.out} ({config['encoder_layers']}+"
              f"{config['decoder_layers']} layers; M2M100ForConditionalGeneration.from_pretrained and "
              "AutoTokenizer.from_pretrained load it)", file=out)
        return
    if args.format == "marian":
        from keras_transformer.checkpoints.marian.export import export_marian

        config = export_marian(args.model, args.out, force=args.force)
        print(f"Hugging Face Marian folder written to {args.out} ({config['encoder_layers']}+{config['decoder_layers']} "
              "layers; MarianMTModel.from_pretrained and MarianTokenizer.from_pretrained load it)", file=out)
        return
    if not all(importable(name) for name in ("tensorflow", "tensorflow_text")):
        raise UserInputError(
            "export writes a TensorFlow SavedModel and needs tensorflow and tensorflow-text "
            "(pip install tensorflow tensorflow-text); train, translate and evaluate run without them."
        )
    model_path = os.path.join(args.model, run_folder.MODEL_FILE)
    if not os.path.isfile(model_path):
        raise UserInputError(
            f"--model {args.model!r} holds no {run_folder.MODEL_FILE}: pass the --output folder of a training run."
        )
    model_file.check_model_archive(model_path)
    import keras

    if keras.backend.backend() != "tensorflow":
        # Export goes through TensorFlow whatever backend trained the model.
        command = [sys.executable, "-m", "keras_transformer_cli", "export", "--model", args.model, "--out", args.out,
                   *(["--force"] if args.force else [])]
        if args.max_new_tokens:
            command += ["--max-new-tokens", str(args.max_new_tokens)]
        if args.quantize:
            command += ["--quantize", args.quantize]
        result = subprocess.run(command, env={**os.environ, "KERAS_BACKEND": "tensorflow"})
        if result.returncode:
            raise UserInputError(f"export under the TensorFlow backend failed (exit code {result.returncode}).")
        return
    from keras_transformer.translation.export import export_translator

    from keras_transformer_runtime.decoding_settings import DecodingSettings
    from keras_transformer_runtime.timings import phase

    # The package's search with the export's one search flag, as the SavedModel always decoded: not the run's
    # own defaults, which for an imported run (generation.json) would change what its export translates.
    settings = DecodingSettings(max_new_tokens=args.max_new_tokens)
    with phase("work"):
        if args.force and os.path.isdir(args.out):
            shutil.rmtree(args.out)
        export_translator(args.model, args.out, quantize=args.quantize, settings=settings)
    print(f"SavedModel written to {args.out} (signature 'serving_default': texts -> translations; "
          f"raw logits model in {os.path.join(args.out, 'logits')})", file=out)


def _check_export_folder(args):
    """Refuses an `--out` that holds files (unless `--force`), and one that is, or holds, the run itself."""
    from keras_transformer.errors import UserInputError

    out, run = os.path.realpath(args.out), os.path.realpath(args.model)
    if out == run or run.startswith(out + os.sep):
        raise UserInputError(f"--out {args.out!r} is the run folder {args.model!r} or holds it: export to a folder "
                             "of its own.")
    if os.path.isfile(args.out) or (os.path.isdir(args.out) and os.listdir(args.out) and not args.force):
        raise UserInputError(f"--out {args.out!r} exists and is not empty: choose a new folder, or pass --force to "
                             "replace it.")


def _export_ctranslate2(args, out):
    from keras_transformer.errors import UserInputError

    if not importable("ctranslate2"):
        raise UserInputError(
            'export --format ctranslate2 needs the ctranslate2 package: pip install "keras-transformer[ctranslate2]".'
        )
    if args.max_new_tokens:
        raise UserInputError("--max-new-tokens is a SavedModel setting; a CTranslate2 model takes it when it translates.")
    if args.quantize:
        raise UserInputError("--quantize is Keras' quantization, for the SavedModel; a CTranslate2 model takes "
                             "--quantization int8 (or quantizes when it loads).")
    from keras_transformer.translation.ctranslate2_model import export_ctranslate2

    from keras_transformer_runtime.timings import phase

    with phase("work"):
        empty = os.path.isdir(args.out) and not os.listdir(args.out)
        export_ctranslate2(args.model, args.out, quantization=args.quantization, force=args.force or empty)
    print(f"CTranslate2 model written to {args.out} ({args.quantization or 'float32'} weights; translate with "
          "keras_transformer.translation.ctranslate2_model.CTranslate2Translator, or ctranslate2.Translator)", file=out)


def importable(name):
    """Whether `import name` can find the package, without importing it."""
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[name] is None (import blocked)
        return False


def import_model(args, out):
    """`import`: a Hugging Face Marian, NLLB-200 or M2M-100 model (folder or hub id) written as a run folder."""
    from keras_transformer.checkpoints.hub_import import FAMILIES
    from keras_transformer.checkpoints.hub_import import import_hugging_face
    from keras_transformer_runtime.timings import phase

    with phase("work"):
        family, checkpoint = import_hugging_face(args.source, args.output, overwrite=args.overwrite)
    a = checkpoint.architecture
    languages = " --source-language CODE --target-language CODE" if family == "m2m_100" else ""
    print(f"imported {args.source}: {FAMILIES[family]}, {a.num_layers}+{a.num_decoder_layers} layers, d_model "
          f"{a.d_model}, {a.vocabulary_size:,} tokens; translate with --model {args.output}{languages}", file=out)


def ablate(args, out):
    """`ablate`: `run_ablation` on the flags' settings; prints the table to `out`."""
    import dataclasses

    from keras_transformer.training import ablation
    from keras_transformer.errors import UserInputError

    try:
        variants = dict(ablation.parse_variant(text) for text in args.variant or ["baseline"])
    except ValueError as error:
        raise UserInputError(f"--variant: {error}")
    settings = ablation.QUICK if args.quick else ablation.AblationSettings()
    overrides = {
        key: getattr(args, key)
        for key in ABLATE_SETTINGS
        if getattr(args, key) is not None
    }
    corpus = {key: getattr(args, key) for key in CORPUS_FLAGS}
    corpus = {key: value for key, value in corpus.items() if value is not None and value is not False}
    if corpus:
        from keras_transformer.data.parallel_corpus import ParallelCorpus

        overrides["corpus"] = ParallelCorpus.from_config(corpus)
        overrides["corpus"].check()
    settings = dataclasses.replace(settings, **overrides)
    if settings.d_model % settings.num_heads:
        raise UserInputError(f"--d-model {settings.d_model} is not divisible by --num-heads {settings.num_heads}.")
    rows = ablation.run_ablation(
        variants, seeds=range(args.seeds), settings=settings, workdir=args.out,
        bleu_sentences=args.bleu_sentences,
    )
    print(ablation.write_results(rows, args.out), file=out)
    print(f"runs, summary and table in {args.out}/results.json and results.md", file=out)


# `ablate`'s settings flags: (AblationSettings field, help). Their defaults
# are AblationSettings' and QUICK's (a test checks the text against them);
# the corpus flags are train's.
ABLATE_SETTINGS = {
    "steps": "optimizer steps per run (default: 1000; 300 with --quick)",
    "eval_every": "steps between dev evaluations (default: 100)",
    "d_model": "model width (default: 128; 64 with --quick)",
    "num_layers": "encoder and decoder layers (default: 2)",
    "num_heads": "attention heads (default: 4)",
    "ff_dim": "feed-forward hidden units (default: 512; 256 with --quick)",
    "max_length": "longest sequence kept, in tokens (default: 64; 48 with --quick)",
    "vocabulary_size": "joint SentencePiece vocabulary (default: 4000; 2000 with --quick)",
    "batch_tokens": "tokens per batch (default: 2048; 1536 with --quick)",
    "train_pairs": "train on the first N training pairs only (default: all)",
    "dev_pairs": "evaluate on the first N dev pairs (default: 200)",
}


CORPUS_FLAGS = ("corpus", "dev", "test", "dev_fraction", "test_fraction", "header", "skip_bad_lines")
