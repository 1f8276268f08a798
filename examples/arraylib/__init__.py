"""arraylib: a small array library on pyoffload's public API.

Arrays live in one device's memory.  Every operation is enqueued on its device's queue and
returns at once; reading an array back (``numpy()``) waits.  Kernels are built from source the
first time a device is used: C on the host backend, OpenCL C on OpenCL devices, and the same on
those devices of other MPI ranks (pyoffload-mpi).

    import numpy as np, arraylib
    a = arraylib.asarray(np.arange(4, dtype=np.float32))
    (a * a + a).numpy()        # array([ 0.,  2.,  6., 12.], dtype=float32)

Device memory comes from a pool of arraylib's own per device (``memory_pool(device)``: its
statistics, ``trim()``, a limit), as CuPy keeps its own memory pool.
"""

from __future__ import annotations

import math
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

import pyoffload
from pyoffload import AllocKind, LocalMemory

__all__ = ["BACKENDS", "Array", "asarray", "empty", "memory_pool", "source_backend"]

# Kernel sources by backend; both declare the same kernels with the same parameters.
_SOURCES = {"host": "kernels.c", "opencl": "kernels.cl"}
BACKENDS = tuple(_SOURCES)
_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
# Work-items per work-group: a power of two (the OpenCL reduction halves it) that every OpenCL
# device allows; the host backend ignores the geometry.
BLOCK = 64


def source_backend(device: pyoffload.Device) -> str:
    """The backend whose source language builds programs for ``device``: its own, or, for a
    device of another MPI rank (pyoffload-mpi), the backend that drives it there."""
    return str(device.info.get("mpi.remote_backend") or device.backend)


class _DeviceState:
    """What arraylib keeps per device: one in-order queue for all its work, its program, and the
    pool its arrays' device memory comes from."""

    def __init__(self, device: pyoffload.Device) -> None:
        backend = source_backend(device)
        name = _SOURCES.get(backend)
        if name is None:
            raise pyoffload.UnsupportedError(f"arraylib has no kernels for the {backend!r} backend")
        source = (Path(__file__).parent / name).read_text()
        self.program = device.build_program(source)  # built once, then from the on-disk cache
        self.queue = device.create_queue()
        self.pool = device.create_pool()  # DEVICE memory of arraylib's arrays, counted apart
        self._kernels: dict[str, pyoffload.Kernel] = {}

    def kernel(self, name: str) -> pyoffload.Kernel:
        kernel = self._kernels.get(name)
        if kernel is None:
            kernel = self._kernels[name] = self.program.kernel(name)
        return kernel


_states: dict[pyoffload.Device, _DeviceState] = {}
_states_lock = threading.Lock()


def _state(device: pyoffload.Device) -> _DeviceState:
    with _states_lock:
        state = _states.get(device)
        if state is None:
            state = _states[device] = _DeviceState(device)
        return state


@pyoffload.on_shutdown
def _forget_devices() -> None:
    # The runtime releases the queues and programs; a later use starts afresh on the new runtime.
    with _states_lock:
        _states.clear()


def memory_pool(device: pyoffload.Device) -> pyoffload.MemoryPool:
    """The pool of arraylib's device memory on ``device``: ``stats()``, ``trim()``, ``limit``."""
    return _state(device).pool


def _free(queue: pyoffload.Queue, alloc: pyoffload.Allocation) -> None:
    # Stream-ordered: the block is reusable by later work on the queue at once, no host wait.
    # After a shutdown the runtime has freed the memory and destroyed the queue already.
    if queue.live and alloc.live:
        queue.free_async(alloc)


class Array:
    """A contiguous array of ``dtype`` (float32 or float64) in ``device``'s memory."""

    def __init__(
        self, shape: tuple[int, ...], dtype: Any, device: pyoffload.Device, kind: AllocKind = AllocKind.DEVICE
    ) -> None:
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        if self.dtype not in _SUFFIX:
            raise TypeError(f"arraylib supports float32 and float64, not {self.dtype}")
        self.device = device
        self.size = math.prod(self.shape)
        self._state = _state(device)
        # Empty arrays still get a block: pyoffload refuses zero-byte allocations.
        nbytes = max(self.size * self.dtype.itemsize, 1)
        pool = self._state.pool if kind is AllocKind.DEVICE else None
        self.alloc = self._state.queue.alloc_async(nbytes, kind, pool=pool)
        # A finalizer rather than __del__: it runs once, from whichever thread drops the array.
        # Left out at interpreter exit, where pyoffload's own teardown frees everything.
        weakref.finalize(self, _free, self._state.queue, self.alloc).atexit = False

    def _launch(self, name: str, out: Array, *args: Any, grid: int | None = None, block: int = BLOCK) -> Array:
        kernel = self._state.kernel(f"{name}_{_SUFFIX[self.dtype]}")
        if grid is None:
            grid = max(1, -(-self.size // block))
        self._state.queue.launch(kernel, grid, block, [out.alloc, *args])
        return out

    def _elementwise(self, name: str, other: Array) -> Array:
        if not isinstance(other, Array):
            return NotImplemented
        if other.device is not self.device:
            raise ValueError(f"operands on {self.device.id} and {other.device.id}: move one with .to()")
        if other.shape != self.shape or other.dtype != self.dtype:
            raise ValueError(f"operands {self.shape} {self.dtype} and {other.shape} {other.dtype} differ")
        out = Array(self.shape, self.dtype, self.device)
        return self._launch(name, out, self.alloc, other.alloc, np.int64(self.size))

    def __add__(self, other: Array) -> Array:
        return self._elementwise("add", other)

    def __mul__(self, other: Array | float) -> Array:
        if isinstance(other, (int, float, np.number)):
            out = Array(self.shape, self.dtype, self.device)
            return self._launch("scale", out, self.alloc, self.dtype.type(other), np.int64(self.size))
        return self._elementwise("mul", other)

    __rmul__ = __mul__

    def sum(self) -> Array:
        """The sum of all elements, as a 0-d array on the same device (one work-group)."""
        out = Array((), self.dtype, self.device)
        scratch = LocalMemory(BLOCK * self.dtype.itemsize)
        return self._launch("sum", out, self.alloc, np.int64(self.size), scratch, grid=1)

    def __getitem__(self, key: tuple[slice, slice]) -> Array:
        """``a[r0:r1, c0:c1]`` of a 2-D array: a new contiguous array, copied on the device as one
        2-D copy (rows of the block at the source's pitch, packed in the result)."""
        if len(self.shape) != 2 or not (isinstance(key, tuple) and len(key) == 2):
            raise TypeError("arraylib indexes 2-D arrays with a pair of slices")
        (r0, r1, rs), (c0, c1, cs) = (k.indices(n) for k, n in zip(key, self.shape, strict=True))
        if rs != 1 or cs != 1:
            raise ValueError("arraylib slices have a step of 1")
        rows, cols, item = max(r1 - r0, 0), max(c1 - c0, 0), self.dtype.itemsize
        out = Array((rows, cols), self.dtype, self.device)
        if rows and cols:
            start = self.alloc.ptr + (r0 * self.shape[1] + c0) * item
            self._state.queue.memcpy_2d(out.alloc, cols * item, start, self.shape[1] * item, cols * item, rows)
        return out

    def to(self, device: pyoffload.Device, kind: AllocKind = AllocKind.DEVICE) -> Array:
        """A copy on ``device``, ordered after the work on this array's queue without blocking the
        host (pyoffload stages the copy through host memory where there is no direct path)."""
        out = Array(self.shape, self.dtype, device, kind)
        target = out._state.queue
        target.wait_events(self._state.queue.record())
        target.memcpy(out.alloc, self.alloc, self.size * self.dtype.itemsize)
        return out

    def numpy(self) -> np.ndarray:
        """The contents as a numpy array: a zero-copy view where the memory is host-accessible
        (the view keeps this array alive), a copy otherwise."""
        self._state.queue.wait()
        if self.alloc.host_accessible:
            return self.alloc.view(self.dtype, self.shape, owner=self)
        host = np.empty(self.shape, self.dtype)
        if self.size:
            pyoffload.memcpy(host, self.alloc, host.nbytes)
        return host

    def __repr__(self) -> str:
        return f"arraylib.Array(shape={self.shape}, dtype={self.dtype}, device={self.device.id})"


def empty(
    shape: tuple[int, ...] | int,
    dtype: Any = np.float32,
    device: pyoffload.Device | None = None,
    kind: AllocKind = AllocKind.DEVICE,
) -> Array:
    """An uninitialised array on ``device`` (the first device by default)."""
    dims = (shape,) if isinstance(shape, int) else shape
    return Array(dims, dtype, device or pyoffload.devices()[0], kind)


def asarray(data: Any, device: pyoffload.Device | None = None, kind: AllocKind = AllocKind.DEVICE) -> Array:
    """A device array with ``data``'s contents (copied on the device's queue, no host wait)."""
    host = np.ascontiguousarray(data)
    out = empty(host.shape, host.dtype, device, kind)
    if host.size:
        out._state.queue.memcpy(out.alloc, host, host.nbytes)
    return out
