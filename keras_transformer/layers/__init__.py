"""Transformer layers, written with `keras.ops` only: every backend works."""

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.attention_kernel import merge_attention_masks
from keras_transformer.layers.decoder import DecoderLayer
from keras_transformer.layers.encoder import EncoderLayer
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.padding_mask import PaddingMask
from keras_transformer.layers.positional_embedding import PositionalEmbedding
from keras_transformer.layers.sinusoidal_encoding import sinusoidal_encoding
