"""Kernel arguments and NDRange launches.

Argument setting is the hot path, so each kind goes straight to the cheapest pyopencl entry
point (measured on PoCL 3.1, pyopencl 2026.1):

* ``int`` pointers: ``Kernel._set_arg_svm`` with a ``cl.SVM`` tag over the address (~0.7 us;
  clSetKernelArgSVMPointer accepts interior pointers).
* ``numpy`` scalars: ``Kernel._set_arg_buf`` with the scalar's own bytes (~0.15 us).  The public
  ``Kernel.set_arg`` costs ~15 us for a scalar: it tries every other argument type first.
* :class:`LocalMemory`: ``Kernel.set_arg(i, cl.LocalMemory(size))``.

The private entry points are the ones pyopencl's own generated invokers call; where a pyopencl
version lacks them, the public ``set_arg`` is used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyoffload.backend import InvalidArgumentError, LocalMemory

from . import svm
from .handles import OclKernel, OclQueue

_C1 = svm._C1
_from_address = _C1.from_address

# pyopencl and numpy, bound on first use: this module must import without them.
_cl: Any = None
_generic: Any = None


def _bind() -> None:
    global _cl, _generic
    import numpy as np
    import pyopencl as cl

    _generic = np.generic
    _cl = cl


def _setters(cl_kernel: Any) -> tuple[Callable[[int, Any], None], Callable[[int, Any], None]]:
    set_buf = getattr(cl_kernel, "_set_arg_buf", None) or cl_kernel.set_arg
    set_svm = getattr(cl_kernel, "_set_arg_svm", None) or cl_kernel.set_arg
    return set_buf, set_svm


def set_args(kernel: OclKernel, cl_kernel: Any, args: tuple[Any, ...], setters: tuple[Any, Any] | None = None) -> None:
    """Set the caller's arguments on ``cl_kernel`` (the hidden state parameter is already set).
    ``setters`` is ``_setters(cl_kernel)``, passed in by callers that cache it."""
    if _cl is None:
        _bind()
    if len(args) != kernel.num_params:
        raise InvalidArgumentError(
            f"kernel {kernel.name!r} takes {kernel.num_params} arguments, got {len(args)}"
        )
    set_buf, set_svm = setters if setters is not None else _setters(cl_kernel)
    svm_tag = _cl.SVM
    from_address = _from_address
    generic = _generic
    for i, arg in enumerate(args):
        if type(arg) is int:
            if arg:
                set_svm(i, svm_tag(from_address(arg)))
            else:
                cl_kernel.set_arg(i, None)  # NULL pointer
        elif isinstance(arg, generic):
            set_buf(i, arg)
        elif isinstance(arg, LocalMemory):
            cl_kernel.set_arg(i, _cl.LocalMemory(arg.size))
        elif isinstance(arg, int):  # int subclasses: a pointer value
            set_svm(i, svm_tag(from_address(int(arg))))
        else:
            raise InvalidArgumentError(
                f"argument {i} of kernel {kernel.name!r}: unsupported type {type(arg).__name__}"
            )


def set_state_arg(kernel: OclKernel, cl_kernel: Any) -> None:
    """Bind the program's state block to the hidden parameter; it never changes afterwards."""
    if kernel.state_index is None:
        return
    block = kernel.program.state
    if block is None:
        # The layout kernel has not run (it is running now, or the program declares none).
        cl_kernel.set_arg(kernel.state_index, None)
    else:
        _, set_svm = _setters(cl_kernel)
        set_svm(kernel.state_index, svm.svm_arg(block.base))


def ndrange(grid: tuple[int, int, int], block: tuple[int, int, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """OpenCL's global size is grid * block per dimension; the local size is the block."""
    return (grid[0] * block[0], grid[1] * block[1], grid[2] * block[2]), tuple(block)


def launch(queue: OclQueue | None, kernel: OclKernel, grid, block, args) -> Any:
    if _cl is None:
        _bind()
    cl_queue = queue.cl_queue if queue is not None else kernel.program.context.internal_queue(kernel.program.device)
    gws = (grid[0] * block[0], grid[1] * block[1], grid[2] * block[2])
    with kernel.lock:
        set_args(kernel, kernel.cl_kernel, args, kernel.setters)
        event = _cl.enqueue_nd_range_kernel(cl_queue, kernel.cl_kernel, gws, block)
    if queue is None:
        event.wait()
        return None
    queue.last_event = event
    return event


def prepare(queue: OclQueue | None, kernel: OclKernel, grid, block, args) -> Callable[[], Any]:
    """A private ``cl.Kernel`` with everything bound; the closure only enqueues."""
    import pyopencl as cl

    cl_kernel = cl.Kernel(kernel.program.cl_program, kernel.name)
    set_state_arg(kernel, cl_kernel)
    set_args(kernel, cl_kernel, args)
    gws, lws = ndrange(grid, block)
    enqueue = cl.enqueue_nd_range_kernel
    if queue is not None:
        cl_queue = queue.cl_queue
        oq = queue

        def launch_prepared() -> Any:
            oq.last_event = event = enqueue(cl_queue, cl_kernel, gws, lws)
            return event

    else:
        cl_queue = kernel.program.context.internal_queue(kernel.program.device)

        def launch_prepared() -> Any:
            enqueue(cl_queue, cl_kernel, gws, lws).wait()
            return None

    # Keep the argument objects' owners reachable from the closure's cell (the kernel).
    launch_prepared.cl_kernel = cl_kernel  # type: ignore[attr-defined]
    return launch_prepared
