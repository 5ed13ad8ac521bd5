"""Writes a run's decoding loop as an exported XLA program into the program cache (Keras on JAX).

The writing half of `keras_transformer_runtime.compiled_translator`: the
run is loaded as a `Translator` (every check of its model, vocabulary and
settings applies), its decoding loop (`decoding.sampler.search_tensors`,
the loop `Translator` compiles) is made a pure function of the weights
and the source tokens, and `jax.export` serializes it with a symbolic
batch size and source length, so one file serves every batch shape. Its
weights, in the order of `model.variables`, are listed beside it in a JSON
index: those the run's `model.keras` holds by their offset there, the rest
(a quantized model's kernels) in one `.npy` file
(`keras_transformer_runtime.weights_file`).
"""

import contextlib
import os

import jax
import keras
import numpy as np

from keras_transformer.decoding.choices import BeamChoice
from keras_transformer.decoding.choices import GreedyChoice
from keras_transformer.decoding.n_best import NBestChoice
from keras_transformer.decoding.pooled_beam import PooledBeamChoice
from keras_transformer.decoding.refill import refill_search_tensors
from keras_transformer.decoding.sampler import search_tensors
from keras_transformer.decoding.sampler import with_variable_values
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.translation.translator import Translator
from keras_transformer_runtime.compiled_translator import REFILL_SLOTS
from keras_transformer_runtime.compiled_translator import SETTINGS_FILE
from keras_transformer_runtime.compiled_translator import refills_on_this_platform
from keras_transformer_runtime.compiled_translator import settings_bytes
from keras_transformer_runtime.decoding_settings import DecodingSettings
from keras_transformer_runtime.keras_file_arrays import locate_arrays
from keras_transformer_runtime.run_files import MODEL_FILE
from keras_transformer_runtime.timings import phase
from keras_transformer_runtime.weights_file import INDEX_FILE
from keras_transformer_runtime.weights_file import WEIGHTS_FILE
from keras_transformer_runtime.weights_file import weights_files


def export_decoding_program(translator, n_best=None, cross_attention=False, refill_slots=None):
    """The decoding loop of a `Translator` as a `jax.export.Exported`.

    Args:
        translator: a `Translator` on the JAX backend.
        n_best: None, or an int: the loop of `Translator.n_best(texts,
            n_best)` (`decoding.n_best_search`) instead of a plain
            translation's.
        cross_attention: bool, with `n_best`: the loop also returns the
            cross-attention, as `n_best(..., alignments=True)` reads it.
        refill_slots: None, or an int: the search (greedy or a kept
            beam) over a queue of sources, this many sources at a time,
            the rows of a sentence that ended taking the next
            (`decoding.refill`); its rows of zeros after the last source
            are not decoded.

    Returns:
        The exported `(weights, encoder_tokens[, forced_first]) -> (generated, steps)`
        (`forced_first`, an int32 scalar, where the tokenizer is NLLB-200's), for
        any batch size and source length (`encoder_tokens` int32
        `(batch, length)`, `weights` the values of `model.variables`); with
        `n_best`, `-> (tokens, scores, normalized_scores, token_scores,
        steps[, cross_attention])`, the arrays of a `hypotheses.NBest`.

    Raises:
        RuntimeError: Keras does not run on JAX.

    Example:

    >>> import numpy as np, keras_transformer as kt
    >>> from keras_transformer.data.sentence_piece_tokenizer import (
    ...     SentencePieceTokenizer, train_tokenizer)
    >>> tokenizer = SentencePieceTokenizer(train_tokenizer(
    ...     ["Sea la luz.", "Let there be light."], vocabulary_size=20))
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=8)
    >>> program = export_decoding_program(Translator(model, tokenizer)) if keras.backend.backend() == "jax" else None
    >>> program is None or len(program.in_avals) == len(model.variables) + 1
    True
    """
    if keras.backend.backend() != "jax":
        raise RuntimeError(
            f"A translation program is exported from Keras on JAX; this process runs Keras on "
            f"{keras.backend.backend()!r}. Set KERAS_BACKEND=jax."
        )
    choice = decoding_choice(translator, n_best)
    decoder = translator.decoder
    variables = list(decoder.model.variables)

    # An NLLB-200 run's program takes the forced first token (the target language) as an input: one program
    # serves every language pair.
    forces_first = hasattr(translator.tokenizer, "forced_first_id")

    def decode(encoder_tokens, *forced_first):
        if refill_slots:
            return refill_search_tensors(decoder, encoder_tokens, refill_slots, translator.max_new_tokens,
                                         translator.no_repeat_ngram_size,
                                         forced_first[0] if forced_first else None, choice)[:2]
        results = search_tensors(decoder, encoder_tokens, choice=choice, max_new_tokens=translator.max_new_tokens,
                                 no_repeat_ngram_size=translator.no_repeat_ngram_size,
                                 return_cross_attention=bool(n_best and cross_attention), grow_caches=True,
                                 forced_first=forced_first[0] if forced_first else None)
        if not n_best:
            return results
        (tokens, scores, normalized, token_scores), steps, *weights = results
        return (tokens, scores, normalized, token_scores, steps, *weights)

    batch, length = jax.export.symbolic_shape("batch, length")
    weights = [jax.ShapeDtypeStruct(tuple(variable.shape), variable.dtype) for variable in variables]
    tokens = jax.ShapeDtypeStruct((batch, length), "int32")
    forced = (jax.ShapeDtypeStruct((), "int32"),) if forces_first else ()
    # JAX 0.4.30 (the lower bound) lowers top_k, which beam search takes, to XLA's `mhlo.topk` custom call, and
    # jax.export refused it there ("no compatibility guarantees"): `translate` failed. A program is only run by
    # the JAX that wrote it (its entry's key names the version), so no guarantee is needed.
    top_k = jax.export.DisabledSafetyCheck.custom_call("mhlo.topk")
    with attention_kernels_for_export(decoder.model, jax.default_backend()):
        return jax.export.export(jax.jit(with_variable_values(decode, variables)),
                                 disabled_checks=[top_k])(weights, tokens, *forced)


def decoding_choice(translator, n_best=None):
    """The choice of the decoding loop a `Translator` runs: greedy, kept or pooled beam, an n-best list's.

    Args:
        translator: a `Translator`.
        n_best: None, or the hypotheses per source of an n-best list.

    Returns:
        A `GreedyChoice`, `BeamChoice`, `NBestChoice` or `PooledBeamChoice`.

    Example:

    >>> import types
    >>> pooled = types.SimpleNamespace(beam_width=4, length_penalty=1.0, beam_search="pooled",
    ...                                early_stopping=False, max_new_tokens=20)
    >>> type(decoding_choice(pooled)).__name__, decoding_choice(pooled, n_best=2).n
    ('PooledBeamChoice', 2)
    """
    width, alpha = translator.beam_width, float(translator.length_penalty)
    if translator.beam_search == "pooled" and width > 1:  # beam 1 is greedy search whichever the search
        return PooledBeamChoice(width=width, length_penalty=alpha, early_stopping=bool(translator.early_stopping),
                                max_new_tokens=translator.max_new_tokens, n=int(n_best or 0),
                                end_at_limit=bool(getattr(translator, "end_at_limit", True)))
    if n_best:
        return NBestChoice(width=width, length_penalty=alpha, n=int(n_best), max_new_tokens=translator.max_new_tokens)
    return GreedyChoice() if width == 1 else BeamChoice(width=width, length_penalty=alpha)


@contextlib.contextmanager
def attention_kernels_for_export(model, platform):
    """Inside, every attention layer of `model` takes the explicit softmax path, unless `platform` is "cpu".

    `jax.export` refuses custom calls that have no compatibility guarantee,
    and on a GPU the fused attention kernel is one (cuDNN's flash attention,
    `__cudnn$fmhaScaleBiasSoftmax`): with it, writing the program of the
    default run failed on a GPU, so `translate` failed there
    (benchmarks/findings/gpu.md, "The user's wait"). A
    decoding step attends from a single query, where a fused kernel has
    little to gain. On a CPU the fused path is XLA's own operations; it stays.

    Args:
        model: a Keras model holding `MultiHeadAttention` layers.
        platform: the platform the program is exported for
            (`jax.default_backend()`: "cpu", "gpu", "tpu").

    Example:

    >>> from keras_transformer import models
    >>> model = models.transformer(50, 50, num_layers=1, d_model=8, num_heads=2, ff_dim=16, max_length=8)
    >>> with attention_kernels_for_export(model, "gpu"):
    ...     inside = {layer._flash_attention for layer in model._flatten_layers()
    ...               if isinstance(layer, MultiHeadAttention)}
    >>> inside
    {False}
    """
    layers = [] if platform == "cpu" else [
        layer for layer in model._flatten_layers(include_self=False) if isinstance(layer, MultiHeadAttention)]
    kept = [layer._flash_attention for layer in layers]
    for layer in layers:
        layer._flash_attention = False
    try:
        yield
    finally:
        for layer, flash_attention in zip(layers, kept):
            layer._flash_attention = flash_attention


def write_translation_program(run_directory, entry, cache, settings=None, quantize=None, **options):
    """Writes a run's weights, settings and the program of one decoding setting into a cache entry.

    Args:
        run_directory: the `--output` folder of `keras-transformer train`.
        entry: the entry's folder (`ProgramCache.entry`).
        cache: the `keras_transformer_runtime.program_cache.ProgramCache`.
        settings: a `DecodingSettings` (None: the package's defaults).
        quantize: None, or a Keras quantization mode ("int8", "int4"): the
            model is quantized so before its program is exported, and the
            entry keeps the quantized weights.
        **options: `DecodingSettings` fields that replace `settings`' own.

    Raises:
        UserInputError, FileNotFoundError, ValueError: as `Translator.from_directory`.
        RuntimeError: Keras does not run on JAX.

    Example:

    >>> write_translation_program("runs/es-en", entry, cache, DecodingSettings(beam_search="pooled"))  # doctest: +SKIP
    """
    settings = (settings or DecodingSettings()).replace(**options)
    with phase("load"):
        translator = Translator.from_directory(run_directory, quantize=quantize, **settings.translator_arguments())
    settings = settings.replace(max_new_tokens=translator.max_new_tokens)
    with phase("compile"):
        program = export_decoding_program(translator, settings.n_best, settings.cross_attention)
    with phase("write"):
        cache.record_run(entry, run_directory, MODEL_FILE, quantize)  # first: a prune elsewhere then keeps the entry
        # Views of JAX's CPU buffers, where Keras' `convert_to_numpy` copies: the weights are held once.
        weights = [np.asarray(variable.value) for variable in translator.decoder.model.variables]
        model_path = os.path.join(run_directory, MODEL_FILE)
        index, data = weights_files(weights, locate_arrays(weights, model_path), os.path.getsize(model_path))
        cache.write(entry / INDEX_FILE, index)
        cache.write(entry / WEIGHTS_FILE, data)
        cache.write(entry / SETTINGS_FILE, settings_bytes(translator.max_length))
        cache.write(entry / settings.program_file(end_at_limit=translator.end_at_limit), bytes(program.serialize()))
    if refills_on_this_platform(settings.beam_width, settings.n_best):  # `load_compiled_translator` reads it too
        with phase("compile"):
            program = export_decoding_program(translator, refill_slots=REFILL_SLOTS)
        with phase("write"):
            cache.write(entry / settings.program_file(end_at_limit=translator.end_at_limit, refill_slots=REFILL_SLOTS),
                        bytes(program.serialize()))
