"""The program state block: program-wide variables that every kernel of a program shares.

Why it exists: OpenCL has no host API for the address of a program-scope variable, and PoCL 3.1
(CL_DEVICE_MAX_GLOBAL_VARIABLE_SIZE = 0) gives every kernel of a program its *own* copy of each
program-scope ``global`` variable, so a value written by one kernel is invisible to the next.
Shared program state therefore lives in an SVM block that this backend allocates per program and
passes to each kernel that asks for it.  The block is an ordinary SVM allocation, so
``global_variable(name)`` gets a real device address that copies and kernels both accept.

The ABI (documented in docs/backends/opencl.md):

* A kernel whose **last** parameter is named ``pyoffload_state`` (a global pointer) receives the
  block's address there.  The caller never passes it; signatures leave it out.
* ``pyoffload_state_layout(global ulong *layout)`` describes the block.  The backend runs it once
  at load on a zeroed buffer of :data:`LAYOUT_BYTES` bytes; it writes::

      layout[0] = 1                      (ABI version)
      layout[1] = block size in bytes
      layout[2] = n, the number of named variables
      layout[3 + 2*i], layout[4 + 2*i] = byte offset and size of variable i
      then, at byte offset 8 * (3 + 2*n): the n names, separated by spaces, NUL-terminated

* ``pyoffload_state_init(global T *pyoffload_state)`` (optional) sets initial values; the
  backend runs it once, after zero-filling the block and before any constructor.
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
