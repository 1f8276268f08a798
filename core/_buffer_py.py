"""The buffer base type for an install without a C compiler, on Python 3.12 and later (PEP 688):
see :mod:`pyoffload.bufferbase`, which imports it only where ``pyoffload._buffer`` was not built.
It follows the C type's rule: an export counts itself, then checks ``exportable``."""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any

_count_lock = threading.Lock()  # guards the _exports of every BufferBase below


class BufferBase:
    """Memory at an address, exported through the buffer protocol when host-accessible."""

    __slots__ = ("ptr", "nbytes", "exportable", "readonly", "_exports")

    ptr: int  # the address of the first byte
    nbytes: int  # bytes the buffer protocol exports
    exportable: bool  # whether the memory may be exported
    readonly: bool  # whether exports are read-only
    _exports: int  # live exports (guarded by _count_lock)

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
            raise BufferError("this memory is not host-accessible (DEVICE memory) or was freed: use pyoffload.memcpy")
        try:
            view = memoryview((ctypes.c_char * self.nbytes).from_address(self.ptr)).cast("B")
            return view.toreadonly() if self.readonly else view
        except BaseException:
            with _count_lock:
                self._exports -= 1
            raise

    def __release_buffer__(self, view: memoryview, /, _lock: Any = _count_lock) -> None:
        # (the lock bound at definition: a view released at interpreter exit, once this module's
        # globals are gone, still finds it)
        with _lock:
            self._exports -= 1


if sys.version_info < (3, 12):
    del BufferBase.__buffer__  # never called before PEP 688: say so by its absence
