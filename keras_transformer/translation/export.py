"""SavedModel export: a serving signature from strings to translated strings.

The tokenizer (tensorflow-text's SentencePiece op), the encoder, the cached
greedy decoding loop (the package's one loop, `decoding.search_tensors`,
traced into a `tf.while_loop` that XLA compiles where it is served) and the
detokenizer all live inside one TensorFlow graph, so the exported folder
translates in a process that has only `tensorflow` and `tensorflow_text`,
without this package or Keras.

This is the TensorFlow edge of the package: it needs the TensorFlow backend
(on JAX the export needs a fixed-length signature, on torch torch_xla). A
model trained under any backend is saved as `.keras`, then exported by a
TensorFlow-backend process; `keras-transformer export` starts that process
for you.
"""

import os

import keras

from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID

SIGNATURE = "serving_default"


def _require_tensorflow_backend():
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            "SavedModel export runs on the TensorFlow backend; run it with "
            "KERAS_BACKEND=tensorflow (`keras-transformer export` does this for you)."
        )


def marian_graph_tokenizer(directory):
    """A run imported from Marian's tokenizer as TensorFlow ops: `(tokenize, detokenize)`.

    `tokenize(texts)`: `source.spm`'s pieces, looked up in the source's
    id table (a piece not in it is `<unk>`), `</s>` appended: a ragged
    int32 tensor. `detokenize(ids)`: the pieces of a ragged tensor of ids
    in the target's table (`target_vocab.json` where the target has one
    of its own), the specials dropped, joined and `▁` made a space, as
    `MarianTokenizer.detokenize`.

    Returns:
        `((tokenize, detokenize), resources)`: the two functions, and a
        `tf.Module` holding what they read (set it on the exported module).
    """
    import tensorflow as tf
    import tensorflow_text

    from keras_transformer_runtime.marian_tokenizer import MarianTokenizer
    from keras_transformer_runtime.special_tokens import UNK_ID

    tokenizer = MarianTokenizer(directory)
    pieces, source_pieces = tokenizer.get_vocabulary(), tokenizer.get_source_vocabulary()
    source = tensorflow_text.SentencepieceTokenizer(model=tokenizer.source_processor.serialized_model_proto(),
                                                    out_type=tf.string)
    table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(source_pieces), tf.range(len(source_pieces), dtype=tf.int32)), UNK_ID)
    dropped = tf.constant(sorted({tokenizer.token_to_id(piece) for piece in tokenizer.specials.values()}), tf.int32)
    piece_strings = tf.constant(pieces)

    def tokenize(texts):
        ids = tf.ragged.map_flat_values(table.lookup, source.tokenize(texts))
        end = tf.fill([tf.shape(texts)[0], 1], END_ID)
        return tf.concat([ids, tf.RaggedTensor.from_tensor(end)], axis=1)

    def detokenize(ids):
        keep = tf.ragged.map_flat_values(
            lambda flat: tf.reduce_all(tf.not_equal(flat[:, None], dropped), axis=-1), ids)
        kept = tf.ragged.boolean_mask(ids, keep)
        text = tf.strings.reduce_join(tf.gather(piece_strings, kept), axis=-1)
        return tf.strings.strip(tf.strings.regex_replace(text, "▁", " "))

    # The module keeps the tokenizer's and the table's resources, so the SavedModel tracks them.
    resources = tf.Module()
    resources.source, resources.table = source, table
    return (tokenize, detokenize), resources


def build_serving_module(model, vocabulary_proto, max_new_tokens=None, no_repeat_ngram_size=None,
                         marian_directory=None, max_output_ratio=None):
    """A `tf.Module` whose `translate` maps a batch of strings to translations.

    Greedy search on the KV cache, as `Translator(beam_width=1)`, with the
    same handling of awkward input: empty or whitespace-only strings give
    `""`, invalid UTF-8 is replaced by U+FFFD, sources longer than the
    model's `max_length` tokens are truncated.

    Args:
        model: a `transformer()` model, on the TensorFlow backend.
        vocabulary_proto: bytes of the SentencePiece model (`vocabulary.spm`).
        max_new_tokens: longest translation. Defaults to `max_length - 1`.
        no_repeat_ngram_size: the loop guard, as `Translator`'s (and by
            default the same).
        marian_directory: a run imported from Marian, whose two
            SentencePiece models and id table tokenize instead
            (`marian_graph_tokenizer`; `vocabulary_proto` is then unused).
        max_output_ratio: the cap on run-away output, as `Translator`'s (and by default the same).

    Returns:
        A `tf.Module` with a `translate(texts)` `tf.function` taking a
        `tf.string` vector.
    """
    _require_tensorflow_backend()
    import tensorflow as tf
    import tensorflow_text

    from keras_transformer.decoding import CachedDecoder
    from keras_transformer.decoding import GreedyChoice
    from keras_transformer.decoding import search_tensors

    from keras_transformer.translation.translator import DEFAULT_NO_REPEAT_NGRAM_SIZE
    from keras_transformer_runtime.batch_buckets import SMALLEST_BATCH
    from keras_transformer_runtime.batch_buckets import source_widths
    from keras_transformer_runtime.search_defaults import checked_output_ratio

    if no_repeat_ngram_size is None:
        no_repeat_ngram_size = DEFAULT_NO_REPEAT_NGRAM_SIZE
    decoder = CachedDecoder(model, max_output_ratio=checked_output_ratio(max_output_ratio))
    max_length = decoder.max_length
    max_new_tokens = max_new_tokens or max_length - 1

    module = tf.Module()
    module.model = model
    if marian_directory is None:
        module.tokenizer = tensorflow_text.SentencepieceTokenizer(model=vocabulary_proto, out_type=tf.int32)
        tokenize, detokenize = module.tokenizer.tokenize, module.tokenizer.detokenize
    else:
        (tokenize, detokenize), module.marian_tokenizer = marian_graph_tokenizer(marian_directory)

    # The search alone is compiled by XLA where the model is served (the
    # string ops around it cannot be), once per batch shape: as
    # `Translator` does, sources are padded to one of `source_widths`, and
    # rows to a power of two (at least `SMALLEST_BATCH`) by repeating the
    # first, so a stream of batches compiles a few programs.
    search = tf.function(
        lambda encoder_tokens: search_tensors(
            decoder, encoder_tokens, GreedyChoice(), max_new_tokens, no_repeat_ngram_size=no_repeat_ngram_size
        ),
        jit_compile=True,
    )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    def translate(texts):
        texts = tf.strings.unicode_transcode(
            texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
        )
        ids = tokenize(texts)[:, :max_length]
        encoder_tokens = ids.to_tensor(default_value=PAD_ID)
        rows, width = tf.shape(encoder_tokens)[0], tf.shape(encoder_tokens)[1]
        width_bucket = _padded_width(tf, width, source_widths(max_length))
        encoder_tokens = tf.pad(encoder_tokens, [[0, 0], [0, width_bucket - width]])
        extra_rows = _next_bucket(tf, rows, SMALLEST_BATCH) - rows
        encoder_tokens = tf.concat([encoder_tokens, tf.repeat(encoder_tokens[:1], extra_rows, axis=0)], axis=0)
        generated, steps = search(encoder_tokens)
        output_ids = generated[:rows, :steps]
        output_ids = tf.where(tf.equal(output_ids, END_ID), PAD_ID, output_ids)
        translations = detokenize(tf.RaggedTensor.from_tensor(output_ids, padding=PAD_ID))
        empty = tf.equal(tf.strings.strip(texts), "")
        return tf.where(empty, tf.constant(""), translations)

    module.translate = translate
    return module


def _padded_width(tf, width, widths):
    """The first of `widths` (ascending ints) that holds `width` (a scalar tensor): `source_width` in the graph."""
    widths = tf.constant(widths, tf.int32)
    return widths[tf.reduce_sum(tf.cast(widths < width, tf.int32))]


def _next_bucket(tf, size, smallest):
    """`smallest`, or the first power-of-two multiple of it that holds `size` (a scalar tensor)."""
    return tf.while_loop(lambda bucket: bucket < size, lambda bucket: bucket * 2, [tf.constant(smallest)])[0]


def export_translator(directory, output, max_new_tokens=None, no_repeat_ngram_size=None, quantize=None,
                      max_output_ratio=None, settings=None):
    """Exports a training output folder as a string -> string SavedModel.

    Writes `output/` (signature `serving_default`: `texts` -> `translations`)
    and `output/logits/`, Keras' own `tf_saved_model` export of the raw
    logits model.

    The SavedModel decodes greedily (`build_serving_module`): of `settings`
    it uses `max_new_tokens`, `no_repeat_ngram_size` and `max_output_ratio`
    only; its search (`beam_width`, `beam_search`, `length_penalty`,
    `early_stopping`) and what a call returns (`n_best`, `cross_attention`)
    are not exported.

    Args:
        directory: the `--output` folder of `keras-transformer train`.
        output: folder to write.
        max_new_tokens: longest translation; None: `settings`', else the
            model's `max_length - 1`.
        no_repeat_ngram_size: the loop guard, as `Translator`'s; None:
            `settings`'.
        quantize: None, or a Keras quantization mode ("int8", "int4"):
            the SavedModel then holds integer kernels.
        max_output_ratio: the cap on run-away output, as `Translator`'s;
            None: `settings`'.
        settings: a `DecodingSettings` (`keras_transformer_runtime.decoding_settings`),
            or None for the package's defaults; the three keywords above,
            where given, replace its fields.

    Returns:
        The path of the exported SavedModel.

    Example:

    >>> export_translator("runs/es-en", "exported/es-en",
    ...                   settings=DecodingSettings(max_new_tokens=64))  # doctest: +SKIP
    'exported/es-en'
    """
    from keras_transformer_runtime.decoding_settings import DecodingSettings

    given = {"max_new_tokens": max_new_tokens, "no_repeat_ngram_size": no_repeat_ngram_size,
             "max_output_ratio": max_output_ratio}
    settings = (settings or DecodingSettings()).replace(**{key: value for key, value in given.items()
                                                           if value is not None})
    _require_tensorflow_backend()
    import tensorflow as tf

    from keras_transformer import model_file
    from keras_transformer_runtime.run_files import MODEL_FILE
    from keras_transformer_runtime.run_files import VOCABULARY_FILE

    model = model_file.load_model(os.path.join(directory, MODEL_FILE), compile=False)
    if quantize:
        from keras_transformer.quantization import quantize as quantize_model

        quantize_model(model, quantize)
    from keras_transformer_runtime.run_tokenizer import is_marian_run

    honoured = {"max_new_tokens": settings.max_new_tokens, "no_repeat_ngram_size": settings.no_repeat_ngram_size,
                "max_output_ratio": settings.max_output_ratio}
    if is_marian_run(directory):
        module = build_serving_module(model, None, marian_directory=directory, **honoured)
    else:
        with open(os.path.join(directory, VOCABULARY_FILE), "rb") as f:
            proto = f.read()
        module = build_serving_module(model, proto, **honoured)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="texts")])
    def serve(texts):
        return {"translations": module.translate(texts)}

    tf.saved_model.save(module, output, signatures={SIGNATURE: serve})
    model.export(os.path.join(output, "logits"), format="tf_saved_model", verbose=False)
    return output
