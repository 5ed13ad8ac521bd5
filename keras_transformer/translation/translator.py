"""Strings in, strings out: tokenize, encode once, decode on the cache, detokenize.

No TensorFlow: the vocabulary is read with the `sentencepiece` library
(`keras_transformer_runtime.sentence_piece_tokenizer.SentencePieceTokenizer`,
the ids and strings of the KerasHub tokenizer), so translating runs on a
JAX or torch machine without TensorFlow installed.
"""

import os

import keras
import numpy as np

from keras_transformer.decoding import CachedDecoder
from keras_transformer.decoding import beam_search
from keras_transformer.decoding import greedy_search
from keras_transformer.decoding import n_best_search
from keras_transformer.decoding import pooled_beam_search
from keras_transformer.decoding.sampler import compiles_loop
from keras_transformer.model_parts import transformer_parts
from keras_transformer_runtime.decoding_settings import SEARCHES
from keras_transformer_runtime.decoding_settings import checked_output_ratio
from keras_transformer_runtime.text_translator import BATCH_SIZE  # noqa: F401
from keras_transformer_runtime.text_translator import COMPILED_CPU_BATCH_SIZE  # noqa: F401
from keras_transformer_runtime.text_translator import DEFAULT_BATCH_SIZE
from keras_transformer_runtime.text_translator import SMALLEST_BATCH  # noqa: F401
from keras_transformer_runtime.text_translator import SOURCE_BUCKET  # noqa: F401
from keras_transformer_runtime.text_translator import TextTranslator
from keras_transformer_runtime.text_translator import resolve_batch_size as resolve_runtime_batch_size

# The loop guard's default: no translation repeats a 3-gram. On the README's
# tiny model it removed the test translations that loop, at about the same
# BLEU and a better chrF (benchmarks/findings/decoding.md, "Decoding quality").
DEFAULT_NO_REPEAT_NGRAM_SIZE = 3
# Beam search by default: on the README's tiny model, beam 4 (with the loop
# guard) scored better than greedy search on every split, with no loops, for
# more decoding time (benchmarks/findings/decoding.md, "Decoding quality").
# Dev BLEU during training stays greedy: it is for comparing epochs, and
# runs every epoch.
DEFAULT_BEAM_WIDTH = 4


class Translator(TextTranslator):
    """Translates a batch of strings with a trained `transformer()` model.

    Defined behaviour on awkward input, so one bad string never fails a
    batch (`keras_transformer_runtime.text_translator.TextTranslator`): an
    empty string translates to `""` without running the model; `bytes` and
    lone surrogates are replaced by U+FFFD where they are not UTF-8; a
    source longer than the model's `max_length` tokens is truncated to it,
    with a `UserWarning` naming how many were; a sentence whose characters
    are mostly unknown to the vocabulary gets a `UserWarning` naming it and
    the fraction, since its translation can only be a guess.

    Args:
        model: a model from `keras_transformer.models.transformer`.
        tokenizer: the tokenizer of its vocabulary: a
            `keras_transformer_runtime.sentence_piece_tokenizer.SentencePieceTokenizer`
            (no TensorFlow; what `from_directory` loads) or the KerasHub
            tokenizer of `keras_transformer.data.tokenizer.load_tokenizer`
            (the same ids and strings).
        beam_width: int, 1 for greedy search. Defaults to 4.
        length_penalty: float, beam search's alpha. Defaults to 0.6 for
            `beam_search="kept"` and to 1.0 (`generate`'s) for `"pooled"`.
        max_new_tokens: int, longest translation in tokens. Defaults to the
            model's `max_length - 1`.
        jit_compile: compile decoding with XLA: greedy and beam search
            become one compiled program per batch size and source bucket
            (sources are padded to 32, 64, 96, 128, 192, ... tokens,
            batches filled up to 8, 16, 32, ... sentences). `"auto"` (the default)
            compiles on TensorFlow and JAX and runs eagerly on torch, which
            has no XLA. Compiling costs more than it saves for a sentence
            or two and pays for itself from a handful on
            (benchmarks/findings/decoding.md, "Decoding speed"); False runs
            TensorFlow eagerly (on JAX the loop is compiled whatever is asked).
        batch_size: int, the most sentences decoded at once. A call with
            more splits them into batches of similar lengths (sorted by
            length; the translations come back in input order). `"auto"`
            (the default): 8 (`COMPILED_CPU_BATCH_SIZE`) when the loop is
            compiled on a CPU, else 64 (`BATCH_SIZE`: torch, or a GPU).
        no_repeat_ngram_size: int; above 0, no translation repeats an
            n-gram of this many tokens, a guard against loops
            (`decoding.search_step.block_repeated_ngrams`); 0 turns it off.
            Defaults to 3.
        beam_search: `"kept"` (the default: a finished hypothesis keeps
            its place in the beam; GNMT's length penalty
            `((5 + length) / 6) ** length_penalty`) or `"pooled"`
            (`transformers`' and fairseq's: finished hypotheses are set
            aside and `beam_width` stay open; `length ** length_penalty`;
            `decoding.pooled_beam_search`), with which a model imported
            from Marian translates as `MarianMTModel.generate` does.
        early_stopping: bool, with `beam_search="pooled"`: stop a source
            once `beam_width` hypotheses finished. Defaults to False.
        end_at_limit: bool, with `beam_search="pooled"`: a hypothesis still
            open at the length limit counts a closing `</s>` in its length
            penalty, as `generate` does for a model with a
            `forced_eos_token_id` (Marian's; the default, True), or not
            (False: NLLB-200's). `from_directory` takes the run's.
        max_output_ratio: float >= 0, the cap on run-away output: a
            sentence's translation writes at most `ratio * its source's ids
            + OUTPUT_SLACK` tokens (`decoding.output_limit`); 0 turns it
            off. None (the default): `decoding_settings.DEFAULT_MAX_OUTPUT_RATIO`.

    Raises:
        TypeError: `model` is not a Keras model, `tokenizer` not a
            tokenizer, `beam_width` or `max_new_tokens` not an int.
        ValueError: `model` is not a `transformer()` model, its source or
            target vocabulary is not the tokenizer's size, `beam_width < 1`,
            or `max_new_tokens` does not fit in `[1, max_length)`.

    Example (an untrained model: the output is a string, not yet English;
    after `keras-transformer train`, use `Translator.from_directory("runs/es-en")`):

    >>> import keras_transformer as kt
    >>> from keras_transformer_runtime.sentence_piece_tokenizer import (
    ...     SentencePieceTokenizer, train_tokenizer)
    >>> tokenizer = SentencePieceTokenizer(train_tokenizer(
    ...     ["Sea la luz.", "Let there be light."], vocabulary_size=20))
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=8)
    >>> outputs = Translator(model, tokenizer)(["Sea la luz.", ""])
    >>> [type(text).__name__ for text in outputs], outputs[1]
    (['str', 'str'], '')
    """

    def __init__(self, model, tokenizer, beam_width=DEFAULT_BEAM_WIDTH, length_penalty=None, max_new_tokens=None,
                 jit_compile="auto", no_repeat_ngram_size=DEFAULT_NO_REPEAT_NGRAM_SIZE,
                 batch_size=DEFAULT_BATCH_SIZE, beam_search="kept", early_stopping=False, end_at_limit=True,
                 max_output_ratio=None):
        if beam_search not in SEARCHES:
            raise ValueError(f"beam_search must be one of {SEARCHES}, got beam_search={beam_search!r}.")
        self.beam_search = beam_search
        self.early_stopping = bool(early_stopping)
        self.end_at_limit = bool(end_at_limit)
        if isinstance(beam_width, bool) or not isinstance(beam_width, (int, np.integer)):
            raise TypeError(f"beam_width must be an int >= 1, got beam_width={beam_width!r}.")
        if beam_width < 1:
            raise ValueError(f"beam_width must be >= 1, got beam_width={beam_width}.")
        if not all(hasattr(tokenizer, name) for name in ("tokenize", "detokenize", "vocabulary_size")):
            raise TypeError(
                f"tokenizer must be a SentencePieceTokenizer or a KerasHub tokenizer, got {type(tokenizer).__name__}. "
                "Load the vocabulary.spm saved beside the model with "
                "keras_transformer_runtime.sentence_piece_tokenizer.SentencePieceTokenizer(path) "
                "(or KerasHub's: keras_transformer.data.tokenizer.load_tokenizer(path))."
            )
        self.model = model
        self.tokenizer = tokenizer
        self._character_is_known = {}
        if jit_compile == "auto":
            jit_compile = keras.backend.backend() in ("tensorflow", "jax")
        elif not isinstance(jit_compile, bool):
            raise ValueError(f'jit_compile must be "auto", True or False, got jit_compile={jit_compile!r}.')
        self.max_output_ratio = checked_output_ratio(max_output_ratio)
        self.decoder = CachedDecoder(model, jit_compile=jit_compile, max_output_ratio=self.max_output_ratio)
        self.bucketed = compiles_loop(self.decoder)
        self.batch_size = resolve_batch_size(batch_size, self.bucketed)
        # A Marian tokenizer whose target has a table of its own counts each side's ids.
        source_size = getattr(tokenizer, "source_vocabulary_size", tokenizer.vocabulary_size)()
        for side, model_vocabulary, tokenizer_vocabulary in (
            ("source", self.decoder.source_vocabulary_size, source_size),
            ("target", self.decoder.embedding.vocabulary_size, tokenizer.vocabulary_size()),
        ):
            if model_vocabulary != tokenizer_vocabulary:
                raise ValueError(
                    f"The model's {side} vocabulary has {model_vocabulary} tokens but the "
                    f"tokenizer has {tokenizer_vocabulary}: they were not trained "
                    "together. Load the vocabulary.spm saved beside the model."
                )
        self.max_length = self.decoder.max_length
        self.beam_width = beam_width
        self.length_penalty = (0.6 if beam_search == "kept" else 1.0) if length_penalty is None else length_penalty
        if isinstance(no_repeat_ngram_size, bool) or not isinstance(no_repeat_ngram_size, (int, np.integer)) \
                or no_repeat_ngram_size < 0:
            raise ValueError(f"no_repeat_ngram_size must be an int >= 0, got {no_repeat_ngram_size!r}.")
        self.no_repeat_ngram_size = int(no_repeat_ngram_size)
        self.max_new_tokens = max_new_tokens or self.max_length - 1
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, (int, np.integer)):
            raise TypeError(f"max_new_tokens must be an int, got max_new_tokens={max_new_tokens!r}.")
        if not 1 <= self.max_new_tokens < self.max_length:
            raise ValueError(
                f"max_new_tokens={self.max_new_tokens} must be in [1, max_length={self.max_length}): "
                "the start token takes one position."
            )

    @classmethod
    def from_directory(cls, directory, quantize=None, source_language=None, target_language=None, **kwargs):
        """Loads `model.keras` and its vocabulary from a run folder (trained, or imported from Marian).

        Args:
            directory: the `--output` folder of `keras-transformer train`.
            quantize: None, or a Keras quantization mode ("int8", "int4")
                applied to the model once loaded
                (`keras_transformer.quantization`).
            source_language, target_language: an NLLB-200 run's languages
                (`spa_Latn`); other runs take theirs from the text.
            **kwargs: passed to `Translator`; `end_at_limit` defaults to the
                run's (`search_defaults.run_ends_at_limit`).

        Raises:
            FileNotFoundError: no `model.keras` or no `vocabulary.spm` there.
            ValueError: `model.keras` is damaged (e.g. truncated), unreadable or not a
                `transformer()` model; `vocabulary.spm` is not a
                SentencePiece model or not the model's vocabulary.
        """
        from keras_transformer import model_file
        from keras_transformer_runtime.run_files import MODEL_FILE
        from keras_transformer_runtime.run_tokenizer import load_run_tokenizer
        from keras_transformer_runtime.run_tokenizer import sentence_settings
        from keras_transformer_runtime.run_tokenizer import vocabulary_files
        from keras_transformer_runtime.search_defaults import run_ends_at_limit

        kwargs.setdefault("end_at_limit", run_ends_at_limit(directory))
        model_path = os.path.join(directory, MODEL_FILE)
        if not os.path.isfile(model_path):
            raise FileNotFoundError(
                f"No trained model at {model_path!r}: pass the --output folder of a "
                "finished `keras-transformer train` run."
            )
        vocabulary_path = os.path.join(directory, vocabulary_files(directory)[0])
        if not os.path.isfile(vocabulary_path):
            raise FileNotFoundError(
                f"No vocabulary at {vocabulary_path!r}: the folder (directory={directory!r}) "
                "holds a model but not the vocabulary it was trained with. Copy the whole "
                "--output folder of the training run."
            )
        model = model_file.load_model(model_path, compile=False)  # decoding needs no optimizer
        transformer_parts(model, what=f"The model in {model_path!r}")
        if quantize:
            from keras_transformer.quantization import quantize as quantize_model

            quantize_model(model, quantize)
        try:
            tokenizer = load_run_tokenizer(directory, source_language, target_language)
        except ValueError as error:
            raise ValueError(f"{vocabulary_path!r}: {error}") from error
        translator = cls(model, tokenizer, **kwargs)
        for name, value in sentence_settings(directory).items():
            setattr(translator, name, value)
        return translator

    def _decode(self, source):
        if self.beam_width == 1:
            return greedy_search(
                self.decoder, source, self.max_new_tokens, no_repeat_ngram_size=self.no_repeat_ngram_size,
                forced_first_id=self.forced_first_id,
            )
        if self.beam_search == "pooled":
            return pooled_beam_search(self.decoder, source, self.beam_width, self.length_penalty,
                                      self.max_new_tokens, early_stopping=self.early_stopping,
                                      no_repeat_ngram_size=self.no_repeat_ngram_size,
                                      forced_first_id=self.forced_first_id, end_at_limit=self.end_at_limit)
        return beam_search(
            self.decoder, source, self.beam_width, self.length_penalty, self.max_new_tokens,
            no_repeat_ngram_size=self.no_repeat_ngram_size, forced_first_id=self.forced_first_id,
        )

    def _decode_n_best(self, source, n, cross_attention=False):
        # Beam 1 is greedy search whichever the search: its one hypothesis is kept's.
        pooled = self.beam_search == "pooled" and self.beam_width > 1
        return n_best_search(
            self.decoder, source, int(n), self.beam_width, self.length_penalty, self.max_new_tokens,
            no_repeat_ngram_size=self.no_repeat_ngram_size, return_cross_attention=cross_attention,
            beam_search="pooled" if pooled else "kept", early_stopping=self.early_stopping,
            forced_first_id=self.forced_first_id, end_at_limit=self.end_at_limit,
        )

    def decoder_layer_count(self):
        """How many decoder layers the model has (the layers `n_best`'s `alignment_layer` counts)."""
        return len(self.decoder.decoder_layers)


def resolve_batch_size(batch_size, compiled):
    """`batch_size` as an int: `"auto"` becomes the size measured fastest for the loop and device.

    `keras_transformer_runtime.text_translator.resolve_batch_size` with
    Keras' view of the devices.

    Example:

    >>> resolve_batch_size(32, True), resolve_batch_size("auto", False)
    (32, 64)
    """
    from keras_transformer.machine import has_accelerator

    return resolve_runtime_batch_size(batch_size, compiled, has_accelerator)
