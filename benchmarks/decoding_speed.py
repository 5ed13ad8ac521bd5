"""Cached vs uncached greedy decoding, side by side in one process: python -m benchmarks.decoding_speed

A random tiny model (speed does not depend on the weights), 8 sources of 32
tokens, exactly 64 and 256 new tokens; medians of 3 repeats after a warm-up.
"""
import statistics
import time

import keras
import numpy as np
import keras_transformer as kt
from keras_transformer.decoding import CachedDecoder, greedy_search, greedy_search_uncached

keras.utils.set_random_seed(0)
model = kt.models.transformer(8000, 8000, num_layers=2, d_model=128, num_heads=4, ff_dim=512, max_length=512, dropout=0.0)
source = np.random.default_rng(0).integers(4, 8000, size=(8, 32)).astype("int32")
decoder = CachedDecoder(model, max_length=300)
results = {}
for new_tokens in (64, 256):
    times = {"cached": [], "uncached": []}
    for repeat in range(4):  # repeat 0 is warm-up, excluded
        for name, run in (("cached", lambda: greedy_search(decoder, source, new_tokens, stop_at_end=False)),
                          ("uncached", lambda: greedy_search_uncached(model, source, new_tokens, stop_at_end=False))):
            start = time.perf_counter(); run(); elapsed = time.perf_counter() - start
            if repeat:
                times[name].append(elapsed)
    cached, uncached = statistics.median(times["cached"]), statistics.median(times["uncached"])
    results[new_tokens] = dict(cached_s=round(cached, 2), uncached_s=round(uncached, 2), speedup=round(uncached / cached, 2))
    print(keras.backend.backend(), new_tokens, results[new_tokens], flush=True)
