"""Bad input everywhere users touch the package, in one table.

Each row of `CASES` is: an id, a callable that feeds one kind of bad input
(it gets pytest's `tmp_path`), the exception type it must raise, and a
regular expression that must find, in the message, the argument at fault
and what was expected. Every row runs under each Keras backend; the same
input must give the same exception type and message on all three.

Where the checks run (see `keras_transformer.layers.input_checks`): shapes,
ranks and dtypes are checked from static shapes on every call, traced or
not; token-id values only on eager calls, and always on the host by the
decoding functions and the `Translator`.
"""

import functools
import os

import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.decoding import CachedDecoder
from keras_transformer.decoding import beam_search
from keras_transformer.decoding import greedy_search
from keras_transformer.layers.input_checks import is_concrete
from keras_transformer.translation.translator import Translator

VOCABULARY = 40
MAX_LENGTH = 8
SIZES = dict(num_layers=1, d_model=8, num_heads=2, ff_dim=16, max_length=MAX_LENGTH)
SOURCE = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
TARGET = np.array([[2, 11, 12], [2, 13, 0]], "int32")
X = np.linspace(-1, 1, 2 * 3 * 8, dtype="float32").reshape(2, 3, 8)  # (batch, length, d_model)
SOURCE_STATES = np.linspace(-1, 1, 2 * 5 * 8, dtype="float32").reshape(2, 5, 8)
TEXTS = [
    "En el principio creó Dios los cielos y la tierra.",
    "In the beginning God created the heavens and the earth.",
    "Y dijo Dios: Sea la luz.",
    "Let there be light.",
]  # enough for a vocabulary of 40 (and of 44) pieces


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """conftest's fixture, less its garbage collection: ~0.5 s a case adds up over this table."""
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session(free_memory=False)


def _transformer(source_vocabulary=VOCABULARY, target_vocabulary=VOCABULARY):
    """A fresh untrained model, for the cases that may leave it broken."""
    return kt.models.transformer(source_vocabulary, target_vocabulary, **SIZES)


@functools.lru_cache(maxsize=None)
def _shared_transformer():
    """One model for the cases that refuse input before touching it (keeps the file fast)."""
    return _transformer()


def _batch(encoder_tokens=SOURCE, decoder_tokens=TARGET):
    return {"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}


def _embedding():
    return kt.layers.PositionalEmbedding(VOCABULARY, 8, max_length=6)


def _attention():
    layer = kt.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    layer(X, X)  # built for width 8
    return layer


def _encoder_layer(built=True):
    layer = kt.layers.EncoderLayer(8, 2, 16)
    if built:
        layer(X)
    return layer


def _decoder_layer():
    layer = kt.layers.DecoderLayer(8, 2, 16)
    layer(X, SOURCE_STATES)
    return layer


@functools.lru_cache(maxsize=None)
def _vocabulary(size):
    from keras_transformer.data.tokenizer import train_tokenizer

    return train_tokenizer(TEXTS, vocabulary_size=size)


def _tokenizer(size=VOCABULARY):
    from keras_transformer.data.tokenizer import load_tokenizer

    return load_tokenizer(_vocabulary(size))


def _run_folder(tmp_path, model=None, vocabulary=None):
    """A folder laid out like `keras-transformer train --output`, from an untrained model."""
    (model or _shared_transformer()).save(tmp_path / "model.keras")
    (tmp_path / "vocabulary.spm").write_bytes(_vocabulary(VOCABULARY) if vocabulary is None else vocabulary)
    return str(tmp_path)


def _corrupt_model(tmp_path):
    folder = _run_folder(tmp_path)
    (tmp_path / "model.keras").write_bytes(os.urandom(4096))
    return Translator.from_directory(folder)


def _truncated_model(tmp_path):
    folder = _run_folder(tmp_path)
    whole = (tmp_path / "model.keras").read_bytes()
    (tmp_path / "model.keras").write_bytes(whole[: len(whole) // 2])  # a copy cut short
    return Translator.from_directory(folder)


def _foreign_model(tmp_path):
    dense = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="someone_elses")
    return Translator.from_directory(_run_folder(tmp_path, model=dense))


def _missing_vocabulary(tmp_path):
    folder = _run_folder(tmp_path)
    os.remove(tmp_path / "vocabulary.spm")
    return Translator.from_directory(folder)


@functools.lru_cache(maxsize=None)
def _decoder():
    return CachedDecoder(_shared_transformer())


CASES = [
    # --- PositionalEmbedding: token ids, dtypes, ranks, max_length --------------
    pytest.param(
        lambda tmp: _embedding()(np.array([[1, 40, 3]])), ValueError,
        r"outside \[0, vocabulary_size=40\) in `inputs`: 40\.", id="embedding-id-equal-to-vocabulary-size",
    ),
    pytest.param(
        lambda tmp: _embedding()(np.array([[1, -1]])), ValueError,
        r"outside \[0, vocabulary_size=40\) in `inputs`: -1\.", id="embedding-negative-id",
    ),
    pytest.param(
        lambda tmp: _embedding()(np.array([[1.0, 2.0]], "float32")), TypeError,
        r"expects integer `inputs`, got dtype float32", id="embedding-float-ids",
    ),
    pytest.param(
        lambda tmp: _embedding()(np.array([[True, False]])), TypeError,
        r"expects integer `inputs`, got dtype bool", id="embedding-bool-ids",
    ),
    pytest.param(
        lambda tmp: _embedding()(np.array([1, 2, 3])), ValueError,
        r"`inputs` of shape \(batch, length\), got shape \(3,\)", id="embedding-rank-1-ids",
    ),
    pytest.param(
        lambda tmp: _embedding()(np.ones((2, 3, 4), "int32")), ValueError,
        r"`inputs` of shape \(batch, length\), got shape \(2, 3, 4\)", id="embedding-rank-3-ids",
    ),
    pytest.param(
        lambda tmp: _embedding()(np.ones((1, 7), "int32")), ValueError,
        r"`inputs` of length 7 starting at position 0, beyond max_length=6", id="embedding-beyond-max-length",
    ),
    pytest.param(
        lambda tmp: _embedding()(np.ones((1, 3), "int32"), start_index=4), ValueError,
        r"length 3 starting at position 4, beyond max_length=6", id="embedding-start-index-beyond-max-length",
    ),
    pytest.param(
        lambda tmp: _embedding()(np.ones((1, 3), "int32"), start_index=-1), ValueError,
        r"start_index >= 0, got start_index=-1", id="embedding-negative-start-index",
    ),
    pytest.param(
        lambda tmp: _embedding().project_to_vocabulary(np.ones((1, 2, 5), "float32")), ValueError,
        r"`hidden` whose last axis is d_model=8, got shape \(1, 2, 5\)", id="embedding-projection-wrong-width",
    ),
    pytest.param(
        lambda tmp: _embedding().project_to_vocabulary(np.ones((1, 2, 8), "int32")), TypeError,
        r"floating-point `hidden`, got dtype int32", id="embedding-projection-int-states",
    ),
    # --- MultiHeadAttention: ranks, dtypes, widths, batch sizes, masks ---------
    pytest.param(
        lambda tmp: kt.layers.MultiHeadAttention(2, 4)(X[:, 0], X[:, 0]), ValueError,
        r"`query` of shape \(batch, length, width\).*got shape \(2, 8\)", id="attention-rank-2-query-at-build",
    ),
    pytest.param(
        lambda tmp: _attention()(X, X[:, 0]), ValueError,
        r"`value` of shape \(batch, length, width=8\), got shape \(2, 8\)", id="attention-rank-2-value",
    ),
    pytest.param(
        lambda tmp: _attention()(X.astype("int32"), X), TypeError,
        r"floating-point `query`, got dtype int32", id="attention-int-query",
    ),
    pytest.param(
        lambda tmp: _attention()(X[..., :6], X), ValueError,
        r"`query` of shape \(batch, length, width=8\), got shape \(2, 3, 6\)", id="attention-query-width-changed",
    ),
    pytest.param(
        lambda tmp: _attention()(X, np.concatenate([X, X[:1]])), ValueError,
        r"`value` of shape \(batch=2, key_length=3, width\), got shape \(3, 3, 8\).*same batch size",
        id="attention-query-and-value-batch-sizes-differ",
    ),
    pytest.param(
        lambda tmp: _attention()(X, X, key=X[:, :2]), ValueError,
        r"`value` of shape \(batch=2, key_length=2, width\), got shape \(2, 3, 8\)",
        id="attention-key-and-value-lengths-differ",
    ),
    pytest.param(
        lambda tmp: _attention()(X, X, attention_mask=np.ones((2, 3), bool)), ValueError,
        r"`attention_mask` of shape \(query_length, key_length\), .*query_length=3, key_length=3, batch=2; "
        r"got shape \(2, 3\)",
        id="attention-mask-of-wrong-shape",
    ),
    pytest.param(
        lambda tmp: _attention()(X, X, value_mask=np.ones((2, 5), bool)), ValueError,
        r"`value_mask` of shape \(batch=2, key_length=3\), got shape \(2, 5\)", id="attention-value-mask-too-long",
    ),
    # --- EncoderLayer / DecoderLayer --------------------------------------------
    pytest.param(
        lambda tmp: _encoder_layer(built=False)(X[..., :6]), ValueError,
        r"EncoderLayer .* `inputs` of shape \(batch, length, d_model=8\), got shape \(2, 3, 6\)",
        id="encoder-layer-wrong-width-at-build",
    ),
    pytest.param(
        lambda tmp: _encoder_layer()(X[..., :6]), ValueError,
        r"EncoderLayer .* `inputs` of shape \(batch, length, d_model=8\), got shape \(2, 3, 6\)",
        id="encoder-layer-wrong-width-after-build",
    ),
    pytest.param(
        lambda tmp: _encoder_layer(built=False)(X[:, 0]), ValueError,
        r"`inputs` of shape \(batch, length, d_model=8\), got shape \(2, 8\)", id="encoder-layer-rank-2-inputs",
    ),
    pytest.param(
        lambda tmp: _encoder_layer()(X.astype("int32")), TypeError,
        r"EncoderLayer .* floating-point `inputs`, got dtype int32", id="encoder-layer-int-inputs",
    ),
    pytest.param(
        lambda tmp: _encoder_layer()(X, mask=np.ones((2, 5), bool)), ValueError,
        r"EncoderLayer .* `mask` of shape \(batch=2, length=3\), got shape \(2, 5\)", id="encoder-layer-mask-too-long",
    ),
    pytest.param(
        lambda tmp: _encoder_layer()(X, attention_mask=np.ones((2, 3), bool)), ValueError,
        r"`attention_mask` of shape \(batch=2, length=3, length=3\), got shape \(2, 3\)",
        id="encoder-layer-attention-mask-of-wrong-rank",
    ),
    pytest.param(
        lambda tmp: _decoder_layer()(X, SOURCE_STATES[:1]), ValueError,
        r"`encoder_outputs` of shape \(batch=2, length, d_model=8\), got shape \(1, 5, 8\).*same batch size",
        id="decoder-layer-batch-sizes-differ",
    ),
    pytest.param(
        lambda tmp: kt.layers.DecoderLayer(8, 2, 16)(X, SOURCE_STATES[..., :6]), ValueError,
        r"`encoder_outputs` of shape \(batch, length, d_model=8\), got shape \(2, 5, 6\)",
        id="decoder-layer-encoder-outputs-wrong-width",
    ),
    pytest.param(
        lambda tmp: _decoder_layer()(X, SOURCE_STATES[:, 0]), ValueError,
        r"`encoder_outputs` of shape \(batch=2, length, d_model=8\), got shape \(2, 8\)",
        id="decoder-layer-rank-2-encoder-outputs",
    ),
    pytest.param(
        lambda tmp: _decoder_layer()(X, SOURCE_STATES.astype("int32")), TypeError,
        r"floating-point `encoder_outputs`, got dtype int32", id="decoder-layer-int-encoder-outputs",
    ),
    pytest.param(
        lambda tmp: _decoder_layer()(X, SOURCE_STATES, encoder_mask=np.ones((2, 3), bool)), ValueError,
        r"`encoder_mask` of shape \(batch=2, source_length=5\), got shape \(2, 3\)",
        id="decoder-layer-encoder-mask-too-short",
    ),
    pytest.param(
        lambda tmp: _decoder_layer()(X), ValueError,
        r"built with encoder_outputs and must be called the same way", id="decoder-layer-missing-encoder-outputs",
    ),
    # --- the models of kt.models -------------------------------------------------
    pytest.param(
        lambda tmp: _shared_transformer()(_batch(encoder_tokens=SOURCE + 35)), ValueError,
        r"'encoder_embedding' got token ids outside \[0, vocabulary_size=40\) in `inputs`: 40, 41, 42, 43, 44",
        id="transformer-source-id-out-of-range",
    ),
    pytest.param(
        lambda tmp: _shared_transformer()(_batch(decoder_tokens=TARGET + 30)), ValueError,
        r"'decoder_embedding' got token ids outside \[0, vocabulary_size=40\)", id="transformer-target-id-out-of-range",
    ),
    pytest.param(
        lambda tmp: _shared_transformer()(_batch(decoder_tokens=TARGET[:1])), ValueError,
        r"`encoder_outputs` of shape \(batch=1.*as many rows of encoder_tokens as of decoder_tokens",
        id="transformer-encoder-and-decoder-batch-sizes-differ",
    ),
    pytest.param(
        lambda tmp: _shared_transformer()(_batch(encoder_tokens=np.ones((2, 9), "int32"))), ValueError,
        r"'encoder_embedding' got `inputs` of length 9 starting at position 0, beyond max_length=8",
        id="transformer-source-beyond-max-length",
    ),
    pytest.param(
        lambda tmp: _transformer().predict(_batch(encoder_tokens=np.ones((2, 9), "int32")), verbose=0), ValueError,
        r"length 9 starting at position 0, beyond max_length=8", id="transformer-predict-beyond-max-length-traced",
    ),
    pytest.param(
        lambda tmp: _shared_transformer()(_batch(SOURCE[0], TARGET[0])), ValueError,
        r"input .* with name 'decoder_tokens'.*Expected shape \(None, None\)", id="transformer-rank-1-tokens",
    ),
    pytest.param(
        lambda tmp: _shared_transformer()({"encoder_tokens": SOURCE}), ValueError,
        r'Missing data for input "decoder_tokens"', id="transformer-missing-decoder-tokens",
    ),
    pytest.param(
        lambda tmp: kt.models.language_model(VOCABULARY, **SIZES)(np.array([[3, 45]])), ValueError,
        r"'decoder_embedding' got token ids outside \[0, vocabulary_size=40\) in `inputs`: 45",
        id="language-model-id-out-of-range",
    ),
    pytest.param(
        lambda tmp: kt.models.encoder_classifier(VOCABULARY, 3, **SIZES)(np.array([[3, 45]])), ValueError,
        r"'encoder_embedding' got token ids outside \[0, vocabulary_size=40\) in `inputs`: 45",
        id="encoder-classifier-id-out-of-range",
    ),
    # --- decoding: CachedDecoder, greedy_search, beam_search ---------------------
    pytest.param(
        lambda tmp: greedy_search(_shared_transformer(), SOURCE, 3), TypeError,
        r"`decoder` must be a CachedDecoder, got Functional", id="greedy-search-given-the-model",
    ),
    pytest.param(
        lambda tmp: greedy_search(_decoder(), SOURCE + 35, 3), ValueError,
        r"greedy_search got token ids outside \[0, vocabulary_size=40\) in `encoder_tokens`: 40",
        id="greedy-search-id-out-of-range",
    ),
    pytest.param(
        lambda tmp: greedy_search(_decoder(), -SOURCE, 3), ValueError,
        r"outside \[0, vocabulary_size=40\) in `encoder_tokens`: -9, -8, -7, -6, -5", id="greedy-search-negative-ids",
    ),
    pytest.param(
        lambda tmp: greedy_search(_decoder(), SOURCE[0], 3), ValueError,
        r"`encoder_tokens` must have shape \(batch, source_length\), got shape \(4,\)", id="greedy-search-rank-1-ids",
    ),
    pytest.param(
        lambda tmp: greedy_search(_decoder(), SOURCE.astype("float32"), 3), TypeError,
        r"`encoder_tokens` must hold integer token ids, got dtype float32", id="greedy-search-float-ids",
    ),
    pytest.param(
        lambda tmp: greedy_search(_decoder(), np.array([["Sea", "la", "luz"]]), 3), TypeError,
        r"`encoder_tokens` must hold integer token ids, got dtype <U3", id="greedy-search-strings-not-ids",
    ),
    pytest.param(
        lambda tmp: greedy_search(_decoder(), [[5, 6, 7], [8]], 3), ValueError,
        r"`encoder_tokens` must be a rectangular \(batch, source_length\) array", id="greedy-search-ragged-rows",
    ),
    pytest.param(
        lambda tmp: greedy_search(_decoder(), SOURCE[:0], 3), ValueError,
        r"`encoder_tokens` is empty \(shape \(0, 4\)\)", id="greedy-search-empty-batch",
    ),
    pytest.param(
        lambda tmp: beam_search(_decoder(), SOURCE[:0], 2, max_new_tokens=3), ValueError,
        r"`encoder_tokens` is empty \(shape \(0, 4\)\)", id="beam-search-empty-batch",
    ),
    pytest.param(
        lambda tmp: greedy_search(_decoder(), SOURCE[:, :0], 3), ValueError,
        r"`encoder_tokens` is empty \(shape \(2, 0\)\)", id="greedy-search-empty-rows",
    ),
    pytest.param(
        lambda tmp: greedy_search(_decoder(), np.ones((1, 9), "int32"), 3), ValueError,
        r"`encoder_tokens` has source_length 9, beyond the model's max_length=8", id="greedy-search-beyond-max-length",
    ),
    pytest.param(
        lambda tmp: greedy_search(_decoder(), SOURCE, 8), ValueError,
        r"max_new_tokens=8 must be in \[1, max_length=8\)", id="greedy-search-max-new-tokens-beyond-cache",
    ),
    pytest.param(
        lambda tmp: greedy_search(_decoder(), SOURCE, 2.5), TypeError,
        r"`max_new_tokens` must be an int, got max_new_tokens=2\.5", id="greedy-search-float-max-new-tokens",
    ),
    pytest.param(
        lambda tmp: beam_search(_decoder(), SOURCE, 0, max_new_tokens=3), ValueError,
        r"`beam_width` must be >= 1, got beam_width=0", id="beam-search-zero-beam-width",
    ),
    pytest.param(
        lambda tmp: beam_search(_decoder(), SOURCE, 1.5, max_new_tokens=3), TypeError,
        r"`beam_width` must be an int, got beam_width=1\.5", id="beam-search-float-beam-width",
    ),
    pytest.param(
        lambda tmp: beam_search(_decoder(), SOURCE + 35, 2, max_new_tokens=3), ValueError,
        r"beam_search got token ids outside \[0, vocabulary_size=40\) in `encoder_tokens`", id="beam-search-id-out-of-range",
    ),
    pytest.param(
        lambda tmp: _decoder().start(SOURCE + 35), ValueError,
        r"CachedDecoder.start got token ids outside \[0, vocabulary_size=40\)", id="cached-decoder-start-id-out-of-range",
    ),
    pytest.param(
        lambda tmp: CachedDecoder(kt.models.language_model(VOCABULARY, **SIZES)), ValueError,
        r"`model` 'language_model' is not an encoder-decoder built by keras_transformer.models.transformer\(\)",
        id="cached-decoder-of-a-language-model",
    ),
    pytest.param(
        lambda tmp: CachedDecoder("runs/es-en/model.keras"), TypeError,
        r"`model` must be a keras.Model .*got str", id="cached-decoder-of-a-path",
    ),
    # --- Translator: arguments, texts, vocabularies ------------------------------
    pytest.param(
        lambda tmp: Translator(_shared_transformer(), _tokenizer(44)), ValueError,
        r"source vocabulary has 40 tokens but the tokenizer has 44: they were not trained together",
        id="translator-vocabulary-of-another-size",
    ),
    pytest.param(
        lambda tmp: Translator(_transformer(source_vocabulary=48), _tokenizer()), ValueError,
        r"source vocabulary has 48 tokens but the tokenizer has 40", id="translator-source-vocabulary-differs",
    ),
    pytest.param(
        lambda tmp: Translator(_transformer(target_vocabulary=48), _tokenizer()), ValueError,
        r"target vocabulary has 48 tokens but the tokenizer has 40", id="translator-target-vocabulary-differs",
    ),
    pytest.param(
        lambda tmp: Translator(_shared_transformer(), "runs/es-en/vocabulary.spm"), TypeError,
        r"tokenizer must be a SentencePieceTokenizer or a KerasHub tokenizer, got str.*SentencePieceTokenizer\(path\)", id="translator-tokenizer-given-as-path",
    ),
    pytest.param(
        lambda tmp: Translator(kt.models.language_model(VOCABULARY, **SIZES), _tokenizer()), ValueError,
        r"`model` 'language_model' is not an encoder-decoder", id="translator-of-a-language-model",
    ),
    pytest.param(
        lambda tmp: Translator(_shared_transformer(), _tokenizer(), beam_width=0), ValueError,
        r"beam_width must be >= 1, got beam_width=0", id="translator-zero-beam-width",
    ),
    pytest.param(
        lambda tmp: Translator(_shared_transformer(), _tokenizer(), beam_width="4"), TypeError,
        r"beam_width must be an int >= 1, got beam_width='4'", id="translator-beam-width-as-string",
    ),
    pytest.param(
        lambda tmp: Translator(_shared_transformer(), _tokenizer(), max_new_tokens=8), ValueError,
        r"max_new_tokens=8 must be in \[1, max_length=8\)", id="translator-max-new-tokens-beyond-cache",
    ),
    pytest.param(
        lambda tmp: Translator(_shared_transformer(), _tokenizer())(None), TypeError,
        r"texts must be a string, bytes or a list of them, got NoneType", id="translator-texts-none",
    ),
    pytest.param(
        lambda tmp: Translator(_shared_transformer(), _tokenizer())(["Sea la luz.", None]), TypeError,
        r"texts\[1\] is NoneType", id="translator-texts-holding-none",
    ),
    pytest.param(
        lambda tmp: Translator(_shared_transformer(), _tokenizer())([[5, 6, 7]]), TypeError,
        r"texts\[0\] is list", id="translator-texts-holding-token-ids",
    ),
    # --- Translator.from_directory: missing, corrupt and foreign files ----------
    pytest.param(
        lambda tmp: Translator.from_directory(str(tmp)), FileNotFoundError,
        r"No trained model at .*model\.keras", id="from-directory-without-model",
    ),
    pytest.param(
        _missing_vocabulary, FileNotFoundError,
        r"No vocabulary at .*vocabulary\.spm", id="from-directory-without-vocabulary",
    ),
    pytest.param(
        _corrupt_model, ValueError,
        r"model\.keras' is damaged: 4,096 bytes, not a complete \.keras archive", id="from-directory-corrupt-model-file",
    ),
    pytest.param(
        _truncated_model, ValueError,
        r"model\.keras' is damaged: [0-9,]+ bytes, not a complete \.keras archive", id="from-directory-truncated-model-file",
    ),
    pytest.param(
        _foreign_model, ValueError,
        r"The model in .*model\.keras' 'someone_elses' is not an encoder-decoder", id="from-directory-foreign-model",
    ),
    pytest.param(
        lambda tmp: Translator.from_directory(
            _run_folder(tmp, model=kt.models.language_model(VOCABULARY, **SIZES))
        ), ValueError,
        r"The model in .*model\.keras' 'language_model' is not an encoder-decoder",
        id="from-directory-language-model",
    ),
    pytest.param(
        lambda tmp: Translator.from_directory(_run_folder(tmp, vocabulary=b"not a sentencepiece model")), ValueError,
        r"vocabulary\.spm': `proto` is not a serialized SentencePiece model", id="from-directory-corrupt-vocabulary",
    ),
    pytest.param(
        lambda tmp: Translator.from_directory(_run_folder(tmp, vocabulary=_vocabulary(44))), ValueError,
        r"vocabulary has 40 tokens but the tokenizer has 44: they were not trained together",
        id="from-directory-vocabulary-of-another-model",
    ),
]


@pytest.mark.parametrize("call, error, message", CASES)
def test_bad_input_raises_a_clear_error_naming_the_argument(call, error, message, tmp_path):
    with pytest.raises(error, match=message):
        call(tmp_path)


def test_empty_batches_give_empty_outputs_not_errors():
    """Zero rows are valid input for layers and models (a last, empty shard)."""
    assert tuple(_embedding()(np.zeros((0, 3), "int32")).shape) == (0, 3, 8)
    assert tuple(_encoder_layer()(X[:0]).shape) == (0, 3, 8)
    assert tuple(_decoder_layer()(X[:0], SOURCE_STATES[:0]).shape) == (0, 3, 8)
    assert tuple(_shared_transformer()(_batch(SOURCE[:0], TARGET[:0])).shape) == (0, 3, VOCABULARY)
    assert Translator(_shared_transformer(), _tokenizer())([]) == []


def test_a_failed_call_leaves_the_layer_usable():
    """A refused input raises before any state changes: the next good call works."""
    layer = _attention()
    with pytest.raises(ValueError):
        layer(X[..., :6], X)
    assert tuple(layer(X, X).shape) == (2, 3, 8)


def _trace(function, x):
    """Runs `function(x)` under the tracer Keras compiles with on this backend."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.jit(function)(x)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function)(x)
    import torch

    return torch.compile(function, backend="eager")(torch.as_tensor(x))


def test_token_values_are_checked_only_when_concrete():
    """Value checks run eagerly and are skipped while tracing; shape checks run in both."""
    seen = []

    def probe(x):
        seen.append(is_concrete(x))
        return x * 2

    _trace(probe, np.ones((2, 3), "float32"))
    assert seen and not any(seen)
    assert is_concrete(keras.ops.ones((2,))) and not is_concrete(keras.KerasTensor((None, 3)))

    layer = _embedding()
    layer.build()
    out_of_range = np.array([[1, 45]], "int32")
    with pytest.raises(ValueError, match="vocabulary_size=40"):
        layer(out_of_range)
    # Traced, the values are unknown: the backend decides. JAX's gather clamps;
    # TensorFlow (CPU) and torch (CPU) raise errors of their own.
    if keras.backend.backend() == "jax":
        assert tuple(_trace(layer, out_of_range).shape) == (1, 2, 8)
    else:
        with pytest.raises(Exception) as info:
            _trace(layer, out_of_range)
        assert "vocabulary_size=40" not in str(info.value)
    with pytest.raises(ValueError, match="beyond max_length=6"):
        _trace(layer, np.ones((1, 7), "int32"))
