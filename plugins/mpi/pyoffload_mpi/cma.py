"""Copies between the memory of two ranks on one machine, by the rank that carries out the copy
alone (Linux cross-memory attach: ``process_vm_readv`` / ``process_vm_writev``).

Open MPI's shared-memory transport moves a large message the same way (the receiver reads the
sender's memory), but through a rendezvous in which both ranks take part: the sender must take
the request that tells it to send, post its send and later see it complete.  Here the rank that
orders the copy reads or writes the other rank's memory itself: a copy to a server is read from
rank 0's buffer by that server, a copy from a server is written into rank 0's buffer by it, and
a copy between two servers is made by the one whose queue orders it, while the other one does
nothing at all.  With three ranks on two cores, a rank that need not be scheduled is what makes
the copy cost what MPI's own does.

A rank may read another's memory only if the kernel would let it ptrace that process: the same
user, and Yama's ``ptrace_scope`` 0, or 1 with the other process allowing it (Open MPI's
shared-memory transport makes each rank allow it when it uses this mechanism itself).  Whether it
can is tried once per pair of ranks, at start-up, on a small buffer with known contents
(:class:`Probe`, :func:`reachable`).  Where it cannot (another machine, another user, a hardened
kernel, ``PYOFFLOAD_MPI_CMA=0``), copies use MPI messages.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

from pyoffload import settings

CMA_VARIABLE = "PYOFFLOAD_MPI_CMA"


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _functions() -> tuple[Any, Any] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        read, write = libc.process_vm_readv, libc.process_vm_writev
    except (OSError, AttributeError):
        return None
    for fn in (read, write):
        fn.restype = ctypes.c_ssize_t
        fn.argtypes = [
            ctypes.c_int,
            ctypes.POINTER(_IoVec),
            ctypes.c_ulong,
            ctypes.POINTER(_IoVec),
            ctypes.c_ulong,
            ctypes.c_ulong,
        ]
    return read, write


_FUNCTIONS = _functions()


def enabled() -> bool:
    """Whether this process may use cross-memory copies (the system has them, and
    ``PYOFFLOAD_MPI_CMA`` is not 0)."""
    return _FUNCTIONS is not None and bool(settings.integer(CMA_VARIABLE, 1))


def move(write: bool, pid: int, remote: int, local: int, size: int) -> None:
    """Copy ``size`` bytes between ``local`` in this process and ``remote`` in process ``pid``:
    into it (``write``) or out of it."""
    assert _FUNCTIONS is not None
    fn = _FUNCTIONS[1 if write else 0]
    done = 0
    while done < size:
        # (ctypes passes a structure by reference where the argument is a pointer to it, and the
        # GIL is released during the call)
        moved = fn(pid, _IoVec(local + done, size - done), 1, _IoVec(remote + done, size - done), 1, 0)
        if moved <= 0:
            errno = ctypes.get_errno()
            what = "write into" if write else "read from"
            raise OSError(
                errno,
                f"cannot {what} the memory of process {pid} at 0x{remote + done:x} "
                f"({size - done} of {size} bytes left): {os.strerror(errno)}",
            )
        done += moved


def read(pid: int, remote: int, local: int, size: int) -> None:
    """Copy ``size`` bytes at ``remote`` in process ``pid`` to ``local`` in this one."""
    move(False, pid, remote, local, size)


def write(pid: int, remote: int, local: int, size: int) -> None:
    """Copy ``size`` bytes at ``local`` in this process to ``remote`` in process ``pid``."""
    move(True, pid, remote, local, size)


def address(view: memoryview) -> int:
    """The address of a contiguous buffer (read-only ones too)."""
    if not view.readonly:
        return ctypes.addressof(ctypes.c_char.from_buffer(view))
    import numpy as np

    return int(np.frombuffer(view, np.uint8).ctypes.data)


class Probe:
    """A small buffer whose contents another rank on the machine reads to find out whether it can
    read this process's memory at all: ``(host, pid, address, contents)``."""

    def __init__(self) -> None:
        self.contents = f"pyoffload-mpi {os.getpid()} {id(self):x}".encode()
        self._buffer = ctypes.create_string_buffer(self.contents, len(self.contents))

    def describe(self) -> tuple[str, int, int, bytes]:
        return os.uname().nodename, os.getpid(), ctypes.addressof(self._buffer), self.contents


def reachable(described: tuple[str, int, int, bytes]) -> bool:
    """Whether this process can read (and so write) the memory of the process a :class:`Probe`
    describes: on this machine, permitted, and what it reads is what the probe holds."""
    host, pid, where, contents = described
    if not enabled() or host != os.uname().nodename or pid == os.getpid():
        return False
    buffer = ctypes.create_string_buffer(len(contents))
    try:
        read(pid, where, ctypes.addressof(buffer), len(contents))
    except OSError:
        return False
    return buffer.raw == contents
