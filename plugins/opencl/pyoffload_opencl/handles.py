"""The backend's own handles: what the generic layer passes back to every hook.

Each class wraps one pyopencl object and keeps the few facts the hooks need next to it, so that
no hook has to query the driver on a hot path.  Handles compare by identity: two contexts on the
same devices are two distinct contexts, as in OpenCL.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

# SVM capability bits of CL_DEVICE_SVM_CAPABILITIES (OpenCL 2.0, section 4.2).
SVM_COARSE_GRAIN_BUFFER = 1 << 0
SVM_FINE_GRAIN_BUFFER = 1 << 1
SVM_FINE_GRAIN_SYSTEM = 1 << 2
SVM_ATOMICS = 1 << 3


@dataclass(eq=False)
class OclDevice:
    """One OpenCL device, as reported by ``init_impl``."""

    cl_device: Any
    platform_name: str
    index: int
    svm_caps: int
    address_bits: int
    # True when program-scope ``global`` variables are shared by all kernels of a program
    # (CL_DEVICE_MAX_GLOBAL_VARIABLE_SIZE > 0).  PoCL 3.1 answers 0: each kernel gets its own
    # copy, which is why this backend offers the program state block instead (see state.py).
    program_scope_globals: bool
    il_version: str
    max_alloc: int  # CL_DEVICE_MAX_MEM_ALLOC_SIZE, read once: allocation checks it every time

    @property
    def name(self) -> str:
        return str(self.cl_device.name)


@dataclass(eq=False)
class OclContext:
    """A ``cl.Context`` over devices of one platform, with the state SVM needs per context."""

    cl_context: Any
    devices: tuple[OclDevice, ...]
    # Queues pyoffload created in this context; freeing SVM waits for all of them, because
    # clSVMFree does not wait for commands that still use the memory.
    queues: weakref.WeakSet[OclQueue] = field(default_factory=weakref.WeakSet)
    # One in-order queue per device for the synchronous (queue=None) operations.
    internal_queues: dict[int, Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def internal_queue(self, device: OclDevice | None) -> Any:
        """The context's own queue on ``device`` (its first device for HOST memory)."""
        dev = device if device is not None else self.devices[0]
        q = self.internal_queues.get(id(dev))
        if q is None:
            import pyopencl as cl

            with self.lock:
                q = self.internal_queues.get(id(dev))
                if q is None:
                    q = cl.CommandQueue(self.cl_context, dev.cl_device)
                    self.internal_queues[id(dev)] = q
        return q

    def finish_all(self) -> None:
        """Wait for every queue of this context: the precondition for releasing SVM."""
        for q in list(self.internal_queues.values()):
            q.finish()
        for oq in list(self.queues):
            oq.cl_queue.finish()


@dataclass(eq=False)
class OclQueue:
    """A command queue created through ``queue_create_impl``."""

    cl_queue: Any
    context: OclContext
    device: OclDevice
    profiling: bool
    # Exceptions raised by host functions, reported by the next synchronize.
    host_errors: list[BaseException] = field(default_factory=list)
    # The event of the newest command: an in-order queue is idle exactly when it completed.
    last_event: Any = None

    def __hash__(self) -> int:  # WeakSet needs hashable members; identity is right here
        return id(self)


@dataclass(eq=False)
class OclKernel:
    """A kernel handle.  ``cl_kernel`` is shared by plain launches, which set its arguments and
    enqueue under ``lock`` (OpenCL captures arguments at enqueue); prepared launches make their
    own ``cl.Kernel`` so that nothing else can change their arguments."""

    program: OclProgram
    name: str
    cl_kernel: Any
    # Index of the hidden ``pyoffload_state`` parameter, or None.
    state_index: int | None
    # Parameters the caller passes (the hidden state parameter excluded).
    num_params: int
    signature: tuple[str, ...] | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    # (set scalar bytes, set SVM pointer) entry points of ``cl_kernel`` (see launch.py).
    setters: tuple[Any, Any] | None = None


@dataclass(eq=False)
class OclProgram:
    """A program built for one device of a context."""

    cl_program: Any
    context: OclContext
    device: OclDevice
    image_format: str  # "source", "spir", "binary"
    kernel_names: tuple[str, ...]
    kernels: dict[str, OclKernel] = field(default_factory=dict)
    state: Any = None  # state.StateBlock or None
    _binary: bytes | None = None

    @property
    def binary(self) -> bytes:
        """The device's own binary of this program (loadable again with ``load_binary``)."""
        if self._binary is None:
            import pyopencl as cl

            binaries = self.cl_program.get_info(cl.program_info.BINARIES)
            devices = self.cl_program.get_info(cl.program_info.DEVICES)
            for dev, data in zip(devices, binaries, strict=True):
                if dev == self.device.cl_device:
                    self._binary = bytes(data)
                    break
            else:  # pragma: no cover - the program is always built for its device
                raise RuntimeError("program has no binary for its device")
        return self._binary
