"""Data for keras_transformer: the embedded Spanish -> English Bible corpus, or your own."""

from keras_transformer.data.corpus import DEFAULT_CORPUS_PATH
from keras_transformer.data.corpus import TranslationPair
from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer.data.corpus import split_for_verse_id
from keras_transformer.data.parallel_corpus import CorpusSplits
from keras_transformer.data.parallel_corpus import ParallelCorpus
from keras_transformer.data.parallel_corpus import split_for_text

__all__ = [
    "DEFAULT_CORPUS_PATH",
    "CorpusSplits",
    "ParallelCorpus",
    "TranslationPair",
    "load_bible_pairs",
    "split_for_text",
    "split_for_verse_id",
]
