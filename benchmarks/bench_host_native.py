"""The host backend's launch cost against PoCL's pthread device, and its thread scaling.

Run it alone (it is not one of run.py's suites: it restarts pyoffload to change the thread count)::

    POCL_DEVICES=pthread python benchmarks/bench_host_native.py [--repeats 15]

1. Launch cost: the same tiny kernel (each work-item adds 1 to one float) as a plain C kernel with
   a trailing ``pyoffload_launch`` pointer on the host device, as a ``PYOFFLOAD_KERNEL`` kernel
   on the host device, and as an OpenCL C kernel on PoCL through pyopencl's ``knl(q, ...)``, with
   1 work-group and with N work-groups (the same global size per figure).  Two figures per shape:
   *batched* (100 launches, then one wait: the enqueue cost plus a share of one wait, as a
   framework issues work) and *round trip* (launch, then wait for it: what one synchronous
   launch costs).  Repeats rotate which contender goes first; medians and min-max over repeats.
2. Scaling: a compute-bound kernel (256 groups x 64 items, each item a dependent chain of
   multiply-adds) with ``PYOFFLOAD_HOST_THREADS=1`` and ``=2``, alternating, each a fresh runtime.

Prints a Markdown table and the machine's load (``uptime``) before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pyoffload

HOST_SRC = r"""
#include <stdint.h>
#include <pyoffload_host.h>

void add1(float *x, const pyoffload_launch *ctx) {
    uint64_t base = ctx->group_id[0] * ctx->local_size[0];
    for (uint64_t l = 0; l < ctx->local_size[0]; l++) x[base + l] += 1.0f;
}

PYOFFLOAD_KERNEL(add1_macro)(PYOFFLOAD_GROUPS, float *x) {
    PYOFFLOAD_FOR_EACH_GROUP {
        PYOFFLOAD_FOR_EACH_ITEM { x[pyoffload_global_id(0)] += 1.0f; }
    }
}

/* compute-bound: each item runs a dependent chain of `iters` multiply-adds */
void chain(float *x, int32_t iters, const pyoffload_launch *ctx) {
    uint64_t base = ctx->group_id[0] * ctx->local_size[0];
    for (uint64_t l = 0; l < ctx->local_size[0]; l++) {
        float v = x[base + l];
        for (int32_t i = 0; i < iters; i++) v = v * 0.999f + 0.5f;
        x[base + l] = v;
    }
}
"""

CL_SRC = """
kernel void add1(global float *x) { x[get_global_id(0)] += 1.0f; }
"""

BATCH = 100


def _stats(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


def _time(fn: Callable[[int], Any], n: int) -> float:
    t0 = time.perf_counter_ns()
    fn(n)
    return (time.perf_counter_ns() - t0) / n / 1e3  # µs per launch


def launch_cost(repeats: int, groups: int) -> list[str]:
    dev = pyoffload.host_device()
    prog = dev.build_program(HOST_SRC)
    q = dev.create_queue()
    size = groups * 64
    x = dev.alloc(4 * size)
    pyoffload.memcpy(x, np.zeros(size, np.float32))
    ctx_k, macro_k = prog.kernel("add1"), prog.kernel("add1_macro")

    import pyopencl as cl

    platform = next(p for p in cl.get_platforms() if "Portable" in p.name or "pocl" in p.name.lower())
    cdev = platform.get_devices()[0]
    cctx = cl.Context([cdev])
    cq = cl.CommandQueue(cctx)
    knl = cl.Program(cctx, CL_SRC).build().add1
    cbuf = cl.Buffer(cctx, cl.mem_flags.READ_WRITE, 4 * size)
    cl.enqueue_fill_buffer(cq, cbuf, np.float32(0), 0, 4 * size)
    cq.finish()

    rows = []
    for local in (size, 64):  # 1 group of `size` items, then `groups` groups of 64
        n_groups = size // local

        def host(k: Any, wait_each: bool) -> Callable[[int], None]:
            launch = q.launch

            def run(n: int) -> None:
                for _ in range(n):
                    ev = launch(k, n_groups, local, [x])
                    if wait_each:
                        ev.wait()
                q.wait()

            return run

        def pocl(wait_each: bool) -> Callable[[int], None]:
            def run(n: int) -> None:
                for _ in range(n):
                    ev = knl(cq, (size,), (local,), cbuf)
                    if wait_each:
                        ev.wait()
                cq.finish()

            return run

        for wait_each, label in ((False, "batched"), (True, "round trip")):
            contenders = {
                "host, plain C + pyoffload_launch": host(ctx_k, wait_each),
                "host, PYOFFLOAD_KERNEL": host(macro_k, wait_each),
                "PoCL pthread, knl(q, ...)": pocl(wait_each),
            }
            for fn in contenders.values():
                fn(10)  # warm-up
            times: dict[str, list[float]] = {name: [] for name in contenders}
            names = list(contenders)
            for r in range(repeats):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    times[name].append(_time(contenders[name], BATCH))
            for name in names:
                rows.append(f"| {n_groups} × {local} | {label} | {name} | {_stats(times[name])} |")
    x.free()
    q.destroy()
    prog.unload()
    return rows


def scaling(repeats: int) -> list[str]:
    times: dict[int, list[float]] = {1: [], 2: []}
    groups, local, iters = 256, 64, 20000
    for r in range(repeats):
        for threads in (1, 2) if r % 2 == 0 else (2, 1):
            pyoffload.shutdown()
            os.environ["PYOFFLOAD_HOST_THREADS"] = str(threads)
            dev = pyoffload.host_device()
            prog = dev.build_program(HOST_SRC)
            q = dev.create_queue()
            x = dev.alloc(4 * groups * local)
            pyoffload.memcpy(x, np.zeros(groups * local, np.float32))
            k = prog.kernel("chain")
            q.launch(k, groups, local, [x, np.int32(iters // 10)]).wait()  # warm-up
            t0 = time.perf_counter()
            q.launch(k, groups, local, [x, np.int32(iters)]).wait()
            times[threads].append((time.perf_counter() - t0) * 1e3)
            x.free()
            q.destroy()
            prog.unload()
    os.environ.pop("PYOFFLOAD_HOST_THREADS", None)
    pyoffload.shutdown()
    speedups = [a / b for a, b in zip(times[1], times[2], strict=True)]
    return [
        f"| 1 | {_stats(times[1])} ms | |",
        f"| 2 | {_stats(times[2])} ms | {statistics.median(speedups):.2f}× ({min(speedups):.2f}–{max(speedups):.2f}) |",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--groups", type=int, default=16, help="N, the work-groups of the multi-group launches")
    args = ap.parse_args()
    load_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    rows = launch_cost(args.repeats, args.groups)
    scale = scaling(max(3, args.repeats // 3))
    load_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"load before: {load_before}\nload after:  {load_after}\n")
    print("| grid × block | how | contender | µs per launch, median (min–max) |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("| threads | 256 × 64 items, 20000 dependent multiply-adds each | speed-up over 1 thread |")
    print("|---|---|---|")
    print("\n".join(scale))


if __name__ == "__main__":
    main()
