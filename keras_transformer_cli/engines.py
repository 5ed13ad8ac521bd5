"""The translator `translate` and `evaluate` run: the cached compiled program, or the Keras model (`--engine`).

Each search flag holds its value by now: given, or the run's default
(`search_flags.apply_search_defaults`), and both engines get the same.
"""

import gc
import sys

from keras_transformer_cli.search_flags import decoding_settings


def translator(args):
    """The translator of `--engine` for these flags: the cached compiled program, or the Keras model.

    Args:
        args: the parsed flags of `translate` or `evaluate`.

    Returns:
        A `TextTranslator` (a `CompiledTranslator` or a `Translator`).

    Raises:
        UserInputError: the run folder cannot be loaded with these flags.

    Example:

    >>> translator(args)  # doctest: +SKIP
    """
    from keras_transformer_cli.search_flags import apply_search_defaults

    apply_search_defaults(args)
    return with_sentence_flags(_engine(args), args)


def with_sentence_flags(translator, args):
    """`translator` splitting texts as `--no-sentence-splitting`, `--sentence-tokens` and `--keep` say (left out:
    the run's).

    Example:

    >>> import argparse, types
    >>> with_sentence_flags(types.SimpleNamespace(), argparse.Namespace(split_sentences=False)).split_sentences
    False
    """
    if not getattr(args, "split_sentences", True):
        translator.split_sentences = False
    if getattr(args, "sentence_tokens", None) is not None:
        translator.sentence_tokens = args.sentence_tokens
    if getattr(args, "keep", None):
        translator.keep_patterns = tuple(args.keep)
    return translator


def _engine(args):
    """The translator of `--engine`, its search flags applied."""
    languages = run_languages(args)
    if getattr(args, "engine", "keras") == "compiled":
        try:
            return compiled_translator(args)
        except OSError as error:  # a cache folder that cannot be written: still translate
            from keras_transformer_runtime.program_cache import cache_directory

            print(f"keras-transformer: warning: the program cache {cache_directory()} cannot be used "
                  f"({type(error).__name__}: {error}); translating with the Keras model instead "
                  "(KERAS_TRANSFORMER_CACHE_DIR moves the cache, KERAS_TRANSFORMER_CACHE=0 turns it off).",
                  file=sys.stderr, flush=True)
            args.start_keras()
    from keras_transformer.errors import UserInputError
    from keras_transformer.translation.translator import Translator
    from keras_transformer_runtime.timings import phase

    try:
        with phase("load"):
            return Translator.from_directory(args.model, quantize=args.quantize, batch_size=args.batch_size,
                                             **languages, **decoding_settings(args).translator_arguments())
    except (FileNotFoundError, ValueError) as error:
        raise UserInputError(str(error))


def run_languages(args):
    """`Translator.from_directory`'s language arguments: an NLLB-200 or M2M-100 run's two codes, else none.

    Raises:
        UserInputError: `--source-language` for a run that is not NLLB's.

    Example:

    >>> import argparse
    >>> run_languages(argparse.Namespace(model="runs/base", source_language=None, target_language="fra"))
    {}
    """
    from keras_transformer_runtime.errors import UserInputError
    from keras_transformer_runtime.run_tokenizer import is_nllb_run

    source, target = getattr(args, "source_language", None), getattr(args, "target_language", None)
    if source == "auto" and getattr(args, "command", "translate") != "translate":
        raise UserInputError("--source-language auto detects each line's language for translate; name the "
                             "corpus' language here")
    if is_nllb_run(args.model):
        # auto: each line's language is detected (`line_languages`); the translator starts without one.
        return {"source_language": None if source == "auto" else source, "target_language": target}
    if source is not None:
        raise UserInputError(f"--source-language {source}: {args.model} is not an NLLB-200 or M2M-100 run; it reads "
                             "any source it was trained on (--target-language names a multi-target Marian run's "
                             "language).")
    return {}


def compiled_translator(args):
    """A `CompiledTranslator` from the program cache; on a miss, Keras (on JAX) writes the program first.

    Example:

    >>> compiled_translator(args)  # doctest: +SKIP
    """
    from keras_transformer_runtime.compiled_translator import load_compiled_translator
    from keras_transformer_runtime.errors import UserInputError
    from keras_transformer_runtime.program_cache import ProgramCache

    def write(*arguments, **options):
        print("keras-transformer: compiling the model's decoding program into the cache "
              "(once per model and setting; later calls start in about a second)", file=sys.stderr, flush=True)
        args.start_keras()
        from keras_transformer.translation.translation_program import write_translation_program

        try:
            write_translation_program(*arguments, **options)
        except (FileNotFoundError, ValueError) as error:
            raise UserInputError(str(error))
        # The Keras model the program was written from lies in reference cycles: freed now, and its memory
        # handed back, not held while decoding maps the run's weights beside it.
        gc.collect()
        _return_freed_memory()

    log = (lambda line: print(f"keras-transformer: {line}", file=sys.stderr, flush=True)) if args.verbose else None
    settings = decoding_settings(args, n_best=(args.n_best or 1) if scored(args) else None,
                                 cross_attention=reads_attention(args))
    return load_compiled_translator(args.model, ProgramCache(), settings, batch_size=args.batch_size, write=write,
                                    log=log, quantize=getattr(args, "quantize", None), **run_languages(args))


def _return_freed_memory():
    """Hands the C allocator's freed memory back to the system (glibc; elsewhere nothing happens).

    Freed blocks below glibc's mmap threshold stay with the process: a
    large model's weights, loaded and let go, would still count in its
    resident memory.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        pass


def reads_attention(args):
    """Whether `translate` reads the cross-attention: `--alignments` or `--attention-map`.

    Example:

    >>> import argparse
    >>> reads_attention(argparse.Namespace(alignments=False, attention_map="map.png"))
    True
    """
    return bool(getattr(args, "alignments", False) or getattr(args, "attention_map", None))


def scored(args):
    """Whether `translate` gives n-best lists (`--n-best`, `--format jsonl`, or the attention's options).

    Example:

    >>> import argparse
    >>> scored(argparse.Namespace(n_best=None, format="text", alignments=False))
    False
    """
    return bool(getattr(args, "n_best", None) or getattr(args, "format", "text") == "jsonl" or reads_attention(args))
