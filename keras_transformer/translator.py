"""Strings in, strings out: tokenize, encode once, decode on the cache, detokenize.

No TensorFlow: the vocabulary is read with the `sentencepiece` library
(`keras_transformer.data.sentence_piece_tokenizer.SentencePieceTokenizer`,
the ids and strings of the KerasHub tokenizer), so translating runs on a
JAX or torch machine without TensorFlow installed.
"""

import os
import warnings

import keras
import numpy as np

from keras_transformer.data.special_tokens import END_ID
from keras_transformer.data.special_tokens import UNK_ID
from keras_transformer.decoding import CachedDecoder
from keras_transformer.decoding import beam_search
from keras_transformer.decoding import greedy_search
from keras_transformer.decoding.sampler import compiles_loop
from keras_transformer.model_parts import transformer_parts

# With a compiled loop, sources are padded to this many tokens, or to a
# power of two above it (at most the model's max_length), so a stream of
# batches compiles a few programs: each costs about 2 s (greedy) to 4.5 s
# (beam 4) on the README's model on a 2-core CPU.
SOURCE_BUCKET = 32
# Sentences decoded together (`batch_size="auto"`); the batches of a call
# are filled with sentences of similar length. With a compiled loop on a
# CPU, small batches translate fastest: a batch runs until its longest
# translation ends, and its caches stay small. On the README's model, 2-core
# CPU, all 605 test sentences, beam 4: 8 sentences 136-156 sentences/s
# against 79 for 64 on TensorFlow, 149 against 78 on JAX; greedy 279-307
# against 217, and 319 against 230 (benchmarks/findings/decoding.md, "Batch size").
COMPILED_CPU_BATCH_SIZE = 8
# Eager torch pays Python for every step of every batch: 64 sentences ran
# 2.4x (beam 4) to 3.1x (greedy) faster than 8 there. On a GPU or TPU,
# where rows decode in parallel, not measured yet.
BATCH_SIZE = 64
DEFAULT_BATCH_SIZE = "auto"
# A batch of fewer sentences is filled up to the next of these sizes (or
# to `batch_size`), so that a stream of batches compiles a few programs.
SMALLEST_BATCH = 8
# Warn when more than this fraction of a sentence's characters is unknown.
UNKNOWN_WARNING_FRACTION = 0.5
# The loop guard's default: no translation repeats a 3-gram. On the README's
# tiny model it took the test translations that loop from 6.1 % to 0 % at
# -0.2 BLEU, +0.6 chrF (benchmarks/findings/decoding.md).
DEFAULT_NO_REPEAT_NGRAM_SIZE = 3
# Beam search by default: on the README's tiny model, beam 4 (with the loop
# guard) scored +2.8 BLEU on dev, +2.0 on test and +2.3 on the held-out
# books over greedy search, with no loops, for 2.4x the decoding time
# (benchmarks/findings/decoding.md). Dev BLEU during training
# stays greedy: it is for comparing epochs, and runs every epoch.
DEFAULT_BEAM_WIDTH = 4


class Translator:
    """Translates a batch of strings with a trained `transformer()` model.

    Defined behaviour on awkward input, so one bad string never fails a
    batch: an empty (or whitespace-only) string translates to `""` without
    running the model; `bytes` are decoded as UTF-8 with invalid sequences
    replaced by U+FFFD; a source longer than the model's `max_length`
    tokens is truncated to it, with a `UserWarning` naming how many were; a
    sentence whose characters are mostly unknown to the vocabulary (emoji,
    another script) gets a `UserWarning` naming it and the fraction, since
    its translation can only be a guess.

    Args:
        model: a model from `keras_transformer.models.transformer`.
        tokenizer: the tokenizer of its vocabulary: a
            `keras_transformer.data.sentence_piece_tokenizer.SentencePieceTokenizer`
            (no TensorFlow; what `from_directory` loads) or the KerasHub
            tokenizer of `keras_transformer.data.tokenizer.load_tokenizer`
            (the same ids and strings).
        beam_width: int, 1 for greedy search. Defaults to 4.
        length_penalty: float, beam search's alpha. Defaults to 0.6.
        max_new_tokens: int, longest translation in tokens. Defaults to the
            model's `max_length - 1`.
        jit_compile: compile decoding with XLA: greedy and beam search
            become one compiled program per batch size and source bucket
            (sources are padded to 32 tokens or a power of two above it,
            batches filled up to 8, 16, 32, ... sentences). `"auto"` (the default)
            compiles on TensorFlow and JAX and runs eagerly on torch, which
            has no XLA. On the README's model on a 2-core CPU (TensorFlow)
            compiling costs about 1.5 s more for one sentence and pays for
            itself from about 8; False runs TensorFlow eagerly (on JAX the
            loop is compiled whatever is asked).
        batch_size: int, the most sentences decoded at once. A call with
            more splits them into batches of similar lengths (sorted by
            length; the translations come back in input order). `"auto"`
            (the default): 8 (`COMPILED_CPU_BATCH_SIZE`) when the loop is
            compiled on a CPU, else 64 (`BATCH_SIZE`: torch, or a GPU).
        no_repeat_ngram_size: int; above 0, no translation repeats an
            n-gram of this many tokens, a guard against loops
            (`decoding.sampler.block_repeated_ngrams`); 0 turns it off.
            Defaults to 3.

    Raises:
        TypeError: `model` is not a Keras model, `tokenizer` not a
            tokenizer, `beam_width` or `max_new_tokens` not an int.
        ValueError: `model` is not a `transformer()` model, its source or
            target vocabulary is not the tokenizer's size, `beam_width < 1`,
            or `max_new_tokens` does not fit in `[1, max_length)`.

    Example (an untrained model: the output is a string, not yet English;
    after `keras-transformer train`, use `Translator.from_directory("runs/es-en")`):

    >>> import keras_transformer as kt
    >>> from keras_transformer.data.sentence_piece_tokenizer import (
    ...     SentencePieceTokenizer, train_tokenizer)
    >>> tokenizer = SentencePieceTokenizer(train_tokenizer(
    ...     ["Sea la luz.", "Let there be light."], vocabulary_size=20))
    >>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
    ...                               num_heads=2, ff_dim=16, max_length=8)
    >>> outputs = Translator(model, tokenizer)(["Sea la luz.", ""])
    >>> [type(text).__name__ for text in outputs], outputs[1]
    (['str', 'str'], '')
    """

    def __init__(self, model, tokenizer, beam_width=DEFAULT_BEAM_WIDTH, length_penalty=0.6, max_new_tokens=None,
                 jit_compile="auto", no_repeat_ngram_size=DEFAULT_NO_REPEAT_NGRAM_SIZE,
                 batch_size=DEFAULT_BATCH_SIZE):
        if isinstance(beam_width, bool) or not isinstance(beam_width, (int, np.integer)):
            raise TypeError(f"beam_width must be an int >= 1, got beam_width={beam_width!r}.")
        if beam_width < 1:
            raise ValueError(f"beam_width must be >= 1, got beam_width={beam_width}.")
        if not all(hasattr(tokenizer, name) for name in ("tokenize", "detokenize", "vocabulary_size")):
            raise TypeError(
                f"tokenizer must be a SentencePieceTokenizer or a KerasHub tokenizer, got {type(tokenizer).__name__}. "
                "Load the vocabulary.spm saved beside the model with "
                "keras_transformer.data.sentence_piece_tokenizer.SentencePieceTokenizer(path) "
                "(or KerasHub's: keras_transformer.data.tokenizer.load_tokenizer(path))."
            )
        self.model = model
        self.tokenizer = tokenizer
        self._character_is_known = {}
        if jit_compile == "auto":
            jit_compile = keras.backend.backend() in ("tensorflow", "jax")
        elif not isinstance(jit_compile, bool):
            raise ValueError(f'jit_compile must be "auto", True or False, got jit_compile={jit_compile!r}.')
        self.decoder = CachedDecoder(model, jit_compile=jit_compile)
        self.batch_size = resolve_batch_size(batch_size, compiles_loop(self.decoder))
        for side, model_vocabulary in (
            ("source", self.decoder.source_vocabulary_size),
            ("target", self.decoder.embedding.vocabulary_size),
        ):
            if model_vocabulary != tokenizer.vocabulary_size():
                raise ValueError(
                    f"The model's {side} vocabulary has {model_vocabulary} tokens but the "
                    f"tokenizer has {tokenizer.vocabulary_size()}: they were not trained "
                    "together. Load the vocabulary.spm saved beside the model."
                )
        self.max_length = self.decoder.max_length
        self.beam_width = beam_width
        self.length_penalty = length_penalty
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
    def from_directory(cls, directory, quantize=None, **kwargs):
        """Loads `model.keras` and `vocabulary.spm` from a training output folder.

        Args:
            directory: the `--output` folder of `keras-transformer train`.
            quantize: None, or a Keras quantization mode ("int8", "int4")
                applied to the model once loaded
                (`keras_transformer.quantization`).
            **kwargs: passed to `Translator`.

        Raises:
            FileNotFoundError: no `model.keras` or no `vocabulary.spm` there.
            ValueError: `model.keras` is damaged (e.g. truncated), unreadable or not a
                `transformer()` model; `vocabulary.spm` is not a
                SentencePiece model or not the model's vocabulary.
        """
        from keras_transformer import run_folder
        from keras_transformer.data.sentence_piece_tokenizer import SentencePieceTokenizer

        model_path = os.path.join(directory, run_folder.MODEL_FILE)
        if not os.path.isfile(model_path):
            raise FileNotFoundError(
                f"No trained model at {model_path!r}: pass the --output folder of a "
                "finished `keras-transformer train` run."
            )
        vocabulary_path = os.path.join(directory, run_folder.VOCABULARY_FILE)
        if not os.path.isfile(vocabulary_path):
            raise FileNotFoundError(
                f"No vocabulary at {vocabulary_path!r}: the folder (directory={directory!r}) "
                "holds a model but not the vocabulary it was trained with. Copy the whole "
                "--output folder of the training run."
            )
        model = run_folder.load_model(model_path, compile=False)  # decoding needs no optimizer
        transformer_parts(model, what=f"The model in {model_path!r}")
        if quantize:
            from keras_transformer.quantization import quantize as quantize_model

            quantize_model(model, quantize)
        try:
            tokenizer = SentencePieceTokenizer(vocabulary_path)
        except ValueError as error:
            raise ValueError(f"{vocabulary_path!r}: {error}") from error
        return cls(model, tokenizer, **kwargs)

    def _source_tokens(self, texts):
        """The sources of `texts` as one padded batch (bucketed when the loop compiles)."""
        return self._padded_batch(self._token_ids(texts))

    def _token_ids(self, texts):
        """Each text's token ids, cut to `max_length` (with a warning saying how many were)."""
        ids = self.tokenizer.tokenize(texts)
        ids = [list(np.asarray(row).reshape(-1)) for row in ids]
        self._warn_about_unknown_characters(texts, ids)
        too_long = sum(len(row) > self.max_length for row in ids)
        if too_long:
            warnings.warn(
                f"{too_long} of {len(ids)} inputs are longer than max_length="
                f"{self.max_length} tokens and were truncated.",
                UserWarning,
                stacklevel=4,
            )
        return [row[: self.max_length] for row in ids]

    def _padded_batch(self, ids, batch_rows=None):
        """`ids` as int32 `(rows, width)`, padded with 0; compiled, in a few shapes only.

        With a compiled loop the width is rounded up to `SOURCE_BUCKET`
        or a power of two above it, and the rows up to `rows` (a call's
        last, smaller batch is filled up to its others') or else to 8, 16,
        32, ... (at most `batch_size`), by repeating the first row, whose
        extra translations are dropped: a fully padded row would be a
        fully masked one.
        """
        width = max(1, max(len(row) for row in ids))
        rows = len(ids)
        if compiles_loop(self.decoder):
            width = min(self.max_length, _next_bucket(width, SOURCE_BUCKET))
            rows = min(_next_bucket(rows, SMALLEST_BATCH), self.batch_size)
            rows = max(len(ids), batch_rows or rows)
        batch = np.zeros((rows, width), "int32")
        for i in range(rows):
            row = ids[i] if i < len(ids) else ids[0]
            batch[i, : len(row)] = row
        return batch

    def unknown_characters(self, text):
        """How many of `text`'s non-space characters the vocabulary does not know.

        Returns:
            `(unknown, characters)`.
        """
        characters = [c for c in text if not c.isspace()]
        for character in set(characters) - set(self._character_is_known):
            ids = np.asarray(self.tokenizer.tokenize([character])[0]).reshape(-1)
            self._character_is_known[character] = not (ids == UNK_ID).any()
        return sum(not self._character_is_known[c] for c in characters), len(characters)

    def _warn_about_unknown_characters(self, texts, ids):
        shown = 3
        unknown = []
        for text, row in zip(texts, ids):
            if UNK_ID not in row:  # the common case costs nothing more
                continue
            count, total = self.unknown_characters(text)
            if total and count / total > UNKNOWN_WARNING_FRACTION:
                unknown.append(f"{text[:40]!r}{'...' if len(text) > 40 else ''}: {count} of {total} "
                               f"characters ({count / total:.0%})")
        if unknown:
            more = f"; and {len(unknown) - shown} more inputs" if len(unknown) > shown else ""
            warnings.warn(
                "mostly unknown to the vocabulary, so the translation is a guess: "
                + "; ".join(unknown[:shown]) + more + ".",
                UserWarning,
                stacklevel=4,
            )

    def _detokenize(self, generated):
        rows = []
        for row in generated:
            row = [int(token) for token in row]  # sentencepiece 0.2.0 decodes Python ints only
            rows.append(row[: row.index(END_ID)] if END_ID in row else row)
        texts = self.tokenizer.detokenize(rows) if rows else []
        return [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in texts]

    def __call__(self, texts, progress=None):
        """Translates `texts` (a string, bytes or a list of them).

        More than `batch_size` texts are decoded in batches of similar
        lengths; the translations come back in input order.

        Args:
            texts: a string, bytes, or a list of them.
            progress: callable, called with the number of sentences of each
                batch once it is translated (e.g. a progress bar's `add`).

        Returns:
            A list of translations (a single string for a single input; an
            empty list for an empty list).

        Raises:
            TypeError: `texts` is neither a string, bytes nor an iterable of
                them.
        """
        single = isinstance(texts, (str, bytes))
        if not single and (texts is None or isinstance(texts, dict) or not hasattr(texts, "__iter__")):
            raise TypeError(
                f"texts must be a string, bytes or a list of them, got {type(texts).__name__}."
            )
        texts = [texts] if single else list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, (str, bytes)):
                raise TypeError(
                    f"texts must be a string, bytes or a list of them, but texts[{i}] is "
                    f"{type(text).__name__} ({text!r:.40})."
                )
        texts = [t.decode("utf-8", errors="replace") if isinstance(t, bytes) else t for t in texts]
        outputs = [""] * len(texts)
        todo = [i for i, text in enumerate(texts) if text.strip()]
        if progress is not None and len(todo) < len(texts):
            progress(len(texts) - len(todo))
        if todo:
            ids = dict(zip(todo, self._token_ids([texts[i] for i in todo])))
            # Similar lengths together: less padding, and batches that finish together.
            todo.sort(key=lambda i: len(ids[i]))
            # Several batches: each as many rows as the first, one shape fewer to compile.
            rows = self.batch_size if len(todo) > self.batch_size else None
            for start in range(0, len(todo), self.batch_size):
                batch = todo[start : start + self.batch_size]
                generated = self._decode(self._padded_batch([ids[i] for i in batch], rows))[: len(batch)]
                for i, text in zip(batch, self._detokenize(generated)):
                    outputs[i] = text
                if progress is not None:
                    progress(len(batch))
        return outputs[0] if single else outputs

    def _decode(self, source):
        if self.beam_width == 1:
            return greedy_search(
                self.decoder, source, self.max_new_tokens, no_repeat_ngram_size=self.no_repeat_ngram_size
            )
        return beam_search(
            self.decoder, source, self.beam_width, self.length_penalty, self.max_new_tokens,
            no_repeat_ngram_size=self.no_repeat_ngram_size,
        )


def resolve_batch_size(batch_size, compiled):
    """`batch_size` as an int: `"auto"` becomes the size measured fastest for the loop and device.

    Args:
        batch_size: `"auto"` or an int >= 1.
        compiled: whether the decoding loop is compiled (XLA).

    Raises:
        ValueError: neither `"auto"` nor an int >= 1.

    Example:

    >>> resolve_batch_size(32, True), resolve_batch_size("auto", False)
    (32, 64)
    """
    if batch_size == "auto":
        if not compiled:
            return BATCH_SIZE
        from keras_transformer.machine import has_accelerator

        return BATCH_SIZE if has_accelerator() else COMPILED_CPU_BATCH_SIZE
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f'batch_size must be "auto" or an int >= 1, got batch_size={batch_size!r}.')
    return int(batch_size)


def _next_bucket(size, smallest):
    """`smallest`, or the first power-of-two multiple of it that holds `size`.

    Example:

    >>> [_next_bucket(size, 32) for size in (1, 32, 33, 65)]
    [32, 32, 64, 128]
    """
    bucket = smallest
    while bucket < size:
        bucket *= 2
    return bucket
