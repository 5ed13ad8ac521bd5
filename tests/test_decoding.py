import keras
import numpy as np
import pytest

import keras_transformer as kt
from keras_transformer.data.special_tokens import END_ID
from keras_transformer.data.special_tokens import PAD_ID
from keras_transformer.data.special_tokens import START_ID
from keras_transformer.decoding import CachedDecoder
from keras_transformer.decoding import beam_search
from keras_transformer.decoding import greedy_search
from keras_transformer.decoding import greedy_search_uncached

SOURCE = np.array([[5, 6, 7, 8, 0, 0], [9, 10, 0, 0, 0, 0], [11, 12, 13, 14, 15, 16]], "int32")


@pytest.fixture(scope="module", params=["post_ln_untied", "pre_ln_tied_fused"])
def model(request):
    keras.utils.set_random_seed(7)
    options = dict(num_layers=2, d_model=32, num_heads=4, ff_dim=64, max_length=24, dropout=0.0)
    if request.param == "pre_ln_tied_fused":
        options.update(norm_first=True, tie_embeddings=True, fused_qkv=True)
    return kt.models.transformer(40, 40, **options)


def test_cached_greedy_equals_uncached_greedy_token_for_token(model):
    cached = greedy_search(CachedDecoder(model), SOURCE, max_new_tokens=8, stop_at_end=False)
    uncached = greedy_search_uncached(model, SOURCE, max_new_tokens=8, stop_at_end=False)
    assert cached.shape == (3, 8)
    np.testing.assert_array_equal(cached, uncached)


def test_beam_width_one_equals_greedy(model):
    decoder = CachedDecoder(model)
    np.testing.assert_array_equal(
        beam_search(decoder, SOURCE, beam_width=1, max_new_tokens=10),
        greedy_search(decoder, SOURCE, max_new_tokens=10),
    )


def test_a_batch_decodes_like_its_rows_alone(model):
    decoder = CachedDecoder(model)
    together = beam_search(decoder, SOURCE, beam_width=3, max_new_tokens=8)
    for row in range(len(SOURCE)):
        alone = beam_search(decoder, SOURCE[row : row + 1], beam_width=3, max_new_tokens=8)[0]
        np.testing.assert_array_equal(together[row, : len(alone)], alone)


def test_sequences_stop_at_end_and_are_padded_after_it():
    # END becomes likely but not certain: some rows stop early, some later.
    model = _end_likely(kt.models.transformer(40, 40, num_layers=1, d_model=16, num_heads=2, ff_dim=32,
                                              max_length=12))
    decoder = CachedDecoder(model)
    for tokens in (greedy_search(decoder, SOURCE, max_new_tokens=8),
                   beam_search(decoder, SOURCE, beam_width=2, max_new_tokens=8)):
        assert not np.isin(tokens, [START_ID]).any()
        assert any(END_ID in row for row in tokens), "the test needs some finished rows"
        for row in tokens:
            ends = np.flatnonzero(row == END_ID)
            assert len(ends) <= 1
            if len(ends):
                assert np.all(row[ends[0] + 1 :] == PAD_ID)
            else:
                assert np.all(row != PAD_ID)


def test_max_new_tokens_beyond_the_cache_raises(model):
    with pytest.raises(ValueError, match="max_new_tokens"):
        greedy_search(CachedDecoder(model), SOURCE, max_new_tokens=24)


def test_compiled_step_gives_the_same_tokens_as_the_eager_step(model):
    eager = greedy_search(CachedDecoder(model), SOURCE, max_new_tokens=6, stop_at_end=False)
    compiled = greedy_search(CachedDecoder(model, jit_compile=True), SOURCE, max_new_tokens=6, stop_at_end=False)
    np.testing.assert_array_equal(compiled, eager)


# --- references: the host loops the package had before its one device loop ----
# Plain NumPy over `decoder.next_logits`, one step at a time, in float64: the
# device loop (keras.ops.while_loop, float32) must pick the same tokens.


def _host_scores(logits):
    scores = keras.ops.convert_to_numpy(logits).astype("float64")
    scores[:, [PAD_ID, START_ID]] = -np.inf
    return scores


def _host_greedy(decoder, source, max_new_tokens, stop_at_end):
    state = decoder.start(source)
    tokens = np.full((len(source), 1), START_ID, "int32")
    finished = np.zeros(len(source), bool)
    generated = []
    for index in range(max_new_tokens):
        logits, state = decoder.next_logits(tokens, index, state)
        best = np.where(finished, PAD_ID, np.argmax(_host_scores(logits), axis=-1)).astype("int32")
        generated.append(best)
        if stop_at_end:
            finished |= best == END_ID
            if finished.all():
                break
        tokens = best[:, None]
    return np.stack(generated, axis=1)


def _host_beam(decoder, source, width, alpha, max_new_tokens):
    batch = len(source)
    state = decoder.start(np.repeat(source, width, axis=0))
    scores = np.tile([0.0] + [-np.inf] * (width - 1), batch)
    sequences = np.zeros((batch * width, 0), "int32")
    finished = np.zeros(batch * width, bool)
    lengths = np.zeros(batch * width)
    tokens = np.full((batch * width, 1), START_ID, "int32")
    for index in range(max_new_tokens):
        logits, state = decoder.next_logits(tokens, index, state)
        log_probs = _host_scores(logits)
        peak = log_probs.max(axis=-1, keepdims=True)
        log_probs -= peak + np.log(np.exp(log_probs - peak).sum(axis=-1, keepdims=True))
        log_probs[finished] = -np.inf
        log_probs[finished, PAD_ID] = 0.0
        vocabulary = log_probs.shape[-1]
        candidates = (scores[:, None] + log_probs).reshape(batch, width * vocabulary)
        top = np.argsort(-candidates, axis=-1, kind="stable")[:, :width]
        rows = (np.arange(batch)[:, None] * width + top // vocabulary).reshape(-1)
        next_tokens = (top % vocabulary).astype("int32").reshape(-1)
        scores = np.take_along_axis(candidates, top, axis=-1).reshape(-1)
        sequences = np.concatenate([sequences[rows], next_tokens[:, None]], axis=1)
        lengths = lengths[rows] + ~finished[rows]
        finished = finished[rows] | (next_tokens == END_ID)
        state = decoder.reorder(state, rows.astype("int32"))
        if finished.all():
            break
        tokens = next_tokens[:, None]
    normalized = (scores / ((5.0 + lengths) / 6.0) ** alpha).reshape(batch, width)
    return sequences.reshape(batch, width, -1)[np.arange(batch), np.argmax(normalized, axis=-1)]


def _end_likely(model):
    bias = model.get_layer("output_projection").bias
    bias.assign(keras.ops.convert_to_numpy(bias) + np.eye(40, dtype="float32")[END_ID] * 2.0)
    return model


@pytest.mark.parametrize("jit_compile", [False, True])
def test_greedy_search_gives_the_host_loops_tokens(model, jit_compile):
    decoder = CachedDecoder(model, jit_compile=jit_compile)
    for stop_at_end in (False, True):
        np.testing.assert_array_equal(
            greedy_search(decoder, SOURCE, max_new_tokens=7, stop_at_end=stop_at_end),
            _host_greedy(decoder, SOURCE, 7, stop_at_end),
        )


def test_beam_search_gives_the_host_loops_tokens(model):
    decoder = CachedDecoder(model)
    for width, alpha in ((2, 0.6), (3, 0.0)):
        np.testing.assert_array_equal(
            beam_search(decoder, SOURCE, beam_width=width, length_penalty=alpha, max_new_tokens=8),
            _host_beam(decoder, SOURCE, width, alpha, 8),
        )


def test_beam_search_with_finished_hypotheses_gives_the_host_loops_tokens():
    keras.utils.set_random_seed(3)
    model = _end_likely(kt.models.transformer(40, 40, num_layers=1, d_model=16, num_heads=2, ff_dim=32,
                                              max_length=12))
    decoder = CachedDecoder(model, jit_compile=True)
    host = _host_beam(decoder, SOURCE, 3, 0.6, 10)
    assert (host == END_ID).any(), "the test needs finished hypotheses"
    np.testing.assert_array_equal(beam_search(decoder, SOURCE, beam_width=3, max_new_tokens=10), host)


def test_the_loop_stops_when_every_row_has_ended():
    model = _end_likely(kt.models.transformer(40, 40, num_layers=1, d_model=16, num_heads=2, ff_dim=32,
                                              max_length=12))
    decoder = CachedDecoder(model, jit_compile=True)
    host = _host_greedy(decoder, SOURCE, 10, stop_at_end=True)
    assert host.shape[1] < 10 and (host == END_ID).any(axis=1).all(), "the test needs every row to end early"
    np.testing.assert_array_equal(greedy_search(decoder, SOURCE, max_new_tokens=10), host)
