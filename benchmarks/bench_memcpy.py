"""3. memcpy bandwidth host→device, device→host, device→device, pinned and unpinned host memory.

Baselines: the vendor binding's copy (pyopencl ``enqueue_copy`` on SVM, which is
``clEnqueueSVMMemcpy``) and numpy's ``copyto`` between two host arrays, the machine's limit.
All copies are synchronous (``pyoffload.memcpy`` without a queue; ``enqueue_copy`` then wait).
At 4 KiB a copy is all overhead: that size is also reported in µs per copy, with its target.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import pyoffload
from _env import RawHost, RawOpenCL, Target as Dev
from _stats import Figure, Target, fmt_size, gbps, measure, us

SUITE = "memcpy"
KiB, MiB = 1 << 10, 1 << 20


def sizes(quick: bool) -> list[int]:
    return [4 * KiB, 1 * MiB, 16 * MiB] if quick else [4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB]


def run(devs: list[Dev], cfg: Any) -> list[Figure]:
    out: list[Figure] = []
    for d in devs:
        if d.raw is not None:
            for size in sizes(cfg.quick):
                out += _one_size(d, size, cfg)
    return out


def _ops(n: int, op: Any) -> Any:
    def batch(k: int) -> None:
        for _ in range(k):
            op()
    return batch


def _one_size(d: Dev, size: int, cfg: Any) -> list[Figure]:
    dev = d.device
    memcpy = pyoffload.memcpy
    src = np.ones(size, np.uint8)
    dst = np.zeros(size, np.uint8)
    np_dst = np.zeros(size, np.uint8)
    a1 = dev.alloc(size)
    a2 = dev.alloc(size)
    pinned = dev.alloc(size, pyoffload.AllocKind.HOST)
    pinned_view = pinned.view()
    pinned_view[:] = 1
    locked = np.ones(size, np.uint8)
    lock_note = ""
    try:
        dev.lock(locked)
        is_locked = True
    except pyoffload.OffloadError as exc:
        is_locked = False
        lock_note = f"device.lock unsupported here: {exc}"

    c: dict[str, Any] = {
        "h2d": lambda: memcpy(a1, src),
        "d2h": lambda: memcpy(dst, a1),
        "d2d": lambda: memcpy(a2, a1),
        "h2d_pinned": lambda: memcpy(a1, pinned),
        "d2h_pinned": lambda: memcpy(pinned, a1),
        "numpy": lambda: np.copyto(np_dst, src),
    }
    if is_locked:
        c["h2d_locked"] = lambda: memcpy(a1, locked)
        c["d2h_locked"] = lambda: memcpy(locked, a1)
    raw_objs: list[Any] = []
    if isinstance(d.raw, RawOpenCL):
        cl, rq, ctx = d.raw.cl, d.raw.queue, d.raw.context
        r1 = cl.SVMAllocation(ctx, size, 0, cl.svm_mem_flags.READ_WRITE)
        r2 = cl.SVMAllocation(ctx, size, 0, cl.svm_mem_flags.READ_WRITE)
        raw_objs = [r1, r2]
        copy = cl.enqueue_copy
        c["raw_h2d"] = lambda: copy(rq, r1, src).wait()
        c["raw_d2h"] = lambda: copy(rq, dst, r1).wait()
        c["raw_d2d"] = lambda: copy(rq, r2, r1).wait()
        raw_name = "pyopencl enqueue_copy (SVM memcpy)"
    else:
        assert isinstance(d.raw, RawHost)
        h1 = np.ones(size, np.uint8)
        h2 = np.zeros(size, np.uint8)
        c["raw_h2d"] = lambda: np.copyto(h1, src)
        c["raw_d2h"] = lambda: np.copyto(dst, h1)
        c["raw_d2d"] = lambda: np.copyto(h2, h1)
        raw_name = "numpy copyto (host memory is the device's)"
    n = cfg.n(max(1, min(2000, (64 * MiB) // size)))
    t = measure({k: _ops(n, v) for k, v in c.items()}, n, cfg.repeats, warmup=1)
    bw = {k: gbps(size, v) for k, v in t.items()}
    p = fmt_size(size)
    big = size >= MiB
    tgt = Target("ratio", ">=", 0.95, "≥ 0.95× raw (≥ 1 MiB)") if big else None
    figs = []
    if size == 4 * KiB and isinstance(d.raw, RawOpenCL):
        for direction in ("h2d", "d2h", "d2d"):
            figs.append(Figure(SUITE, f"synchronous 4 KiB copy, {direction}", d.backend, p, "us", us(t[direction]),
                               raw_name, us(t[f"raw_{direction}"]), Target("ratio", "<=", 1.2, "≤ 1.2× raw")))
    for direction in ("h2d", "d2h", "d2d"):
        figs.append(Figure(SUITE, f"memcpy {direction}", d.backend, p, "GB/s", bw[direction], raw_name,
                           bw[f"raw_{direction}"], tgt, extra={"size": size, "direction": direction}))
        figs.append(Figure(SUITE, f"memcpy {direction} vs numpy", d.backend, p, "GB/s", bw[direction],
                           "numpy copyto host→host", bw["numpy"], extra={"size": size, "direction": direction}))
    for direction in ("h2d", "d2h"):
        figs.append(Figure(SUITE, f"memcpy {direction}, pinned (HOST alloc) vs unpinned", d.backend, p, "GB/s",
                           bw[f"{direction}_pinned"], "same, unpinned numpy array", bw[direction],
                           extra={"size": size, "direction": f"{direction}_pinned"}))
        if is_locked:
            figs.append(Figure(SUITE, f"memcpy {direction}, locked numpy vs unpinned", d.backend, p, "GB/s",
                               bw[f"{direction}_locked"], "same, unpinned numpy array", bw[direction],
                               extra={"size": size, "direction": f"{direction}_locked"}))
        elif direction == "h2d" and size == sizes(cfg.quick)[0]:
            cfg.skip(SUITE, d.backend, f"locked numpy arrays: {lock_note}")
    if is_locked:
        dev.unlock(locked)
    del pinned_view
    for a in (a1, a2, pinned):
        pyoffload.free(a)
    for r in raw_objs:
        r.release()
    return figs
