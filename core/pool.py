"""The small-allocation pool in front of DEVICE allocations (after LLVM's MemoryManagerTy).

Requests up to the threshold are rounded up to a power-of-two bucket; freed blocks go back to
their bucket's free list instead of the driver.  ``PYOFFLOAD_POOL_THRESHOLD`` sets the threshold
in bytes (default 8 KiB, as LLVM's ``LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD``); 0 disables the pool.
On out-of-memory the generic layer empties every pool of the device and retries once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from .errors import Errc, OffloadError

DEFAULT_THRESHOLD = 8 * 1024
MIN_BUCKET = 64


def threshold_from_env() -> int:
    raw = os.environ.get("PYOFFLOAD_POOL_THRESHOLD", "").strip()
    if not raw:
        return DEFAULT_THRESHOLD
    try:
        value = int(raw, 0)
    except ValueError:
        raise OffloadError(f"PYOFFLOAD_POOL_THRESHOLD={raw!r} is not an integer", Errc.INVALID_VALUE) from None
    if value < 0:
        raise OffloadError(f"PYOFFLOAD_POOL_THRESHOLD={raw!r} must be >= 0", Errc.INVALID_VALUE)
    return value


def bucket_size(size: int) -> int:
    return max(MIN_BUCKET, 1 << (size - 1).bit_length())


class Pool:
    """Cached DEVICE blocks of one (context, device), bucketed by power-of-two size."""

    def __init__(self, threshold: int, alloc: Callable[[int], int], free: Callable[[int], None]) -> None:
        self.threshold = threshold
        self._alloc = alloc
        self._free = free
        self._lock = threading.Lock()
        self._buckets: dict[int, list[int]] = {}
        self.cached_bytes = 0

    def take(self, size: int) -> tuple[int, int]:
        """Return ``(ptr, bucket)`` for a request of ``size`` <= threshold bytes."""
        bucket = bucket_size(size)
        with self._lock:
            free = self._buckets.get(bucket)
            if free:
                self.cached_bytes -= bucket
                return free.pop(), bucket
        return self._alloc(bucket), bucket

    def give(self, ptr: int, bucket: int) -> None:
        with self._lock:
            self._buckets.setdefault(bucket, []).append(ptr)
            self.cached_bytes += bucket

    def release_all(self) -> int:
        """Return every cached block to the driver; the number released."""
        with self._lock:
            blocks = [p for ptrs in self._buckets.values() for p in ptrs]
            self._buckets.clear()
            self.cached_bytes = 0
        for ptr in blocks:
            self._free(ptr)
        return len(blocks)
