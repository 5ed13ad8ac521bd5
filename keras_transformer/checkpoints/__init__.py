"""Checkpoints of other toolkits on this package's layers: Hugging Face Marian (OPUS-MT) and NLLB-200.

Example:

>>> from keras_transformer import checkpoints
>>> callable(checkpoints.load_marian), callable(checkpoints.load_nllb)
(True, True)
"""

from keras_transformer.checkpoints.marian import export_marian
from keras_transformer.checkpoints.marian import import_marian
from keras_transformer.checkpoints.marian import load_marian
from keras_transformer.checkpoints.marian import read_marian
from keras_transformer.checkpoints.nllb import import_nllb
from keras_transformer.checkpoints.nllb import load_nllb
from keras_transformer.checkpoints.nllb import read_nllb
