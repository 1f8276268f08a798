"""``PYOFFLOAD_TRACK_ALLOCATIONS=1``: per-device allocation statistics and a leak report.

When on, every allocation records where it was made; at shutdown the tracker prints, for each
device, the number of allocations, bytes, peak bytes and min/max size, then every allocation still
alive with its origin, and warns with :class:`~pyoffload.LeakWarning`.  Double frees and frees of
the wrong kind name the allocation's origin (and, for a double free, where it was freed first)
while tracking is on, as far as the bounded history of recent frees reaches.

The tracker sees allocations through a few attributes (``ptr``, ``size``, ``device``, ``context``,
``origin``); it imports none of the layers above it.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import traceback
import warnings
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from .errors import LeakWarning

FREED_HISTORY = 4096


def origin() -> str:
    """Where the user's call came from: the innermost frame outside pyoffload (however many of
    pyoffload's own frames are on the stack: none where its modules are compiled)."""
    for frame in reversed(traceback.extract_stack()[:-1]):
        if "/pyoffload/" not in frame.filename and "/core/" not in frame.filename:
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return "<unknown>"


@dataclasses.dataclass
class DeviceStats:
    count: int = 0
    live: int = 0
    live_bytes: int = 0
    peak_bytes: int = 0
    total_bytes: int = 0
    min_size: int = 0
    max_size: int = 0

    def on_alloc(self, size: int) -> None:
        self.count += 1
        self.live += 1
        self.total_bytes += size
        self.live_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        self.min_size = size if self.count == 1 else min(self.min_size, size)
        self.max_size = max(self.max_size, size)

    def on_free(self, size: int) -> None:
        self.live -= 1
        self.live_bytes -= size


class Tracker:
    def __init__(self, on: bool) -> None:
        self.on = on
        self.stats: dict[str, DeviceStats] = {}
        self.freed: OrderedDict[int, tuple[str, str]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(alloc: Any) -> str:
        return alloc.device.id if alloc.device is not None else f"{alloc.context.backend}-host-memory"

    def freed_alloc(self, alloc: Any) -> None:
        """Called only while tracking is on (the free path checks first)."""
        with self._lock:
            self.stats.setdefault(self._key(alloc), DeviceStats()).on_free(alloc.size)
            self.freed[alloc.ptr] = (alloc.origin or "", origin())
            if len(self.freed) > FREED_HISTORY:
                self.freed.popitem(last=False)

    def allocated(self, alloc: Any) -> None:
        """Called only while tracking is on (the allocation path checks first)."""
        with self._lock:
            self.stats.setdefault(self._key(alloc), DeviceStats()).on_alloc(alloc.size)
            self.freed.pop(alloc.ptr, None)

    def history(self, ptr: int) -> str:
        hit = self.freed.get(ptr)
        if hit is None:
            return "" if self.on else " (PYOFFLOAD_TRACK_ALLOCATIONS=1 records where memory was allocated and freed)"
        made, freed = hit
        return f" (allocated at {made}, freed at {freed})"

    def report(self, live: Iterable[Any]) -> None:
        """Print the statistics and the allocations still alive; warn LeakWarning if any are."""
        if not self.on:
            return
        out = sys.stderr
        print("pyoffload allocation tracker:", file=out)
        for key, s in sorted(self.stats.items()):
            print(
                f"  {key}: {s.count} allocations, {s.total_bytes} bytes, peak {s.peak_bytes} bytes, "
                f"min {s.min_size} max {s.max_size}, {s.live} live ({s.live_bytes} bytes)",
                file=out,
            )
        leaked = list(live)
        if leaked:
            print(f"  leaked: {len(leaked)} allocations", file=out)
            for alloc in leaked:
                print(f"    {alloc!r} allocated at {alloc.origin}", file=out)
            warnings.warn(
                f"pyoffload: {len(leaked)} allocation(s) still alive at shutdown (listed above)",
                LeakWarning,
                stacklevel=2,
            )
