"""Strings in, strings out: tokenize, encode once, decode on the cache, detokenize.

No TensorFlow: the vocabulary is read with the `sentencepiece` library
(`keras_transformer.data.sentence_piece_tokenizer.SentencePieceTokenizer`,
the ids and strings of the KerasHub tokenizer), so translating runs on a
JAX or torch machine without TensorFlow installed.
"""

import os
import warnings

import numpy as np

from keras_transformer.data.special_tokens import END_ID
from keras_transformer.data.special_tokens import UNK_ID
from keras_transformer.decoding import CachedDecoder
from keras_transformer.decoding import beam_search
from keras_transformer.decoding import greedy_search
from keras_transformer.decoding.sampler import compiles_loop
from keras_transformer.model_parts import transformer_parts

# With `jit_compile`, sources are padded to a multiple of this many tokens,
# so the compiled decoder is traced once per bucket, not once per length.
SOURCE_BUCKET = 16
# Warn when more than this fraction of a sentence's characters is unknown.
UNKNOWN_WARNING_FRACTION = 0.5
# The loop guard's default: no translation repeats a 3-gram. On the README's
# tiny model it took the test translations that loop from 6.1 % to 0 % at
# -0.2 BLEU, +0.6 chrF (benchmarks/README.md, "Decoding quality").
DEFAULT_NO_REPEAT_NGRAM_SIZE = 3
# Beam search by default: on the README's tiny model, beam 4 (with the loop
# guard) scored +2.8 BLEU on dev, +2.0 on test and +2.3 on the held-out
# books over greedy search, with no loops, for 2.4x the decoding time
# (benchmarks/README.md, "Decoding quality"). Dev BLEU during training
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
        jit_compile: compile decoding with XLA on TensorFlow (on JAX the
            loop is always compiled; torch runs it eagerly): greedy and beam
            search become one compiled program per batch size and source
            bucket (sources are padded to a multiple of 16 tokens). Pays off
            when translating many batches; the first batch of each shape
            pays the compilation. Defaults to False.
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
                 jit_compile=False, no_repeat_ngram_size=DEFAULT_NO_REPEAT_NGRAM_SIZE):
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
        self.decoder = CachedDecoder(model, jit_compile=jit_compile)
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
    def from_directory(cls, directory, **kwargs):
        """Loads `model.keras` and `vocabulary.spm` from a training output folder.

        Args:
            directory: the `--output` folder of `keras-transformer train`.
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
        model = run_folder.load_model(model_path)
        transformer_parts(model, what=f"The model in {model_path!r}")
        try:
            tokenizer = SentencePieceTokenizer(vocabulary_path)
        except ValueError as error:
            raise ValueError(f"{vocabulary_path!r}: {error}") from error
        return cls(model, tokenizer, **kwargs)

    def _source_tokens(self, texts):
        ids = self.tokenizer.tokenize(texts)
        ids = [list(np.asarray(row).reshape(-1)) for row in ids]
        self._warn_about_unknown_characters(texts, ids)
        too_long = sum(len(row) > self.max_length for row in ids)
        if too_long:
            warnings.warn(
                f"{too_long} of {len(ids)} inputs are longer than max_length="
                f"{self.max_length} tokens and were truncated.",
                UserWarning,
                stacklevel=3,
            )
        width = max(1, max(min(len(row), self.max_length) for row in ids))
        if compiles_loop(self.decoder):
            width = min(self.max_length, -(-width // SOURCE_BUCKET) * SOURCE_BUCKET)
        batch = np.zeros((len(ids), width), "int32")
        for i, row in enumerate(ids):
            row = row[: self.max_length]
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

    def __call__(self, texts):
        """Translates `texts` (a string, bytes or a list of them).

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
        if todo:
            source = self._source_tokens([texts[i] for i in todo])
            if self.beam_width == 1:
                generated = greedy_search(
                    self.decoder, source, self.max_new_tokens, no_repeat_ngram_size=self.no_repeat_ngram_size
                )
            else:
                generated = beam_search(
                    self.decoder, source, self.beam_width, self.length_penalty, self.max_new_tokens,
                    no_repeat_ngram_size=self.no_repeat_ngram_size,
                )
            for i, text in zip(todo, self._detokenize(generated)):
                outputs[i] = text
        return outputs[0] if single else outputs
