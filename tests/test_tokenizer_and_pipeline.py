"""The joint SentencePiece vocabulary and the token-batched pipelines.

The tf.data pipeline (KerasHub tokenizer) and the TensorFlow-free one (the
sentencepiece library and a keras.utils.PyDataset) must give the same ids
and the same batches; these comparisons need TensorFlow, so they live here.
"""

import collections
import io
import math
import pathlib

import keras
import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

import keras_transformer
from keras_transformer.data import load_bible_pairs
from keras_transformer.data import python_pipeline
from keras_transformer.data.batch_plan import BatchPlan
from keras_transformer.data.pipeline import padding_fraction
from keras_transformer.data.pipeline import tokenize_pairs
from keras_transformer.data.pipeline import translation_dataset
from keras_transformer.data.tokenizer import END_ID
from keras_transformer.data.tokenizer import PAD_ID
from keras_transformer.data.tokenizer import START_ID
from keras_transformer.data.tokenizer import UNK_ID
from keras_transformer.data.tokenizer import SentencePieceTokenizer
from keras_transformer.data.tokenizer import load_tokenizer
from keras_transformer.data.tokenizer import normalize
from keras_transformer.data.tokenizer import train_tokenizer

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "bible_es_en_small.tsv.gz"
VOCABULARY_SIZE = 400
MAX_LENGTH = 64  # About a third of the fixture's training pairs are longer.
BATCH_TOKENS = 512


def texts_of(pairs):
    return [pair.source for pair in pairs] + [pair.target for pair in pairs]


@pytest.fixture(scope="module")
def train_pairs():
    return load_bible_pairs("train", path=FIXTURE)


@pytest.fixture(scope="module")
def proto(train_pairs):
    return train_tokenizer(texts_of(train_pairs), vocabulary_size=VOCABULARY_SIZE)


@pytest.fixture(scope="module")
def tokenizer(proto):
    return load_tokenizer(proto)


@pytest.fixture(scope="module")
def tokenized(train_pairs, tokenizer):
    return tokenize_pairs(train_pairs, tokenizer, MAX_LENGTH)


@pytest.fixture(scope="module")
def library_tokenizer(proto):
    """The TensorFlow-free tokenizer: the sentencepiece library alone."""
    return SentencePieceTokenizer(proto)


@pytest.fixture(scope="module")
def arrays(train_pairs, library_tokenizer):
    return python_pipeline.tokenize_pairs(train_pairs, library_tokenizer, MAX_LENGTH)


def epoch(dataset):
    """One pass over a dataset as NumPy: a list of (encoder, decoder, labels)."""
    return [
        (inputs["encoder_tokens"].numpy(), inputs["decoder_tokens"].numpy(), labels.numpy())
        for inputs, labels in dataset
    ]


# Tokenizer.


@pytest.mark.backend_independent
def test_detokenize_inverts_tokenize_up_to_normalization(train_pairs, tokenizer):
    seen_characters = set("".join(normalize(text) for text in texts_of(train_pairs)))
    texts = texts_of(load_bible_pairs("all", path=FIXTURE))
    ids = tokenizer.tokenize(texts)
    decoded = tokenizer.detokenize(ids)
    num_unseen = 0
    for text, text_ids, text_decoded in zip(texts, ids, decoded):
        if set(normalize(text)) <= seen_characters:
            assert text_decoded == normalize(text)
        else:
            # A character the vocabulary never saw can only come back as <unk>.
            assert UNK_ID in text_ids
            num_unseen += 1
    assert num_unseen < len(texts) // 50


@pytest.mark.backend_independent
def test_normalize_is_nfkc_with_whitespace_collapsed():
    assert normalize("  ﬁn \t del\u00a0 mundo  ") == "fin del mundo"
    assert normalize("Génesis") == "Génesis"


@pytest.mark.backend_independent
def test_special_ids_are_zero_to_three(tokenizer, train_pairs):
    assert (PAD_ID, UNK_ID, START_ID, END_ID) == (0, 1, 2, 3)
    assert tokenizer.get_vocabulary()[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tokenizer.vocabulary_size() == VOCABULARY_SIZE
    ids = np.concatenate(tokenizer.tokenize(texts_of(train_pairs)))
    assert ids.min() > UNK_ID  # Plain text never yields pad, unk, start or end.
    assert ids.max() < VOCABULARY_SIZE


@pytest.mark.backend_independent
def test_saved_vocabulary_gives_identical_ids(tmp_path, train_pairs, proto, tokenizer):
    path = tmp_path / "vocabulary.spm"
    saved = train_tokenizer(texts_of(train_pairs), vocabulary_size=VOCABULARY_SIZE, path=path)
    assert saved == proto  # Training is deterministic.
    assert path.read_bytes() == proto
    texts = texts_of(load_bible_pairs("dev", path=FIXTURE))
    assert load_tokenizer(path).tokenize(texts) == tokenizer.tokenize(texts)
    assert load_tokenizer(str(path)).tokenize(texts) == tokenizer.tokenize(texts)


@pytest.mark.backend_independent
def test_sentencepiece_library_gives_the_ids_and_strings_of_the_keras_hub_tokenizer(
    proto, tokenizer, library_tokenizer
):
    import tensorflow_text

    # tensorflow-text's op: what KerasHub runs inside tf.data and the export runs.
    in_graph = tensorflow_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)
    texts = texts_of(load_bible_pairs("all", path=FIXTURE)) + ["", "  ﬁn \t del\u00a0 mundo ", "漢字 y ☃ unseen"]
    ids = library_tokenizer.tokenize(texts)
    assert ids == tokenizer.tokenize(texts)  # KerasHub called eagerly
    assert ids == in_graph.tokenize(tf.constant(texts)).to_list()
    values, offsets = library_tokenizer.tokenize_flat(texts)
    assert values.dtype == np.int32 and offsets.dtype == np.int64
    assert [values[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == ids
    assert library_tokenizer.tokenize(texts[0]).tolist() == ids[0]
    # Detokenized strings too, of real ids and of any ids (specials and <unk> included).
    rng = np.random.default_rng(0)
    any_ids = [rng.integers(0, VOCABULARY_SIZE, size=n).tolist() for n in rng.integers(0, 30, size=200)]
    for rows in (ids, any_ids):
        decoded = library_tokenizer.detokenize(rows)
        assert decoded == tokenizer.detokenize(rows)
        strings = in_graph.detokenize(tf.ragged.constant(rows, dtype="int32", ragged_rank=1)).numpy()
        assert decoded == [text.decode("utf-8") for text in strings]
    assert library_tokenizer.get_vocabulary() == tokenizer.get_vocabulary()
    assert library_tokenizer.vocabulary_size() == tokenizer.vocabulary_size() == VOCABULARY_SIZE


@pytest.mark.backend_independent
def test_too_large_vocabulary_raises_value_error():
    with pytest.raises(ValueError, match="vocabulary_size=5000 is too large"):
        train_tokenizer(["el principio", "the beginning"], vocabulary_size=5000)


@pytest.mark.backend_independent
def test_single_string_is_rejected():
    with pytest.raises(ValueError, match="texts"):
        train_tokenizer("the beginning", vocabulary_size=20)


@pytest.mark.backend_independent
def test_missing_vocabulary_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="proto"):
        load_tokenizer(tmp_path / "missing.spm")


@pytest.mark.backend_independent
def test_vocabulary_without_our_special_ids_is_rejected():
    writer = io.BytesIO()
    # SentencePiece's own defaults: unk=0, bos=1, eos=2, no padding id.
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(["el principio", "the beginning"] * 5),
        model_writer=writer,
        vocab_size=16,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match="special ids"):
        load_tokenizer(writer.getvalue())


# Pipeline.


@pytest.mark.backend_independent
def test_tokenization_truncates_and_counts(train_pairs, tokenizer):
    max_length = 32
    tokenized = tokenize_pairs(train_pairs, tokenizer, max_length)
    full_sources = tokenizer.tokenize([pair.source for pair in train_pairs])
    full_targets = tokenizer.tokenize([pair.target for pair in train_pairs])
    expected = sum(
        len(source) > max_length or len(target) + 1 > max_length
        for source, target in zip(full_sources, full_targets)
    )
    assert 0 < tokenized.num_truncated == expected < len(train_pairs)
    assert tokenized.sources.to_list() == [ids[:max_length] for ids in full_sources]
    assert tokenized.targets.to_list() == [ids[: max_length - 1] for ids in full_targets]


@pytest.mark.backend_independent
@pytest.mark.parametrize("bucket", [True, False])
def test_batches_are_teacher_forcing_pairs(tokenized, bucket):
    batches = epoch(translation_dataset(tokenized, batch_tokens=BATCH_TOKENS, bucket=bucket))
    seen = collections.Counter()
    for encoder, decoder, labels in batches:
        for x in (encoder, decoder, labels):
            assert x.dtype == np.int32
            assert x.shape == encoder.shape  # One padded length per batch.
        assert encoder.shape[1] <= MAX_LENGTH
        assert np.all(decoder[:, 0] == START_ID)
        real = labels != PAD_ID
        assert np.array_equal(real, decoder != PAD_ID)
        last = real.sum(axis=1) - 1
        assert np.all(labels[np.arange(len(labels)), last] == END_ID)
        assert np.array_equal(labels[:, :-1][real[:, 1:]], decoder[:, 1:][real[:, 1:]])
        for source, target in zip(encoder, labels):
            seen[(tuple(source[source != PAD_ID]), tuple(target[target != PAD_ID][:-1]))] += 1
    pairs = zip(tokenized.sources.to_list(), tokenized.targets.to_list())
    # Every pair appears exactly once per epoch, with no padding inside it.
    assert seen == collections.Counter((tuple(s), tuple(t)) for s, t in pairs)


@pytest.mark.backend_independent
def test_bucketing_lowers_padding_and_bounds_batch_tokens(tokenized):
    bucketed = translation_dataset(tokenized, batch_tokens=BATCH_TOKENS, bucket=True)
    unbucketed = translation_dataset(tokenized, batch_tokens=BATCH_TOKENS, bucket=False)
    assert padding_fraction(bucketed) < 0.6 * padding_fraction(unbucketed)
    batches = epoch(bucketed)
    for encoder, _, _ in batches:
        assert encoder.size <= BATCH_TOKENS
    # Bucketing pads per length range, so few distinct shapes reach the model.
    shapes = {encoder.shape for encoder, _, _ in batches}
    assert len(shapes) <= 2 * math.ceil(MAX_LENGTH / 8)
    # Without buckets: the same mean batch size, hence the same steps per epoch.
    assert abs(len(epoch(unbucketed)) - len(batches)) <= 1


@pytest.mark.backend_independent
def test_same_seed_same_batches_and_each_epoch_reshuffles(tokenized):
    def first_sources(dataset):
        return [encoder[:, :4].tolist() for encoder, _, _ in epoch(dataset)]

    dataset = translation_dataset(tokenized, batch_tokens=BATCH_TOKENS, seed=3)
    first_epoch = first_sources(dataset)
    assert first_sources(translation_dataset(tokenized, batch_tokens=BATCH_TOKENS, seed=3)) == first_epoch
    assert first_sources(dataset) != first_epoch


@pytest.mark.backend_independent
def test_every_iterator_over_a_repeated_dataset_yields_the_same_batches(tokenized):
    # Keras may open several iterators over one dataset; a resumed or
    # distributed run must still train on the batches of a plain run.
    def sources(dataset, steps=40):
        return [inputs["encoder_tokens"].numpy().tolist() for inputs, _ in dataset.take(steps)]

    dataset = translation_dataset(tokenized, batch_tokens=BATCH_TOKENS, repeat=True, seed=3)
    first = sources(dataset)
    assert sources(dataset) == first
    assert sources(translation_dataset(tokenized, batch_tokens=BATCH_TOKENS, repeat=True, seed=4)) != first


@pytest.mark.backend_independent
def test_each_repeated_pass_is_a_new_permutation_of_all_pairs(tokenized):
    plan = BatchPlan(tokenized.lengths(), MAX_LENGTH, batch_tokens=BATCH_TOKENS, seed=3, repeat=True)
    num_pairs = len(tokenized)
    first, second = plan.pass_order(0).tolist(), plan.pass_order(1).tolist()
    assert sorted(first) == sorted(second) == list(range(num_pairs))
    assert first != second
    # Half-full buckets carry over into the next pass: after 3 passes every
    # pair was batched 3 times but those still waiting, fewer than a batch
    # per bucket, and no batch is smaller than its bucket's size.
    batched = [plan.pass_batches(p) for p in range(3)]
    counts = np.bincount(np.concatenate([pairs for pairs, _, _ in batched]), minlength=num_pairs)
    assert counts.max() == 3 and 0 < 3 * num_pairs - counts.sum() < plan.batch_sizes.sum()
    for _, sizes, lengths in batched:
        assert sizes.tolist() == [plan.batch_sizes[plan.lengths.index(length)] for length in lengths]


@pytest.mark.backend_independent
def test_batch_multiple_rounds_every_batch_size_down_to_a_multiple(tokenized):
    for bucket in (True, False):
        dataset = translation_dataset(tokenized, batch_tokens=BATCH_TOKENS, bucket=bucket, repeat=True,
                                      batch_multiple=3)
        sizes = [len(labels) for _, labels in dataset.take(30)]
        assert all(size % 3 == 0 for size in sizes), sizes
    with pytest.raises(ValueError, match="batch_multiple"):
        translation_dataset(tokenized, batch_multiple=0)


@pytest.mark.backend_independent
def test_numpy_tokenization_holds_the_ids_of_the_tf_pipeline(tokenized, arrays):
    assert len(arrays) == len(tokenized) and arrays.num_truncated == tokenized.num_truncated > 0
    for ids, offsets, ragged in ((arrays.source_ids, arrays.source_offsets, tokenized.sources),
                                 (arrays.target_ids, arrays.target_offsets, tokenized.targets)):
        assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == ragged.to_list()
    assert np.array_equal(arrays.lengths(), tokenized.lengths())


@pytest.mark.parametrize("options", [
    dict(seed=0),
    dict(seed=1, bucket=False),
    dict(shuffle=False, batch_multiple=2),
    dict(seed=2, repeat=True),
    dict(seed=3, repeat=True, bucket=False),
    dict(seed=4, repeat=True, batch_multiple=2),
    dict(seed=5, repeat=True, bucket_width=32),
], ids=lambda options: ",".join(f"{key}={value}" for key, value in options.items()))
@pytest.mark.backend_independent
def test_py_dataset_yields_the_batches_of_the_tf_data_pipeline(tokenized, arrays, options):
    options = dict(batch_tokens=BATCH_TOKENS, **options)
    dataset = translation_dataset(tokenized, **options)
    py_dataset = python_pipeline.TranslationPyDataset(arrays, **options)

    def py_batches(count, start=0):
        return [(inputs["encoder_tokens"], inputs["decoder_tokens"], labels)
                for inputs, labels in (py_dataset[i] for i in range(start, start + count))]

    def assert_same(got, want):
        assert len(got) == len(want)
        for got_batch, want_batch in zip(got, want):
            for x, y in zip(got_batch, want_batch):
                assert x.dtype == y.dtype == np.int32 and x.shape == y.shape
                np.testing.assert_array_equal(x, y)

    if options.get("repeat"):
        # Three passes and more: the carried-over buckets of each pass included.
        count = 3 * len(epoch(translation_dataset(tokenized, **{**options, "repeat": False}))) + 5
        want = epoch(dataset.take(count))
        assert_same(py_batches(count), want)
        # A resumed run starts at a later batch without assembling the earlier ones.
        skipped = python_pipeline.TranslationPyDataset(arrays, start=count - 9, **options)
        assert_same([(i["encoder_tokens"], i["decoder_tokens"], l) for i, l in (skipped[j] for j in range(9))],
                    want[-9:])
        assert py_dataset.num_batches is None
    else:
        for _ in range(2):  # each epoch, a new permutation in both
            want = epoch(dataset)
            assert_same(py_batches(len(py_dataset)), want)
            py_dataset.on_epoch_end()
        with pytest.raises(IndexError):
            py_dataset[len(py_dataset)]
    padded = {batch[0].shape[1] for batch in want}
    assert padded <= set(range(options.get("bucket_width", 8), MAX_LENGTH + 1, options.get("bucket_width", 8)))


@pytest.mark.backend_independent
def test_bad_arguments_raise(train_pairs, tokenizer, tokenized):
    with pytest.raises(ValueError, match="max_length"):
        tokenize_pairs(train_pairs, tokenizer, max_length=1)
    with pytest.raises(ValueError, match="batch_tokens"):
        translation_dataset(tokenized, batch_tokens=MAX_LENGTH - 1)
    with pytest.raises(ValueError, match="num_batches"):
        padding_fraction(translation_dataset(tokenized, repeat=True))


def test_fit_on_the_dataset_gives_finite_loss(tokenized):
    model = keras_transformer.models.transformer(
        VOCABULARY_SIZE,
        VOCABULARY_SIZE,
        num_layers=1,
        d_model=16,
        num_heads=2,
        ff_dim=32,
        max_length=MAX_LENGTH,
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    dataset = translation_dataset(tokenized, batch_tokens=BATCH_TOKENS, repeat=True)
    history = model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0)
    assert np.isfinite(history.history["loss"][-1])
