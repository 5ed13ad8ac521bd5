"""A fused attention kernel that returns NaN for rows with no visible key changes nothing.

On a GPU in bfloat16, `keras.ops.dot_product_attention` runs cuDNN (JAX) or
SDPA (torch) fused kernels, which return NaN for a query row whose keys are
all masked. The CPU never runs them, so these tests put a stand-in in its
place: exact attention, except that such rows are NaN. The model's logits
at real positions, its loss and its gradients must be those of the real
kernel, and a bfloat16 fit on bucketed batches must stay finite.
"""

import keras
import numpy as np
import pytest
from keras import ops

import keras_transformer as kt
from benchmarks import gpu_check
from tests.conftest import FIXTURE_CORPUS
from tests.conftest import to_numpy


def nan_for_rows_without_keys(query, key, value, bias=None, mask=None, scale=None, is_causal=False,
                              flash_attention=None, attn_logits_soft_cap=None):
    """`keras.ops.dot_product_attention`, but NaN where a query row sees no key."""
    logits = ops.einsum("btnh,bsnh->bnts", ops.cast(query, "float32"), ops.cast(key, "float32"))
    logits = logits * (scale if scale is not None else 1.0 / np.sqrt(query.shape[-1]))
    query_length, key_length = logits.shape[-2], logits.shape[-1]
    visible = ops.ones_like(logits, dtype="bool")
    if is_causal:
        visible = ops.logical_and(visible, ops.tril(ops.ones((query_length, key_length), "bool")))
    if mask is not None:
        visible = ops.logical_and(visible, ops.cast(mask, "bool"))
    weights = ops.softmax(ops.where(visible, logits, -1e30), axis=-1)
    weights = ops.where(ops.any(visible, axis=-1, keepdims=True), weights, float("nan"))
    return ops.einsum("bnts,bsnh->btnh", ops.cast(weights, value.dtype), value)


@pytest.fixture
def stand_in_kernel(monkeypatch):
    monkeypatch.setattr(keras.ops, "dot_product_attention", nan_for_rows_without_keys)


# Right-padded rows of different lengths, and one empty row (a global batch
# padded with empty rows under --distribute data has them).
ENCODER_TOKENS = np.array([[5, 6, 7, 8, 9, 10], [5, 6, 7, 0, 0, 0], [11, 0, 0, 0, 0, 0], [0] * 6], "int32")
DECODER_TOKENS = np.array([[2, 12, 13, 14, 15], [2, 12, 0, 0, 0], [2, 13, 14, 15, 0], [0] * 5], "int32")
LABELS = np.array([[12, 13, 14, 15, 3], [12, 3, 0, 0, 0], [13, 14, 15, 3, 0], [0] * 5], "int32")
INPUTS = {"encoder_tokens": ENCODER_TOKENS, "decoder_tokens": DECODER_TOKENS}


def _model_and_one_sgd_step(weights=None):
    """A small translator, its logits, its loss and its weights after one SGD step."""
    keras.utils.set_random_seed(0)
    model = kt.models.transformer(20, 20, num_layers=1, d_model=16, num_heads=2, ff_dim=32,
                                  max_length=8, dropout=0.0)
    if weights is not None:
        model.set_weights(weights)
    model.compile(keras.optimizers.SGD(0.5), kt.training.MaskedSparseCrossentropy())
    logits = to_numpy(model(INPUTS))
    loss = float(to_numpy(model.compute_loss(y=LABELS, y_pred=logits)))
    initial = [to_numpy(w) for w in model.weights]
    model.train_on_batch(INPUTS, LABELS)
    return logits, loss, initial, [to_numpy(w) for w in model.weights]


def test_nan_in_rows_without_keys_changes_no_logit_loss_or_gradient(monkeypatch):
    logits, loss, initial, stepped = _model_and_one_sgd_step()
    monkeypatch.setattr(keras.ops, "dot_product_attention", nan_for_rows_without_keys)
    nan_logits, nan_loss, _, nan_stepped = _model_and_one_sgd_step(initial)

    real = LABELS != 0
    assert np.isfinite(nan_logits[real]).all()
    np.testing.assert_allclose(nan_logits[real], logits[real], atol=1e-5)
    assert np.isfinite(nan_loss) and nan_loss == pytest.approx(loss, abs=1e-5)
    # One SGD step moves every weight by its gradient: equal steps, equal gradients.
    for before, after, nan_after in zip(initial, stepped, nan_stepped):
        assert np.isfinite(nan_after).all()
        np.testing.assert_allclose(nan_after - before, after - before, atol=1e-5)
    assert any(np.abs(after - before).max() > 0 for before, after in zip(initial, stepped))


@pytest.mark.parametrize("length", [8, 72])
def test_layer_with_the_stand_in_kernel_matches_the_explicit_path(stand_in_kernel, length):
    # The GPU check's matrix, on the CPU at a few lengths.
    for row in gpu_check.attention_cases(length, [(kind, True) for kind in gpu_check.KINDS]):
        assert row["finite"], row
        assert row["padded_rows_zero"], row
        assert row["output_error"] < gpu_check.OUTPUT_TOLERANCE, row
        assert row["gradient_error"] < gpu_check.GRADIENT_TOLERANCE, row


@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="bfloat16 GPU training runs on JAX and torch")
def test_bfloat16_fit_on_bucketed_batches_stays_finite(stand_in_kernel):
    from keras_transformer.data import corpus
    from keras_transformer.data import pipeline
    from keras_transformer.data import tokenizer as tokenizer_lib

    pairs = corpus.load_bible_pairs("train", path=FIXTURE_CORPUS)
    texts = [p.source for p in pairs] + [p.target for p in pairs]
    tokenizer = tokenizer_lib.load_tokenizer(tokenizer_lib.train_tokenizer(texts, vocabulary_size=400))
    tokenized = pipeline.tokenize_pairs(pairs, tokenizer, max_length=64)
    # Buckets of 32 and 64 tokens: 64 is where cuDNN's backward failed on a GPU.
    dataset = pipeline.translation_dataset(tokenized, batch_tokens=512, repeat=True, bucket_width=32)
    batches, per_shape = [], {}
    for inputs, labels in dataset.take(60):  # two batches of each bucket
        shape = tuple(labels.shape)
        if per_shape.get(shape, 0) < 2:
            per_shape[shape] = per_shape.get(shape, 0) + 1
            batches.append((inputs, labels))
    assert {length for _, length in per_shape} == {32, 64}, per_shape
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = kt.models.transformer(400, 400, num_layers=1, d_model=32, num_heads=2, ff_dim=64, max_length=64)
    model.compile(keras.optimizers.Adam(1e-3), kt.training.MaskedSparseCrossentropy(0.1))
    losses = []
    for inputs, labels in batches:
        inputs = {name: tokens.numpy() for name, tokens in inputs.items()}
        losses.append(float(to_numpy(model.train_on_batch(inputs, labels.numpy()))))
    assert np.isfinite(losses).all(), losses


def test_a_mask_at_a_length_of_64_mod_128_skips_the_fused_kernel_on_jax_only(monkeypatch):
    calls = []

    def counting_kernel(*args, **kwargs):
        calls.append(1)
        return nan_for_rows_without_keys(*args, **kwargs)

    monkeypatch.setattr(keras.ops, "dot_product_attention", counting_kernel)
    layer = kt.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    for length in (64, 72):
        x = np.random.default_rng(0).random((2, length, 8)).astype("float32")
        calls.clear()
        layer(x, x, value_mask=np.ones((2, length), bool))
        skipped = length % 128 == 64 and keras.backend.backend() == "jax"
        assert calls == ([] if skipped else [1]), (length, calls)
