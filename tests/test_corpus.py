"""The embedded Spanish -> English Bible corpus and its loader."""

import collections
import dataclasses
import pathlib

import pytest

from keras_transformer.data import corpus
from keras_transformer.data import load_bible_pairs
from keras_transformer.data import split_for_verse_id

pytestmark = pytest.mark.backend_independent

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "bible_es_en_small.tsv.gz"


@pytest.fixture(scope="module")
def packaged():
    return load_bible_pairs("all")


def test_fixture_split_counts():
    counts = collections.Counter(pair.split for pair in load_bible_pairs("all", FIXTURE))
    assert counts == {"train": 200, "dev": 40, "test": 30, "heldout": 30}
    for split, count in counts.items():
        pairs = load_bible_pairs(split, path=str(FIXTURE))
        assert len(pairs) == count
        assert {pair.split for pair in pairs} == {split}


def test_fixture_is_cut_from_packaged_corpus(packaged):
    by_id = {pair.id: pair for pair in packaged}
    for pair in load_bible_pairs("all", FIXTURE):
        assert by_id[pair.id] == pair
        assert len(pair.source.split()) <= 40


def test_packaged_corpus_size_and_unique_ids(packaged):
    assert len(packaged) > 25_000
    assert len({pair.id for pair in packaged}) == len(packaged)


def test_splits_are_disjoint_and_cover_all(packaged):
    ids = {split: {pair.id for pair in load_bible_pairs(split)} for split in corpus.SPLITS}
    for a in corpus.SPLITS:
        for b in corpus.SPLITS:
            if a < b:
                assert not ids[a] & ids[b], (a, b)
    assert set().union(*ids.values()) == {pair.id for pair in packaged}
    trained = len(ids["train"]) + len(ids["dev"]) + len(ids["test"])
    for split in ("dev", "test"):
        assert 0.015 < len(ids[split]) / trained < 0.025, split


def test_heldout_books_only_in_heldout(packaged):
    heldout_books = set()
    for pair in packaged:
        assert pair.id.split(".")[0] == pair.book
        assert (pair.book in corpus.HELDOUT_BOOKS) == (pair.split == "heldout"), pair.id
        if pair.split == "heldout":
            heldout_books.add(pair.book)
    assert heldout_books == {"Ruth", "Jonah", "Phlm", "Jude"}


def test_text_is_clean(packaged):
    for pair in packaged:
        assert pair.source and pair.target
        assert pair.references[0] == pair.target
        for text in (pair.source,) + pair.references:
            for bad in ("<", ">", "¶", "\t", "\n", "  ", "\\"):
                assert bad not in text, (pair.id, bad, text)
            assert text == text.strip(), pair.id


def test_known_verses(packaged):
    by_id = {pair.id: pair for pair in packaged}
    genesis = by_id["Gen.1.1"]
    assert genesis.book == "Gen"
    assert genesis.source.startswith("EN el principio crió Dios los cielos")
    assert genesis.target.startswith("In the beginning, God created the heavens")
    assert genesis.references[1].startswith("In the beginning God created the heaven ")
    # WEB has footnotes inside both verses: removed, words not glued.
    assert "God created" in genesis.target
    assert "his only born Son, that whoever" in by_id["John.3.16"].target
    # RV1909 supplies words in <transChange>: spaced, enclitics kept whole.
    assert by_id["Rom.14.1"].source.startswith("RECIBID al flaco en la fe, pero no para")


def test_split_is_a_function_of_the_verse_id(packaged):
    for pair in packaged:
        assert split_for_verse_id(pair.id) == pair.split, pair.id
    assert split_for_verse_id("Ruth.1.1") == "heldout"
    assert split_for_verse_id("Gen.1.1") == split_for_verse_id("Gen.1.1")


def test_pairs_are_frozen():
    pair = load_bible_pairs("dev", FIXTURE)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        pair.source = "x"
    assert isinstance(pair.references, tuple)


def test_bad_split_raises():
    with pytest.raises(ValueError, match="split"):
        load_bible_pairs("validation")


def test_missing_path_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="path"):
        load_bible_pairs("train", path=tmp_path / "missing.tsv.gz")
