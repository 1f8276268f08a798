"""Packing kernel arguments into an AMDGPU kernarg buffer for ``hipModuleLaunchKernel(extra=...)``.

HIP's ``extra`` launch parameter is a ``void*[5]`` array::

    { HIP_LAUNCH_PARAM_BUFFER_POINTER, <kernarg bytes>,
      HIP_LAUNCH_PARAM_BUFFER_SIZE,    <size_t* size>,
      HIP_LAUNCH_PARAM_END }

The buffer holds the explicit arguments at the offsets the code object's metadata gives (each
naturally aligned: the AMDGPU ABI lays arguments out like a C struct).  The runtime appends the
hidden arguments itself.  A ``local`` (dynamic LDS) argument is a 32-bit LDS address: dynamic
group memory starts after the kernel's static group segment, so the first one is the aligned
static size and each later one follows the previous one's bytes; ``sharedMemBytes`` is their
total.  ROCclr computes the same addresses when it sees a ``dynamic_shared_pointer`` argument.
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
from pyoffload.backend import InvalidArgumentError, LocalMemory

from .codeobject import KernelArg, KernelInfo

_LDS_ALIGN = 16  # what ROCclr aligns dynamic LDS arguments to when the metadata is silent


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


@dataclasses.dataclass
class PackedArgs:
    """A kernarg buffer and the ``extra`` array pointing at it.

    Keep this object alive for the duration of the launch call: HIP copies the bytes into the
    dispatch's kernarg segment before ``hipModuleLaunchKernel`` returns.
    """

    buffer: ctypes.Array[ctypes.c_char]
    size: ctypes.c_size_t
    extra: ctypes.Array[ctypes.c_void_p]
    shared_mem_bytes: int

    @property
    def extra_address(self) -> int:
        return ctypes.addressof(self.extra)

    @property
    def data(self) -> bytes:
        return bytes(self.buffer)[: self.size.value]


def _encode(arg: Any, spec: KernelArg, index: int) -> bytes:
    if isinstance(arg, int) and not isinstance(arg, bool):
        if spec.value_kind != "global_buffer" and spec.size != 8:
            raise InvalidArgumentError(f"argument {index}: a pointer was passed for a {spec.size}-byte value")
        return arg.to_bytes(8, "little", signed=False)
    if isinstance(arg, np.generic):
        raw = np.asarray(arg).astype(arg.dtype.newbyteorder("<"), copy=False).tobytes()
        if len(raw) != spec.size:
            raise InvalidArgumentError(
                f"argument {index}: {arg.dtype} is {len(raw)} bytes, the kernel expects {spec.size}"
            )
        return raw
    raise InvalidArgumentError(f"argument {index}: cannot pass {type(arg).__name__} to a kernel")


def _natural_layout(args: Sequence[Any]) -> tuple[KernelArg, ...]:
    """The layout when the code object carries no metadata: C-struct natural alignment."""
    layout = []
    offset = 0
    for arg in args:
        if isinstance(arg, LocalMemory):
            size, kind = 4, "dynamic_shared_pointer"
        elif isinstance(arg, np.generic):
            size, kind = arg.dtype.itemsize, "by_value"
        else:
            size, kind = 8, "global_buffer"
        offset = _align(offset, size)
        layout.append(KernelArg(offset, size, kind))
        offset += size
    return tuple(layout)


def pack(kernel: KernelInfo, args: Sequence[Any], hip: Any) -> PackedArgs:
    """Lay ``args`` out as the kernel's kernarg segment expects and build the ``extra`` array.

    ``hip`` is the binding module; its ``HIP_LAUNCH_PARAM_*`` markers delimit the array.
    """
    layout = kernel.args if kernel.args or not args else _natural_layout(args)
    if len(layout) != len(args):
        raise InvalidArgumentError(
            f"kernel {kernel.name!r} takes {len(layout)} arguments, {len(args)} were given"
        )
    size = max((a.offset + a.size for a in layout), default=0)
    data = bytearray(size)
    lds = kernel.group_segment_size
    dynamic_lds = 0
    for index, (arg, spec) in enumerate(zip(args, layout, strict=True)):
        if spec.offset % min(spec.size, 8) and spec.size in (1, 2, 4, 8):
            raise InvalidArgumentError(f"argument {index} of {kernel.name!r} is misaligned in the metadata")
        if isinstance(arg, LocalMemory):
            if spec.value_kind != "dynamic_shared_pointer":
                raise InvalidArgumentError(f"argument {index} of {kernel.name!r} is not a local pointer")
            lds = _align(lds, max(spec.pointee_align, _LDS_ALIGN))
            raw = lds.to_bytes(spec.size, "little")
            lds += arg.size
            dynamic_lds = lds - kernel.group_segment_size
        else:
            if spec.value_kind == "dynamic_shared_pointer":
                raise InvalidArgumentError(f"argument {index} of {kernel.name!r} needs LocalMemory")
            raw = _encode(arg, spec, index)
        data[spec.offset : spec.offset + spec.size] = raw
    buffer = ctypes.create_string_buffer(bytes(data), max(size, 1))
    size_t = ctypes.c_size_t(size)
    extra = (ctypes.c_void_p * 5)(
        hip.HIP_LAUNCH_PARAM_BUFFER_POINTER,
        ctypes.addressof(buffer),
        hip.HIP_LAUNCH_PARAM_BUFFER_SIZE,
        ctypes.addressof(size_t),
        hip.HIP_LAUNCH_PARAM_END,
    )
    return PackedArgs(buffer, size_t, extra, dynamic_lds)
