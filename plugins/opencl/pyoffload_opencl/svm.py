"""Shared virtual memory: allocations whose addresses are real device pointers.

Every allocation is a ``cl.SVMAllocation``; its ``svm_ptr`` is the address pyoffload hands out.
pyopencl only accepts :class:`pyopencl.SVMPointer` objects where OpenCL takes an SVM pointer,
so a raw address (possibly pointing inside an allocation) is wrapped as ``cl.SVM`` over a ctypes
array placed at that address: the wrapper never touches the memory, it only carries the address
and a size that pyopencl checks copy sizes against.
"""

from __future__ import annotations

import ctypes
from typing import Any

from pyoffload.backend import AllocKind, OutOfResourcesError

from .handles import SVM_COARSE_GRAIN_BUFFER, SVM_FINE_GRAIN_BUFFER, OclContext

C1 = ctypes.c_char * 1


def svm_ref(ptr: int, size: int) -> Any:
    """A ``cl.SVM`` naming ``size`` bytes at address ``ptr`` (no access to the memory)."""
    import pyopencl as cl

    return cl.SVM((ctypes.c_char * size).from_address(ptr))


TAGS_MAX = 4096  # tags cached per context; the cache starts afresh when it is full


def tag(tags: dict[tuple[int, int], Any], ptr: int, size: int) -> Any:
    """``svm_ref(ptr, size)``, kept in ``tags`` (a context's ``svm_tags``) for the next copy of
    the same range: a tag only carries an address and a size, never the memory, so it stays
    valid whatever is freed or allocated there later.  Called on a cache miss only."""
    if len(tags) >= TAGS_MAX:
        tags.clear()
    ref = tags[ptr, size] = svm_ref(ptr, size)
    return ref


def memory_kinds(svm_caps: int) -> tuple[str, ...]:
    """The kinds a device can allocate: DEVICE memory is coarse-grain SVM (host access only
    through copies, as on a GPU); HOST and MANAGED are fine-grain buffer SVM, which the host
    reads and writes in place."""
    kinds = ("DEVICE",) if svm_caps & SVM_COARSE_GRAIN_BUFFER else ()
    return kinds + (("HOST", "MANAGED") if svm_caps & SVM_FINE_GRAIN_BUFFER else ())


def host_addressable_kinds(svm_caps: int, cpu: bool, unified: bool) -> tuple[str, ...]:
    """The kinds whose memory the host may read and write at its SVM address once the work using
    it has completed.  Fine-grain buffer SVM (HOST, MANAGED) is host-accessible on any device.
    Coarse-grain SVM (DEVICE) is too where the device is a CPU device whose memory is the host's
    (``CL_DEVICE_TYPE_CPU`` and ``CL_DEVICE_HOST_UNIFIED_MEMORY``: PoCL's pthread and basic
    devices, which run kernels in this process on ordinary memory): OpenCL asks for a map only so
    that a device with memory of its own can move the bytes, and such a device has none to move
    them from.  A GPU, or a CPU device served elsewhere (PoCL's remote device reports no unified
    memory), keeps DEVICE memory behind copies."""
    kinds = memory_kinds(svm_caps)
    if not (cpu and unified):
        kinds = tuple(k for k in kinds if k != "DEVICE")
    return kinds


def allocate(context: OclContext, size: int, kind: AllocKind) -> int:
    import pyopencl as cl

    flags: int = cl.svm_mem_flags.READ_WRITE
    if kind is not AllocKind.DEVICE:
        flags |= cl.svm_mem_flags.SVM_FINE_GRAIN_BUFFER
    try:
        allocation = cl.SVMAllocation(context.cl_context, size, 0, flags)
    except (cl.MemoryError, cl.RuntimeError, cl.LogicError) as exc:
        # clSVMAlloc reports failure only as NULL; pyopencl turns that into an error here.
        raise OutOfResourcesError(f"clSVMAlloc of {size} bytes failed: {exc}") from exc
    ptr = int(allocation.svm_ptr)
    context.allocations[ptr] = allocation
    return ptr


def release(context: OclContext, ptr: int) -> None:
    """``clSVMFree``; it does not wait for commands using the memory, but the generic layer
    calls this only once no queued work can use it."""
    context.allocations.pop(ptr).release()
