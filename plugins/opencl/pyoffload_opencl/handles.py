"""The backend's own handles: what the generic layer passes back to every hook.

Each class wraps one pyopencl object and keeps the few facts the hooks need next to it, so that
no hook has to query the driver on a hot path.  Handles compare by identity: two contexts on the
same devices are two distinct contexts, as in OpenCL.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

# SVM capability bits of CL_DEVICE_SVM_CAPABILITIES (OpenCL 2.0, section 4.2).
SVM_COARSE_GRAIN_BUFFER = 1 << 0
SVM_FINE_GRAIN_BUFFER = 1 << 1
SVM_FINE_GRAIN_SYSTEM = 1 << 2


@dataclass(eq=False)
class OclDevice:
    """One OpenCL device, as reported by ``init_impl``."""

    cl_device: Any
    svm_caps: int
    address_bits: int
    # CL_DEVICE_MAX_GLOBAL_VARIABLE_SIZE > 0: program-scope ``global`` variables are shared by
    # every kernel of a program.  PoCL 3.1 answers 0 and gives each kernel its own copy, so
    # source declaring such variables is refused there (see images.py).
    program_scope_globals: bool
    il_version: str
    # The allocation kinds this process may read and write at their SVM address once the work
    # using them has completed (svm.host_addressable_kinds).
    host_kinds: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return str(self.cl_device.name)


@dataclass(eq=False)
class OclContext:
    """A ``cl.Context`` over devices of one platform, and its live SVM allocations by address
    (``data_free_impl`` gets only the address back).  ``svm_tags`` caches the ``cl.SVM`` tags
    the copy hooks name device ranges with, by ``(address, size)`` (see svm.tag)."""

    cl_context: Any
    devices: tuple[OclDevice, ...]
    allocations: dict[int, Any] = field(default_factory=dict)
    svm_tags: dict[tuple[int, int], Any] = field(default_factory=dict)


@dataclass(eq=False)
class OclQueue:
    """An in-order command queue.  ``last`` is the event of its newest command: an in-order
    queue is idle exactly when that one completed (``queue_query_impl`` must not block)."""

    cl_queue: Any
    context: OclContext
    last: Any = None


class OclEvent:
    """A marker recorded by ``event_record_impl``, and its queue (whose context a wait list
    needs).  Made with ``object.__new__`` and three attribute stores, without an ``__init__``."""

    __slots__ = ("cl_event", "queue", "command")
    cl_event: Any
    queue: OclQueue
    command: Any  # on a profiling queue: the command enqueued just before it (its own timestamps)


@dataclass(eq=False)
class OclProgram:
    """A program built for one device of a context, with its state block (see state.py)."""

    cl_program: Any
    context: OclContext
    device: OclDevice
    kernel_names: tuple[str, ...]
    state: Any = None  # state.StateBlock or None


@dataclass(eq=False)
class OclKernel:
    """A kernel handle.  ``cl_kernel`` is shared by plain launches, which set its arguments and
    enqueue under ``lock`` (OpenCL captures arguments at enqueue); prepared launches make their
    own ``cl.Kernel`` so that nothing else can change their arguments."""

    program: OclProgram
    name: str
    cl_kernel: Any
    signature: tuple[str, ...] | None
    setters: tuple[Any, Any, Any]  # see launch.setters
    state_index: int | None  # the hidden ``pyoffload_state`` parameter, if it has one
    lock: threading.Lock = field(default_factory=threading.Lock)
