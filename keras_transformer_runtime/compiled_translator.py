"""A trained run's decoding loop as a cached XLA program, run with JAX alone: no Keras.

`keras_transformer.translation.translation_program.write_translation_program` exports
the whole decoding loop of a run (greedy or beam search on the KV cache,
the loop guard included) with `jax.export`, for any batch size and source
length, and writes it with the weights into a `ProgramCache` entry.
`load_compiled_translator` reads them back and returns a
`CompiledTranslator`: the `TextTranslator` front end on that program. XLA's
compiled code goes to the cache too (JAX's persistent compilation cache),
so a second process neither imports Keras nor compiles: one sentence
takes a fraction of the Keras engine's time (docs/translating.md, "Where
the time goes").

The program is the one `Translator` compiles on the JAX backend, traced
from the same code, so it gives the same tokens for the same batches.
"""

import contextlib
import json
import os
import threading

import numpy as np

from keras_transformer_runtime.batch_threads import DEFAULT_PARALLEL_BATCHES
from keras_transformer_runtime.batch_threads import ENGINE_SPARE_BATCHES
from keras_transformer_runtime.batch_threads import batch_cores
from keras_transformer_runtime.batch_threads import resolve_parallel_batches
from keras_transformer_runtime.cpu_compiler_options import compile_for_cpu
from keras_transformer_runtime.cpu_compiler_options import lone_sentence_rows
from keras_transformer_runtime.decoding_settings import DecodingSettings
from keras_transformer_runtime.errors import UserInputError
from keras_transformer_runtime.fixed_shape_program import FixedShapePrograms
from keras_transformer_runtime.hypotheses import NBest
from keras_transformer_runtime.jax_internals import FIXED_SHAPE_PROGRAM
from keras_transformer_runtime.jax_internals import FastPathFallback
from keras_transformer_runtime.jax_internals import backend_check_skipped
from keras_transformer_runtime.jax_internals import weights_uncopied
from keras_transformer_runtime.program_cache import entry_key
from keras_transformer_runtime.run_files import MODEL_FILE
from keras_transformer_runtime.run_tokenizer import load_run_tokenizer
from keras_transformer_runtime.run_tokenizer import sentence_settings
from keras_transformer_runtime.run_tokenizer import vocabulary_files
from keras_transformer_runtime.search_defaults import model_positions
from keras_transformer_runtime.search_defaults import run_ends_at_limit
from keras_transformer_runtime.text_translator import TextTranslator
from keras_transformer_runtime.text_translator import resolve_batch_size
from keras_transformer_runtime.timings import phase
from keras_transformer_runtime.weights_file import INDEX_FILE
from keras_transformer_runtime.weights_file import WEIGHTS_FILE
from keras_transformer_runtime.weights_file import read_weights as read_entry_weights

SETTINGS_FILE = "settings.json"
# Sentences a batch of a beam program (`batch_size="auto"`) on a CPU, where a
# batch a core decode side by side: 4 translated the README's model's test
# split fastest, 8 and 2 slower; greedy stays at 8 rows: fewer or more were
# slower (benchmarks/findings/decoding.md, "The compiled engine on a CPU").
CPU_BEAM_BATCH_SIZE = 4
# A greedy program on a CPU also comes as a refilling one (`keras_transformer.decoding.refill`): queues of up to
# 32 sentences, 8 rows decoding at a time, a row whose sentence ended taking the next (the sizes measured fastest:
# docs/measured.md).
REFILL_SLOTS = 8
REFILL_QUEUE_SIZE = 32
# Greedy sentences a batch (`batch_size="auto"`) on a CPU for a model whose largest weight, its token matrix, has
# at least `LARGE_VOCABULARY_ENTRIES` entries: every step reads that matrix whole (NLLB-200's 256,206 x 1,024),
# so more rows a step share the read (benchmarks/findings/decoding.md, "A hundred sentences of NLLB-200's shape").
LARGE_VOCABULARY_CPU_BATCH_SIZE = 16
LARGE_VOCABULARY_ENTRIES = 2**26


def engine_description():
    """The JAX that runs the programs: versions and platform (part of an entry's key).

    Example:

    >>> engine_description().startswith("jax ")
    True
    """
    import jax
    import jaxlib

    return f"jax {jax.__version__} jaxlib {jaxlib.__version__} {jax.default_backend()}"


def use_compilation_cache(cache):
    """Points JAX's persistent compilation cache at `cache`'s XLA folder, unless the user set one.

    Every compiled program is kept (no minimum compile time), so a second
    process finds each shape of the decoding loop compiled.

    Args:
        cache: a `ProgramCache`.
    """
    import jax

    if jax.config.jax_compilation_cache_dir:
        return
    jax.config.update("jax_compilation_cache_dir", str(cache.xla_directory()))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


class CompiledTranslator(TextTranslator):
    """Translates strings with an exported decoding program (`jax.export`), no Keras.

    The `TextTranslator` front end (tokenize, batch, pad into a few shapes,
    detokenize) around one exported program: the decoding loop of a
    `Translator` with the same settings. Built by `load_compiled_translator`.
    A program of an n-best list (`n_best`) serves `n_best(texts, n_best)`,
    with `alignments=True` too when it returns the cross-attention, and
    translates with its first hypothesis.

    Args:
        program: a `jax.export.Exported` of `(weights, encoder_tokens) ->
            (generated, steps)`, with a symbolic batch size and source length
            (`translation_program.export_decoding_program`).
        weights: list of NumPy arrays, the program's first argument.
        tokenizer: the run's `SentencePieceTokenizer`.
        max_length: the model's `max_length`.
        batch_size: `"auto"` or an int, as `Translator`'s; on a CPU `"auto"`
            is 8 for greedy search (`LARGE_VOCABULARY_CPU_BATCH_SIZE` for a
            large token matrix) and `CPU_BEAM_BATCH_SIZE` for beams.
        beam_width: int, the program's beam width.
        n_best: None, or the hypotheses per source of an n-best program.
        cross_attention: bool, whether that program returns the cross-attention.
        parallel_batches: `"auto"` (one a core and one more on a CPU, 1 on a
            GPU or TPU) or an int: batches decoded at a time, each on its
            own thread (`batch_threads`). On a CPU a call of one batch's
            sentences or fewer is split into a batch a core, up to this
            many, for a model of small enough weights
            (`batch_threads.batch_cores`).
        fixed_shape_programs: None, or the `FixedShapePrograms` of
            `program`: each batch shape is compiled from its program of
            fixed shapes, which lowers without JAX's shape refinement.
        refill: None, or `(program, fixed_shape_programs)` of the same
            greedy search refilling `REFILL_SLOTS` rows: with a batch size
            of `REFILL_SLOTS`, a call of more sentences goes in queues
            (`batch_threads.queue_parts`) to it.
        log: callable taking one line, or None: told once of each fast
            path of `jax_internals` that falls back on the JAX running
            (`translate --verbose` prints it).
    """

    def __init__(self, program, weights, tokenizer, max_length, batch_size="auto", beam_width=1, n_best=None,
                 cross_attention=False, parallel_batches=DEFAULT_PARALLEL_BATCHES, fixed_shape_programs=None,
                 refill=None, log=None):
        import jax

        self.program = program
        self.fixed_shape_programs = fixed_shape_programs
        self._log = log or (lambda line: None)
        self._fell_back = set()
        self._weights = jax.device_put(list(weights))
        try:
            weights_uncopied(weights, self._weights)
        except FastPathFallback as fallback:
            self._fall_back(fallback)
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.bucketed = True
        on_accelerator = jax.default_backend() != "cpu"
        if batch_size == "auto" and beam_width > 1 and not on_accelerator:
            batch_size = CPU_BEAM_BATCH_SIZE
        elif batch_size == "auto" and not on_accelerator and max(weight.size for weight in self._weights) >= (
                LARGE_VOCABULARY_ENTRIES):
            batch_size = LARGE_VOCABULARY_CPU_BATCH_SIZE
        self.batch_size = resolve_batch_size(batch_size, True, lambda: on_accelerator)
        self.parallel_batches = resolve_parallel_batches(parallel_batches, lambda: on_accelerator,
                                                         spare=ENGINE_SPARE_BATCHES)
        self.beam_width = int(beam_width)
        # XLA's code for each shape is kept in the cache: a lone sentence
        # decodes alone (faster than padded to a batch's rows),
        # or as a few copies where that is what reaches AMX's int8 products.
        self.lone_sentence_rows = 1 if on_accelerator else lone_sentence_rows(self._weights, self.beam_width)
        weight_bytes = sum(weight.nbytes for weight in self._weights)
        self.batch_cores = 1 if on_accelerator else batch_cores(weight_bytes, self.parallel_batches)
        self.n_best_size = n_best
        self.cross_attention = bool(n_best and cross_attention)
        self._refill = refill or None
        self.queue_size = REFILL_QUEUE_SIZE if refill and self.batch_size == REFILL_SLOTS else None
        self._compiled = {}
        self._compiling = threading.Lock()
        # An NLLB-200 run's program also takes the forced first token (`translation_program`).
        self._forces_first = len(program.in_avals) == len(self._weights) + 2

    def _fall_back(self, fallback):
        if fallback.fast_path not in self._fell_back:  # one line a fast path, however many shapes meet it
            self._fell_back.add(fallback.fast_path)
            self._log(str(fallback))

    def _fixed_program(self, fixed_programs, shape):
        if not fixed_programs or FIXED_SHAPE_PROGRAM in self._fell_back:
            return None
        try:
            return fixed_programs.program_for(shape)
        except FastPathFallback as fallback:
            self._fall_back(fallback)
            return None

    def _backend_check_skipped(self, program):
        try:
            return backend_check_skipped(program)
        except FastPathFallback as fallback:
            self._fall_back(fallback)
            return contextlib.nullcontext(False)

    def _program_for(self, shape, refill=False):
        compiled = self._compiled.get((shape, refill))
        if compiled is None:
            with self._compiling:  # once per batch shape, whichever thread asks first
                compiled = self._compiled.get((shape, refill))
                if compiled is None:  # XLA, or its code from the cache
                    import jax

                    program, fixed_programs = self._refill if refill else (self.program, self.fixed_shape_programs)
                    # Making the fixed-shape program lowers the symbolic one: the set-up is skipped for both.
                    with phase("compile"), self._backend_check_skipped(program):
                        fixed = self._fixed_program(fixed_programs, shape)
                        run = jax.jit(fixed.call if fixed else program.call)
                        source = jax.ShapeDtypeStruct(shape, np.int32)
                        forced = (jax.ShapeDtypeStruct((), np.int32),) if self._forces_first else ()
                        compiled = compile_for_cpu(run.lower(self._weights, source, *forced), self._weights)
                        self._compiled[(shape, refill)] = compiled
        return compiled

    def _outputs(self, source):
        forced = (np.int32(self.forced_first_id),) if self._forces_first else ()
        refill = self.queue_size is not None and source.shape[0] > self.batch_size  # a queue (`_in_batches`)
        return self._program_for(source.shape, refill)(self._weights, source, *forced)

    def compile_batch_shapes(self):
        """Compiles the program for every batch shape a call can give it (`batch_shapes`), so none waits for XLA.

        From the second process on, XLA's code comes from the cache.
        What a server does before it says it is ready.

        Returns:
            The `(rows, width)` shapes: the batches' smallest first, then the queues' (`queue_shapes`).
        """
        shapes = self.batch_shapes()
        for shape in shapes:
            self._program_for(shape)
        for shape in self.queue_shapes():
            self._program_for(shape, refill=True)
        return shapes + self.queue_shapes()

    def queue_shapes(self):
        """Every `(rows, width)` a queue of the refilling program is padded into (`batch_threads.queue_parts`).

        Rows: twice the batch size, doubling up to `queue_size`; the widths
        of `batch_shapes`. None without a refilling program.

        Example:

        >>> translator = CompiledTranslator.__new__(CompiledTranslator)
        >>> translator.batch_size, translator.max_length, translator.queue_size = 8, 40, 64
        >>> translator.lone_sentence_rows, translator.batch_cores = 1, 1
        >>> translator.queue_shapes()
        [(16, 32), (16, 40), (32, 32), (32, 40), (64, 32), (64, 40)]
        """
        if not self.queue_size:
            return []
        widths = sorted({width for _, width in self.batch_shapes()})
        rows = [2 * self.batch_size]
        while rows[-1] < self.queue_size:
            rows.append(2 * rows[-1])
        return [(row, width) for row in rows for width in widths]

    def _decode(self, source):
        if self.n_best_size:
            return self._decode_n_best(source, self.n_best_size).tokens[:, 0]
        generated, steps = self._outputs(source)
        return np.asarray(generated)[:, : int(steps)]

    def _decode_n_best(self, source, n, cross_attention=False):
        if n != self.n_best_size or (cross_attention and not self.cross_attention):
            raise NotImplementedError(
                f"This program gives {self.n_best_size or 'no'} hypotheses a source"
                f"{' with their cross-attention' if self.cross_attention else ''}: load the program of "
                f"n_best={n}{', cross_attention=True' if cross_attention else ''} (load_compiled_translator)."
            )
        tokens, scores, normalized, token_scores, steps, *weights = self._outputs(source)
        steps = int(steps)
        return NBest(np.asarray(tokens)[:, :, :steps], np.asarray(scores), np.asarray(normalized),
                     np.asarray(token_scores)[:, :, :steps],
                     np.asarray(weights[0])[:, :, :, :steps] if cross_attention else None)

    def decoder_layer_count(self):
        """How many decoder layers the model has: the layers of the program's cross-attention."""
        if not self.cross_attention:
            raise NotImplementedError("This program gives no cross-attention: load the program of "
                                      "cross_attention=True (load_compiled_translator).")
        return int(self.program.out_avals[5].shape[2])


def _require_run_files(run_directory):
    for name, what in ((MODEL_FILE, "trained model"), *((name, "vocabulary") for name in vocabulary_files(run_directory))):
        path = os.path.join(run_directory, name)
        if not os.path.isfile(path):
            raise UserInputError(
                f"No {what} at {path!r}: pass the --output folder of a finished `keras-transformer train` run."
            )


def load_compiled_translator(run_directory, cache, settings=None, batch_size="auto", write=None, log=None,
                             weights_of=None, parallel_batches=DEFAULT_PARALLEL_BATCHES, source_language=None,
                             target_language=None, quantize=None, **options):
    """The `CompiledTranslator` of a run, from the cache; on a miss, `write` fills the cache first.

    Args:
        run_directory: the `--output` folder of `keras-transformer train`.
        cache: a `ProgramCache`.
        settings: a `DecodingSettings` (None: the package's defaults): the
            search, and with `n_best` (and `cross_attention`) the program of
            an n-best list instead of a plain translation's. Its
            `max_new_tokens` None: the model's positions less one.
        batch_size, parallel_batches: as `CompiledTranslator`'s.
        source_language, target_language: an NLLB-200 run's languages
            (`spa_Latn`); one program serves every pair (`with_languages`).
        quantize: None, or a Keras quantization mode ("int8", "int4"): the
            program of the model quantized so (`Translator.from_directory`),
            in an entry of its own, its weights the quantized ones.
        weights_of: None, or a `CompiledTranslator` of the same run whose
            weights (already on the device) the new one shares: a server
            holding several settings of one model keeps one copy.
        write: called as `write(run_directory, entry, cache, settings,
            quantize=...)` when the entry lacks the weights or this
            setting's program: it writes them
            (`keras_transformer.translation.translation_program.write_translation_program`,
            which needs Keras on JAX). None: a miss returns None.
        log: callable taking one line (e.g. "translation program: from the cache"); None logs nothing.
        **options: `DecodingSettings` fields that replace `settings`' own (`beam_width=1`).

    Returns:
        A `CompiledTranslator`, or None on a miss without `write`.

    Raises:
        UserInputError: the folder holds no model or no vocabulary.

    Example:

    >>> from keras_transformer_runtime.program_cache import ProgramCache
    >>> load_compiled_translator("runs/es-en", ProgramCache(), beam_search="pooled")  # doctest: +SKIP
    """
    log = log or (lambda line: None)
    _require_run_files(run_directory)
    settings = (settings or DecodingSettings()).replace(**options)
    if settings.max_new_tokens is None:  # named in the program's file: a writer in another process must write the same
        positions = model_positions(run_directory)
        settings = settings.replace(max_new_tokens=positions - 1 if positions else None)
    with phase("import"):
        use_compilation_cache(cache)
        engine = engine_description()
    with phase("load"):
        quantized = f" quantized {quantize}" if quantize else ""
        entry = cache.entry(entry_key(run_directory, MODEL_FILE, vocabulary_files(run_directory), engine + quantized,
                                      cache.digests_directory()))
        end_at_limit = run_ends_at_limit(run_directory)  # the run's, as the writer's `Translator.from_directory`
        refills = refills_on_this_platform(settings.beam_width, settings.n_best)

        def read():
            loaded = _read_entry(cache, entry, settings, end_at_limit=end_at_limit, read_weights=weights_of is None,
                                 run_file=os.path.join(run_directory, MODEL_FILE))
            refill = refills and _read_entry(cache, entry, settings, end_at_limit=end_at_limit, read_weights=False,
                                             refill_slots=REFILL_SLOTS)
            return None if loaded is None or refill is None else (loaded, refill)

        loaded = read()
    if loaded is None:
        if write is None:
            return None
        log(f"translation program: writing it to {entry} (once per model and setting)")
        write(run_directory, entry, cache, settings, quantize=quantize)
        with phase("load"):
            loaded = read()
        if loaded is None:
            raise RuntimeError(f"The translation program written to {entry} cannot be read back.")
    else:
        log(f"translation program: from the cache, {entry}")
    (program, weights, entry_settings, program_path), refill = loaded
    with phase("load"):
        if weights_of is not None:
            weights, tokenizer = weights_of._weights, weights_of.tokenizer
        else:
            tokenizer = load_run_tokenizer(run_directory)
        if source_language is not None or target_language is not None:
            tokenizer = tokenizer.with_languages(source_language, target_language)
        translator = CompiledTranslator(
            program, weights, tokenizer, entry_settings["max_length"], batch_size=batch_size,
            beam_width=settings.beam_width, n_best=settings.n_best, cross_attention=settings.cross_attention,
            parallel_batches=parallel_batches,
            fixed_shape_programs=FixedShapePrograms(cache, program_path, program),
            refill=refill and (refill[0], FixedShapePrograms(cache, refill[3], refill[0])), log=log)
        for name, value in sentence_settings(run_directory).items():
            setattr(translator, name, value)
        return translator


def refills_on_this_platform(beam_width, n_best=None):
    """Whether a setting's program also comes as a refilling one (`REFILL_SLOTS`): greedy translation on a CPU.

    Not measured on a GPU, where a batch is 64 rows and one program fills the device.

    Example:

    >>> refills_on_this_platform(4), refills_on_this_platform(1, n_best=1)
    (False, False)
    """
    import jax

    return beam_width == 1 and not n_best and jax.default_backend() == "cpu"


def _read_entry(cache, entry, settings, end_at_limit=True, read_weights=True, refill_slots=None, run_file=None):
    """`(program, weights, entry settings, program's path)` of a `DecodingSettings`' program in an entry, or None.

    The weights are None unless `read_weights`; those the entry refers to are read from `run_file` (the run's
    `model.keras`). None: a part is missing.
    """
    from jax import export

    entry_settings = cache.read_json(entry / SETTINGS_FILE)
    if not entry_settings or "max_length" not in entry_settings:
        return None
    program_path = entry / settings.program_file(settings.max_new_tokens or entry_settings["max_length"] - 1,
                                                 end_at_limit, refill_slots)
    weights_path = entry / WEIGHTS_FILE
    try:
        program = export.deserialize(bytearray(program_path.read_bytes()))
        weights = None
        if read_weights:
            weights = read_entry_weights(entry, run_file)
        elif not weights_path.is_file():
            return None
    except (OSError, ValueError, KeyError):
        return None
    cache.touch(program_path, weights_path, entry / INDEX_FILE, entry / SETTINGS_FILE)
    return program, weights, entry_settings, program_path


def settings_bytes(max_length):
    """The entry's settings file."""
    return (json.dumps({"max_length": int(max_length)}, indent=2) + "\n").encode()
