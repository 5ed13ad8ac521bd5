"""Cached vs uncached greedy decoding, side by side in one process: python -m benchmarks.decoding_speed

Columns: the cached loop run eagerly (on JAX the loop is always compiled),
the same compiled by XLA (`jit_compile=True`: one program, encoder
included; torch runs it eagerly), and the uncached loop, compiled alike.
A random tiny model (speed does not depend on the weights), 8 sources of 32
tokens, exactly 64 and 256 new tokens; medians of 3 repeats after a warm-up.
"""
import statistics
import time

import keras
import numpy as np
import keras_transformer as kt
from keras_transformer.decoding import CachedDecoder, UncachedDecoder, greedy_search

keras.utils.set_random_seed(0)
model = kt.models.transformer(8000, 8000, num_layers=2, d_model=128, num_heads=4, ff_dim=512, max_length=512, dropout=0.0)
source = np.random.default_rng(0).integers(4, 8000, size=(8, 32)).astype("int32")
decoder = CachedDecoder(model, max_length=300)
compiled = CachedDecoder(model, max_length=300, jit_compile=True)
results = {}
for new_tokens in (64, 256):
    uncached = UncachedDecoder(model, max_length=new_tokens + 1, jit_compile=True)
    times = {"cached": [], "cached_jit": [], "uncached_jit": []}
    for repeat in range(4):  # repeat 0 is warm-up, excluded
        for name, run in (("cached", lambda: greedy_search(decoder, source, new_tokens, stop_at_end=False)),
                          ("cached_jit", lambda: greedy_search(compiled, source, new_tokens, stop_at_end=False)),
                          ("uncached_jit", lambda: greedy_search(uncached, source, new_tokens, stop_at_end=False))):
            start = time.perf_counter(); run(); elapsed = time.perf_counter() - start
            if repeat:
                times[name].append(elapsed)
    median = {name: statistics.median(values) for name, values in times.items()}
    results[new_tokens] = {
        **{f"{name}_s": round(value, 2) for name, value in median.items()},
        "speedup_cached": round(median["uncached_jit"] / median["cached"], 2),
        "speedup_cached_jit": round(median["uncached_jit"] / median["cached_jit"], 2),
    }
    print(keras.backend.backend(), new_tokens, results[new_tokens], flush=True)
