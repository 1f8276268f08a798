"""3. memcpy bandwidth host→device, device→host, device→device, pinned and unpinned host memory.

Baselines: the vendor binding's copy (pyopencl ``enqueue_copy`` on SVM, which is
``clEnqueueSVMMemcpy``; on the host backend numpy's ``copyto``) between the *same* buffers
pyoffload copies, on a queue of its own, and numpy's ``copyto`` between two host arrays, the
machine's limit.  All copies are synchronous (``pyoffload.memcpy`` without a queue;
``enqueue_copy`` then wait).  Each ratio's two sides are timed as a pair of their own, alternating
which goes first.  At 4 KiB a copy is all overhead: that size is also reported in µs per copy,
with its target.
"""

from __future__ import annotations

import ctypes
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

    ours: dict[str, Any] = {
        "h2d": lambda: memcpy(a1, src),
        "d2h": lambda: memcpy(dst, a1),
        "d2d": lambda: memcpy(a2, a1),
        "h2d_pinned": lambda: memcpy(a1, pinned),
        "d2h_pinned": lambda: memcpy(pinned, a1),
    }
    if is_locked:
        ours["h2d_locked"] = lambda: memcpy(a1, locked)
        ours["d2h_locked"] = lambda: memcpy(locked, a1)
    numpy = lambda: np.copyto(np_dst, src)  # noqa: E731
    # The baseline copies the same bytes between the same buffers as pyoffload does (its
    # allocations, wrapped once for the binding), so that the ratio measures pyoffload's layer
    # and not where two sets of buffers happen to lie (at 16 MiB that alone moved a copy by ±20 %).
    raw: dict[str, Any]
    views: list[Any] = []
    if isinstance(d.raw, RawOpenCL):
        cl = d.raw.cl
        rq = cl.CommandQueue(a1.context.native, d.raw.device)  # its own queue, pyoffload's cl context
        s1 = cl.SVM((ctypes.c_char * size).from_address(a1.ptr))
        s2 = cl.SVM((ctypes.c_char * size).from_address(a2.ptr))
        copy = cl.enqueue_copy
        raw = {
            "h2d": lambda: copy(rq, s1, src).wait(),
            "d2h": lambda: copy(rq, dst, s1).wait(),
            "d2d": lambda: copy(rq, s2, s1).wait(),
        }
        raw_name = "pyopencl enqueue_copy (SVM memcpy), same buffers"
    else:
        assert isinstance(d.raw, RawHost)
        views = [a1.view(), a2.view()]
        raw = {
            "h2d": lambda: np.copyto(views[0], src),
            "d2h": lambda: np.copyto(dst, views[0]),
            "d2d": lambda: np.copyto(views[1], views[0]),
        }
        raw_name = "numpy copyto, same buffers (host memory is the device's)"
    n = cfg.n(max(1, min(2000, (64 * MiB) // size)))

    def pair(a: Any, b: Any) -> tuple[list[float], list[float]]:
        """Two contenders timed alone together, alternating which goes first: neither one always
        follows a third copy that left its own buffers (dirty) in the cache."""
        t = measure({"a": _ops(n, a), "b": _ops(n, b)}, n, cfg.repeats, warmup=1)
        return t["a"], t["b"]

    t: dict[str, Any] = {}
    for direction in ("h2d", "d2h", "d2d"):
        t[direction], t[f"raw_{direction}"] = pair(ours[direction], raw[direction])
        t[f"{direction}@numpy"], t[f"numpy@{direction}"] = pair(ours[direction], numpy)
    for direction in ("h2d", "d2h"):
        for kind in ("pinned", "locked"):
            if f"{direction}_{kind}" in ours:
                t[f"{direction}_{kind}"], t[f"{direction}@{kind}"] = pair(ours[f"{direction}_{kind}"], ours[direction])
    bw = {k: gbps(size, v) for k, v in t.items()}
    p = fmt_size(size)
    big = size >= MiB
    tgt = Target("ratio", ">=", 0.95, "≥ 0.95× raw (≥ 1 MiB)") if big else None
    figs = []
    if size == 4 * KiB and isinstance(d.raw, RawOpenCL):
        for direction in ("h2d", "d2h", "d2d"):
            figs.append(
                Figure(
                    SUITE,
                    f"synchronous 4 KiB copy, {direction}",
                    d.backend,
                    p,
                    "us",
                    us(t[direction]),
                    raw_name,
                    us(t[f"raw_{direction}"]),
                    Target("ratio", "<=", 1.2, "≤ 1.2× raw"),
                )
            )
    for direction in ("h2d", "d2h", "d2d"):
        figs.append(
            Figure(
                SUITE,
                f"memcpy {direction}",
                d.backend,
                p,
                "GB/s",
                bw[direction],
                raw_name,
                bw[f"raw_{direction}"],
                tgt,
                extra={"size": size, "direction": direction},
            )
        )
        figs.append(
            Figure(
                SUITE,
                f"memcpy {direction} vs numpy",
                d.backend,
                p,
                "GB/s",
                bw[f"{direction}@numpy"],
                "numpy copyto host→host",
                bw[f"numpy@{direction}"],
                extra={"size": size, "direction": direction},
            )
        )
    for direction in ("h2d", "d2h"):
        figs.append(
            Figure(
                SUITE,
                f"memcpy {direction}, pinned (HOST alloc) vs unpinned",
                d.backend,
                p,
                "GB/s",
                bw[f"{direction}_pinned"],
                "same, unpinned numpy array",
                bw[f"{direction}@pinned"],
                extra={"size": size, "direction": f"{direction}_pinned"},
            )
        )
        if is_locked:
            figs.append(
                Figure(
                    SUITE,
                    f"memcpy {direction}, locked numpy vs unpinned",
                    d.backend,
                    p,
                    "GB/s",
                    bw[f"{direction}_locked"],
                    "same, unpinned numpy array",
                    bw[f"{direction}@locked"],
                    extra={"size": size, "direction": f"{direction}_locked"},
                )
            )
        elif direction == "h2d" and size == sizes(cfg.quick)[0]:
            cfg.skip(SUITE, d.backend, f"locked numpy arrays: {lock_note}")
    if is_locked:
        dev.unlock(locked)
    del pinned_view
    raw.clear()  # the baseline's wrappers and views of a1 and a2 go before the memory does
    views.clear()
    for a in (a1, a2, pinned):
        pyoffload.free(a)
    return figs
