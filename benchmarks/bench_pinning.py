"""4. Pinned-map lock / unlock / lookup with 10^3 .. 10^6 locked ranges (host device).

The ranges are non-overlapping 16-byte slices of one large numpy buffer; a spare region after
them supplies the ranges locked and unlocked while timing, so the map holds exactly ``count``
ranges plus the batch being measured.  The baseline of each figure is the same operation with
10^3 ranges: a logarithmic map keeps the ratio close to 1.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

import pyoffload
from _env import Target as Dev
from _stats import Figure, Target, fmt_count, time_batch, us

SUITE = "pinning"
SLICE = 16


def run(devs: list[Dev], cfg: Any) -> list[Figure]:
    host = [d for d in devs if d.backend == "host"]
    if not host:
        return []
    dev = host[0].device
    counts = [10**3, 10**4] if cfg.quick else [10**3, 10**4, 10**5, 10**6]
    probe = 1000
    top = counts[-1]
    big = np.zeros((top + probe) * SLICE, np.uint8)
    base = big.ctypes.data
    spare = [big[(top + i) * SLICE : (top + i + 1) * SLICE] for i in range(probe)]
    locked: list[Any] = []
    rng = random.Random(2)
    lock, unlock, is_pinned = dev.lock, dev.unlock, pyoffload.is_pinned
    figs = []
    first: dict[str, list[float]] = {}
    for count in counts:
        for i in range(len(locked), count):
            s = big[i * SLICE : (i + 1) * SLICE]
            lock(s)
            locked.append(s)
        addrs = [base + i * SLICE + 5 for i in rng.sample(range(count), probe)]

        def do_lock(n: int) -> None:
            for s in spare[:n]:
                lock(s)

        def do_unlock(n: int) -> None:
            for s in spare[:n]:
                unlock(s)

        def do_lookup(n: int) -> None:
            k = len(addrs)
            for i in range(n):
                if not is_pinned(addrs[i % k]):
                    raise AssertionError("a locked address was not found")

        res: dict[str, list[float]] = {"lock": [], "unlock": [], "lookup": []}
        for _ in range(cfg.repeats):
            res["lock"].append(time_batch(do_lock, probe))
            res["lookup"].append(time_batch(do_lookup, probe))
            res["unlock"].append(time_batch(do_unlock, probe))
        if not first:
            first = res
        c = fmt_count(count)
        ref = f"same at {fmt_count(counts[0])} ranges"
        tgt = Target("value", "<=", 2.0, "≤ 2 µs at 10^6") if count >= 10**6 else None
        figs.append(
            Figure(
                SUITE,
                "is_pinned(ptr) lookup",
                "host",
                c,
                "us",
                us(res["lookup"]),
                ref,
                us(first["lookup"]),
                tgt,
                extra={"count": count},
            )
        )
        figs.append(
            Figure(
                SUITE,
                "device.lock(slice)",
                "host",
                c,
                "us",
                us(res["lock"]),
                ref,
                us(first["lock"]),
                extra={"count": count},
            )
        )
        figs.append(
            Figure(
                SUITE,
                "device.unlock(slice)",
                "host",
                c,
                "us",
                us(res["unlock"]),
                ref,
                us(first["unlock"]),
                extra={"count": count},
            )
        )
    for s in locked:
        unlock(s)
    return figs
