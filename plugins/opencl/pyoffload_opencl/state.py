"""The program state block: program-wide variables that every kernel of a program shares.

OpenCL has no host API for the address of a program-scope variable, and PoCL 3.1 gives every
kernel its *own* copy of one.  Shared program state therefore lives in an SVM block that this
backend allocates per program and binds to each kernel whose **last** parameter is named
``pyoffload_state`` (callers never pass it; signatures leave it out).  The block's variables
have real device addresses, which copies and kernels both accept.  At load,
``pyoffload_state_layout(global ulong *layout)`` describes the block (``[1, size, n]``, then
offset and size of each variable, then their names separated by spaces: see
docs/backends/opencl.md), the block is zero-filled, and ``pyoffload_state_init(pyoffload_state)``
(optional) sets initial values, before any constructor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyoffload.backend import AllocKind, InvalidBinaryError

from . import svm
from .handles import OclProgram

STATE_PARAM = "pyoffload_state"
LAYOUT_KERNEL = "pyoffload_state_layout"
INIT_KERNEL = "pyoffload_state_init"
LAYOUT_BYTES = 16384
ABI_VERSION = 1


@dataclass(frozen=True)
class StateBlock:
    base: int
    size: int
    variables: dict[str, tuple[int, int]]  # name -> (offset, size)


def parse_layout(raw: bytes) -> tuple[int, dict[str, tuple[int, int]]]:
    """Decode what ``pyoffload_state_layout`` wrote; raise InvalidBinaryError if malformed."""
    words = memoryview(raw).cast("Q")
    version, size, count = int(words[0]), int(words[1]), int(words[2])
    if version != ABI_VERSION:
        raise InvalidBinaryError(f"{LAYOUT_KERNEL} wrote ABI version {version}, expected 1")
    names_at = 8 * (3 + 2 * count)
    if size <= 0 or names_at >= len(raw):
        raise InvalidBinaryError(f"{LAYOUT_KERNEL} wrote an impossible layout (size {size}, {count} variables)")
    end = raw.find(b"\x00", names_at)
    names = raw[names_at : end if end >= 0 else len(raw)].decode("ascii", "replace").split()
    if len(names) != count:
        raise InvalidBinaryError(f"{LAYOUT_KERNEL} names {len(names)} variables but counts {count}")
    variables: dict[str, tuple[int, int]] = {}
    for i, name in enumerate(names):
        offset, vsize = int(words[3 + 2 * i]), int(words[4 + 2 * i])
        if vsize <= 0 or offset + vsize > size:
            raise InvalidBinaryError(f"state variable {name!r} lies outside the {size}-byte block")
        variables[name] = (offset, vsize)
    return size, variables


def create(program: OclProgram) -> StateBlock | None:
    """Describe, allocate and initialise the program's state block, if it declares one.

    Runs at load on a command queue of its own: the layout kernel writes into a plain buffer
    that is read back, then the block is zero-filled and ``pyoffload_state_init`` runs on it.
    """
    if LAYOUT_KERNEL not in program.kernel_names:
        return None
    import numpy as np
    import pyopencl as cl

    ctx = program.context.cl_context
    queue = cl.CommandQueue(ctx, program.device.cl_device)
    layout = np.zeros(LAYOUT_BYTES, np.uint8)
    scratch = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=layout)
    _run(queue, program, LAYOUT_KERNEL, scratch)
    cl.enqueue_copy(queue, layout, scratch)  # blocking
    size, variables = parse_layout(layout.tobytes())
    # DEVICE memory: the block is device data, like .data/.bss.
    base = svm.allocate(program.context, size, AllocKind.DEVICE)
    try:
        cl._cl._enqueue_svm_memfill(queue, svm.svm_ref(base, size), np.uint8(0), size, None)
        if INIT_KERNEL in program.kernel_names:
            _run(queue, program, INIT_KERNEL, svm.svm_ref(base, size))
        queue.finish()
    except BaseException:
        svm.release(program.context, base)
        raise
    return StateBlock(base, size, variables)


def _run(queue: Any, program: OclProgram, name: str, arg: Any) -> None:
    import pyopencl as cl

    kernel = cl.Kernel(program.cl_program, name)
    kernel.set_arg(0, arg)
    cl.enqueue_nd_range_kernel(queue, kernel, (1,), (1,))


def destroy(program: OclProgram) -> None:
    block, program.state = program.state, None
    if block is not None:
        svm.release(program.context, block.base)
