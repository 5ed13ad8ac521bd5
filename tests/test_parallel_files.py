"""Your own parallel corpus: formats, gzip, the hash split, bad lines (data only, any backend)."""

import collections
import gzip
import pathlib
import random
import re
import shutil
import warnings

import pytest

from keras_transformer.data import parallel_files
from keras_transformer.data.parallel_corpus import ParallelCorpus
from keras_transformer.data.parallel_corpus import split_for_text
from keras_transformer.errors import UserInputError

pytestmark = pytest.mark.backend_independent

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
TSV = str(FIXTURES / "bible_fr_en_small.tsv")
FRENCH, ENGLISH = str(FIXTURES / "bible_fr_en_small.fr.gz"), str(FIXTURES / "bible_fr_en_small.en.gz")
BIBLE = str(FIXTURES / "bible_es_en_small.tsv.gz")
EVERYTHING_TRAINS = dict(dev_fraction=0.0, test_fraction=0.0)


def _write(path, data, compress=False):
    data = data.encode("utf-8") if isinstance(data, str) else data
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    return str(path)


def _all(splits):
    return sorted(splits["train"] + splits["dev"] + splits["test"], key=lambda pair: int(pair.id.split(":")[1]))


def test_the_tsv_and_the_aligned_files_of_the_fixture_give_the_same_258_pairs():
    tsv = ParallelCorpus(TSV, dev_fraction=0.1).read()
    aligned = ParallelCorpus((FRENCH, ENGLISH), dev_fraction=0.1).read()
    assert (tsv.format, aligned.format) == ("tsv", "aligned")
    assert len(_all(tsv)) == 258
    assert [(p.source, p.target, p.split) for p in _all(tsv)] == [(p.source, p.target, p.split) for p in _all(aligned)]
    first = _all(tsv)[0]
    assert (first.id, first.book, first.source, first.target, first.references) == (
        "bible_fr_en_small.tsv:1", "", "Au commencement, Dieu créa les cieux et la terre.",
        "In the beginning God created the heavens and the earth.",
        ("In the beginning God created the heavens and the earth.",),
    )
    assert _all(aligned)[0].id == "bible_fr_en_small.fr.gz:1"


@pytest.mark.parametrize("compress", [False, True])
def test_gzipped_and_plain_files_read_the_same_whatever_their_names(tmp_path, compress):
    text = pathlib.Path(TSV).read_text(encoding="utf-8")
    tsv = _write(tmp_path / "pairs.txt", text, compress)  # the name says nothing: the bytes decide
    french = _write(tmp_path / "fr", gzip.decompress(pathlib.Path(FRENCH).read_bytes()), compress)
    english = _write(tmp_path / "en", gzip.decompress(pathlib.Path(ENGLISH).read_bytes()), compress)
    assert parallel_files.is_gzip(tsv) == compress
    expected = [(p.source, p.target) for p in _all(ParallelCorpus(TSV).read())]
    for corpus in (ParallelCorpus(tsv), ParallelCorpus((french, english))):
        assert [(p.source, p.target) for p in _all(corpus.read())] == expected


def test_further_tsv_columns_are_references_and_empty_ones_are_left_out(tmp_path):
    path = _write(tmp_path / "three.tsv", "Hallo\tHello\tHi\nDanke\tThanks\t\n")
    pairs = _all(ParallelCorpus(path, **EVERYTHING_TRAINS).read())
    assert [pair.references for pair in pairs] == [("Hello", "Hi"), ("Thanks",)]


def test_a_header_line_is_skipped_only_when_asked_and_crlf_bom_and_spaces_are_stripped(tmp_path):
    path = _write(tmp_path / "h.tsv", "\ufeffde\ten\r\n  Hallo \tHello\r\n")
    assert [(p.source, p.target) for p in _all(ParallelCorpus(path, **EVERYTHING_TRAINS).read())] == [
        ("de", "en"), ("Hallo", "Hello")]
    with_header = _all(ParallelCorpus(path, header=True, **EVERYTHING_TRAINS).read())
    assert [(p.id, p.source, p.target) for p in with_header] == [("h.tsv:2", "Hallo", "Hello")]


def test_the_hash_split_is_a_function_of_the_source_text_with_the_asked_sizes(tmp_path):
    lines = [f"Satz {i}\tsentence {i}" for i in range(20_000)] + ["Satz 7\tanother translation"]
    path = _write(tmp_path / "big.tsv", "\n".join(lines) + "\n")
    random.Random(0).shuffle(lines)
    shuffled = _write(tmp_path / "shuffled.tsv", "\n".join(lines) + "\n")
    splits = ParallelCorpus(path, dev_fraction=0.1, test_fraction=0.05).read()
    # 20,001 pairs: the counts are binomial, within 4 standard deviations (42 and 31) of 10 % and 5 %.
    assert abs(len(splits["dev"]) - 2000) < 170 and abs(len(splits["test"]) - 1000) < 125
    assert len(splits["train"]) + len(splits["dev"]) + len(splits["test"]) == 20_001
    by_source = collections.defaultdict(set)
    for pair in _all(splits):
        by_source[pair.source].add(pair.split)
        assert pair.split == split_for_text(pair.source, 0.1, 0.05)
    assert len(by_source["Satz 7"]) == 1  # a repeated source never straddles two splits
    again = ParallelCorpus(shuffled, dev_fraction=0.1, test_fraction=0.05).read()
    assert {(p.source, p.target, p.split) for p in _all(again)} == {(p.source, p.target, p.split) for p in _all(splits)}
    default = ParallelCorpus(path).read()  # 2 % each by default
    assert abs(len(default["dev"]) - 400) < 80 and abs(len(default["test"]) - 400) < 80


def test_dev_and_test_files_replace_the_hash_split(tmp_path):
    dev = _write(tmp_path / "dev.tsv", "Guten Tag\tGood day\n")
    splits = ParallelCorpus(TSV, dev=dev, dev_fraction=0.5, test_fraction=0.1).read()
    assert [(p.id, p.split, p.source) for p in splits["dev"]] == [("dev.tsv:1", "dev", "Guten Tag")]
    assert len(splits["train"]) + len(splits["test"]) == 258 and 5 < len(splits["test"]) < 50
    test_fr = _write(tmp_path / "test.fr", "Bonjour\n")
    test_en = _write(tmp_path / "test.en", "Hello\n", compress=True)
    splits = ParallelCorpus((FRENCH, ENGLISH), test=(test_fr, test_en), test_fraction=0.3).read()
    assert [(p.source, p.target) for p in splits["test"]] == [("Bonjour", "Hello")]


def test_the_bible_header_is_recognised_and_keeps_its_splits_languages_and_reader():
    splits = ParallelCorpus(BIBLE).read()
    assert (splits.format, splits.source_language, splits.target_language) == ("bible", "es", "en")
    assert {split: len(pairs) for split, pairs in splits.pairs.items()} == {
        "train": 200, "dev": 40, "test": 30, "heldout": 30}
    assert ParallelCorpus().languages == ("es", "en")
    for options, flag in ((dict(dev_fraction=0.1), "--dev-fraction"), (dict(test=TSV), "--test")):
        with pytest.raises(UserInputError, match=f"keeps its own splits .*{flag}"):
            ParallelCorpus(BIBLE, **options).read()
    with pytest.raises(UserInputError, match="Spanish"):
        ParallelCorpus(None, source_language="de").check()


def test_options_that_do_not_fit_the_format_are_refused(tmp_path):
    with pytest.raises(UserInputError, match="--dev must be in the format of --corpus: two aligned"):
        ParallelCorpus((FRENCH, ENGLISH), dev=TSV).check()
    with pytest.raises(UserInputError, match="--test must be in the format of --corpus: one TSV"):
        ParallelCorpus(TSV, test=(FRENCH, ENGLISH)).check()
    with pytest.raises(UserInputError, match="--header is for a TSV"):
        ParallelCorpus((FRENCH, ENGLISH), header=True).check()
    with pytest.raises(UserInputError, match="--corpus takes one TSV file or two aligned text files .* got 3"):
        ParallelCorpus((TSV, TSV, TSV))
    with pytest.raises(UserInputError, match="plus --test-fraction must be below 1"):
        ParallelCorpus(TSV, dev_fraction=0.5, test_fraction=0.5)
    with pytest.raises(UserInputError, match=r"--dev '.*nope.tsv' does not exist"):
        ParallelCorpus(TSV, dev=str(tmp_path / "nope.tsv")).check()


def test_an_empty_split_or_heldout_of_your_own_corpus_says_what_to_do():
    splits = ParallelCorpus(TSV, **EVERYTHING_TRAINS).read()
    with pytest.raises(UserInputError, match=r"no dev pairs \(258 pairs in all\); raise --dev-fraction"):
        splits.require("dev")
    with pytest.raises(UserInputError, match="only the embedded Bible corpus has a heldout split"):
        splits.require("heldout")
    assert len(splits.require("train")) == 258


# (kind, TSV content, the message's text after "FILE:LINE: "); line 3 is the bad one.
TSV_BAD_LINES = [
    ("columns", "a\tA\nb\tB\nc\n", "1 column, expected source<TAB>target"),
    ("columns", "a\tA\nb\tB\nc\tC\tC2\n", "3 tab-separated columns, expected 2 as on line 1"),
    ("empty", "a\tA\nb\tB\n \tC\n", r"the source \(column 1\) is empty"),
    ("empty", "a\tA\nb\tB\nc\t\n", r"the target \(column 2\) is empty"),
    ("empty", "a\tA\nb\tB\n\n", "empty line"),
    ("utf8", b"a\tA\nb\tB\nc\xe9\tC\n", r"invalid UTF-8 \(byte 0xe9 at byte 2 of the line\)"),
]


@pytest.mark.parametrize("kind, content, message", TSV_BAD_LINES)
def test_a_bad_tsv_line_names_its_file_and_line_or_is_skipped_and_counted(tmp_path, kind, content, message):
    path = _write(tmp_path / "bad.tsv", content + ("d\tD\n" if isinstance(content, str) else b"d\tD\n"))
    with pytest.raises(UserInputError, match=f"^{re.escape(path)}:3: {message}.*--skip-bad-lines"):
        ParallelCorpus(path, **EVERYTHING_TRAINS).read()
    with pytest.warns(UserWarning, match=f"{re.escape(path)}: skipped 1 bad line: 1 with "
                                         f"{parallel_files.BAD_LINE_KINDS[kind]} \\(first: line 3\\)"):
        splits = ParallelCorpus(path, skip_bad_lines=True, **EVERYTHING_TRAINS).read()
    assert [pair.source for pair in splits["train"]] == ["a", "b", "d"]
    assert splits.skipped == {kind: 1}


ALIGNED_BAD_LINES = [
    ("empty", "a\n\nc\n", "A\nB\nC\n", "src", 2, "empty line, but line 2 of .*tgt is not"),
    ("empty", "a\nb\nc\n", "A\nB\n  \n", "tgt", 3, "empty line, but line 3 of .*src is not"),
    ("empty", "a\n\nc\n", "A\n\nC\n", "src", 2, "empty line, and line 2 of .*tgt is empty too"),
    ("utf8", "a\nb\nc\n", b"A\n\xff\nC\n", "tgt", 2, r"invalid UTF-8 \(byte 0xff at byte 1 of the line\)"),
]


@pytest.mark.parametrize("kind, source, target, where, line, message", ALIGNED_BAD_LINES)
def test_a_bad_aligned_line_names_its_file_and_line_or_is_skipped_and_counted(
    tmp_path, kind, source, target, where, line, message
):
    files = (_write(tmp_path / "src", source, compress=True), _write(tmp_path / "tgt", target))
    named = files[0] if where == "src" else files[1]
    with pytest.raises(UserInputError, match=f"^{re.escape(named)}:{line}: {message}"):
        ParallelCorpus(files, **EVERYTHING_TRAINS).read()
    with pytest.warns(UserWarning, match=f"skipped 1 bad line: 1 with {parallel_files.BAD_LINE_KINDS[kind]} "
                                         f"\\(first: line {line}\\)"):
        splits = ParallelCorpus(files, skip_bad_lines=True, **EVERYTHING_TRAINS).read()
    assert len(splits["train"]) == 2 and all(pair.source.upper() == pair.target for pair in splits["train"])


def test_aligned_files_of_different_lengths_are_an_error_even_when_skipping(tmp_path):
    files = (_write(tmp_path / "train.de", "a\nb\nc\nd\n"), _write(tmp_path / "train.en", "A\nB\n", compress=True))
    for skip in (False, True):
        with pytest.raises(UserInputError, match=re.escape(
            f"--corpus: {files[0]} has 4 lines but {files[1]} has 2: aligned files need one line each per pair "
            f"({files[0]}:3 has no partner)"
        ) + ".*--skip-bad-lines does not apply"):
            ParallelCorpus(files, skip_bad_lines=skip, **EVERYTHING_TRAINS).read()
    with pytest.raises(UserInputError, match=f"--dev: .*dev.en has 5 lines but {re.escape(files[0])} has 4"):
        ParallelCorpus((FRENCH, ENGLISH), dev=(files[0], _write(tmp_path / "dev.en", "A\nB\nC\nD\nE\n"))).read()


def test_skipping_counts_every_kind_in_one_warning_and_keeps_the_good_lines(tmp_path):
    content = b"a\tA\nb\n\tC\nd\tD\ne\xff\tE\nf\n\ng\tG\n"
    path = _write(tmp_path / "mixed.tsv", content)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        splits = ParallelCorpus(path, skip_bad_lines=True, **EVERYTHING_TRAINS).read()
    assert [str(w.message) for w in caught] == [
        f"{path}: skipped 5 bad lines: 2 with the wrong number of columns (first: line 2), "
        "2 with an empty side (first: line 3), 1 with invalid UTF-8 (first: line 5)."
    ]
    assert [pair.id for pair in splits["train"]] == ["mixed.tsv:1", "mixed.tsv:4", "mixed.tsv:8"]
    assert splits.skipped == {"columns": 2, "empty": 2, "utf8": 1}


def test_a_missing_file_or_damaged_gzip_is_one_clear_error(tmp_path):
    with pytest.raises(UserInputError, match=r"--corpus '.*missing.tsv' does not exist"):
        ParallelCorpus(str(tmp_path / "missing.tsv")).read()
    whole = gzip.compress(pathlib.Path(TSV).read_bytes())
    cut = _write(tmp_path / "cut.tsv.gz", whole[: len(whole) // 2])
    with pytest.raises(UserInputError, match=r"cut.tsv.gz: the gzip data is damaged after line \d+"):
        ParallelCorpus(cut).read()
    shutil.copy(BIBLE, tmp_path / "bible.tsv.gz")
    plain = _write(tmp_path / "bible.tsv", gzip.decompress((tmp_path / "bible.tsv.gz").read_bytes()))
    with pytest.raises(UserInputError, match="has the Bible corpus' header but is not gzipped"):
        ParallelCorpus(plain).read()
