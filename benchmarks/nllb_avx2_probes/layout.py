import time, jax, jax.numpy as jnp, numpy as np
def bench(V, D, rows, opts, layout):
    w = np.random.randn(V, D).astype(np.float32)
    if layout == "dv": w = np.ascontiguousarray(w.T)
    x0 = jnp.asarray(np.random.randn(rows, D).astype(np.float32))
    dims = (((1,), (1,)), ((), ())) if layout == "vd" else (((1,), (0,)), ((), ()))
    def f(w, x):
        def body(i, x):
            y = jax.lax.dot_general(x, w, dims)
            return x + jnp.max(y) * 1e-9
        return jax.lax.fori_loop(0, 64, body, x)
    c = jax.jit(f).lower(w, x0).compile(compiler_options=opts)
    wj = jnp.asarray(w); c(wj, x0).block_until_ready()
    ts = []
    for _ in range(5):
        a = time.perf_counter(); c(wj, x0).block_until_ready(); ts.append((time.perf_counter() - a) / 64 * 1e3)
    return np.median(ts)
NO = {"xla_cpu_experimental_ynn_fusion_type": ""}
for V, D in ((8000, 256), (8000, 128), (65001, 512)):
    for rows in (1, 4, 8, 32):
        r = [bench(V, D, rows, o, l) for o in ({}, NO) for l in ("vd", "dv")]
        print(f"{V}x{D} rows {rows}: YNNPACK vd {r[0]:.3f} dv {r[1]:.3f} ms; XLA's own vd {r[2]:.3f} dv {r[3]:.3f} ms", flush=True)
