"""Host buffers: checking a Python object that exposes the buffer protocol and finding its bytes.

Every place that takes "a host buffer" (copies, fills, ``lock``) goes through :func:`host_view`,
so they all accept and refuse the same things: C-contiguous buffers of plain data; never objects
(``numpy`` object arrays hold pointers to Python objects, which a device must not overwrite);
never a read-only buffer as a destination.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from .errors import InvalidArgumentError, got


class HostView:
    """The bytes of a host buffer: a one-byte-format view, its address and its length.

    Holding the view holds the buffer's export: a ``bytearray`` cannot be resized and an
    ``mmap`` cannot be closed while it is alive.
    """

    __slots__ = ("view", "address", "nbytes", "readonly")

    def __init__(self, view: memoryview, address: int, readonly: bool) -> None:
        self.view = view
        self.address = address
        self.nbytes = view.nbytes
        self.readonly = readonly


_new = object.__new__  # HostView without an __init__ frame: a copy builds one per host buffer


def _address(mv: memoryview) -> int:
    if not mv.nbytes:
        return 0
    if not mv.readonly:
        return ctypes.addressof(ctypes.c_char.from_buffer(mv))
    # The one portable way to get a read-only buffer's address.
    return int(np.frombuffer(mv, dtype=np.uint8).ctypes.data)


def host_view(obj: Any, role: str, writable: bool) -> HostView:
    """Check ``obj`` as a host buffer for ``role`` (for messages) and return its bytes.

    Raises ``TypeError`` for an object without the buffer protocol, ``InvalidArgumentError`` for a
    non-contiguous, object-holding, or (when ``writable``) read-only buffer.
    """
    if type(obj) is np.ndarray:
        if obj.dtype.hasobject:
            raise InvalidArgumentError(f"{role}: a numpy array of Python objects ({obj.dtype}) is not plain data")
        if not obj.flags.c_contiguous:
            raise InvalidArgumentError(f"{role}: the numpy array must be C-contiguous")
        if writable and not obj.flags.writeable:
            raise InvalidArgumentError(f"{role}: the numpy array is read-only")
        flat = obj.reshape(-1).view(np.uint8) if obj.ndim != 1 or obj.itemsize != 1 else obj
        mv = memoryview(flat)  # type: ignore[arg-type]  # ndarray exports the buffer protocol
        address, readonly = obj.__array_interface__["data"]  # C-level, unlike ndarray.ctypes
        hv = _new(HostView)
        hv.view, hv.address, hv.nbytes, hv.readonly = mv, address if obj.size else 0, mv.nbytes, readonly
        return hv
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"{role}: expected an Allocation, a pointer (int) or a host buffer, got {got(obj)}") from None
    if "O" in mv.format:
        raise InvalidArgumentError(f"{role}: a buffer of Python objects (format {mv.format!r}) is not plain data")
    if not mv.c_contiguous:
        raise InvalidArgumentError(f"{role}: the buffer must be C-contiguous")
    if writable and mv.readonly:
        raise InvalidArgumentError(f"{role}: the buffer ({type(obj).__name__}) is read-only")
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B") if mv.nbytes else memoryview(b"")
    hv = _new(HostView)
    hv.view, hv.address, hv.nbytes, hv.readonly = mv, _address(mv), mv.nbytes, mv.readonly
    return hv


def view_at(address: int, size: int) -> memoryview:
    """A writable one-byte view of ``size`` bytes at host ``address`` (memory the runtime owns)."""
    return memoryview((ctypes.c_char * size).from_address(address)).cast("B")
