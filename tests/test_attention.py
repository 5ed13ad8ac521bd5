import keras
import numpy as np
import pytest

from conftest import to_numpy
from layer_contract import check_layer_contract
from keras_transformer.layers import MultiHeadAttention

BATCH, LENGTH, WIDTH, HEADS, KEY_DIM = 2, 6, 16, 4, 4


@pytest.fixture
def inputs(rng):
    return rng.normal(size=(BATCH, LENGTH, WIDTH)).astype("float32")


def _attention(**kwargs):
    layer = MultiHeadAttention(HEADS, KEY_DIM, **kwargs)
    layer.build((None, LENGTH, WIDTH), (None, LENGTH, WIDTH))
    return layer


def _changed_after(x, position, rng):
    changed = x.copy()
    changed[:, position:] = rng.normal(size=changed[:, position:].shape) * 10
    return changed


def test_agrees_with_keras_multi_head_attention_given_the_same_weights(inputs):
    reference = keras.layers.MultiHeadAttention(HEADS, KEY_DIM)
    key_mask = np.array([[1, 1, 1, 1, 0, 0], [1] * 6], bool)
    expected = reference(inputs, inputs, value_mask=key_mask, use_causal_mask=True)
    ours = _attention()
    for name in ("query", "key", "value"):
        dense = getattr(reference, f"_{name}_dense")
        getattr(ours, f"{name}_dense").kernel.assign(np.reshape(to_numpy(dense.kernel), (WIDTH, HEADS * KEY_DIM)))
        getattr(ours, f"{name}_dense").bias.assign(np.reshape(to_numpy(dense.bias), (HEADS * KEY_DIM,)))
    ours.output_dense.kernel.assign(np.reshape(to_numpy(reference._output_dense.kernel), (HEADS * KEY_DIM, WIDTH)))
    ours.output_dense.bias.assign(to_numpy(reference._output_dense.bias))
    got = ours(inputs, inputs, value_mask=key_mask, use_causal_mask=True)
    np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "call_kwargs",
    [{}, {"return_attention_scores": True}, {"training": True}],
    ids=["fast_path", "scores", "attention_dropout_training"],
)
def test_future_inputs_do_not_change_past_outputs(inputs, rng, call_kwargs):
    # Two layers with equal weights and equal dropout seeds draw equal
    # dropout masks, so any difference comes from the changed inputs.
    first, second = (_attention(attention_dropout=0.5, seed=3) for _ in range(2))
    second.set_weights(first.get_weights())
    changed = _changed_after(inputs, 3, rng)
    a = keras.tree.flatten(first(inputs, inputs, use_causal_mask=True, **call_kwargs))
    b = keras.tree.flatten(second(changed, changed, use_causal_mask=True, **call_kwargs))
    np.testing.assert_allclose(to_numpy(a[0])[:, :3], to_numpy(b[0])[:, :3], rtol=1e-5, atol=1e-5)
    assert not np.allclose(to_numpy(a[0])[:, 3:], to_numpy(b[0])[:, 3:])
    if call_kwargs.get("return_attention_scores"):
        scores = to_numpy(a[1])
        assert np.all(np.triu(scores, k=1) == 0.0)


def test_dropout_on_attention_weights_changes_training_outputs_only(inputs):
    layer = _attention(attention_dropout=0.5)
    inference = [to_numpy(layer(inputs, inputs)) for _ in range(2)]
    np.testing.assert_array_equal(inference[0], inference[1])
    training = to_numpy(layer(inputs, inputs, training=True))
    assert not np.allclose(training, inference[0])


def test_padded_keys_do_not_change_outputs(inputs, rng):
    layer = _attention()
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]], bool)
    changed = inputs.copy()
    changed[~mask] = rng.normal(size=changed[~mask].shape) * 10
    for kwargs in ({}, {"return_attention_scores": True}):
        a = keras.tree.flatten(layer(inputs, inputs, value_mask=mask, **kwargs))[0]
        b = keras.tree.flatten(layer(inputs, changed, value_mask=mask, **kwargs))[0]
        np.testing.assert_allclose(to_numpy(a), to_numpy(b), rtol=1e-5, atol=1e-5)


def test_keras_masks_on_the_inputs_are_honoured(rng):
    from keras_transformer.layers import PositionalEmbedding

    tokens = keras.Input((None,), dtype="int32")
    embedded = PositionalEmbedding(30, WIDTH, max_length=LENGTH, mask_zero=True)(tokens)
    model = keras.Model(tokens, MultiHeadAttention(HEADS, KEY_DIM)(embedded, embedded))
    short = np.array([[4, 5, 6, 0, 0, 0]], "int32")
    outputs = to_numpy(model(short))
    # Same real tokens, with padding replaced by more padding of another
    # length: the real positions must not notice.
    np.testing.assert_allclose(to_numpy(model(short[:, :4]))[:, :3], outputs[:, :3], rtol=1e-5, atol=1e-5)


def test_fully_masked_rows_give_zeros_not_nan(inputs):
    layer = _attention()
    attention_mask = np.ones((BATCH, LENGTH, LENGTH), bool)
    attention_mask[:, 2, :] = False
    for kwargs in ({}, {"return_attention_scores": True}):
        outputs = keras.tree.flatten(layer(inputs, inputs, attention_mask=attention_mask, **kwargs))
        values = to_numpy(outputs[0])
        assert np.all(np.isfinite(values))
        bias = to_numpy(layer.output_dense.bias)
        np.testing.assert_allclose(values[:, 2], np.broadcast_to(bias, values[:, 2].shape), atol=1e-6)
        if len(outputs) == 2:
            np.testing.assert_array_equal(to_numpy(outputs[1])[:, :, 2], 0.0)


def test_zero_logit_scale_gives_uniform_weights_and_linear_differs_from_sqrt(inputs):
    causal = dict(use_causal_mask=True, return_attention_scores=True)
    _, uniform = _attention(logit_scale=0.0)(inputs, inputs, **causal)
    expected = np.tril(np.ones((LENGTH, LENGTH))) / np.arange(1, LENGTH + 1)[:, None]
    np.testing.assert_allclose(to_numpy(uniform), np.broadcast_to(expected, (BATCH, HEADS, LENGTH, LENGTH)), atol=1e-6)

    sqrt_layer = _attention()
    linear_layer = _attention(logit_scale="linear")
    linear_layer.set_weights(sqrt_layer.get_weights())
    assert sqrt_layer.scale == pytest.approx(0.5) and linear_layer.scale == pytest.approx(0.25)
    _, sqrt_scores = sqrt_layer(inputs, inputs, return_attention_scores=True)
    _, linear_scores = linear_layer(inputs, inputs, return_attention_scores=True)
    assert not np.allclose(to_numpy(sqrt_scores), to_numpy(linear_scores), atol=1e-4)


@pytest.mark.parametrize("fused_qkv", [False, True], ids=["separate", "fused"])
def test_fast_and_explicit_paths_agree(inputs, fused_qkv):
    layer = _attention(fused_qkv=fused_qkv)
    mask = np.array([[1, 1, 1, 1, 0, 0], [1] * 6], bool)
    fast = layer(inputs, inputs, value_mask=mask, use_causal_mask=True)
    explicit, _ = layer(inputs, inputs, value_mask=mask, use_causal_mask=True, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(fast), to_numpy(explicit), rtol=1e-5, atol=1e-5)


def test_fused_qkv_equals_separate_projections_in_self_and_cross_attention(inputs, rng):
    source = rng.normal(size=(BATCH, 4, WIDTH)).astype("float32")
    fused = _attention(fused_qkv=True)
    separate = _attention()
    q, k, v = np.split(to_numpy(fused.qkv_dense.kernel), 3, axis=-1)
    qb, kb, vb = np.split(to_numpy(fused.qkv_dense.bias), 3)
    separate.set_weights([q, qb, k, kb, v, vb, to_numpy(fused.output_dense.kernel), to_numpy(fused.output_dense.bias)])
    # One tensor passed as query and value takes the single-matmul path.
    inputs = keras.ops.convert_to_tensor(inputs)
    for query, value in ((inputs, inputs), (inputs, source)):
        np.testing.assert_allclose(
            to_numpy(fused(query, value)), to_numpy(separate(query, value)), rtol=1e-5, atol=1e-5
        )


def test_cached_one_step_decoding_equals_full_causal_attention(inputs):
    layer = _attention()
    full = to_numpy(layer(inputs, inputs, use_causal_mask=True))
    cache = layer.empty_cache(BATCH, LENGTH)
    steps = []
    for i in range(LENGTH):
        step = inputs[:, i : i + 1]
        output, cache = layer(step, step, use_causal_mask=True, cache=cache, cache_index=i)
        steps.append(to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-5, atol=1e-5)


def test_cached_decoding_with_values_wider_than_keys_equals_full_attention(inputs):
    layer = MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM, value_dim=KEY_DIM + 3)
    full = to_numpy(layer(inputs, inputs, use_causal_mask=True))
    cache = layer.empty_cache(BATCH, LENGTH)
    assert [tuple(part.shape) for part in cache] == [(BATCH, HEADS, LENGTH, KEY_DIM), (BATCH, HEADS, LENGTH, KEY_DIM + 3)]
    steps = []
    for i in range(LENGTH):
        output, cache = layer(inputs[:, i : i + 1], inputs[:, i : i + 1], use_causal_mask=True, cache=cache, cache_index=i)
        steps.append(to_numpy(output))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-5, atol=1e-5)
    source = inputs[:, :3]
    np.testing.assert_allclose(
        to_numpy(layer(inputs, source, cache=layer.key_value_cache(source))[0]), to_numpy(layer(inputs, source)),
        rtol=1e-5, atol=1e-5,
    )


def test_a_read_only_cache_with_padded_keys_equals_attention_without_the_cache(inputs, rng):
    # A cache is read as it lies, heads before positions (`attention_over_cache`), masks and all.
    layer = _attention()
    source = inputs[:, :4]
    mask = rng.random((BATCH, 4)) < 0.6
    mask[0], mask[1, 0] = False, True  # a source with no visible key gives what the uncached layer gives
    cached = layer(inputs, source, value_mask=mask, cache=layer.key_value_cache(source))[0]
    np.testing.assert_allclose(to_numpy(cached), to_numpy(layer(inputs, source, value_mask=mask)), rtol=1e-5,
                               atol=1e-5)


def test_a_stacked_cache_of_earlier_versions_is_refused_with_what_to_pass(inputs):
    layer = _attention()
    step = inputs[:, :1]
    with pytest.raises(ValueError, match=r"pair \(keys, values\).*empty_cache"):
        layer(step, step, use_causal_mask=True, cache=np.zeros((BATCH, 2, LENGTH, HEADS, KEY_DIM), "float32"),
              cache_index=0)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_keeps_softmax_in_float32(inputs, policy):
    keras.config.set_dtype_policy(policy)
    layer = _attention()
    outputs, scores = layer(inputs, inputs, use_causal_mask=True, return_attention_scores=True)
    assert keras.backend.standardize_dtype(scores.dtype) == "float32"
    assert keras.backend.standardize_dtype(outputs.dtype) == policy.split("_")[1]
    np.testing.assert_allclose(to_numpy(scores).sum(axis=-1), 1.0, atol=1e-5)
    assert np.all(np.isfinite(to_numpy(layer(inputs, inputs)).astype("float32")))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(logit_scale="cube"), "logit_scale"),
        (dict(attention_dropout=1.5), "attention_dropout"),
        (dict(fused_qkv=True, value_dim=8), "value_dim"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(HEADS, KEY_DIM, **kwargs)


@pytest.mark.parametrize("fused_qkv", [False, True], ids=["separate", "fused"])
def test_layer_contract(inputs, tmp_path, fused_qkv):
    def make_model(layer):
        x = keras.Input((None, WIDTH))
        return keras.Model(x, layer(x, x, use_causal_mask=True, return_attention_scores=True))

    check_layer_contract(
        lambda: MultiHeadAttention(HEADS, KEY_DIM, fused_qkv=fused_qkv, qkv_initializer="fairseq",
                                   logit_scale="linear", attention_dropout=0.1, seed=1),
        make_model,
        inputs,
        tmp_path,
    )
