"""What the fake driver reads from an image beyond the plugin's symbol lists: each kernel's
parameter sizes (the layout its parameter buffer must have) and each global's initial bytes.

A real driver knows both from the image; the fake reads cubins (``.nv.info.<kernel>``
``EIATTR_KPARAM_INFO`` records, global sections) and PTX (``.param`` lists, initialisers).
"""

from __future__ import annotations

import dataclasses
import io
import re
import struct
from typing import TYPE_CHECKING, cast

from ..images import PTX_ENTRY, PTX_VAR, ImageSymbols, cubin_symbols, ptx_symbols, ptx_text

if TYPE_CHECKING:
    from elftools.elf.sections import SymbolTableSection

_PTX_TYPE_SIZES = {
    "b8": 1,
    "u8": 1,
    "s8": 1,
    "pred": 1,
    "b16": 2,
    "u16": 2,
    "s16": 2,
    "f16": 2,
    "bf16": 2,
    "b32": 4,
    "u32": 4,
    "s32": 4,
    "f32": 4,
    "b64": 8,
    "u64": 8,
    "s64": 8,
    "f64": 8,
}
_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+(?:\.ptr\S*\s+)?[\w$%]+(?:\[(\d+)\])?")


@dataclasses.dataclass(frozen=True)
class FakeImage:
    """Kernels with their parameter sizes (``None`` where the image does not say), globals with
    their initial bytes, and the image's target architecture."""

    kernels: dict[str, tuple[int, ...] | None]
    globals: dict[str, bytes]
    arch: str | None
    # The most threads per block each kernel's performance directives allow (PTX .maxntid or
    # .reqntid, from __launch_bounds__); absent: the device's limit.
    max_threads: dict[str, int] = dataclasses.field(default_factory=dict)
    # Each parameter's alignment where the image states it (PTX ``.param .align 4 .b8 p[8]``, a
    # struct by value); absent: natural alignment.
    param_aligns: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)


def param_bytes(sizes: tuple[int, ...], aligns: tuple[int, ...] | None = None) -> int:
    """Bytes of a parameter list laid out with each parameter's alignment (CUDA's layout)."""
    offsets = param_offsets(sizes, aligns)
    return offsets[-1] + sizes[-1] if sizes else 0


def param_offsets(sizes: tuple[int, ...], aligns: tuple[int, ...] | None = None) -> list[int]:
    """Each parameter's offset: at its stated alignment, else its natural one (its size, to 8)."""
    out, off = [], 0
    for i, s in enumerate(sizes):
        align = aligns[i] if aligns is not None else min(max(s, 1), 8)
        off = -(-off // align) * align
        out.append(off)
        off += s
    return out


# .nv.info attributes: (format, attribute) pairs; EIATTR_KPARAM_INFO describes one parameter:
# u32 index, u16 ordinal, u16 offset, u32 flags with the size in bits 18-31.
_EIFMT_SVAL, _EIATTR_KPARAM_INFO = 4, 0x17


def _kparam_sizes(info: bytes) -> tuple[int, ...] | None:
    params: dict[int, int] = {}
    i = 0
    while i + 2 <= len(info):
        fmt, attr = info[i], info[i + 1]
        if fmt in (1, 2, 3):
            i += 4
        elif fmt == _EIFMT_SVAL and i + 4 <= len(info):
            (length,) = struct.unpack_from("<H", info, i + 2)
            if attr == _EIATTR_KPARAM_INFO and length >= 12:
                _index, ordinal, _offset, flags = struct.unpack_from("<IHHI", info, i + 4)
                params[ordinal] = (flags >> 18) & 0x3FFF
            i += 4 + length
        else:
            return None
    if sorted(params) != list(range(len(params))):
        return None
    return tuple(params[k] for k in range(len(params)))


def read_cubin(image: bytes) -> FakeImage:
    from elftools.elf.elffile import ELFFile

    syms: ImageSymbols = cubin_symbols(image)
    elf = ELFFile(io.BytesIO(image))
    kernels = {}
    for name in syms.kernels:
        info = elf.get_section_by_name(f".nv.info.{name}")
        kernels[name] = _kparam_sizes(info.data()) if info is not None else ()
    globals_: dict[str, bytes] = {}
    symtab = cast("SymbolTableSection", elf.get_section_by_name(".symtab"))  # cubin_symbols found it
    for sym in symtab.iter_symbols():
        if sym.name in syms.globals:
            section = elf.get_section(sym["st_shndx"])
            size = syms.globals[sym.name]
            data = (
                bytes(size)
                if section["sh_type"] == "SHT_NOBITS"
                else section.data()[sym["st_value"] : sym["st_value"] + size]
            )
            globals_[sym.name] = bytes(data)
    return FakeImage(kernels, globals_, syms.arch)


def _initializer(type_name: str, elem_size: int, count: int, text: str) -> bytes:
    values = [v.strip() for v in text.strip().strip(";").strip().strip("{}").split(",") if v.strip()]
    out = bytearray()
    for v in values[:count]:
        if v[:2] in ("0f", "0F", "0d", "0D"):
            out += bytes.fromhex(v[2:])[::-1]
        elif type_name.startswith("f"):
            out += struct.pack("<f" if elem_size == 4 else "<d", float(v))
        else:
            try:
                value = int(v, 0)
            except ValueError:  # generic(sym) and other address initialisers: resolved by a loader
                value = 0
            out += value.to_bytes(elem_size, "little", signed=value < 0)
    return bytes(out[: elem_size * count]).ljust(elem_size * count, b"\0")


def read_ptx(image: bytes) -> FakeImage:
    syms = ptx_symbols(image)
    text = ptx_text(image)
    kernels: dict[str, tuple[int, ...] | None] = {}
    param_aligns: dict[str, tuple[int, ...]] = {}
    for m in PTX_ENTRY.finditer(text):
        params = list(_PARAM.finditer(m.group(2) or ""))
        sizes = tuple(_PTX_TYPE_SIZES.get(p.group(2), 0) * int(p.group(3) or 1) for p in params)
        kernels[m.group(1)] = sizes
        param_aligns[m.group(1)] = tuple(
            int(p.group(1)) if p.group(1) else min(max(n, 1), 8) for p, n in zip(params, sizes, strict=True)
        )
    globals_: dict[str, bytes] = {}
    for _vec, type_name, name, _dims, init in PTX_VAR.findall(text):
        size = syms.globals[name]
        elem = _PTX_TYPE_SIZES.get(type_name, 1)
        globals_[name] = _initializer(type_name, elem, size // elem, init) if init else bytes(size)
    max_threads: dict[str, int] = {}
    for m in PTX_ENTRY.finditer(text):
        # Directives sit between the parameter list and the body: ".maxntid 8, 1, 1".
        head = text[m.end() : text.find("{", m.end())]
        bound = _NTID.search(head)
        if bound:
            dims = [int(v) for v in bound.group(1).split(",")]
            max_threads[m.group(1)] = dims[0] * (dims[1] if len(dims) > 1 else 1) * (dims[2] if len(dims) > 2 else 1)
    return FakeImage(kernels, globals_, syms.arch, max_threads, param_aligns)


_NTID = re.compile(r"\.(?:maxntid|reqntid)\s+(\d+(?:\s*,\s*\d+){0,2})")
