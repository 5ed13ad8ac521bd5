"""A corpus that streams (`--stream`), on tf.data or without TensorFlow: the same pairs as in memory,
bounded vocabulary sample, exact resume."""

import collections
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest

import keras_transformer_cli as cli
from keras_transformer.data import ParallelCorpus
from keras_transformer.data.batch_plan import padded_lengths
from keras_transformer.data.batch_plan import pairs_of_batches
from keras_transformer.data.corpus_scan import VocabularySample
from keras_transformer.data.corpus_scan import scan_corpus
from keras_transformer.errors import UserInputError
from keras_transformer.training.train_config import TrainConfig

pytestmark = pytest.mark.backend_independent

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
TSV = str(FIXTURES / "bible_fr_en_small.tsv")
CORPUS = ParallelCorpus(TSV, dev_fraction=0.1, test_fraction=0.1)
RUN = dict(
    corpus=TSV, dev_fraction=0.1, test_fraction=0.1, preset="tiny", num_layers=1, d_model=16, num_heads=2,
    ff_dim=32, max_length=24, vocabulary_size=300, batch_tokens=240, warmup_steps=2, steps_per_epoch=2,
)
QUIET = dict(verbose=0, log=lambda message: None, sample_sentences=0)


@pytest.fixture(scope="module")
def vocabulary():
    from keras_transformer.data.tokenizer import train_tokenizer

    return train_tokenizer([text for pair in CORPUS.read()["train"] for text in (pair.source, pair.target)], 300)


@pytest.fixture
def tokenizer(vocabulary):
    # Per test: the session reset between tests drops the SentencePiece op's resource.
    pytest.importorskip("tensorflow")
    from keras_transformer.data.tokenizer import load_tokenizer

    return load_tokenizer(vocabulary)


@pytest.fixture
def spm_tokenizer(vocabulary):
    from keras_transformer_runtime.sentence_piece_tokenizer import SentencePieceTokenizer

    return SentencePieceTokenizer(vocabulary)


def _streamed(tokenizer, max_length, corpus=CORPUS, **options):
    from keras_transformer.data.streaming import streamed_dataset

    return streamed_dataset(corpus, scan_corpus(corpus).train_lines, tokenizer, max_length, batch_tokens=240,
                            **options)


def test_one_streamed_pass_holds_the_pairs_of_an_in_memory_epoch_truncated_alike(tokenizer):
    from keras_transformer.data import pipeline

    max_length = 16  # truncates: the verses are longer
    tokens = pipeline.tokenize_pairs(CORPUS.read()["train"], tokenizer, max_length)
    assert tokens.num_truncated > 10
    in_memory = collections.Counter(pairs_of_batches(pipeline.translation_dataset(tokens, batch_tokens=240)))
    streamed_batches = list(_streamed(tokenizer, max_length, repeat=False, shuffle_buffer=50))
    streamed = collections.Counter(pairs_of_batches(streamed_batches))
    assert streamed == in_memory and sum(streamed.values()) == len(tokens)
    assert max(len(source) for source, _ in streamed) == max_length
    assert max(len(target) for _, target in streamed) == max_length - 1
    for inputs, labels in streamed_batches:
        rows, length = labels.shape
        assert length in padded_lengths(max_length) and rows * length <= 240
        assert inputs["encoder_tokens"].shape == inputs["decoder_tokens"].shape == labels.shape


def test_a_resumed_stream_skips_to_the_batches_an_uninterrupted_one_reaches_across_passes(tokenizer):
    stream = _streamed(tokenizer, 24, shuffle_buffer=30, seed=3)
    whole = [labels.numpy() for _, labels in stream.take(40)]  # ~13 batches a pass: 3 passes
    resumed = [labels.numpy() for _, labels in stream.skip(25).take(15)]
    assert len(whole) == 40 and all(np.array_equal(a, b) for a, b in zip(whole[25:], resumed))
    other_seed = [labels.numpy() for _, labels in _streamed(tokenizer, 24, shuffle_buffer=30, seed=4).take(5)]
    assert not all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(whole, other_seed))


def _python_streamed(tokenizer, max_length, corpus=CORPUS, **options):
    from keras_transformer.data.python_streaming import StreamedPyDataset

    return StreamedPyDataset(corpus, scan_corpus(corpus).train_lines, tokenizer, max_length, batch_tokens=240,
                             **options)


def _first(dataset, count):
    return [batch for batch, _ in zip(dataset, range(count))]


def test_one_python_streamed_pass_holds_the_pairs_of_an_in_memory_epoch_truncated_alike(spm_tokenizer):
    from keras_transformer.data import python_pipeline
    from keras_transformer_runtime.special_tokens import START_ID

    max_length = 16  # truncates: the verses are longer
    tokens = python_pipeline.tokenize_pairs(CORPUS.read()["train"], spm_tokenizer, max_length)
    assert tokens.num_truncated > 10
    in_memory = collections.Counter(pairs_of_batches(python_pipeline.TranslationPyDataset(tokens, batch_tokens=240)))
    batches = list(_python_streamed(spm_tokenizer, max_length, repeat=False, shuffle_buffer=50))
    streamed = collections.Counter(pairs_of_batches(batches))
    assert streamed == in_memory and sum(streamed.values()) == len(tokens)
    assert max(len(source) for source, _ in streamed) == max_length
    assert max(len(target) for _, target in streamed) == max_length - 1
    for inputs, labels in batches:
        rows, length = labels.shape
        assert length in padded_lengths(max_length) and rows * length <= 240
        assert inputs["encoder_tokens"].shape == inputs["decoder_tokens"].shape == labels.shape
        assert {tokens.dtype.name for tokens in (*inputs.values(), labels)} == {"int32"}
        decoder = inputs["decoder_tokens"]
        assert (decoder[:, 0] == START_ID).all() and np.array_equal(decoder[:, 1:] != 0, labels[:, :-1] != 0)
    # Every batch is full (240 // length pairs) but the half-full buckets at the end of the pass, one a length.
    full = [len(labels) == 240 // labels.shape[1] for _, labels in batches]
    partial = [labels.shape[1] for _, labels in batches[full.index(False):]] if not all(full) else []
    assert not any(full[len(full) - len(partial):]) and len(partial) == len(set(partial))


def test_the_python_stream_is_seeded_and_a_resumed_one_continues_on_the_uninterrupted_batches(spm_tokenizer):
    stream = _python_streamed(spm_tokenizer, 24, shuffle_buffer=30, seed=3)
    whole = [labels for _, labels in _first(stream, 40)]  # ~13 batches a pass: 3 passes
    again = [labels for _, labels in _first(_python_streamed(spm_tokenizer, 24, shuffle_buffer=30, seed=3), 40)]
    resumed = _python_streamed(spm_tokenizer, 24, shuffle_buffer=30, seed=3, start=25)
    tail = [resumed[i][1] for i in range(15)]  # as model.fit reads it: index 0 is batch 25
    assert len(whole) == 40 and all(np.array_equal(a, b) for a, b in zip(whole, again))
    assert all(np.array_equal(a, b) for a, b in zip(whole[25:], tail))
    assert np.array_equal(stream[3][1], whole[3]) and np.array_equal(stream[39][1], whole[39])  # read again
    other_seed = [labels for _, labels in _first(_python_streamed(spm_tokenizer, 24, shuffle_buffer=30, seed=4), 5)]
    assert not all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(whole, other_seed))


def _texts(corpus, train_lines=None, shard=(0, 1)):
    pytest.importorskip("tensorflow")
    from keras_transformer.data.streaming import train_texts

    pairs = []
    if train_lines is None:
        train_lines = scan_corpus(corpus).train_lines
    for sources, targets in train_texts(corpus, train_lines, shard=shard):
        pairs += zip((s.decode() for s in sources.numpy()), (t.decode() for t in targets.numpy()))
    return pairs


def _python_texts(corpus, train_lines=None, shard=(0, 1)):
    from keras_transformer.data.python_streaming import train_text_chunks

    if train_lines is None:
        train_lines = scan_corpus(corpus).train_lines
    return [(source, target) for sources, targets in train_text_chunks(corpus, train_lines, shard=shard)
            for source, target in zip(sources, targets)]


@pytest.mark.parametrize("texts", [_python_texts, _texts], ids=["python", "tf.data"])
def test_host_shards_partition_the_train_pairs(texts):
    everything = texts(CORPUS)
    first, second = texts(CORPUS, shard=(0, 2)), texts(CORPUS, shard=(1, 2))
    assert everything == [(pair.source, pair.target) for pair in CORPUS.read()["train"]]
    assert sorted(first + second) == sorted(everything) and first and second
    assert not set(first) & set(second)


def test_both_streams_give_a_host_the_same_shard():
    for shard in ((0, 3), (2, 3)):
        assert _python_texts(CORPUS, shard=shard) == _texts(CORPUS, shard=shard)


@pytest.mark.parametrize("texts", [_python_texts, _texts], ids=["python", "tf.data"])
def test_the_streams_read_the_train_pairs_of_the_python_readers_in_every_format(tmp_path, texts):
    lines = ["\ufeffphrase 0 \t sentence 0\r", "phrase 1\tsentence 1\tanother reference", "only one column",
             "", "phrase 4\t\tx", *(f"  phrase {i}\tsentence {i}  " for i in range(5, 3000))]
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("header\n" + "\n".join(lines) + "\n")
    lines[4] = "phrase 4\tx"  # the aligned files have no columns; an empty side instead
    source, target = tmp_path / "pairs.fr.gz", tmp_path / "pairs.en.gz"
    import gzip

    with gzip.open(source, "wt") as f:
        f.write("\n".join(line.split("\t")[0] for line in lines) + "\n")
    with gzip.open(target, "wt") as f:
        f.write("\n".join((line.split("\t") + [""])[1] for line in lines) + "\n")
    from keras_transformer.data import corpus as bible

    for corpus in (
        ParallelCorpus(str(tsv), header=True, skip_bad_lines=True),
        ParallelCorpus((str(source), str(target)), skip_bad_lines=True),
        ParallelCorpus(bible.DEFAULT_CORPUS_PATH),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = [(pair.source, pair.target) for pair in corpus.read()["train"]]
            assert texts(corpus) == expected and len(expected) > 2000, corpus


def test_a_bad_line_stops_the_scan_with_its_file_and_line_or_is_skipped_with_one_warning(tmp_path):
    path = tmp_path / "pairs.tsv"
    lines = [f"phrase {i}\tsentence {i}" for i in range(8)]
    lines[4] = "only one column"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserInputError, match=r"pairs\.tsv:5: 1 column"):
        scan_corpus(ParallelCorpus(str(path), dev_fraction=0.3))
    corpus = ParallelCorpus(str(path), dev_fraction=0.3, test_fraction=0.0, skip_bad_lines=True)
    with pytest.warns(UserWarning, match=r"pairs\.tsv: skipped 1 bad line: 1 with the wrong number of columns"):
        scan = scan_corpus(corpus)
    assert scan.train_pairs + len(scan.splits["dev"]) == 7 and scan.splits.skipped["columns"] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the streams do not warn again, pass after pass
        streamed = [source for source, _ in _python_texts(corpus, scan.train_lines)]
    assert len(streamed) == scan.train_pairs and "only one column" not in streamed
    pytest.importorskip("tensorflow")
    from keras_transformer.data.streaming import train_texts

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        streamed = [s.decode() for sources, _ in train_texts(corpus, scan.train_lines) for s in sources.numpy()]
    assert len(streamed) == scan.train_pairs and "only one column" not in streamed


def test_the_vocabulary_sample_is_bounded_uniform_seeded_and_the_same_read_or_scanned():
    sample = VocabularySample(100, seed=0)
    for i in range(10_000):
        sample.add(f"s{i}", f"t{i}")
    texts = sample.texts()
    indices = [int(text[1:]) for text in texts[:50]]
    assert len(texts) == 100 and texts[50:] == [f"t{i}" for i in indices] and indices == sorted(indices)
    assert max(indices) > 5_000  # not just the first pairs
    other = VocabularySample(100, seed=1)
    for i in range(10_000):
        other.add(f"s{i}", f"t{i}")
    assert other.texts() != texts
    from keras_transformer.training import train_input

    config = TrainConfig(vocabulary_sample=60, **RUN).resolved()
    inputs = train_input.TrainInput(config.parallel_corpus(), config.max_length, config.batch_tokens,
                                    seed=config.seed, vocabulary_sample=config.vocabulary_sample)
    scanned = dataclasses.replace(inputs, stream=True).read_corpus()
    read = inputs.read_corpus()
    assert scanned.vocabulary_texts() == read.vocabulary_texts() and len(read.vocabulary_texts()) == 60
    assert scanned.train_pairs == read.train_pairs and scanned.splits["train"] == []
    assert scanned.splits["dev"] == read.splits["dev"]


@pytest.mark.end_to_end
def test_a_streamed_run_writes_a_model_and_a_resumed_one_ends_with_the_uninterrupted_model(tmp_path):
    from keras_transformer.training.trainer import train_translator

    messages = []
    whole = train_translator(TrainConfig(output=str(tmp_path / "whole"), stream=True, epochs=2, **RUN),
                             **{**QUIET, "log": messages.append})
    assert whole["stream"] and whole["completed_steps"] == 4 and (tmp_path / "whole" / "model.keras").exists()
    assert whole["train_pairs"] == len(CORPUS.read()["train"])
    assert any("streamed" in message for message in messages), messages
    first = train_translator(TrainConfig(output=str(tmp_path / "resumed"), stream=True, epochs=1, **RUN), **QUIET)
    assert first["completed_steps"] == 2
    messages = []
    resumed = train_translator(TrainConfig(output=str(tmp_path / "resumed"), stream=True, epochs=2, **RUN),
                               **{**QUIET, "log": messages.append})
    assert resumed["trained_steps_this_run"] == 2
    assert any("skipping the 2 batches" in message for message in messages), messages
    for path in ("whole", "resumed"):
        model = keras.saving.load_model(tmp_path / path / "model.keras", compile=False)
        weights = [keras.ops.convert_to_numpy(w) for w in model.weights]
        if path == "whole":
            reference = weights
    for got, want in zip(weights, reference):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_stream_flags_reach_the_config_and_stream_runs_on_either_pipeline():
    args = cli.build_parser().parse_args(["train", "--stream", "--vocabulary-sample", "1000"])
    assert (args.stream, args.vocabulary_sample) == (True, 1000)
    assert cli.build_parser().parse_args(["train"]).stream is False
    assert TrainConfig(stream=True, input_pipeline="python", **RUN).resolved().stream
    with pytest.raises(UserInputError, match="--vocabulary-sample must be at least 2"):
        TrainConfig(vocabulary_sample=1, **RUN).resolved()


# A streamed run on the python pipeline with TensorFlow blocked: 2 steps,
# then 2 more resumed (the stream skips the 2 batches trained on).
BLOCK_TENSORFLOW_THEN_STREAM = """
import sys
sys.modules["tensorflow"] = None  # any `import tensorflow` now raises ImportError
import json
from keras_transformer.training.train_config import TrainConfig
from keras_transformer.training.trainer import train_translator
run, output = json.loads(sys.argv[1]), sys.argv[2]
for epochs in (1, 2):
    log = []
    summary = train_translator(TrainConfig(output=output, stream=True, input_pipeline="python", epochs=epochs,
                                           **run), verbose=0, log=log.append, sample_sentences=0)
    print(json.dumps({"summary": {k: summary[k] for k in ("completed_steps", "train_pairs", "input_pipeline")},
                      "log": log}))
print("IMPORTED", sorted(name for name in ("tensorflow", "keras_hub", "tensorflow_text")
                         if sys.modules.get(name) is not None))
"""


@pytest.mark.end_to_end
@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="needs a backend other than TensorFlow")
def test_a_python_streamed_run_trains_and_resumes_with_tensorflow_blocked(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_TENSORFLOW_THEN_STREAM, json.dumps(RUN), str(tmp_path / "run")],
        env=dict(os.environ), capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    first, resumed = json.loads(lines[-3]), json.loads(lines[-2])
    assert lines[-1] == "IMPORTED []"
    assert first["summary"] == {"completed_steps": 2, "train_pairs": len(CORPUS.read()["train"]),
                                "input_pipeline": "python"}
    assert any("streamed in chunks of 1024 lines" in line for line in first["log"]), first["log"]
    assert resumed["summary"]["completed_steps"] == 4
    assert any("skipping the 2 batches" in line for line in resumed["log"]), resumed["log"]
    assert (tmp_path / "run" / "model.keras").exists()


def test_evaluate_on_a_streamed_run_reads_only_its_split_one_pair_at_a_time(tmp_path, monkeypatch):
    import io

    from keras_transformer.translation import evaluation
    from keras_transformer.training import run_folder
    from keras_transformer_cli import commands

    folder = tmp_path / "run"
    folder.mkdir()
    config = {**RUN, "stream": True}
    (folder / run_folder.CONFIG_FILE).write_text(json.dumps(config))
    expected = CORPUS.read()["test"]

    def whole_corpus(self):
        raise AssertionError("evaluate read the whole corpus of a streamed run")

    scored = []
    monkeypatch.setattr(ParallelCorpus, "read", whole_corpus)
    monkeypatch.setattr(commands, "_translator", lambda args: None)
    monkeypatch.setattr(evaluation, "evaluate_pairs", lambda translator, pairs: scored.append(pairs) or {
        "sentences": len(pairs), "bleu": 0.0, "chrf": 0.0, "loop_rate": 0.0, "bleu_signature": "-"})
    for limit, count in ((None, len(expected)), (3, 3)):
        argv = ["evaluate", "--model", str(folder), "--split", "test"] + (["--limit", str(limit)] if limit else [])
        commands.evaluate(cli.build_parser().parse_args(argv), io.StringIO())
        assert scored[-1] == expected[:count] and len(expected) > 3
    with pytest.raises(UserInputError, match="only the embedded Bible corpus has a heldout split"):
        commands.evaluate(cli.build_parser().parse_args(["evaluate", "--model", str(folder), "--split", "heldout"]),
                          io.StringIO())
