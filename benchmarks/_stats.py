"""Timing and the result record.

Every figure is measured as a *batch*: a function ``batch(n)`` that performs the operation ``n``
times.  :func:`measure` times every contender of one figure in the same repeat, rotating which one
goes first so that none is always the one that runs on a cold cache, and returns seconds per
operation for each repeat.  A ratio is computed per repeat (pyoffload over the baseline of the same
repeat), so the min–max of the ratio shows how stable the comparison is, not just each side.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

Batch = Callable[[int], Any]


def time_batch(batch: Batch, n: int) -> float:
    """Seconds per operation of one call of ``batch(n)``; the collector is off meanwhile so that
    a collection triggered by one side is not charged to it."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter_ns()
        batch(n)
        t1 = time.perf_counter_ns()
    finally:
        gc.enable()
    return (t1 - t0) * 1e-9 / n


def measure(contenders: Mapping[str, Batch], n: int, repeats: int, warmup: int | None = None) -> dict[str, list[float]]:
    """Per-repeat seconds/op for each contender, all measured in the same process and repeat."""
    names = list(contenders)
    w = max(1, n // 10) if warmup is None else warmup
    for name in names:
        if w:
            contenders[name](w)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(time_batch(contenders[name], n))
    return out


@dataclasses.dataclass
class Target:
    """``field`` compared with ``op`` (``<=`` or ``>=``) to ``limit``: ``ratio`` (pyoffload over
    the baseline), ``value`` (pyoffload alone) or ``diff`` (pyoffload minus the baseline), each
    the median over the repeats."""

    field: str
    op: str
    limit: float
    text: str

    def met(self, fig: Figure) -> bool | None:
        got = {"ratio": fig.ratio_median, "value": fig.value_median, "diff": fig.diff_median}[self.field]
        if got is None:
            return None
        return got <= self.limit if self.op == "<=" else got >= self.limit


@dataclasses.dataclass
class Figure:
    suite: str
    name: str  # what pyoffload does
    backend: str
    param: str  # e.g. a size or a count; "" if none
    unit: str  # "us", "GB/s", "ms", "MiB", "cycles/s"
    values: list[float]  # pyoffload, per repeat, in ``unit``
    baseline: str = ""  # what it is compared with
    base_values: list[float] | None = None
    target: Target | None = None
    note: str = ""
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def value_median(self) -> float:
        return statistics.median(self.values)

    @property
    def base_median(self) -> float | None:
        return statistics.median(self.base_values) if self.base_values else None

    @property
    def ratios(self) -> list[float]:
        if not self.base_values:
            return []
        return [v / b for v, b in zip(self.values, self.base_values, strict=False) if b]

    @property
    def ratio_median(self) -> float | None:
        r = self.ratios
        return statistics.median(r) if r else None

    @property
    def diffs(self) -> list[float]:
        return [v - b for v, b in zip(self.values, self.base_values, strict=False)] if self.base_values else []

    @property
    def diff_median(self) -> float | None:
        d = self.diffs
        return statistics.median(d) if d else None

    def as_dict(self) -> dict[str, Any]:
        r = self.ratios
        d = self.diffs
        met = self.target.met(self) if self.target else None
        return {
            "suite": self.suite,
            "name": self.name,
            "backend": self.backend,
            "param": self.param,
            "unit": self.unit,
            "median": self.value_median,
            "min": min(self.values),
            "max": max(self.values),
            "values": self.values,
            "baseline": self.baseline,
            "baseline_median": self.base_median,
            "baseline_values": self.base_values,
            "ratio_median": statistics.median(r) if r else None,
            "ratio_min": min(r) if r else None,
            "ratio_max": max(r) if r else None,
            "diff_median": statistics.median(d) if d else None,
            "diff_min": min(d) if d else None,
            "diff_max": max(d) if d else None,
            "target": self.target.text if self.target else None,
            "met": met,
            "note": self.note,
            **({"extra": self.extra} if self.extra else {}),
        }


def us(values: list[float]) -> list[float]:
    return [v * 1e6 for v in values]


def gbps(size: int, values: list[float]) -> list[float]:
    return [size / v / 1e9 for v in values]


def fmt_size(n: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def fmt_count(n: int) -> str:
    exp = len(str(n)) - 1
    return f"10^{exp}" if n == 10**exp else str(n)
