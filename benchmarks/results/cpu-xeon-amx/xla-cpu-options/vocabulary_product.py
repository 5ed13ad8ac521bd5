"""Ad hoc: the README model's vocabulary projection (8 rows x 128 by 128 x 4,000) inside a compiled loop, and outside.

    python benchmarks/results/cpu-xeon-amx/xla-cpu-options/vocabulary_product.py

XLA (JAX) with the engine's default (YNNPACK) and without YNNPACK, each product
inside a `fori_loop` of 200 (no dispatch a product); NumPy's and torch's on one
and two threads, a call each. Medians of 5 repeats, microseconds a product.
"""
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

REPEATS, PRODUCTS = 5, 200
rng = np.random.default_rng(0)
x = rng.random((8, 128), np.float32)
w = rng.random((128, 4000), np.float32) * 0.01


def in_a_loop(x, w):
    def body(_, carry):
        total, rows = carry
        return total + (rows @ w)[:, :128].sum(), rows + 1e-6

    return jax.lax.fori_loop(0, PRODUCTS, body, (jnp.float32(0), x))


def median_us(run):
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) / PRODUCTS * 1e6)
    return float(np.median(times))


for name, options in (("XLA, YNNPACK (the engine's)", {}), ("XLA without YNNPACK", {"xla_cpu_experimental_ynn_fusion_type": ""})):
    compiled = jax.jit(in_a_loop).lower(x, w).compile(compiler_options=options)
    compiled(x, w)[0].block_until_ready()
    print(f"{name}, in a loop: {median_us(lambda: compiled(x, w)[0].block_until_ready()):.1f} us")
print(f"NumPy: {median_us(lambda: [x @ w for _ in range(PRODUCTS)]):.1f} us")
tx, tw = torch.from_numpy(x), torch.from_numpy(w)
for threads in (1, 2):
    torch.set_num_threads(threads)
    print(f"torch, {threads} thread(s): {median_us(lambda: [tx @ tw for _ in range(PRODUCTS)]):.1f} us")
