"""Kernel arguments as an AMDGPU kernarg buffer for ``hipModuleLaunchKernel(extra=...)``.

HIP's ``extra`` launch parameter is a ``void*[5]`` array::

    { HIP_LAUNCH_PARAM_BUFFER_POINTER, <kernarg bytes>,
      HIP_LAUNCH_PARAM_BUFFER_SIZE,    <size_t* size>,
      HIP_LAUNCH_PARAM_END }

The buffer holds the explicit arguments at the metadata's offsets (without metadata, C-struct
natural alignment, as the AMDGPU ABI); the runtime appends the hidden ones.  A ``local`` argument
is a 32-bit LDS address: dynamic LDS starts after the static group segment, each local argument
aligned after the previous one, ``sharedMemBytes`` their total (as ROCclr computes it).
:func:`packer` works out the layout once per signature; a launch copies a template frame and
writes the values with one ``struct.pack_into``.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from typing import Any

from pyoffload.backend import InvalidArgumentError, struct_kind

from .codeobject import KernelArg, KernelInfo

_FORMATS = {
    "ptr": "Q",
    "local": "I",
    "i8": "b",
    "i16": "h",
    "i32": "i",
    "i64": "q",
    "u8": "B",
    "u16": "H",
    "u32": "I",
    "u64": "Q",
    "f16": "e",
    "f32": "f",
    "f64": "d",
}
MARKERS = (1, 2, 3)
"""``HIP_LAUNCH_PARAM_BUFFER_POINTER``, ``_BUFFER_SIZE``, ``_END``: fixed by HIP's ABI, so a packer
needs no binding (the tests check them against hip-python's)."""
_LDS_ALIGN = 16  # what ROCclr aligns dynamic LDS arguments to when the metadata is silent

Packed = tuple[ctypes.Structure, int]
"""A launch's frame (the ``extra`` array first, so its address is the frame's) and its dynamic
LDS bytes.  HIP copies the kernarg bytes before ``hipModuleLaunchKernel`` returns."""


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def _format(kind: str) -> str:
    n = struct_kind(kind)
    return f"{n}s" if n is not None else _FORMATS[kind]  # a struct by value: its bytes


def _natural(kinds: tuple[str, ...]) -> tuple[KernelArg, ...]:
    # Without metadata the struct's alignment is unknown: structs by value need described kernels.
    if any(struct_kind(k) is not None for k in kinds):
        raise InvalidArgumentError("a struct by value needs kernel metadata to place it (this image has none)")
    layout, offset = [], 0
    for kind in kinds:
        size = struct.calcsize(_FORMATS[kind])
        offset = _align(offset, size)
        layout.append(KernelArg(offset, size, "dynamic_shared_pointer" if kind == "local" else "by_value"))
        offset += size
    return tuple(layout)


def packer(info: KernelInfo, kinds: tuple[str, ...]) -> Callable[[tuple[Any, ...]], Packed]:
    """The packing function for launches of ``info`` with arguments of ``kinds``.

    Raises ``InvalidArgumentError`` when the kinds do not fit the metadata's layout (a kernel
    whose metadata names types pyoffload has no kind for, so the generic layer could not check).
    """
    layout = info.args if info.described else _natural(kinds)
    if len(layout) != len(kinds) or any(
        struct.calcsize(_format(k)) != a.size for k, a in zip(kinds, layout, strict=True)
    ):
        raise InvalidArgumentError(
            f"kernel {info.name!r} takes arguments of {[a.size for a in layout]} bytes, not ({', '.join(kinds)})"
        )
    fmt, end = "<", 0
    for kind, arg in zip(kinds, layout, strict=True):
        fmt += "x" * (arg.offset - end) + _format(kind)
        end = arg.offset + arg.size
    pack_into = struct.Struct(fmt).pack_into

    class Frame(ctypes.Structure):
        _fields_ = [("extra", ctypes.c_void_p * 5), ("size", ctypes.c_size_t), ("data", ctypes.c_char * max(end, 1))]

    data_at, size_at = Frame.data.offset, Frame.size.offset
    template = Frame()
    template.extra[0], template.extra[2], template.extra[4] = MARKERS
    template.size = end
    raw = bytes(template)
    locals_ = [(i, max(layout[i].pointee_align, _LDS_ALIGN)) for i, k in enumerate(kinds) if k == "local"]
    structs = [i for i, k in enumerate(kinds) if struct_kind(k) is not None]

    def pack(values: tuple[Any, ...]) -> Packed:
        lds = info.group_segment_size
        if structs:
            values = tuple(v.tobytes() if i in structs else v for i, v in enumerate(values))
        if locals_:
            values = list(values)  # type: ignore[assignment]
            for i, alignment in locals_:
                lds = _align(lds, alignment)
                size = values[i].size
                values[i] = lds  # type: ignore[index]
                lds += size
        frame = Frame.from_buffer_copy(raw)
        base = ctypes.addressof(frame)
        frame.extra[1], frame.extra[3] = base + data_at, base + size_at
        pack_into(frame, data_at, *values)
        return frame, lds - info.group_segment_size

    return pack
