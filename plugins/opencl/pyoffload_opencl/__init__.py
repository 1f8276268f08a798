"""pyoffload-opencl: pyoffload's OpenCL backend, over pyopencl.

Pointers are shared-virtual-memory (SVM) addresses: DEVICE memory is coarse-grain SVM, HOST
and MANAGED memory fine-grain buffer SVM.  Images are OpenCL C source, SPIR 1.2 bitcode or the
device's own program binaries; see docs/backends/opencl.md for the conventions (global
constructors and destructors, the program state block).

The hooks live in :mod:`pyoffload_opencl.plugin`, registered in the ``pyoffload.plugins``
entry-point group.  This package's only public helper is :func:`program_binary`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["program_binary"]


def program_binary(program: Any) -> bytes:
    """The device binary of a loaded OpenCL program, for caching: ``load_program`` accepts it
    again, in this process or a later one, on a device of the same kind.

    ``program`` is a :class:`pyoffload.Program` loaded on an OpenCL device (or this backend's
    own program handle).
    """
    from .handles import OclProgram

    handle = program
    if not isinstance(handle, OclProgram):
        for attr in ("handle", "_handle", "backend_handle"):
            handle = getattr(program, attr, None)
            if isinstance(handle, OclProgram):
                break
        else:
            raise TypeError(f"{type(program).__name__} is not a program loaded by the OpenCL backend")
    if handle.cl_program is None:
        raise ValueError("the program has been unloaded")
    return handle.binary
