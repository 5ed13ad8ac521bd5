"""`MultiHeadAttention` takes the arguments of `keras.layers.MultiHeadAttention`."""

import keras
import numpy as np
import pytest

from conftest import to_numpy
from keras_transformer.layers import MultiHeadAttention

BATCH, LENGTH, WIDTH, HEADS, KEY_DIM = 2, 5, 12, 3, 4


@pytest.fixture
def inputs(rng):
    query = rng.normal(size=(BATCH, LENGTH, WIDTH)).astype("float32")
    source = rng.normal(size=(BATCH, LENGTH + 1, WIDTH)).astype("float32")
    return query, source


def _copy_keras_weights(reference, ours, use_bias):
    """Keras keeps (d, heads, dim) and (heads, dim, d_out) kernels; ours are 2-D."""
    for name in ("query", "key", "value"):
        dense = getattr(reference, f"{name}_dense")
        kernel = to_numpy(dense.kernel)
        getattr(ours, f"{name}_dense").kernel.assign(np.reshape(kernel, (kernel.shape[0], -1)))
        if use_bias:
            getattr(ours, f"{name}_dense").bias.assign(np.reshape(to_numpy(dense.bias), (-1,)))
    kernel = to_numpy(reference.output_dense.kernel)
    ours.output_dense.kernel.assign(np.reshape(kernel, (-1, kernel.shape[-1])))
    if use_bias:
        ours.output_dense.bias.assign(to_numpy(reference.output_dense.bias))


@pytest.mark.parametrize(
    "kwargs, masking",
    [
        (dict(output_shape=8), "none"),
        (dict(use_bias=False, output_shape=(8,)), "attention_mask"),
        (dict(output_shape=8, kernel_initializer="ones", bias_initializer="ones"), "padding"),
    ],
    ids=["int_output_shape", "no_bias_tuple_output_shape_attention_mask", "initializers_padding"],
)
def test_same_arguments_and_weights_give_keras_outputs(inputs, rng, kwargs, masking):
    query, source = inputs
    kwargs = dict(num_heads=HEADS, key_dim=KEY_DIM, dropout=0.5, seed=1, **kwargs)
    reference = keras.layers.MultiHeadAttention(**kwargs)
    ours = MultiHeadAttention(**kwargs)
    call_kwargs = {}
    if masking == "attention_mask":
        mask = np.tril(np.ones((LENGTH, LENGTH + 1), bool), k=1)
        call_kwargs["attention_mask"] = np.stack([mask, mask[::-1, ::-1]])
    elif masking == "padding":
        # Padded keys only: Keras and this layer treat a padded query
        # differently (a uniform average there, zeros here).
        call_kwargs["value_mask"] = np.array([[1] * 4 + [0] * 2, [1] * 2 + [0] * 4], bool)
    reference(query, source)  # builds
    # Random weights, biases included, so a misplaced weight shows.
    reference.set_weights([rng.normal(scale=0.3, size=w.shape).astype("float32") for w in reference.get_weights()])
    expected = reference(query, source, training=False, **call_kwargs)
    ours(query, source)
    _copy_keras_weights(reference, ours, kwargs.get("use_bias", True))
    got = ours(query, source, training=False, **call_kwargs)
    assert got.shape == expected.shape
    np.testing.assert_allclose(to_numpy(got), to_numpy(expected), rtol=1e-5, atol=1e-5)


def test_kernel_initializer_is_the_default_of_all_four_projections(inputs):
    query, source = inputs
    layer = MultiHeadAttention(
        HEADS, KEY_DIM, kernel_initializer="ones", bias_initializer="ones", value_initializer="zeros"
    )
    layer(query, source)
    for name, value in (("query", 1.0), ("key", 1.0), ("value", 0.0), ("output", 1.0)):
        np.testing.assert_array_equal(to_numpy(getattr(layer, f"{name}_dense").kernel), value, err_msg=name)
        np.testing.assert_array_equal(to_numpy(getattr(layer, f"{name}_dense").bias), 1.0, err_msg=name)


def test_a_seeded_kernel_initializer_acts_like_one_passed_to_each_projection(inputs):
    query, _ = inputs
    names = ("query", "key", "value", "output")
    seeded = keras.initializers.GlorotUniform(seed=7)
    via_keras_name = MultiHeadAttention(HEADS, KEY_DIM, kernel_initializer=seeded)
    via_own_names = MultiHeadAttention(HEADS, KEY_DIM, **{f"{n}_initializer": seeded for n in names})
    for layer in (via_keras_name, via_own_names):
        layer(query, query)
    for name in names:
        np.testing.assert_array_equal(
            to_numpy(getattr(via_keras_name, f"{name}_dense").kernel),
            to_numpy(getattr(via_own_names, f"{name}_dense").kernel),
        )
    # Still one seed per projection: Q and K do not start equal.
    assert not np.allclose(to_numpy(via_keras_name.query_dense.kernel), to_numpy(via_keras_name.key_dense.kernel))


def test_dropout_drops_attention_weights_in_training_only(inputs):
    query, _ = inputs
    layer = MultiHeadAttention(HEADS, KEY_DIM, dropout=0.5, seed=3)
    assert layer.dropout == layer.attention_dropout == 0.5
    inference = to_numpy(layer(query, query, training=False))
    np.testing.assert_array_equal(to_numpy(layer(query, query)), inference)
    assert not np.allclose(to_numpy(layer(query, query, training=True)), inference)
    # The same rate under this layer's own name, with the same seed and
    # weights, draws the same masks: `dropout` is that argument, not another.
    own_name = MultiHeadAttention(HEADS, KEY_DIM, attention_dropout=0.5, seed=3)
    alias = MultiHeadAttention(HEADS, KEY_DIM, dropout=0.5, seed=3)
    own_name(query, query)
    alias(query, query)
    alias.set_weights(own_name.get_weights())
    np.testing.assert_array_equal(
        to_numpy(alias(query, query, training=True)), to_numpy(own_name(query, query, training=True))
    )


def test_config_round_trip_keeps_behaviour_under_canonical_keys(inputs):
    query, _ = inputs
    layer = MultiHeadAttention(
        HEADS, KEY_DIM, dropout=0.5, output_shape=(8,), seed=5,
        kernel_initializer=keras.initializers.GlorotUniform(seed=11),
    )
    config = layer.get_config()
    assert config["attention_dropout"] == 0.5 and config["output_dim"] == 8
    assert not {"dropout", "output_shape", "kernel_initializer"} & set(config)
    clone = MultiHeadAttention.from_config(config)
    assert clone.get_config() == config
    # Seeded initializers and dropout: the clone starts with the same weights
    # and draws the same dropout masks.
    outputs = [to_numpy(x(query, query, training=True)) for x in (layer, clone)]
    assert outputs[0].shape == (BATCH, LENGTH, 8)
    np.testing.assert_array_equal(outputs[0], outputs[1])
    assert not np.allclose(outputs[0], to_numpy(layer(query, query, training=False)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dropout=0.5, attention_dropout=0.1), "attention_dropout=0.1 and dropout=0.5"),
        (dict(dropout=0.5, attention_dropout=0.0), "attention_dropout=0.0 and dropout=0.5"),
        (dict(dropout=1.5), r"dropout=1\.5"),
        (dict(output_shape=8, output_dim=16), "output_dim=16 and output_shape=8"),
        (dict(output_shape=(2, 0)), r"output_shape=\(2, 0\)"),
        (dict(output_shape=(2, 8), output_dim=16), r"output_dim=16 and output_shape=\(2, 8\)"),
        (dict(output_shape=0), "output_shape=0"),
    ],
)
def test_conflicting_or_unsupported_keras_arguments_raise(kwargs, match):
    # The messages name the arguments as given (`name=value`), which a
    # generic "unrecognized keyword" error would not.
    with pytest.raises(ValueError, match=match):
        MultiHeadAttention(HEADS, KEY_DIM, **kwargs)


def test_equal_aliases_are_accepted():
    layer = MultiHeadAttention(HEADS, KEY_DIM, dropout=0.25, attention_dropout=0.25, output_shape=[6], output_dim=6)
    assert (layer.attention_dropout, layer.output_dim) == (0.25, 6)


def test_value_dim_other_than_key_dim_runs_on_the_default_path(inputs):
    # On JAX the fused path crashed ("cannot reshape array of shape (2, 8, 2, 1, 4)").
    query, source = inputs
    default = MultiHeadAttention(HEADS, KEY_DIM, value_dim=2 * KEY_DIM)
    explicit = MultiHeadAttention(HEADS, KEY_DIM, value_dim=2 * KEY_DIM, flash_attention=False)
    default(query, source)
    explicit(query, source)
    explicit.set_weights(default.get_weights())
    np.testing.assert_allclose(to_numpy(default(query, source)), to_numpy(explicit(query, source)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(LENGTH, LENGTH + 1), (1, LENGTH, LENGTH + 1), (BATCH, LENGTH, LENGTH + 1),
                                   (BATCH, HEADS, LENGTH, LENGTH + 1)])
def test_attention_masks_broadcast_from_every_shape_keras_accepts(inputs, shape):
    query, source = inputs
    layer = MultiHeadAttention(HEADS, KEY_DIM)
    base = np.tril(np.ones((LENGTH, LENGTH + 1), bool), k=1)
    expected = to_numpy(layer(query, source, attention_mask=np.broadcast_to(base, (BATCH, LENGTH, LENGTH + 1))))
    mask = np.broadcast_to(base, shape)
    np.testing.assert_allclose(to_numpy(layer(query, source, attention_mask=mask)), expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(to_numpy(layer(query, source)), expected)


def test_a_head_mask_hides_keys_from_one_head_only(inputs):
    query, source = inputs
    layer = MultiHeadAttention(HEADS, KEY_DIM)
    mask = np.ones((BATCH, HEADS, LENGTH, LENGTH + 1), bool)
    mask[:, 0, :, 0] = False
    _, scores = layer(query, source, attention_mask=mask, return_attention_scores=True)
    scores = to_numpy(scores)
    np.testing.assert_array_equal(scores[:, 0, :, 0], 0.0)
    assert np.all(scores[:, 1:, :, 0] > 0)


def test_output_shape_and_spec_agree_with_the_call_under_mixed_precision(inputs):
    query, source = inputs
    keras.config.set_dtype_policy("mixed_float16")
    layer = MultiHeadAttention(HEADS, KEY_DIM, output_shape=(2, 4))
    assert layer.compute_output_shape(query.shape, source.shape) == (BATCH, LENGTH, 2, 4)
    outputs = layer(query, source)
    spec = layer.compute_output_spec(keras.KerasTensor(query.shape), keras.KerasTensor(source.shape))
    assert tuple(outputs.shape) == spec.shape == (BATCH, LENGTH, 2, 4)
    assert keras.backend.standardize_dtype(outputs.dtype) == spec.dtype == "float16"


def test_a_keras_layer_config_builds_this_layer_with_the_same_outputs(inputs):
    query, source = inputs
    reference = keras.layers.MultiHeadAttention(num_heads=HEADS, key_dim=KEY_DIM, value_dim=2 * KEY_DIM,
                                                use_gate=True, output_shape=8, kernel_regularizer="l2")
    # Scores asked for: Keras' own layer crashes on JAX's fused path when
    # value_dim != key_dim (ours does not, see above).
    expected, _ = reference(query, source, return_attention_scores=True)
    ours = MultiHeadAttention.from_config(reference.get_config())
    ours(query, source)
    ours.set_weights(reference.get_weights())  # Keras' (width, heads, dim) kernels, reshaped
    np.testing.assert_allclose(to_numpy(ours(query, source)), to_numpy(expected), rtol=1e-5, atol=1e-5)
    assert len(ours.losses) == len(reference.losses) > 0  # the kernel regularizer applies


@pytest.mark.parametrize("value_dim", [0, -2, 1.5, True])
def test_a_bad_value_dim_is_refused_at_construction(value_dim):
    with pytest.raises(ValueError, match="argument `value_dim`"):
        MultiHeadAttention(HEADS, KEY_DIM, value_dim=value_dim)
