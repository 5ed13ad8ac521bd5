"""Search refilling finished rows: each sentence's tokens as greedy and beam search give them, in fewer steps."""

import numpy as np
import pytest

import keras
from keras import ops

import keras_transformer as kt
from keras_transformer.decoding import CachedDecoder
from keras_transformer.decoding import beam_search
from keras_transformer.decoding import greedy_search
from keras_transformer.decoding.refill import narrower_ring
from keras_transformer.decoding.refill import refill_beam_search
from keras_transformer.decoding.refill import refill_greedy_search
from keras_transformer.decoding.refill import ring_mask
from keras_transformer.decoding.refill import wider_ring
from keras_transformer_runtime.special_tokens import END_ID

MAX_NEW_TOKENS = 70  # rings of 32, 64 and 128 columns


def spread_model(outputs_of, spread):
    """A model, 12 sources and their outputs, where `spread(lengths)` holds for the outputs' lengths.

    `outputs_of(decoder, sources)` gives each source's tokens, unpadded.
    """
    rng = np.random.default_rng(0)
    sources = rng.integers(3, 40, size=(12, 9))
    sources[rng.random(sources.shape) < 0.3] = 0
    sources[:, 0] = rng.integers(3, 40, len(sources))
    # Random weights rarely end a sentence: raise END_ID's logit until the lengths spread.
    for seed in range(4):
        keras.utils.set_random_seed(seed)
        model = kt.models.transformer(40, 40, num_layers=2, d_model=16, num_heads=2, ff_dim=32, max_length=80)
        decoder = CachedDecoder(model, jit_compile=True)
        bias = next(v for v in model.variables if v.path == "output_projection/bias")
        for extra in np.arange(0.0, 3.0, 0.25):
            values = np.zeros(bias.shape, "float32")
            values[END_ID] = extra
            bias.assign(values)
            outputs = outputs_of(decoder, sources)
            if spread([len(tokens) for tokens in outputs]):
                return decoder, sources, outputs
    pytest.fail("no bias spread the outputs' lengths")


@pytest.fixture(scope="module")
def decoder_and_sources():
    """A model whose greedy outputs end anywhere from the first step to past 64 tokens, and 12 sources."""
    return spread_model(each, lambda lengths: min(lengths) < 32 and 64 < max(lengths) and len(set(lengths)) > 4)


@pytest.fixture(scope="module")
def beam_decoder_and_sources():
    """A model whose beams of 3 end within 32 tokens for some sources and run to the limit for a third of them.

    A source refilled after one that ran to the limit starts where the
    last hypotheses' scores were far below 0: a beam that kept them would
    rank its new hypotheses otherwise.
    """
    def outputs_of(decoder, sources):
        return unpadded(beam_search(decoder, sources, beam_width=3, max_new_tokens=MAX_NEW_TOKENS))

    return spread_model(outputs_of, lambda lengths: min(lengths) < 32 and lengths.count(MAX_NEW_TOKENS) >= 4
                        and sum(length < 32 for length in lengths) >= 4)


def unpadded(tokens):
    """Each row's tokens without their padding."""
    return [[int(token) for token in row if token] for row in tokens]


def each(decoder, sources, **options):
    """Greedy search's tokens for each source, without their padding."""
    tokens = greedy_search(decoder, sources, max_new_tokens=MAX_NEW_TOKENS, **options)
    return [[int(token) for token in row if token] for row in tokens]


# The eager loops of torch make every search here take seconds: the options share a case, and the
# fixtures' outputs (no options) are the expected ones.
@pytest.mark.parametrize("options", [{}, {"no_repeat_ngram_size": 3, "forced_first_id": 5}])
def test_each_sentence_gets_the_tokens_greedy_search_gives_it(decoder_and_sources, options):
    decoder, sources, outputs = decoder_and_sources
    refilled = refill_greedy_search(decoder, sources, slots=4, max_new_tokens=MAX_NEW_TOKENS, **options)
    expected = each(decoder, sources, **options) if options else outputs
    assert [[int(token) for token in row if token] for row in refilled] == expected
    assert refilled.shape[1] == max(len(tokens) for tokens in expected)


@pytest.mark.parametrize("options", [{}, {"no_repeat_ngram_size": 3, "length_penalty": 0.0, "forced_first_id": 5}])
def test_each_sentence_gets_the_hypothesis_beam_search_gives_it(beam_decoder_and_sources, options):
    decoder, sources, outputs = beam_decoder_and_sources
    refilled, loop_steps = refill_beam_search(decoder, sources, slots=3, beam_width=3, max_new_tokens=MAX_NEW_TOKENS,
                                              return_loop_steps=True, **options)
    expected = (unpadded(beam_search(decoder, sources, beam_width=3, max_new_tokens=MAX_NEW_TOKENS, **options))
                if options else outputs)
    assert unpadded(refilled) == expected
    # A source's rows decode at least its best hypothesis' steps: 3 slots share them.
    lengths = [len(tokens) for tokens in expected]
    assert max(sum(lengths) / 3, max(lengths)) <= loop_steps


def test_a_row_whose_sentence_ended_takes_the_next_one(decoder_and_sources):
    decoder, sources, outputs = decoder_and_sources
    lengths = [len(tokens) for tokens in outputs]
    _, loop_steps = refill_greedy_search(decoder, sources, slots=4, max_new_tokens=MAX_NEW_TOKENS,
                                         return_loop_steps=True)
    batches = sum(max(lengths[i:i + 4]) for i in range(0, len(lengths), 4))  # the one loop, 4 rows a batch
    assert sum(lengths) / 4 <= loop_steps < batches
    alone, alone_steps = refill_greedy_search(decoder, sources[:1], slots=4, max_new_tokens=MAX_NEW_TOKENS,
                                              return_loop_steps=True)
    assert alone_steps == lengths[0] and [int(t) for t in alone[0] if t] == outputs[0]


def test_rows_of_zeros_after_the_last_source_are_not_decoded(decoder_and_sources):
    decoder, sources, outputs = decoder_and_sources
    padded = np.concatenate([sources[:5], np.zeros((3, sources.shape[1]), sources.dtype)])
    refilled, loop_steps = refill_greedy_search(decoder, padded, slots=4, max_new_tokens=MAX_NEW_TOKENS,
                                                return_loop_steps=True)
    _, unpadded_steps = refill_greedy_search(decoder, sources[:5], slots=4, max_new_tokens=MAX_NEW_TOKENS,
                                             return_loop_steps=True)
    assert loop_steps == unpadded_steps and not refilled[5:].any()
    assert [[int(t) for t in row if t] for row in refilled[:5]] == outputs[:5]


def test_more_slots_than_sources(decoder_and_sources):
    decoder, sources, outputs = decoder_and_sources
    refilled = refill_greedy_search(decoder, sources[:3], slots=8, max_new_tokens=MAX_NEW_TOKENS)
    assert [[int(t) for t in row if t] for row in refilled] == outputs[:3]


def test_a_ring_keeps_the_last_steps_as_it_narrows_and_widens():
    longest, size = 16, 4
    ring = np.zeros((2, 1, longest, 1), "float32")
    for step in range(23):  # each column holds the step that wrote it last
        ring[:, :, step % longest] = step
    # Before step 23, a ring of 4 holds steps 20-22 (the column of 23 is written by step 23 itself).
    narrow = ops.convert_to_numpy(narrower_ring(ops.convert_to_tensor(ring), size, 23))
    assert all(narrow[0, 0, step % size, 0] == step for step in range(20, 23))
    wide = ops.convert_to_numpy(wider_ring(ops.convert_to_tensor(narrow), longest))
    assert all(wide[1, 0, step % longest, 0] == step for step in range(20, 23))


def test_ring_mask_allows_the_columns_of_a_rows_own_sentence():
    mask = ops.convert_to_numpy(ring_mask(5, ops.convert_to_tensor([0, 3, 7]), 8)).astype(int)
    assert mask.tolist() == [[0, 0, 0, 0, 0, 1, 0, 0], [0, 0, 1, 1, 1, 1, 0, 0], [1] * 8]


def test_a_position_per_row():
    layer = kt.layers.PositionalEmbedding(30, 8, max_length=12)
    tokens = np.array([[4], [7], [9]])
    rows = ops.convert_to_numpy(layer(tokens, start_index=ops.convert_to_tensor([0, 5, 11])))
    for row, start in zip(range(3), (0, 5, 11)):
        np.testing.assert_allclose(rows[row], ops.convert_to_numpy(layer(tokens[row:row + 1], start_index=start))[0])


def test_bad_slots_are_refused(decoder_and_sources):
    decoder, sources, _ = decoder_and_sources
    with pytest.raises(ValueError, match="slots"):
        refill_greedy_search(decoder, sources, slots=0)


def test_bad_beam_width_is_refused(decoder_and_sources):
    decoder, sources, _ = decoder_and_sources
    with pytest.raises(ValueError, match="beam_width"):
        refill_beam_search(decoder, sources, beam_width=0)
