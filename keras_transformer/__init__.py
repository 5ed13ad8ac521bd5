"""keras-transformer: a Keras 3 Transformer for every backend.

Example:

>>> import keras_transformer as kt
>>> model = kt.models.transformer(100, 100, num_layers=1, d_model=16,
...                               num_heads=2, ff_dim=32, max_length=16)
>>> model.name
'transformer'
"""

from keras_transformer import checkpoints
from keras_transformer import diagnostics
from keras_transformer import initializers
from keras_transformer import layers
from keras_transformer import lora
from keras_transformer import models
from keras_transformer import training
from keras_transformer import translation

__version__ = "0.1.0"
