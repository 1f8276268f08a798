"""Typed views of allocations for other libraries: numpy arrays over exactly the requested bytes,
DLPack exports, the array interface and the CUDA array interface v3.

A view keeps its allocation (and an optional ``owner``, e.g. a framework's own array) alive, and
counts as an export: ``free`` refuses while one is alive.  Every path that hands an address to
another library counts one:

* numpy arrays (``Allocation.view``, ``numpy.asarray`` of a :class:`TypedView`) are made from a
  :class:`HostView` that holds a buffer export of the allocation for as long as the array lives
  (the array interface's ``data`` is that holder, not a bare address);
* a DLPack export holds a buffer export of host-accessible memory, or counts in ``dl_exports`` for
  device memory, until the consumer's deleter runs;
* the CUDA array interface hands out a bare pointer, and its consumers (CuPy, Numba, PyTorch) keep
  the object they read it from: a :class:`TypedView` whose interface was read counts one export
  until it is garbage-collected.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import dlpack
from .bufferbase import BufferBase
from .checks import check_size
from .errors import InvalidArgumentError, InvalidSizeError
from .locks import check_not_reentered, defer, held_by_me
from .queue_core import users_of

# Views sit below allocations (an Allocation makes its views), so they name it only as ``Any``.
Allocation = Any


class HostView(BufferBase):
    """What a ``view()`` array is made from: the viewed bytes, an export of the allocation (so
    ``free`` refuses while the array is alive) and the caller's ``owner``, kept alive with it."""

    __slots__ = ("export", "owner")

    export: memoryview
    owner: Any


def host_holder(alloc: Allocation, offset: int, nbytes: int, owner: Any = None) -> HostView:
    """A :class:`HostView` of ``nbytes`` at ``offset`` into ``alloc``, holding an export of it.

    The export is taken first: memory that is not (or no longer) exportable, because it was freed,
    its program unloaded, or it is device memory, raises ``BufferError`` and hands out nothing."""
    export = memoryview(alloc)
    holder = HostView()
    holder.ptr, holder.nbytes, holder.readonly = alloc.ptr + offset, nbytes, bool(alloc.readonly)
    holder.export, holder.owner = export, owner
    holder.exportable = True
    return holder


class _DeviceExport:
    """One ``dl_exports`` count of device memory (which the buffer protocol cannot hold), given
    back when this object goes."""

    __slots__ = ("allocation",)

    def __init__(self, allocation: Allocation) -> None:
        count_device_export(allocation)
        self.allocation = allocation

    def __del__(self) -> None:
        uncount_device_export(self.allocation)


def count_device_export(a: Allocation) -> None:
    """Count an export of ``a`` in ``dl_exports``, or raise ``BufferError`` if it is no longer live.

    Under the registry's lock, where a free's claim and an unload read the count and clear
    ``live``: either they see this export or this export sees that the memory is gone."""
    lock = a.context.rt.registry.lock
    check_not_reentered(lock, "exporting device memory")
    with lock:
        if not a.live:
            raise BufferError(f"{a!r} was freed")
        a.dl_exports += 1


def uncount_device_export(a: Allocation) -> None:
    """Give back a :func:`count_device_export`.  This runs in finalizers (a capsule's destructor,
    a consumer's deleter, a collected view), so possibly on a thread inside the allocator: there,
    it is deferred until the thread leaves it (:mod:`pyoffload.locks`)."""
    lock = a.context.rt.registry.lock
    if held_by_me(lock):
        defer(lambda: uncount_device_export(a))
        return
    with lock:
        a.dl_exports -= 1


def layout(
    alloc: Allocation, dt: np.dtype[Any], shape: Any, offset: Any, what: str
) -> tuple[tuple[int, ...], int, int]:
    """``(dims, item count, offset)`` of a typed view of ``alloc``, checked to fit in it exactly."""
    offset = check_size(offset, f"{what} offset", allow_zero=True)
    if offset > alloc.size:
        raise InvalidSizeError(f"{what} offset {offset} is past the end of {alloc!r}")
    if shape is None:
        dims: tuple[int, ...] = ((alloc.size - offset) // dt.itemsize if dt.itemsize else 0,)
    elif isinstance(shape, tuple):
        dims = tuple(check_size(d, f"{what} shape", allow_zero=True) for d in shape)
    else:
        dims = (check_size(shape, f"{what} shape", allow_zero=True),)
    count = 1
    for d in dims:
        count *= d
    if offset + count * dt.itemsize > alloc.size:
        raise InvalidSizeError(
            f"{what} of {dims} {dt} ({count * dt.itemsize} bytes) at offset {offset} overruns {alloc!r}"
        )
    return dims, count, offset


def dlpack_device(alloc: Allocation) -> tuple[int, int]:
    """``(DLDeviceType, device id)`` of an allocation's memory: from the device's info key
    ``dlpack_device_types`` (AllocKind name -> type), else ``kDLCPU`` for host-accessible memory
    and ``kDLExtDev`` for device memory."""
    device = alloc.device if alloc.device is not None else alloc.context.devices[0]
    dl_type = (device.info.get("dlpack_device_types") or {}).get(alloc.kind.name)
    if dl_type is None:
        dl_type = dlpack.K_DL_CPU if alloc.host_accessible else dlpack.K_DL_EXT_DEV
    return int(dl_type), device.index if dl_type != dlpack.K_DL_CPU else 0


CUDA_TYPES = (dlpack.K_DL_CUDA, dlpack.K_DL_CUDA_HOST, dlpack.K_DL_CUDA_MANAGED)


class TypedView:
    """``shape`` items of ``dtype`` at ``offset`` bytes into an allocation (``Allocation.typed``),
    for other libraries: DLPack, the array interface (host-accessible memory) and the CUDA array
    interface v3 (CUDA memory).  While a DLPack consumer holds it, ``free`` refuses."""

    __slots__ = ("allocation", "dtype", "shape", "offset", "owner", "_device_export")

    def __init__(
        self, allocation: Allocation, dtype: Any, shape: Any = None, offset: int = 0, owner: Any = None
    ) -> None:
        if not allocation.live:
            raise InvalidArgumentError(f"typed: {allocation!r} was freed")
        dt = np.dtype(dtype)
        if dt.hasobject:
            raise InvalidArgumentError(f"typed: dtype {dt} holds Python objects")
        dims, _, offset = layout(allocation, dt, shape, offset, "typed")
        self.allocation, self.dtype, self.shape, self.offset, self.owner = allocation, dt, dims, offset, owner
        self._device_export: _DeviceExport | None = None

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: Any = None,
        copy: bool | None = None,
    ) -> Any:
        a = self.allocation
        if not a.live:
            raise BufferError(f"{a!r} was freed")
        here = dlpack_device(a)
        if dl_device is not None and tuple(dl_device) != here or copy:
            if copy is False:
                raise BufferError(f"the memory is on DLPack device {here}, not {tuple(dl_device)}, and copy=False")
            if dl_device is not None and tuple(dl_device)[0] != dlpack.K_DL_CPU:
                raise BufferError(f"pyoffload copies DLPack exports only to the CPU, not to {tuple(dl_device)}")
            return self._host_copy().__dlpack__(stream=None, max_version=max_version)
        if stream != -1:  # the consumer wants queued work on the memory to be done
            for queue, seq in users_of(a):
                if queue.live:
                    queue.wait_done(seq)
        if a.host_accessible:
            keep: memoryview | None = memoryview(a)  # the buffer protocol counts this export (and
            # refuses, atomically with a free's or an unload's check, once the memory is going)
        else:
            keep = None
            count_device_export(a)

        def on_release() -> None:
            if keep is not None:
                keep.release()
            else:
                uncount_device_export(a)

        versioned = max_version is not None and tuple(max_version) >= dlpack.VERSION
        return dlpack.make_capsule(
            a.ptr + self.offset, here, self.dtype, self.shape, bool(a.readonly), versioned, on_release
        )

    def _host_copy(self) -> np.ndarray:
        a = self.allocation
        if not a.exportable:
            raise BufferError(f"{a!r} is device memory: copy it to the host with pyoffload.memcpy first")
        count = 1
        for d in self.shape:
            count *= d
        data = np.frombuffer(a, dtype=self.dtype, count=count, offset=self.offset)
        return data.reshape(self.shape).copy()

    def __dlpack_device__(self) -> tuple[int, int]:
        return dlpack_device(self.allocation)

    @property
    def _nbytes(self) -> int:
        count: int = self.dtype.itemsize
        for d in self.shape:
            count *= d
        return count

    @property
    def __array_interface__(self) -> dict[str, Any]:
        """The array interface v3, whose ``data`` is a buffer (a :class:`HostView` holding an export
        of the allocation and this view's ``owner``), not an address: numpy keeps it as the array's
        base, so ``free`` refuses while the array lives."""
        a = self.allocation
        a.check_host("__array_interface__")
        try:
            data = host_holder(a, self.offset, self._nbytes, self.owner)
        except BufferError:
            a.check_host("__array_interface__")  # freed meanwhile: the same error as above
            raise
        return {"shape": self.shape, "typestr": self.dtype.str, "descr": self.dtype.descr, "data": data, "version": 3}

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA array interface v3.  Its consumers keep this object, so from the first read on
        it counts one export of the allocation until it is garbage-collected."""
        a = self.allocation
        if dlpack_device(a)[0] not in CUDA_TYPES:
            raise AttributeError("__cuda_array_interface__: not CUDA memory")
        if self._device_export is None:
            try:
                self._device_export = _DeviceExport(a)
            except BufferError:
                raise InvalidArgumentError(f"__cuda_array_interface__: {a!r} was freed") from None
        pending = [(seq, q) for q, seq in users_of(a) if q.live and seq > q.done]
        stream = max(pending, key=lambda p: p[0])[1].native if pending else None
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "descr": self.dtype.descr,
            "data": (a.ptr + self.offset, bool(a.readonly)),
            "version": 3,
            "strides": None,
            "stream": stream if isinstance(stream, int) else None,
        }

    def __repr__(self) -> str:
        return f"<pyoffload.TypedView {self.shape} {self.dtype} at +{self.offset} of {self.allocation!r}>"
