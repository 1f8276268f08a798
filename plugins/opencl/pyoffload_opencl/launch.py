"""Kernels: signatures from kernel-arg info, argument packing and NDRange launches.

The packer (``kernel_packer_impl``) decides once per argument-kind signature how each argument
is set, and turns one launch's checked values into ``(setter, value)`` pairs; the launch then
only calls the setters and enqueues.  Each kind goes straight to the cheapest pyopencl entry
point (measured on PoCL 3.1, pyopencl 2026.1):

* pointers: ``Kernel._set_arg_svm`` with a ``cl.SVM`` tag over the address (~0.7 us;
  clSetKernelArgSVMPointer accepts interior pointers); NULL through ``set_arg(i, None)``;
* scalars: ``Kernel._set_arg_buf`` with the numpy scalar's own bytes (~0.15 us; the public
  ``set_arg`` costs ~15 us for a scalar: it tries every other argument type first);
* local memory: ``set_arg(i, cl.LocalMemory(size))``.

The private entry points are the ones pyopencl's own generated invokers call; where a pyopencl
version lacks them, the public ``set_arg`` is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyoffload.backend import scalar_kind

from .errors import driver_call, translate
from .handles import OclDevice, OclKernel, OclProgram, OclQueue
from .state import STATE_PARAM
from .svm import C1

_BUF, _SVM, _ARG = range(3)  # indices into OclKernel.setters


def setters(cl_kernel: Any) -> tuple[Any, Any, Any]:
    return (
        getattr(cl_kernel, "_set_arg_buf", None) or cl_kernel.set_arg,
        getattr(cl_kernel, "_set_arg_svm", None) or cl_kernel.set_arg,
        cl_kernel.set_arg,
    )


def make_kernel(program: OclProgram, name: str) -> OclKernel:
    import pyopencl as cl

    with driver_call(f"creating kernel {name!r}"):
        cl_kernel = cl.Kernel(program.cl_program, name)
    names, kinds = _describe(cl_kernel, program.device.address_bits)
    # The hidden state parameter is the last one; callers never pass it (see state.py).
    index = len(names) - 1 if names and names[-1] == STATE_PARAM else None
    if index is not None and kinds is not None:
        kinds = kinds[:-1]
    kernel = OclKernel(program, name, cl_kernel, tuple(kinds) if kinds is not None else None, setters(cl_kernel), index)
    bind_state(kernel, cl_kernel)
    return kernel


def bind_state(kernel: OclKernel, cl_kernel: Any) -> None:
    """Bind the program's state block to the hidden parameter; it never changes afterwards."""
    import pyopencl as cl

    block = kernel.program.state
    if kernel.state_index is not None:
        cl_kernel.set_arg(kernel.state_index, cl.SVM(C1.from_address(block.base)) if block else None)


def _describe(cl_kernel: Any, address_bits: int) -> tuple[list[str] | None, list[str] | None]:
    """``(parameter names, parameter kinds)`` from clGetKernelArgInfo; either is None where the
    image does not say (no kernel-arg info) or a parameter has no pyoffload kind (vectors)."""
    import pyopencl as cl

    info = cl.kernel_arg_info
    names: list[str] = []
    kinds: list[str] | None = []
    try:
        for i in range(int(cl_kernel.num_args)):
            names.append(str(cl_kernel.get_arg_info(i, info.NAME)))
            qual = int(cl_kernel.get_arg_info(i, info.ADDRESS_QUALIFIER))
            type_name = str(cl_kernel.get_arg_info(i, info.TYPE_NAME)).strip()
            if qual == cl.kernel_arg_address_qualifier.LOCAL:
                kind: str | None = "local"
            elif type_name.endswith("*"):
                kind = "ptr"
            elif type_name in ("size_t", "uintptr_t", "ptrdiff_t", "intptr_t"):
                kind = f"{'u' if type_name[0] in 'su' else 'i'}{address_bits}"
            else:
                kind = scalar_kind(type_name)
            if kinds is not None and kind is not None:
                kinds.append(kind)
            else:
                kinds = None
    except cl.Error:
        return None, None  # KERNEL_ARG_INFO_NOT_AVAILABLE
    return names, kinds


def packer(kinds: tuple[str, ...]) -> Callable[[tuple[Any, ...]], list[tuple[int, Any]]]:
    import pyopencl as cl

    svm, local, at = cl.SVM, cl.LocalMemory, C1.from_address
    how = tuple(_SVM if k == "ptr" else _ARG if k == "local" else _BUF for k in kinds)
    # The cl.SVM tag of each address seen lately: a tag only names an address (it owns nothing),
    # so one serves every launch at that address, and a prepared launch given the same tag
    # again skips setting it (see prepare).  Bounded; dict reads and writes need no lock.
    tags: dict[int, Any] = {}

    def tag(address: int) -> Any:
        t = tags.get(address)
        if t is None:
            if len(tags) >= _TAGS:
                tags.clear()
            t = tags[address] = svm(at(address))
        return t

    def pack(values: tuple[Any, ...]) -> list[tuple[int, Any]]:
        out = []
        for h, v in zip(how, values, strict=False):
            if h == _BUF:
                out.append((_BUF, v))
            elif h == _SVM:
                if v:
                    t = tags.get(v)
                    out.append((_SVM, t if t is not None else tag(v)))
                else:
                    out.append((_ARG, None))
            else:
                out.append((_ARG, local(v.size)))
        return out

    return pack


_TAGS = 1024  # addresses whose cl.SVM tag a packer keeps


def prepare(
    queue: OclQueue,
    kernel: OclKernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: list[tuple[int, Any]],
) -> Callable[..., None]:
    """A private ``cl.Kernel`` with everything bound; the closure only enqueues.  Given new
    packed arguments it sets them on the private kernel first (OpenCL captures them at enqueue;
    the generic layer serialises the calls per queue), and the next call without rebinds
    ``args``."""
    import pyopencl as cl

    cl_kernel = cl.Kernel(kernel.program.cl_program, kernel.name)
    bind_state(kernel, cl_kernel)
    setter = setters(cl_kernel)
    for i, (h, v) in enumerate(args):
        setter[h](i, v)
    gws = (grid[0] * block[0], grid[1] * block[1], grid[2] * block[2])
    enqueue, cl_queue = cl.enqueue_nd_range_kernel, queue.cl_queue
    # The cl.SVM tag set on each pointer argument of the private kernel now (None: unknown or
    # not a pointer).  The packer keeps one tag per address, so the same tag is the same pointer
    # and is not set again; scalars (cheap to set, and a numpy.void may be a view that changed)
    # and local memory are set every time.
    bound: list[Any] = [v if h == _SVM else None for h, v in args]
    rebound = False  # whether calls with new values left other arguments set

    def launch_prepared(new_args: list[tuple[int, Any]] | None = None) -> None:
        nonlocal rebound
        if new_args is None:
            if rebound:
                for i, (h, v) in enumerate(args):
                    if h != _SVM or v is not bound[i]:
                        bound[i] = None
                        setter[h](i, v)
                        bound[i] = v if h == _SVM else None
                rebound = False
            queue.last = enqueue(cl_queue, cl_kernel, gws, block)
            return
        rebound = True
        try:
            for i, (h, v) in enumerate(new_args):
                if h != _SVM:
                    setter[h](i, v)
                    bound[i] = None
                elif v is not bound[i]:
                    bound[i] = None  # unknown until set: a failed set leaves the driver's value unknown
                    setter[h](i, v)
                    bound[i] = v
            queue.last = enqueue(cl_queue, cl_kernel, gws, block)
        except cl.Error as exc:  # as launch_impl words it; hot path: no context manager on success
            raise translate(exc, f"launching {kernel.name!r}") from exc

    return launch_prepared


def attributes(device: OclDevice, kernel: OclKernel) -> dict[str, Any]:
    import pyopencl as cl

    wg = cl.kernel_work_group_info
    get = kernel.cl_kernel.get_work_group_info
    # (0, 0, 0) unless the source declares __attribute__((reqd_work_group_size(x, y, z))).
    required = tuple(int(v) for v in get(wg.COMPILE_WORK_GROUP_SIZE, device.cl_device))
    return {
        "max_work_group_size": int(get(wg.WORK_GROUP_SIZE, device.cl_device)),
        "preferred_work_group_multiple": int(get(wg.PREFERRED_WORK_GROUP_SIZE_MULTIPLE, device.cl_device)),
        "local_memory_bytes": int(get(wg.LOCAL_MEM_SIZE, device.cl_device)),
        "private_memory_bytes": int(get(wg.PRIVATE_MEM_SIZE, device.cl_device)),
        "required_work_group_size": required if any(required) else None,
    }
