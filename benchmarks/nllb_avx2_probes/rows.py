import time, sys, jax, jax.numpy as jnp, numpy as np
def bench(V, D, rows, dtype):
    w = (np.random.randn(V, D) * 10).astype(np.int8) if dtype == "int8" else np.random.randn(V, D).astype(np.float32)
    x0 = jnp.asarray(np.random.randn(rows, D).astype(np.float32))
    def f(w, x):
        def body(i, x):
            if dtype == "int8":
                q = jnp.round(x).astype(jnp.int8)
                y = jax.lax.dot_general(q, w, (((1,), (1,)), ((), ())), preferred_element_type=jnp.int32).astype(jnp.float32)
            else:
                y = jax.lax.dot_general(x, w, (((1,), (1,)), ((), ())))
            return x + y[:, :D] * 1e-9
        return jax.lax.fori_loop(0, 16, body, x)
    c = jax.jit(f).lower(w, x0).compile()
    temp = c.memory_analysis().temp_size_in_bytes / 2**20
    wj = jnp.asarray(w); c(wj, x0).block_until_ready()
    ts = []
    for _ in range(3):
        a = time.perf_counter(); c(wj, x0).block_until_ready(); ts.append((time.perf_counter() - a) / 16 * 1e3)
    print(f"{V}x{D} rows {rows} {dtype}: {np.median(ts):.2f} ms a step, temp {temp:.1f} MB", flush=True)
for V in (4096, 256206):
    for rows in (1, 2, 4, 8):
        for dt in ("float32", "int8"):
            bench(V, 1024, rows, dt)
