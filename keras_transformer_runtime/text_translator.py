"""Strings in, strings out, around any decoding engine: the translators' text front end.

`TextTranslator` tokenizes, truncates, warns, sorts sentences into batches
of similar lengths, pads each batch into one of a few shapes, hands it to
its engine's `_decode`, and detokenizes the tokens back in input order.
The Keras `Translator`, the `CompiledTranslator` of a cached program and
the `CTranslate2Translator` differ only in `_decode`, so the same text
gives the same batches, and the same tokens the same translation, whatever
runs the model (but a call of one batch, which `batch_cores` above 1
splits into a batch a core). Imports NumPy only: no Keras, no TensorFlow.
"""

import copy
import dataclasses
import itertools
import warnings

import numpy as np

from keras_transformer_runtime.alignment import ALIGNMENT_LAYER
from keras_transformer_runtime.alignment import alignment_links
from keras_transformer_runtime.alignment import check_layer
from keras_transformer_runtime.alignment import layer_weights
from keras_transformer_runtime.batch_buckets import SMALLEST_BATCH
from keras_transformer_runtime.batch_buckets import SOURCE_BUCKET  # noqa: F401 (where callers import it from)
from keras_transformer_runtime.batch_buckets import next_bucket
from keras_transformer_runtime.batch_buckets import source_width
from keras_transformer_runtime.batch_buckets import source_widths
from keras_transformer_runtime.batch_threads import call_parts
from keras_transformer_runtime.batch_threads import in_order
from keras_transformer_runtime.documents import paragraphs
from keras_transformer_runtime.documents import sentences
from keras_transformer_runtime.hypotheses import Hypothesis
from keras_transformer_runtime.hypotheses import Translation
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID
from keras_transformer_runtime.special_tokens import UNK_ID
from keras_transformer_runtime.input_texts import checked_texts as _checked_texts
from keras_transformer_runtime.input_texts import warn_about_unknown_characters

# Sentences decoded together (`batch_size="auto"`); the batches of a call
# are filled with sentences of similar length. With a compiled loop on a
# CPU, small batches translate fastest: a batch runs until its longest
# translation ends, and its caches stay small: on the README's model 8
# sentences translated faster than 64, greedy and beam 4, on TensorFlow and
# JAX (benchmarks/findings/decoding.md, "Batch size").
COMPILED_CPU_BATCH_SIZE = 8
# Eager torch pays Python for every step of every batch: 64 sentences ran
# several times faster than 8 there (the same section). On a GPU or TPU,
# where rows decode in parallel, not measured yet.
BATCH_SIZE = 64
DEFAULT_BATCH_SIZE = "auto"
# Warn when more than this fraction of a sentence's characters is unknown.
UNKNOWN_WARNING_FRACTION = 0.5


class TextTranslator:
    """The text side of a translator; subclasses supply `_decode`.

    Each text is split into sentences (`split_sentences`; a sentence over
    `sentence_tokens` cut at its clauses). One bad string never fails a batch:
    an empty (or whitespace-only) string translates to `""` without running
    the model; `bytes` are decoded as UTF-8 with invalid sequences replaced
    by U+FFFD, and so is each lone surrogate in a `str` (`text_cleaning`),
    with a `UserWarning`; a text handed whole longer than `max_length` tokens
    is truncated to it, with a `UserWarning` naming how many were; one whose
    characters are mostly unknown to the vocabulary (emoji, another script)
    gets a `UserWarning` naming it and the fraction, since its translation
    can only be a guess. Those warnings speak of a whole call (`warn=False`
    leaves them out); `n_best` also gives each sentence its own, on its
    `Translation` (`Translation.warnings`).

    A subclass sets `tokenizer`, `max_length`, `batch_size` and `bucketed`
    (whether batches are padded into a few shapes, for a compiled engine)
    and defines `_decode(source) -> generated`: int `(rows, width)` source
    ids padded with 0 in, int `(rows, steps)` generated ids out, each row
    ending with `END_ID` or running to the end. A subclass whose `_decode`
    is safe to call from several threads may set `parallel_batches` above
    1: that many batches are then decoded at a time
    (`batch_threads.in_order`).

    Example (an engine that answers every sentence with its own tokens):

    >>> from keras_transformer_runtime.sentence_piece_tokenizer import (
    ...     SentencePieceTokenizer, train_tokenizer)
    >>> class Echo(TextTranslator):
    ...     def __init__(self, tokenizer):
    ...         self.tokenizer, self.max_length = tokenizer, 16
    ...         self.batch_size, self.bucketed = 8, False
    ...     def _decode(self, source):
    ...         return source  # padding (id 0) detokenizes to nothing
    >>> tokenizer = SentencePieceTokenizer(train_tokenizer(
    ...     ["Sea la luz.", "Let there be light."], vocabulary_size=20))
    >>> Echo(tokenizer)(["Sea  la luz.", "", "light"])
    ['Sea la luz.', '', 'light']
    """

    _character_is_known = None
    parallel_batches = 1
    # A lone sentence is padded as a batch of a few (a shape fewer to compile); a cached engine may give it one row.
    lone_sentence_rows = SMALLEST_BATCH
    # The cores a call of one batch's sentences is split over (`batch_threads.parts_a_core`); 1: not split.
    batch_cores = 1
    queue_size = None  # the sentences of a queue, where the engine refills rows (`batch_threads.queue_parts`)
    split_sentences = True  # a call's default: translate each sentence of a text on its own
    # The language whose rules split a run's sentences (an NLLB-200 tokenizer's own first; None: fallback rules).
    source_language = None
    # A sentence longer than this many tokens is cut at its clauses; None: longer than `max_length`.
    sentence_tokens = None
    keep_patterns = ()  # regular expressions of spans kept as they are, beside `documents.kept_spans`' own

    def _source_tokens(self, texts):
        """The sources of `texts` as one padded batch (bucketed when `bucketed`)."""
        return self._padded_batch(self._token_ids(texts))

    def _token_ids(self, texts):
        """Each text's token ids, cut to `max_length` (with a warning saying how many were)."""
        return self._checked_token_ids(texts)[0]

    def _checked_token_ids(self, texts, warn=True):
        """`(ids, found)`: each text's token ids cut to `max_length`, and each one's warnings (a tuple of str).

        With `warn`, what was found is also said in one `UserWarning` a kind for all of `texts`.
        """
        ids = self.tokenizer.tokenize(texts)
        ids = [list(np.asarray(row).reshape(-1)) for row in ids]
        found = [[] for _ in texts]
        for messages, row in zip(found, ids):
            if len(row) > self.max_length:
                messages.append(f"longer than max_length={self.max_length} tokens ({len(row)}); truncated")
        unknown = self._mostly_unknown(texts, ids)
        for i, count, total in unknown:
            found[i].append(f"{count} of {total} characters are unknown to the vocabulary, so the translation "
                            "is a guess")
        if warn:
            warn_about_unknown_characters([(texts[i], count, total) for i, count, total in unknown])
            too_long = sum(len(row) > self.max_length for row in ids)
            if too_long:
                warnings.warn(f"{too_long} of {len(ids)} inputs are longer than max_length={self.max_length} "
                              "tokens and were truncated.", UserWarning, stacklevel=4)
        return [row[: self.max_length] for row in ids], [tuple(messages) for messages in found]

    def _padded_batch(self, ids, batch_rows=None, zeros=False):
        """`ids` as int32 `(rows, width)`, padded with 0; bucketed, in a few shapes only.

        When `bucketed`, the width is rounded up to one of
        `batch_buckets.source_widths`, and the rows up to `rows` (a call's last,
        smaller batch is filled up to its others') or else to 8, 16, 32,
        ... (at most `batch_size`), by repeating the first row, whose
        extra translations are dropped: a fully padded row would be a
        fully masked one (`zeros`: rows of 0, a refilling engine's queue).
        A lone sentence gets `lone_sentence_rows` rows.
        """
        width = max(1, max(len(row) for row in ids))
        rows = len(ids)
        if self.bucketed:
            width = source_width(width, self.max_length)
            rows = self.lone_sentence_rows if rows == 1 else min(next_bucket(rows, SMALLEST_BATCH), self.batch_size)
            rows = max(len(ids), batch_rows or rows)
        batch = np.zeros((rows, width), "int32")
        for i in range(rows):
            row = ids[i] if i < len(ids) else () if zeros else ids[0]
            batch[i, : len(row)] = row
        return batch

    def batch_shapes(self):
        """Every `(rows, width)` a call pads its batches into when `bucketed`, smallest first.

        Rows: 8, 16, 32, ... up to `batch_size` (a batch is filled up to one
        of these), `lone_sentence_rows`, and a part's where a call of one
        batch is split over `batch_cores` (`batch_threads.parts_a_core`);
        widths: `batch_buckets.source_widths`. A compiled engine compiles
        each once.

        Example:

        >>> translator = TextTranslator()
        >>> translator.batch_size, translator.max_length = 16, 128
        >>> translator.batch_shapes()
        [(8, 32), (8, 64), (8, 96), (8, 128), (16, 32), (16, 64), (16, 96), (16, 128)]
        """
        rows = {min(next_bucket(size, SMALLEST_BATCH), self.batch_size) for size in range(2, self.batch_size + 1)}
        rows.add(self.lone_sentence_rows)
        if -(-self.batch_size // self.batch_cores) > 1:  # parts of several sentences (else lone ones)
            rows.add(-(-self.batch_size // self.batch_cores))
        return [(row, width) for row in sorted(rows) for width in source_widths(self.max_length)]

    def unknown_characters(self, text):
        """How many of `text`'s non-space characters the vocabulary does not know.

        Returns:
            `(unknown, characters)`.
        """
        if self._character_is_known is None:
            self._character_is_known = {}
        characters = [c for c in text if not c.isspace()]
        for character in set(characters) - set(self._character_is_known):
            ids = np.asarray(self.tokenizer.tokenize([character])[0]).reshape(-1)
            self._character_is_known[character] = not (ids == UNK_ID).any()
        return sum(not self._character_is_known[c] for c in characters), len(characters)

    def _mostly_unknown(self, texts, ids):
        """`(index, unknown, characters)` of each text whose characters are mostly unknown to the vocabulary."""
        unknown = []
        for i, (text, row) in enumerate(zip(texts, ids)):
            if UNK_ID not in row:  # the common case costs nothing more
                continue
            count, total = self.unknown_characters(text)
            if total and count / total > UNKNOWN_WARNING_FRACTION:
                unknown.append((i, count, total))
        return unknown

    def _detokenize(self, generated):
        rows = []
        for row in generated:
            row = [int(token) for token in row]  # sentencepiece 0.2.0 decodes Python ints only
            rows.append(row[: row.index(END_ID)] if END_ID in row else row)
        texts = self.tokenizer.detokenize(rows) if rows else []
        return [t.decode("utf-8") if isinstance(t, bytes) else str(t) for t in texts]

    def __call__(self, texts, progress=None, warn=True, split_sentences=None):
        """Translates `texts` (a string, bytes or a list of them).

        Each text is split into its sentences, which are translated
        together with every other text's and put back with the text's own
        whitespace and line breaks (`documents.paragraphs`); a sentence
        longer than `sentence_tokens` (else `max_length`) tokens is cut at
        its clauses. More than `batch_size` sentences are decoded in
        batches of similar lengths; the translations come back in input
        order.

        Args:
            texts: a string, bytes, or a list of them.
            progress: callable, called with the number of sentences of each
                batch once it is translated (e.g. a progress bar's `add`).
            warn: bool, say what was truncated or replaced, or mostly
                unknown, in a `UserWarning` a kind for the call (what the
                command line prints). Defaults to True.
            split_sentences: bool, translate each sentence on its own; False hands
                each text to the model whole. Defaults to `self.split_sentences`.

        Returns:
            A list of translations (a single string for a single input; an
            empty list for an empty list).

        Raises:
            TypeError: `texts` is neither a string, bytes nor an iterable of
                them.
        """
        single, texts, _ = _checked_texts(texts, warn)
        split, lines = self._split(texts, split_sentences)
        outputs, _ = self._in_batches(
            lines, lambda source, count: self._detokenize(self._decode(source)[:count]),
            paragraphs.progress_over_texts(progress, len(texts), len(lines)), warn
        )
        outputs = ["" if output is None else output for output in outputs]
        outputs = outputs if split is None else paragraphs.join_texts(split, outputs)
        return outputs[0] if single else outputs

    def _split(self, texts, split_sentences):
        """`(split, lines)`: `texts`' `split_texts` and their units, or `(None, texts)` when not splitting."""
        splits = self.split_sentences if split_sentences is None else split_sentences
        split = self.split_texts(texts) if splits else None
        return split, texts if split is None else paragraphs.units(split)

    def split_texts(self, texts):
        """Each of `texts` (a list of str) as a `documents.paragraphs.SplitText`: its sentences, split by the
        rules of the run's source language, one longer than `sentence_tokens` tokens cut at its clauses, and
        cut around the spans kept as they are (`documents.kept_spans`, and `keep_patterns`)."""
        language = sentences.splitting_language(getattr(self.tokenizer, "source_language", 0) or self.source_language)
        fits = sentences.within_tokens(self.tokenizer, min(self.sentence_tokens or self.max_length, self.max_length))
        return paragraphs.split_texts(texts, language, fits, self.keep_patterns)

    def n_best(self, texts, n, progress=None, alignments=False, alignment_layer=ALIGNMENT_LAYER, warn=True,
               split_sentences=None):
        """The `n` best translations of each of `texts`, with their scores (`hypotheses.Translation`).

        The first hypothesis of each is what calling the translator gives
        with the same settings. An empty text has one hypothesis, `""`,
        scored 0. Scores are log-probabilities (see
        `keras_transformer.decoding.n_best`). Each translation carries the
        warnings about its own source (`Translation.warnings`: truncated,
        mostly unknown, lone surrogates replaced), whatever `warn` says.
        A text of several sentences gets one `Translation` joining its sentences'
        hypotheses (`documents.paragraphs` says how; `Hypothesis.segments`).

        Args:
            texts: a string, bytes, or a list of them.
            n: int, hypotheses per text, at most the beam's width.
            progress: as when calling the translator.
            alignments: bool, give each hypothesis its word alignment to
                the source and the cross-attention it was read from
                (`keras_transformer_runtime.alignment`), and each
                translation its source's pieces.
            alignment_layer: the decoder layer the alignments read: an
                index (negative from the last) or `"mean"` (of all).
                Defaults to `alignment.ALIGNMENT_LAYER`.
            warn: bool, also say those warnings in a `UserWarning` a kind for the call, as when
                calling the translator. Defaults to True; a server, which answers each sentence's
                warnings with it, passes False and leaves Python's warnings alone.
            split_sentences: bool, as when calling the translator.

        Returns:
            A list of `Translation`s (a single one for a single input).

        Raises:
            TypeError: as when calling the translator.
            ValueError: `n` is not an int in `[1, beam width]`, or
                `alignment_layer` is not a layer of the model.
        """
        beam_width = getattr(self, "beam_width", 1)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= beam_width:
            raise ValueError(f"n must be an int from 1 to the beam's width, {beam_width}; got n={n!r}.")
        single, texts, replaced = _checked_texts(texts, warn)
        if alignments:
            check_layer(alignment_layer, self.decoder_layer_count())  # before decoding

        def translate_batch(source, count):
            n_best = self._decode_n_best(source, int(n), cross_attention=bool(alignments))
            return self._hypotheses(n_best, count, source if alignments else None, alignment_layer)

        split, lines = self._split(texts, split_sentences)
        outputs, found = self._in_batches(
            lines, translate_batch, paragraphs.progress_over_texts(progress, len(texts), len(lines)), warn)
        translations = []
        for line, (source_tokens, hypotheses), warned in zip(
                lines, (output or (None, None) for output in outputs), found):
            if hypotheses is None:  # a blank text
                source_tokens = () if alignments else None
                hypotheses = [Hypothesis("", 0.0, 0.0, **({"alignment": (), "attention": ()} if alignments else {}))]
            translations.append(Translation(line, tuple(hypotheses), source_tokens, warned))
        if split is not None:
            translations = paragraphs.join_translations(split, translations, alignments)
        translations = [dataclasses.replace(translation, warnings=before + translation.warnings)
                        for translation, before in zip(translations, replaced)]
        return translations[0] if single else translations

    @property
    def forced_first_id(self):
        """The token every translation starts with (an NLLB-200 tokenizer's target language), or None."""
        return getattr(self.tokenizer, "forced_first_id", None)

    def with_languages(self, source_language, target_language):
        """A copy translating between two of an NLLB-200 run's languages; it shares the model and its programs.

        Raises:
            UserInputError: the tokenizer has no such languages (close codes named).
        """
        copied = copy.copy(self)
        copied.tokenizer = self.tokenizer.with_languages(source_language, target_language)
        return copied

    def decoder_layer_count(self):
        """How many decoder layers the model has (the layers `alignment_layer` counts)."""
        raise NotImplementedError(f"{type(self).__name__} does not give cross-attention.")

    def _in_batches(self, texts, translate_batch, progress, warn=True):
        """`(outputs, found)`: `translate_batch(source, count)` over `texts` in sorted batches, back in input
        order, and each text's warnings (`_checked_token_ids`).

        A blank text gets None, no batch and no warning.
        """
        outputs, found = [None] * len(texts), [()] * len(texts)
        todo = [i for i, text in enumerate(texts) if text.strip()]
        if progress is not None and len(todo) < len(texts):
            progress(len(texts) - len(todo))
        if todo:
            ids, warned = self._checked_token_ids([texts[i] for i in todo], warn)
            ids = dict(zip(todo, ids))
            for i, messages in zip(todo, warned):
                found[i] = messages
            # Similar lengths together: less padding, and batches that finish together.
            todo.sort(key=lambda i: len(ids[i]))
            sizes, rows, queued = call_parts(len(todo), self.batch_size, self.batch_cores, self.queue_size,
                                             self.parallel_batches)
            starts = [0, *itertools.accumulate(sizes)]
            batches = [todo[start:end] for start, end in zip(starts, starts[1:])]

            def translate(batch):
                return translate_batch(self._padded_batch([ids[i] for i in batch], rows, queued), len(batch))

            for batch, translated in zip(batches, in_order(translate, batches, self.parallel_batches)):
                for i, output in zip(batch, translated):
                    outputs[i] = output
                if progress is not None:
                    progress(len(batch))
        return outputs, found

    def _hypotheses(self, n_best, count, source=None, alignment_layer=ALIGNMENT_LAYER):
        """Each of the first `count` rows' `(source pieces, hypotheses)`, from `_decode_n_best`'s arrays.

        Dead beams are left out. With `source` (the batch's source ids),
        each hypothesis gets its alignment and attention, read from
        `n_best.cross_attention`, and the source pieces are given; else
        they are None.
        """
        piece = self.tokenizer.id_to_token
        # A Marian tokenizer whose target has a table of its own names the source's pieces from the source's.
        source_piece = getattr(self.tokenizer, "source_id_to_token", piece)
        kept = []  # (row, ids to the end token, score, normalized score, token scores, weights)
        weights = n_best.cross_attention if source is not None else None
        for row in range(count):
            for k, (ids, score) in enumerate(zip(n_best.tokens[row], n_best.scores[row])):
                if np.isfinite(score):
                    ids = [int(token) for token in ids]
                    length = ids.index(END_ID) + 1 if END_ID in ids else len(ids)
                    kept.append((row, ids[:length], float(score), float(n_best.normalized_scores[row][k]),
                                 n_best.token_scores[row][k][:length],
                                 None if weights is None else layer_weights(weights[row][k], alignment_layer)))
        texts = self._detokenize([ids for _, ids, _, _, _, _ in kept])  # one call for every hypothesis
        sources = [None] * count
        if source is not None:
            sources = [tuple(str(source_piece(int(token))) for token in ids if token != PAD_ID)
                       for ids in source[:count]]
        rows = [(sources[row], []) for row in range(count)]
        for (row, ids, score, normalized_score, token_scores, attention), text in zip(kept, texts):
            tokens = tuple(str(piece(token)) for token in ids)
            extra = {}
            if attention is not None:
                attention = attention[: len(ids), : len(sources[row])]
                extra = {"alignment": alignment_links(attention, sources[row], tokens),
                         "attention": tuple(map(tuple, attention.tolist()))}
            rows[row][1].append(Hypothesis(text, score, normalized_score, tokens,
                                           tuple(np.asarray(token_scores, "float64").tolist()), **extra))
        return rows

    def _decode_n_best(self, source, n, cross_attention=False):
        raise NotImplementedError(
            f"{type(self).__name__} gives one translation per input; n-best lists need the Keras model "
            "(keras_transformer.translation.translator.Translator) or a compiled program of an n-best list "
            "(load_compiled_translator(..., n_best=n))."
        )

    def _decode(self, source):
        raise NotImplementedError(f"{type(self).__name__} must define _decode(source) -> generated ids.")


def resolve_batch_size(batch_size, compiled, has_accelerator):
    """`batch_size` as an int: `"auto"` becomes the size measured fastest for the loop and device.

    Args:
        batch_size: `"auto"` or an int >= 1.
        compiled: whether the decoding loop is compiled (XLA).
        has_accelerator: callable returning whether a GPU or TPU runs it
            (asked only for `"auto"` with a compiled loop).

    Raises:
        ValueError: neither `"auto"` nor an int >= 1.

    Example:

    >>> resolve_batch_size("auto", True, lambda: False), resolve_batch_size(32, True, None)
    (8, 32)
    """
    if batch_size == "auto":
        if not compiled:
            return BATCH_SIZE
        return BATCH_SIZE if has_accelerator() else COMPILED_CPU_BATCH_SIZE
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f'batch_size must be "auto" or an int >= 1, got batch_size={batch_size!r}.')
    return int(batch_size)
