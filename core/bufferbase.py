"""The base type of allocations and host views: memory at an address, exported through the
buffer protocol when host-accessible, with a count of live exports that ``free`` reads.

The type is C (core/_buffer.c) wherever it was compiled: Python 3.11 has no Python-level buffer
protocol.  On Python 3.12 and later an install without a C compiler gets the class below, which
exports through ``__buffer__`` (PEP 688) under the same rule: an export counts itself, then checks
``exportable``; a free clears ``exportable``, then reads the count (``pyoffload.memory._claim``).
On 3.11 without a compiler, ``memoryview(allocation)`` is unavailable; ``Allocation.view``, the
array interface and DLPack still work.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any

__all__ = ["BufferBase", "COMPILED"]

try:
    from ._buffer import BufferBase

    COMPILED = True
except ImportError:
    COMPILED = False

    _count_lock = threading.Lock()  # guards every PyBufferBase's _exports

    class BufferBase:  # type: ignore[no-redef]
        """Memory at an address, exported through the buffer protocol when host-accessible."""

        __slots__ = ("ptr", "nbytes", "exportable", "readonly", "_exports")

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            self = object.__new__(cls)
            self.ptr, self.nbytes, self.exportable, self.readonly, self._exports = 0, 0, False, False, 0
            return self

        @property
        def export_count(self) -> int:
            """Live buffer exports."""
            return self._exports

        def __buffer__(self, flags: int, /) -> memoryview:
            with _count_lock:
                self._exports += 1
            if not self.exportable or (self.ptr == 0 and self.nbytes):
                with _count_lock:
                    self._exports -= 1
                raise BufferError("this memory is not host-accessible (DEVICE memory) or was freed: "
                                  "use pyoffload.memcpy")
            try:
                view = memoryview((ctypes.c_char * self.nbytes).from_address(self.ptr)).cast("B")
                return view.toreadonly() if self.readonly else view
            except BaseException:
                with _count_lock:
                    self._exports -= 1
                raise

        def __release_buffer__(self, view: memoryview, /) -> None:
            with _count_lock:
                self._exports -= 1

    if sys.version_info < (3, 12):
        del BufferBase.__buffer__  # never called before PEP 688: say so by its absence
