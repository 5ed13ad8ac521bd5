"""Checkpoints of other toolkits on this package's layers: Hugging Face Marian (OPUS-MT).

Example:

>>> from keras_transformer import checkpoints
>>> callable(checkpoints.load_marian)
True
"""

from keras_transformer.checkpoints.marian import export_marian
from keras_transformer.checkpoints.marian import import_marian
from keras_transformer.checkpoints.marian import load_marian
from keras_transformer.checkpoints.marian import read_marian
