import time, jax, jax.numpy as jnp, numpy as np
def bench(V, D, rows, opts):
    w = np.random.randn(V, D).astype(np.float32)
    x0 = jnp.asarray(np.random.randn(rows, D).astype(np.float32))
    def f(w, x):
        def body(i, x):
            y = jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())))
            return x + jnp.max(y) * 1e-9
        return jax.lax.fori_loop(0, 16, body, x)
    c = jax.jit(f).lower(w, x0).compile(compiler_options=opts)
    wj = jnp.asarray(w); c(wj, x0).block_until_ready()
    ts = []
    for _ in range(5):
        a = time.perf_counter(); c(wj, x0).block_until_ready(); ts.append((time.perf_counter() - a) / 16 * 1e3)
    return np.median(ts)
for V in (4096, 256206):
    for rows in (1, 2, 4, 8, 16):
        a = bench(V, 1024, rows, {}); b = bench(V, 1024, rows, {"xla_cpu_experimental_ynn_fusion_type": ""})
        print(f"{V}x1024 float32 rows {rows}: YNNPACK {a:.2f} ms, XLA's own {b:.2f} ms", flush=True)
