"""Framework-generated C on the host device, the way tinygrad's CPU back end generates it: one plain
C function per kernel, parallel over a group index (tinygrad's ``core_id``), with no wrapper and
no pyoffload macros: the trailing ``const pyoffload_launch *ctx`` parameter makes it
data-parallel, and the host backend runs its work-groups on its native thread pool.

    python examples/generated_c.py [n]     # an n x n matmul and a fused elementwise kernel

The generator is deliberately small: it shows the shape of generated code, not an optimiser.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import pyoffload


def matmul_source(name: str, n: int, rows_per_group: int) -> str:
    """C for ``c = a @ b`` (n x n float32): each work-group (``core_id``) computes a band of rows."""
    return f"""
void {name}(float *restrict c, const float *restrict a, const float *restrict b, const pyoffload_launch *ctx) {{
    const int core_id = (int)ctx->group_linear_id;
    for (int i = core_id * {rows_per_group}; i < (core_id + 1) * {rows_per_group} && i < {n}; i++) {{
        float acc[{n}];
        for (int j = 0; j < {n}; j++) acc[j] = 0.0f;
        for (int k = 0; k < {n}; k++) {{
            const float aik = a[i * {n} + k];
            for (int j = 0; j < {n}; j++) acc[j] += aik * b[k * {n} + j];
        }}
        for (int j = 0; j < {n}; j++) c[i * {n} + j] = acc[j];
    }}
}}
"""


def fused_source(name: str, size: int, per_group: int) -> str:
    """C for ``out = relu(x * w + bias)``, elementwise, ``per_group`` elements per work-group."""
    return f"""
void {name}(float *restrict out, const float *restrict x, const float *restrict w, float bias,
            const pyoffload_launch *ctx) {{
    const long start = (long)ctx->group_linear_id * {per_group};
    for (long i = start; i < start + {per_group} && i < {size}; i++) {{
        float v = x[i] * w[i] + bias;
        out[i] = v > 0.0f ? v : 0.0f;
    }}
}}
"""


def run(n: int = 256) -> dict[str, float]:
    """Build both kernels, run them on the host device, check them against numpy; returns the
    milliseconds each launch took (enqueue to completion)."""
    dev = pyoffload.host_device()
    rows = max(1, n // 16)  # 16 bands: several per thread
    per_group = 4096
    size = n * n
    source = "#include <pyoffload_host.h>\n" + matmul_source("matmul", n, rows) + fused_source("fused", size, per_group)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    w = rng.standard_normal(size).astype(np.float32)
    times: dict[str, float] = {}
    with dev.build_program(source) as prog, dev.create_queue() as q:
        da, db, dc, dw, dout = (dev.alloc(4 * size) for _ in range(5))
        pyoffload.memcpy(da, a)
        pyoffload.memcpy(db, b)
        pyoffload.memcpy(dw, w)
        matmul, fused = prog.kernel("matmul"), prog.kernel("fused")
        assert matmul.signature == ("ptr", "ptr", "ptr")  # the launch context is not an argument

        t0 = time.perf_counter()
        q.launch(matmul, -(-n // rows), 1, [dc, da, db]).wait()
        times["matmul"] = (time.perf_counter() - t0) * 1e3
        c = np.empty((n, n), np.float32)
        pyoffload.memcpy(c, dc)
        np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)

        t0 = time.perf_counter()
        q.launch(fused, -(-size // per_group), 1, [dout, dc, dw, np.float32(0.5)]).wait()
        times["fused"] = (time.perf_counter() - t0) * 1e3
        out = np.empty(size, np.float32)
        pyoffload.memcpy(out, dout)
        np.testing.assert_allclose(out, np.maximum(c.ravel() * w + np.float32(0.5), 0), rtol=1e-5, atol=1e-5)
        for alloc in (da, db, dc, dw, dout):
            alloc.free()
    return times


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    times = run(n)
    print(f"{n}x{n} matmul: {times['matmul']:.2f} ms; fused relu(x * w + b): {times['fused']:.2f} ms (checked)")
