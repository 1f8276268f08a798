"""Kernel parameter kinds from clGetKernelArgInfo (programs built with -cl-kernel-arg-info)."""

from __future__ import annotations

from typing import Any

from pyoffload.backend import scalar_kind

from .state import STATE_PARAM

def describe(cl_kernel: Any, address_bits: int) -> tuple[list[str] | None, list[str] | None]:
    """Return ``(parameter names, parameter kinds)``; either is None where the image does not
    say (no kernel-arg-info) or a parameter has no pyoffload kind (vectors, structs)."""
    import pyopencl as cl

    n = int(cl_kernel.num_args)
    names: list[str] = []
    kinds: list[str] | None = []
    try:
        for i in range(n):
            names.append(str(cl_kernel.get_arg_info(i, cl.kernel_arg_info.NAME)))
            qual = int(cl_kernel.get_arg_info(i, cl.kernel_arg_info.ADDRESS_QUALIFIER))
            type_name = str(cl_kernel.get_arg_info(i, cl.kernel_arg_info.TYPE_NAME)).strip()
            if kinds is None:
                continue
            kind = _kind(qual, type_name, address_bits)
            if kind is None:
                kinds = None
            else:
                kinds.append(kind)
    except cl.Error:
        return None, None  # KERNEL_ARG_INFO_NOT_AVAILABLE
    return names, kinds


def _kind(qual: int, type_name: str, address_bits: int) -> str | None:
    import pyopencl as cl

    if qual == cl.kernel_arg_address_qualifier.LOCAL:
        return "local"
    if type_name.endswith("*"):
        return "ptr"
    if type_name in ("size_t", "uintptr_t"):
        return "u64" if address_bits == 64 else "u32"
    if type_name in ("ptrdiff_t", "intptr_t"):
        return "i64" if address_bits == 64 else "i32"
    return scalar_kind(type_name)


def state_index(names: list[str] | None, num_args: int) -> int | None:
    """Index of the hidden state parameter: the last one, named ``pyoffload_state``."""
    if names and names[-1] == STATE_PARAM:
        return num_args - 1
    return None
