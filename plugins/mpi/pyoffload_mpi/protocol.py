"""What rank 0 and the serving ranks say to each other, and how remote addresses look on rank 0.

Everything here is plain Python (no MPI), so that it can be tested without ``mpirun``.

**Channels.**  Rank 0 sends requests to a server on :data:`TAG_REQUEST`; a server answers and
reports events to rank 0 on :data:`TAG_REPLY`.  Both are pickled tuples ``(op, *fields)``, except
that a ``submit`` request is followed, on the same tag, by the raw chunks it announces (MPI keeps
messages of one sender and tag in order; rank 0 sends a request and its chunks under one lock,
and a server reads ahead at most one request, never past a ``submit``).  Retrieved bytes and
copies between two servers use a tag of their own per transfer (:class:`Tags`): rank 0 posts the
receives of a ``retrieve`` before its request, so that the bytes need no header and move as soon
as the server sends them.

**Addresses.**  Each server's allocations live in its own address space, so two servers (or a
server and rank 0) may hand out the same number.  Rank 0 sees a remote address with its rank in
the high bits (:func:`tag`): unique across ranks, never a valid host address, and any pointer
inside an allocation still maps to the same offset on the server.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from pyoffload import errors as _errors
from pyoffload.backend import BackendError, Errc, InvalidArgumentError, OffloadError, OutOfResourcesError

TAG_REQUEST = 1
TAG_REPLY = 2
FIRST_TRANSFER_TAG = 16

CHUNK = 4 << 20
"""Bytes per message of a large copy: the receiver copies one chunk to the device while the next
one is on the wire."""

ADDRESS_BITS = 48
"""Remote addresses must fit in this many bits (user-space addresses on x86-64 and AArch64 do; so
do the device addresses of every backend pyoffload has)."""
_MARK = 1 << 63
_RANK_MASK = (1 << (63 - ADDRESS_BITS)) - 1
MAX_RANK = _RANK_MASK
_LOW = (1 << ADDRESS_BITS) - 1


def tag(rank: int, address: int) -> int:
    """Rank 0's name for ``address`` on ``rank``; 0 (NULL) stays 0."""
    if not address:
        return 0
    if address >> ADDRESS_BITS or not 0 < rank <= MAX_RANK:
        raise OutOfResourcesError(
            f"rank {rank} returned address 0x{address:x}, which does not fit in {ADDRESS_BITS} bits"
        )
    return _MARK | rank << ADDRESS_BITS | address


def untag(tagged: int) -> tuple[int, int]:
    """``(rank, address)`` of a tagged address (``(0, 0)`` for NULL)."""
    if not tagged:
        return 0, 0
    if not tagged & _MARK:
        raise InvalidArgumentError(f"0x{tagged:x} is not the address of memory on another MPI rank")
    return (tagged >> ADDRESS_BITS) & _RANK_MASK, tagged & _LOW


def local_address(tagged: int, rank: int) -> int:
    """The address on ``rank`` behind ``tagged``, refusing memory of another rank."""
    owner, address = untag(tagged)
    if address and owner != rank:
        raise InvalidArgumentError(f"0x{tagged:x} is memory of MPI rank {owner}, not of rank {rank}")
    return address


def chunks(size: int, chunk: int = CHUNK) -> Iterator[tuple[int, int]]:
    """``(offset, length)`` of each chunk of a ``size``-byte copy."""
    for offset in range(0, size, chunk):
        yield offset, min(chunk, size - offset)


class Tags:
    """Unique MPI tags for transfers between servers, handed out by rank 0 (the only rank that
    starts transfers); they wrap around below the MPI implementation's upper bound."""

    def __init__(self, upper: int) -> None:
        self._span = upper - FIRST_TRANSFER_TAG
        self._next = 0

    def take(self) -> int:
        # Called with the plugin's lock held.
        tag_ = FIRST_TRANSFER_TAG + self._next
        self._next = (self._next + 1) % self._span
        return tag_


# -- errors across ranks ----------------------------------------------------------------------

ErrorRecord = tuple[str, int, str, str, int]
"""(class name, errc, message, build log, identity): the identity tells one failure reported through
several events of a queue from another failure with the same text."""
"""A failure as it travels: (class name, errc, message, build log)."""


def error_record(exc: BaseException, rank: int) -> ErrorRecord:
    """What rank 0 needs to raise ``exc`` again as the same class with the same errc."""
    if isinstance(exc, OffloadError):
        message = exc.args[0] if exc.args else ""
        return type(exc).__name__, int(exc.errc), f"rank {rank}: {message}", getattr(exc, "build_log", ""), id(exc)
    return "BackendError", int(Errc.BACKEND_FAILURE), f"rank {rank}: {type(exc).__name__}: {exc}", "", id(exc)


def rebuild(record: ErrorRecord) -> OffloadError:
    """A fresh exception from an :data:`ErrorRecord` (fresh: one exception object raised twice
    would grow its traceback)."""
    name, errc, message, log, _ = record
    cls = getattr(_errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, OffloadError)):
        cls = OffloadError
    if cls is _errors.CompileError:
        return _errors.CompileError(message, log, Errc(errc))
    return cls(message, Errc(errc))


def picklable(value: Any) -> bool:
    """Whether ``value`` can travel in a message (device info values are checked one by one)."""
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


def remote_failure(rank: int, why: str) -> BackendError:
    return BackendError(f"MPI rank {rank}: {why}")
