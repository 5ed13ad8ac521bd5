"""Batches decoded on several threads (`keras_transformer_runtime.batch_threads`): order, errors, no stray threads."""

import threading
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from keras_transformer_runtime.batch_threads import BATCH_A_CORE_MAX_WEIGHT_BYTES
from keras_transformer_runtime.batch_threads import batch_cores
from keras_transformer_runtime.batch_threads import in_order
from keras_transformer_runtime.batch_threads import queue_parts
from keras_transformer_runtime.batch_threads import resolve_parallel_batches
from keras_transformer_runtime.batch_threads import usable_cores
from keras_transformer_runtime.text_translator import TextTranslator

pytestmark = pytest.mark.backend_independent


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer
    from keras_transformer_runtime.sentence_piece_tokenizer import train_tokenizer

    return SentencePieceTokenizer(train_tokenizer(["Sea la luz.", "Y fue la luz.", "Y la tierra era."] * 5,
                                                  vocabulary_size=20))


def _decode_threads():
    return [thread for thread in threading.enumerate() if thread.name.startswith("decode")]


def test_results_come_back_in_the_order_of_the_items_whatever_finishes_first():
    def slow_first(item):
        time.sleep(0.05 if item == 0 else 0.0)
        return item * 10

    assert list(in_order(slow_first, list(range(9)), threads=3)) == [i * 10 for i in range(9)]


def test_calls_overlap_on_several_threads_and_never_exceed_the_limit():
    running, most, lock = [0], [0], threading.Lock()

    def call(item):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return item

    assert list(in_order(call, list(range(12)), threads=3)) == list(range(12))
    assert most[0] == 3


def test_an_error_is_raised_at_its_item_and_the_calls_not_started_are_cancelled():
    started = []

    def call(item):
        started.append(item)
        time.sleep(0.01)
        if item == 2:
            raise ValueError("bad batch")
        return item

    results = in_order(call, list(range(50)), threads=2)
    assert [next(results), next(results)] == [0, 1]
    with pytest.raises(ValueError, match="bad batch"):
        next(results)
    assert len(started) < 50
    assert not _decode_threads()


def test_a_caller_that_stops_reading_leaves_no_thread_behind():
    results = in_order(lambda item: time.sleep(0.01) or item, list(range(40)), threads=2)
    assert next(results) == 0
    results.close()
    assert not _decode_threads()


def test_one_thread_calls_in_this_thread():
    assert list(in_order(lambda item: threading.current_thread().name, [1, 2], threads=1)) == ["MainThread"] * 2


def test_parallel_batches_must_be_auto_or_a_positive_int():
    cores = resolve_parallel_batches("auto", lambda: False)
    assert cores >= 1 and resolve_parallel_batches("auto", lambda: False, spare=1) == cores + 1
    assert resolve_parallel_batches("auto", lambda: True, spare=1) == 1
    for bad in (0, -1, 2.0, True, "two"):
        with pytest.raises(ValueError, match="parallel_batches"):
            resolve_parallel_batches(bad, lambda: False)


class _Reverse(TextTranslator):
    """An engine that answers each sentence with its pieces reversed, slower for short batches."""

    def __init__(self, tokenizer, parallel_batches):
        self.tokenizer, self.max_length, self.batch_size, self.bucketed = tokenizer, 32, 2, False
        self.parallel_batches = parallel_batches
        self.threads = set()

    def _decode(self, source):
        self.threads.add(threading.current_thread().name)
        time.sleep(0.002 * (32 - int((source > 0).sum())) / 32)
        return _reversed(source)


def _reversed(source):
    width = source.shape[1]
    return np.stack([np.concatenate([row[row > 0][::-1], np.zeros(width, "int32")])[:width] for row in source])


def test_a_translator_gives_the_same_translations_and_progress_on_several_threads(tiny_tokenizer):
    texts = ["Sea la luz.", "", "Y fue la luz.", "la luz", "Sea", "Y la tierra", "luz luz", "la"]
    one, two = _Reverse(tiny_tokenizer, 1), _Reverse(tiny_tokenizer, 2)
    counts_one, counts_two = [], []
    assert one(texts, progress=counts_one.append) == two(texts, progress=counts_two.append)
    assert counts_one == counts_two and sum(counts_two) == len(texts)
    assert one.threads == {"MainThread"} and len(two.threads) == 2


class _Rows(_Reverse):
    """`_Reverse` in bucketed batches, noting each batch's shape and thread."""

    def __init__(self, tokenizer, batch_cores, batch_size=8, lone_sentence_rows=1):
        super().__init__(tokenizer, parallel_batches=batch_cores + 1)
        self.batch_size, self.bucketed, self.batch_cores = batch_size, True, batch_cores
        self.lone_sentence_rows, self.calls = lone_sentence_rows, []

    def _decode(self, source):
        self.calls.append((source.shape[0], threading.current_thread().name))
        time.sleep(0.02)  # long enough for the parts to overlap
        return _reversed(source)


def test_a_call_of_one_batch_is_split_into_a_batch_a_core_with_the_same_translations(tiny_tokenizer):
    texts = ["Sea la luz.", "Y fue la luz.", "la luz", "Sea", "Y la tierra", "luz luz", "la", "Y la luz"]
    whole, split = _Rows(tiny_tokenizer, 1), _Rows(tiny_tokenizer, 2)
    assert whole(texts) == split(texts) == _Reverse(tiny_tokenizer, 1)(texts)
    assert [rows for rows, _ in whole.calls] == [8]
    assert [rows for rows, _ in split.calls] == [4, 4] and len({thread for _, thread in split.calls}) == 2
    # Five sentences: 3 and 2, each part padded to the same 4 rows.
    split.calls.clear()
    assert split(texts[:5]) == whole(texts[:5])
    assert sorted(rows for rows, _ in split.calls) == [4, 4]
    assert {(4, 32)} <= set(split.batch_shapes()) and not {(4, 32)} & set(whole.batch_shapes())


def test_more_than_a_batch_is_not_split_and_two_sentences_decode_as_two_lone_ones(tiny_tokenizer):
    texts = ["Sea la luz.", "Y fue la luz.", "la luz", "Sea", "Y la tierra", "luz luz", "la", "Y la luz", "la la"]
    split = _Rows(tiny_tokenizer, 2, lone_sentence_rows=4)
    assert split(texts) == _Reverse(tiny_tokenizer, 1)(texts)
    assert [rows for rows, _ in split.calls] == [8, 8]
    split.calls.clear()
    assert split(texts[:2]) == _Reverse(tiny_tokenizer, 1)(texts[:2])
    assert [rows for rows, _ in split.calls] == [4, 4]  # each sentence its lone_sentence_rows


def test_a_call_of_one_batch_stays_whole_where_the_weights_are_read_at_every_step_of_each_part():
    cores = usable_cores()
    assert batch_cores(BATCH_A_CORE_MAX_WEIGHT_BYTES, 8) == min(cores, 8)
    assert batch_cores(BATCH_A_CORE_MAX_WEIGHT_BYTES + 1, 8) == 1
    assert batch_cores(1024, 1) == 1  # a translator asked for one batch at a time


def test_more_cores_than_a_batch_has_sentences_adds_no_shape_beyond_the_lone_sentences(tiny_tokenizer):
    many = _Rows(tiny_tokenizer, 8, batch_size=4, lone_sentence_rows=4)
    assert {rows for rows, _ in many.batch_shapes()} == {4}
    assert many(["Sea la luz.", "la luz", "Sea"]) == _Reverse(tiny_tokenizer, 1)(["Sea la luz.", "la luz", "Sea"])
    assert [rows for rows, _ in many.calls] == [4, 4, 4]  # a lone sentence a core


@given(count=st.integers(1, 2000), threads=st.integers(1, 8))
@settings(max_examples=200, deadline=None)
def test_queues_hold_every_sentence_in_order_at_most_a_queue_each_and_fill_the_threads(count, threads):
    sizes, rows = queue_parts(count, 8, 64, threads)
    assert sum(sizes) == count and max(sizes) <= 64 and max(sizes) - min(sizes) <= 1
    assert len(sizes) == max(-(-count // 64), min(threads, -(-count // 8)))  # fewest queues, every thread busy
    assert rows in (16, 32, 64) and max(sizes) <= rows and (rows == 16 or max(sizes) > rows // 2)


class _Queues(_Rows):
    """`_Rows` whose engine refills: a call of more than a batch goes in queues padded with rows of zeros."""

    queue_size = 64

    def _decode(self, source):
        assert source.shape[0] <= self.batch_size or not source[-1].any() or source.shape[0] == 64
        return super()._decode(source)


def test_a_call_of_more_than_a_batch_goes_in_queues_padded_with_rows_of_zeros(tiny_tokenizer):
    texts = ["Sea la luz.", "Y fue la luz.", "la luz", "Sea", "Y la tierra", "luz luz", "la", "Y la luz", "la la"] * 3
    queued = _Queues(tiny_tokenizer, 2)
    assert queued(texts) == _Reverse(tiny_tokenizer, 1)(texts)
    assert [rows for rows, _ in queued.calls] == [16, 16, 16]  # 27 sentences as 9 + 9 + 9, on 3 threads
    queued.calls.clear()
    assert queued(texts[:5]) == _Reverse(tiny_tokenizer, 1)(texts[:5])  # a batch's worth: a batch a core
    assert [rows for rows, _ in queued.calls] == [4, 4]
