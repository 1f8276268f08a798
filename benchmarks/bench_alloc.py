"""2. Allocation + free across sizes, pool on and off; free / mem_info lookup with many live
allocations.

The pool-off contender sets the public ``device.memory_pool().max_request`` to 0 for the length
of its batch (what ``PYOFFLOAD_POOL_THRESHOLD=0`` does at start): every request then goes
straight to the backend, without dropping what the pool has cached for the pool-on contender.
"""

from __future__ import annotations

import random
from typing import Any

import pyoffload
from _env import RawHost, RawOpenCL, Target as Dev
from _stats import Figure, Target, fmt_count, fmt_size, measure, time_batch, us

SUITE = "alloc"
MiB = 1 << 20


def sizes(quick: bool) -> list[int]:
    if quick:
        return [64, 8 << 10, 1 * MiB, 64 * MiB]
    return [64, 1 << 10, 8 << 10, 64 << 10, 1 * MiB, 8 * MiB, 64 * MiB]


def run(devs: list[Dev], cfg: Any) -> list[Figure]:
    out: list[Figure] = []
    for d in devs:
        if d.raw is not None:
            out += _alloc_free(d, cfg)
    for d in devs:
        if d.raw is not None:
            out += _lookup(d, cfg)
    return out


def _raw_batch(d: Dev, size: int) -> tuple[Any, str]:
    if isinstance(d.raw, RawOpenCL):
        cl, ctx = d.raw.cl, d.raw.context
        svm_alloc, flags = cl.SVMAllocation, cl.svm_mem_flags.READ_WRITE

        def raw(n: int) -> None:
            for _ in range(n):
                svm_alloc(ctx, size, 0, flags).release()

        return raw, "pyopencl SVMAllocation + release"
    assert isinstance(d.raw, RawHost)
    malloc, free = d.raw.libc.malloc, d.raw.libc.free

    def raw_host(n: int) -> None:
        for _ in range(n):
            free(malloc(size))

    return raw_host, "ctypes malloc + free"


def _alloc_free(d: Dev, cfg: Any) -> list[Figure]:
    dev = d.device
    pool = dev.memory_pool()
    alloc, free = dev.alloc, pyoffload.free
    figs = []
    for size in sizes(cfg.quick):
        raw, raw_name = _raw_batch(d, size)

        def pool_on(n: int, size: int = size) -> None:
            for _ in range(n):
                free(alloc(size))

        def pool_off(n: int, size: int = size) -> None:
            saved, pool.max_request = pool.max_request, 0
            try:
                for _ in range(n):
                    free(alloc(size))
            finally:
                pool.max_request = saved

        n = cfg.n(2000 if size <= MiB else 300)
        t = measure({"on": pool_on, "off": pool_off, "raw": raw}, n, cfg.repeats)
        tgt_raw = Target("ratio", "<=", 2.0, "≤ 2× raw")
        bound = pool.max_request
        pooled = bound is None or size <= bound
        p = fmt_size(size)
        figs.append(
            Figure(
                SUITE,
                "alloc+free, pool on",
                d.backend,
                p,
                "us",
                us(t["on"]),
                raw_name,
                us(t["raw"]),
                tgt_raw,
                extra={"size": size},
            )
        )
        figs.append(
            Figure(
                SUITE,
                "alloc+free, pool off",
                d.backend,
                p,
                "us",
                us(t["off"]),
                raw_name,
                us(t["raw"]),
                tgt_raw,
                extra={"size": size},
            )
        )
        figs.append(
            Figure(
                SUITE,
                "alloc+free, pool on vs off",
                d.backend,
                p,
                "us",
                us(t["on"]),
                "same, pool off",
                us(t["off"]),
                Target(
                    "ratio",
                    "<=",
                    1.0 if pooled else 1.05,
                    "pool never slower (≤ 1.0)" if pooled else "above threshold: same path (≤ 1.05, noise)",
                ),
                extra={"size": size},
            )
        )
    return figs


def _lookup(d: Dev, cfg: Any) -> list[Figure]:
    """mem_info(interior pointer) and free(base pointer) with 10^3 .. 10^5 live allocations."""
    dev = d.device
    counts = [10**3, 10**5] if cfg.quick else [10**3, 10**4, 10**5]
    live: list[Any] = []
    rng = random.Random(1)
    figs = []
    first: dict[str, list[float]] = {}
    probe = 1000
    for count in counts:
        while len(live) < count:
            live.append(dev.alloc(64))
        sample = rng.sample(range(count), probe)
        inner = [live[i].ptr + 17 for i in sample]
        mem_info = pyoffload.mem_info

        def lookup(n: int) -> None:
            ptrs = inner
            k = len(ptrs)
            for i in range(n):
                mem_info(ptrs[i % k])

        victims = [live[i] for i in sample]

        def free_by_pointer(n: int) -> None:
            # Frees ``n`` allocations by base pointer (the registry lookup), then replaces them
            # untimed-by-design: the batch is timed whole, so replacements are done afterwards.
            free = pyoffload.free
            for a in victims[:n]:
                free(a.ptr)

        lk = []
        fr = []
        for _ in range(cfg.repeats):
            lk.append(time_batch(lookup, probe))
            fr.append(time_batch(free_by_pointer, probe))
            for j, i in enumerate(sample):  # replace the freed ones, untimed
                live[i] = dev.alloc(64)
                victims[j] = live[i]
        if not first:
            first = {"lookup": lk, "free": fr}
        c = fmt_count(count)
        # No CPU target: the figure is reported (the GPU table's target is ≤ 1 µs at 10^5).
        figs.append(
            Figure(
                SUITE,
                "mem_info(interior ptr) lookup",
                d.backend,
                c,
                "us",
                us(lk),
                f"same at {fmt_count(counts[0])} live",
                us(first["lookup"]),
                extra={"count": count},
            )
        )
        figs.append(
            Figure(
                SUITE,
                "free(base ptr)",
                d.backend,
                c,
                "us",
                us(fr),
                f"same at {fmt_count(counts[0])} live",
                us(first["free"]),
                extra={"count": count},
            )
        )
    for a in live:
        pyoffload.free(a)
    return figs
