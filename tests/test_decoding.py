import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

import keras_transformer as kt
from keras_transformer_runtime.special_tokens import END_ID
from keras_transformer_runtime.special_tokens import PAD_ID
from keras_transformer_runtime.special_tokens import START_ID
from keras_transformer.decoding import CachedDecoder
from keras_transformer.decoding import beam_search
from keras_transformer.decoding import greedy_search
from keras_transformer.decoding import greedy_search_uncached
from tests.conftest import to_numpy

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


def test_a_state_started_with_copies_is_the_state_of_the_repeated_sources(model):
    decoder = CachedDecoder(model)
    copied = decoder.start(SOURCE, cache_length=8, copies=3)
    repeated = decoder.start(np.repeat(SOURCE, 3, axis=0), cache_length=8)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(copied.encoder_mask),
                                  keras.ops.convert_to_numpy(repeated.encoder_mask))
    pairs = zip(copied.cross_caches + copied.caches, repeated.cross_caches + repeated.caches)
    for ours, theirs in ((a, b) for pair in pairs for a, b in zip(*pair)):
        assert tuple(ours.shape) == tuple(theirs.shape) and ours.shape[0] == 3 * len(SOURCE)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(theirs), rtol=1e-5, atol=1e-6)


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


def _skip_repeated_compiled_case(request, jit_compile):
    """Skips a compiled (jit_compile=True) case that would only repeat another.

    Torch runs the decoder eagerly whatever `jit_compile` says; elsewhere the
    compiled loop is checked on the pre-LN, tied, fused-QKV model, the
    search's code being the same for both models (the eager cases check
    both). Each compiled case costs 10-30 s under TensorFlow and JAX.
    """
    repeated = keras.backend.backend() == "torch" or request.node.callspec.params["model"] != "pre_ln_tied_fused"
    if jit_compile and repeated:
        pytest.skip("the compiled loop is checked once: on the pre-LN tied fused model, under TensorFlow and JAX")


@pytest.mark.parametrize("jit_compile", [False, True])
def test_greedy_search_gives_the_host_loops_tokens(model, jit_compile, request):
    _skip_repeated_compiled_case(request, jit_compile)
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


@pytest.mark.parametrize("jit_compile", [False, True])
def test_beam_search_whose_caches_grow_gives_the_host_loops_tokens(model, jit_compile, monkeypatch, request):
    _skip_repeated_compiled_case(request, jit_compile)
    # The loop starts with caches of 4 positions and lengthens them to 8, 16
    # and 23; the host loop keeps caches of max_length from the start.
    from keras_transformer.decoding import sampler

    monkeypatch.setattr(sampler, "FIRST_CACHE_LENGTH", 4)
    assert sampler.cache_phases(23) == (4, 8, 16, 23)
    decoder = CachedDecoder(model, jit_compile=jit_compile)
    found = beam_search(decoder, SOURCE, beam_width=3, max_new_tokens=23)
    assert found.shape[1] > 16, "the test needs a search that reaches the last cache length"
    np.testing.assert_array_equal(found, _host_beam(decoder, SOURCE, 3, 0.6, 23))


@pytest.mark.parametrize("grow_caches", [False, True])
@pytest.mark.parametrize("width", [1, 3])
def test_a_short_search_keeps_caches_of_its_own_length_not_the_models_positions(model, grow_caches, width):
    # Every step reads its self-attention caches whole: a search of 5 tokens on a model of 24 positions
    # keeps 5, and gives the tokens of the same search on caches of the model's positions.
    from keras_transformer.decoding import sampler
    from keras_transformer.decoding.choices import BeamChoice
    from keras_transformer.decoding.choices import GreedyChoice

    def search(cache_length=None):
        decoder, lengths = CachedDecoder(model), []
        plain_start = decoder.start

        def start(*args, **kwargs):
            state = plain_start(*args, **{**kwargs, **({"cache_length": cache_length} if cache_length else {})})
            lengths.extend(int(keys.shape[2]) for keys, _ in state.caches)
            return state

        decoder.start = start
        choice = GreedyChoice() if width == 1 else BeamChoice(width, 0.6)
        found, _ = sampler.search_tensors(decoder, keras.ops.convert_to_tensor(SOURCE), choice, 5,
                                          grow_caches=grow_caches)
        return to_numpy(found), lengths, decoder.max_length

    found, lengths, positions = search()
    assert positions > 5 and lengths == [5, 5]  # one cache per decoder layer
    on_all_positions, long_lengths, _ = search(cache_length=positions)
    assert set(long_lengths) == {positions}
    np.testing.assert_array_equal(found, on_all_positions)
    if width == 1:
        expected = greedy_search_uncached(model, SOURCE, max_new_tokens=5)
        np.testing.assert_array_equal(found[:, : expected.shape[1]], expected)


def test_greedy_search_whose_caches_grow_gives_the_plain_loops_tokens_and_attention(model, monkeypatch):
    # What the compiled engine's greedy program runs (grow_caches=True): caches of 4, 8, 16 and 23
    # positions give the tokens and recorded cross-attention of the one-loop search (itself checked
    # against the host loop above), with the loop guard on.
    from keras_transformer.decoding import sampler
    from keras_transformer.decoding.choices import GreedyChoice

    monkeypatch.setattr(sampler, "FIRST_CACHE_LENGTH", 4)
    decoder = CachedDecoder(model)
    lengths = []
    plain_grow = decoder.grow
    decoder.grow = lambda state, length: lengths.append(length) or plain_grow(state, length)
    source = keras.ops.convert_to_tensor(SOURCE)
    runs = {grow: sampler.search_tensors(decoder, source, GreedyChoice(), 23, stop_at_end=False,
                                         no_repeat_ngram_size=3, return_cross_attention=True, grow_caches=grow)
            for grow in (False, True)}
    (plain, steps, plain_weights), (grown, grown_steps, grown_weights) = runs[False], runs[True]
    assert int(to_numpy(steps)) == int(to_numpy(grown_steps)) == 23
    assert lengths == [8, 16, 23]  # grown when asked only
    np.testing.assert_array_equal(to_numpy(grown), to_numpy(plain))
    np.testing.assert_allclose(to_numpy(grown_weights), to_numpy(plain_weights), atol=1e-6)


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


# --- the loop guard: no_repeat_ngram_size -----------------------------------


def _blocked_by_brute_force(generated, index, size):
    blocked = set()
    recent = tuple(generated[index - size + 1 : index]) if index >= size - 1 else None
    for start in range(0, index - size + 1):
        if recent is not None and tuple(generated[start : start + size - 1]) == recent:
            blocked.add(int(generated[start + size - 1]))
    return blocked


@pytest.mark.parametrize("size", [1, 2, 3])
def test_block_repeated_ngrams_blocks_exactly_the_tokens_that_would_repeat_an_ngram(size, rng):
    from keras_transformer.decoding.search_step import block_repeated_ngrams

    generated = rng.integers(4, 8, size=(6, 12)).astype("int32")  # few ids: many repeats
    for index in (0, 1, 3, 7, 12):
        visible = np.where(np.arange(12) < index, generated, 0)
        logits = keras.ops.convert_to_numpy(
            block_repeated_ngrams(keras.ops.zeros((6, 10)), keras.ops.convert_to_tensor(visible), index, size)
        )
        for row in range(6):
            assert set(np.flatnonzero(np.isinf(logits[row]))) == _blocked_by_brute_force(visible[row], index, size)


def _repeated_ngrams(row, size):
    row = list(row[: list(row).index(END_ID) + 1] if END_ID in row else row)
    grams = [tuple(row[i : i + size]) for i in range(len(row) - size + 1)]
    return len(grams) - len(set(grams))


def test_the_guard_keeps_a_looping_model_from_repeating_ngrams():
    keras.utils.set_random_seed(5)
    model = kt.models.transformer(40, 40, num_layers=1, d_model=16, num_heads=2, ff_dim=32, max_length=16)
    bias = model.get_layer("output_projection").bias
    # Two tokens far likelier than the rest: unguarded decoding alternates them.
    bias.assign(keras.ops.convert_to_numpy(bias) + np.isin(np.arange(40), [7, 8]).astype("float32") * 6.0)
    decoder = CachedDecoder(model, jit_compile=True)
    plain = greedy_search(decoder, SOURCE, max_new_tokens=12, stop_at_end=False)
    assert all(_repeated_ngrams(row, 3) > 0 for row in plain), "the test needs a model that loops"
    for tokens in (greedy_search(decoder, SOURCE, max_new_tokens=12, stop_at_end=False, no_repeat_ngram_size=3),
                   beam_search(decoder, SOURCE, beam_width=3, max_new_tokens=12, no_repeat_ngram_size=3)):
        assert all(_repeated_ngrams(row, 3) == 0 for row in tokens)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_a_decoder_reads_the_weights_as_they_are_at_each_call(jit_compile):
    keras.utils.set_random_seed(11)
    model = kt.models.transformer(40, 40, num_layers=1, d_model=16, num_heads=2, ff_dim=32, max_length=12)
    decoder = CachedDecoder(model, jit_compile=jit_compile)
    before = greedy_search(decoder, SOURCE, max_new_tokens=4, stop_at_end=False)
    bias = model.get_layer("output_projection").bias
    bias.assign(keras.ops.convert_to_numpy(bias) + np.eye(40, dtype="float32")[9] * 100.0)
    after = greedy_search(decoder, SOURCE, max_new_tokens=4, stop_at_end=False)
    assert (before != 9).any() and (after == 9).all()


def test_first_max_index_is_argmax_with_ties_to_the_lowest_index():
    from keras_transformer.decoding.choices import first_max_index

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(16, 4000)).astype("float32")
    logits[3, [7, 900, 3999]] = 50.0  # a tie: the lowest index wins, as argmax's
    logits[5] = -np.inf  # nothing allowed: index 0, as argmax's
    logits[6, :10] = -np.inf
    ours = keras.ops.convert_to_numpy(first_max_index(keras.ops.convert_to_tensor(logits)))
    np.testing.assert_array_equal(ours, np.argmax(logits, axis=-1))
    assert ours[3] == 7 and ours[5] == 0


def _stable_top_k(values, k):
    """NumPy's top k of each row: largest first, ties to the lower index."""
    order = np.argsort(-values, axis=-1, kind="stable")[:, :k]
    return np.take_along_axis(values, order, axis=-1), order


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 5), n=st.integers(1, 700), k=st.integers(1, 5), chunk=st.sampled_from([4, 8, 32]),
       levels=st.integers(1, 6), seed=st.integers(0, 2**16), dead=st.floats(0.0, 1.0))
def test_top_k_by_chunks_is_top_k_with_ties_to_the_lower_index(rows, n, k, chunk, levels, seed, dead):
    from keras_transformer.decoding.top_k import top_k_by_chunks

    k = min(k, n)
    rng = np.random.default_rng(seed)
    # Few distinct values, so ties within and across chunks are common; some -inf (dead hypotheses).
    values = rng.integers(0, levels, size=(rows, n)).astype("float32")
    values[rng.random((rows, n)) < dead] = -np.inf
    top, indices = (keras.ops.convert_to_numpy(t) for t in top_k_by_chunks(keras.ops.convert_to_tensor(values),
                                                                           k, chunk=chunk))
    expected_top, expected_indices = _stable_top_k(values, k)
    np.testing.assert_array_equal(top, expected_top)
    assert indices.dtype == np.int32
    np.testing.assert_array_equal(np.take_along_axis(values, indices, axis=-1), expected_top)
    if keras.backend.backend() != "torch":  # torch.topk promises no order among ties
        np.testing.assert_array_equal(indices, expected_indices)
