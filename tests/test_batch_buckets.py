"""The widths a compiled loop pads its sources to: few, ordered, and never far above a batch's longest source."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keras_transformer_runtime.batch_buckets import SOURCE_BUCKET
from keras_transformer_runtime.batch_buckets import source_width
from keras_transformer_runtime.batch_buckets import source_widths

pytestmark = pytest.mark.backend_independent


@given(st.integers(1, 4096))
def test_widths_ascend_to_the_models_positions_and_stay_few(max_length):
    widths = source_widths(max_length)
    assert widths == sorted(set(widths)) and widths[-1] == max_length
    # Two widths an octave at most: a stream of batches compiles a few programs.
    assert len(widths) <= 2 * max(1, max_length // SOURCE_BUCKET).bit_length() + 1


@given(st.data())
def test_a_batch_is_padded_to_the_narrowest_width_that_holds_its_longest_source(data):
    max_length = data.draw(st.integers(1, 4096))
    width = data.draw(st.integers(1, max_length))
    padded = source_width(width, max_length)
    widths = source_widths(max_length)
    assert padded in widths and padded >= width
    assert all(narrower < width for narrower in widths[: widths.index(padded)])
    if padded != max_length and width > 2 * SOURCE_BUCKET:
        assert padded * 2 <= width * 3  # at most half as many tokens again


def test_long_sources_are_padded_less_than_to_the_next_power_of_two():
    assert [source_width(width, 1024) for width in (20, 33, 65, 97, 130, 200, 300, 700)] == [
        32, 64, 96, 128, 192, 256, 384, 768]


def test_the_savedmodel_pads_a_source_to_the_width_the_engine_does():
    tf = pytest.importorskip("tensorflow")
    from keras_transformer.translation.export import _padded_width

    for max_length in (24, 64, 128, 300, 1024):
        widths = source_widths(max_length)
        for width in range(1, max_length + 1):
            assert int(_padded_width(tf, tf.constant(width), widths)) == source_width(width, max_length)
