"""Greedy and beam search on a key/value cache, in one decoding loop.

Decoding lives apart from the model. A decoder (`CachedDecoder`, or the
uncached baseline `UncachedDecoder`) turns a model built by
`keras_transformer.models.transformer` into `start` and `next_logits`
steps; `sampler.search_tensors` runs them in one `keras.ops.while_loop`,
and greedy and beam search differ only in the choice that picks the next
tokens (`GreedyChoice`, `BeamChoice`; `NBestChoice` keeps the n best
with their scores; `PooledBeamChoice` is transformers' beam search, with
its n best too). The `Translator` and the SavedModel
export run the same loop. `refill_greedy_search` and `refill_beam_search`
decode a queue of sources a few at a time, the rows of a sentence that
ended taking the next (`refill`): the first is the compiled engine's
greedy search on a CPU.

Example:

>>> import numpy as np
>>> import keras_transformer as kt
>>> from keras_transformer import decoding
>>> model = kt.models.transformer(20, 20, num_layers=1, d_model=8,
...                               num_heads=2, ff_dim=16, max_length=12)
>>> decoding.beam_search(decoding.CachedDecoder(model), np.array([[5, 6, 0]]),
...                      beam_width=2, max_new_tokens=4).shape[0]
1
"""

from keras_transformer.decoding.cached_decoder import CachedDecoder
from keras_transformer.decoding.cached_decoder import DecoderState
from keras_transformer.decoding.checks import check_encoder_tokens
from keras_transformer.decoding.n_best import NBest
from keras_transformer.decoding.n_best import NBestChoice
from keras_transformer.decoding.choices import BeamChoice
from keras_transformer.decoding.choices import GreedyChoice
from keras_transformer.decoding.sampler import compile_function
from keras_transformer.decoding.sampler import run_search
from keras_transformer.decoding.sampler import search_tensors
from keras_transformer.decoding.search_step import mask_forbidden_tokens
from keras_transformer.decoding.search import beam_search
from keras_transformer.decoding.search import greedy_search
from keras_transformer.decoding.search import greedy_search_uncached
from keras_transformer.decoding.search import n_best_search
from keras_transformer.decoding.search import pooled_beam_search
from keras_transformer.decoding.pooled_beam import PooledBeamChoice
from keras_transformer.decoding.refill import refill_beam_search
from keras_transformer.decoding.refill import refill_greedy_search
from keras_transformer.decoding.uncached_decoder import UncachedDecoder

__all__ = [
    "BeamChoice",
    "CachedDecoder",
    "DecoderState",
    "GreedyChoice",
    "NBest",
    "NBestChoice",
    "UncachedDecoder",
    "beam_search",
    "check_encoder_tokens",
    "compile_function",
    "greedy_search",
    "greedy_search_uncached",
    "mask_forbidden_tokens",
    "n_best_search",
    "pooled_beam_search",
    "PooledBeamChoice",
    "refill_beam_search",
    "refill_greedy_search",
    "run_search",
    "search_tensors",
]
