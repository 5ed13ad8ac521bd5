"""Data for keras_transformer: the embedded Spanish -> English Bible corpus."""

from keras_transformer.data.corpus import DEFAULT_CORPUS_PATH
from keras_transformer.data.corpus import TranslationPair
from keras_transformer.data.corpus import load_bible_pairs
from keras_transformer.data.corpus import split_for_verse_id

__all__ = [
    "DEFAULT_CORPUS_PATH",
    "TranslationPair",
    "load_bible_pairs",
    "split_for_verse_id",
]
