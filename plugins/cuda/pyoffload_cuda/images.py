"""CUDA device images: recognise cubin, PTX and fatbin from their bytes, list their symbols and
read kernel signatures from C++ mangled names.

Everything here is pure Python and runs before any driver call: ``load_binary_impl`` refuses
anything that is not one of the three formats with ``InvalidBinaryError``, and the symbol lists
serve ``get_symbols_impl`` (the driver API cannot enumerate a module).
"""

from __future__ import annotations

import dataclasses
import enum
import io
import re
import struct
from typing import TYPE_CHECKING, cast

from pyoffload.backend import InvalidBinaryError

if TYPE_CHECKING:
    from elftools.elf.sections import StringTableSection

EM_CUDA = 190
STO_CUDA_ENTRY = 0x10  # st_other flag of a cubin's kernel entry points (device functions lack it)
FATBIN_MAGIC = 0xBA55ED50
FATBIN_WRAPPER_MAGIC = 0x466243B1  # the host-side __fatBinC_Wrapper_t, which only points at code


class ImageFormat(enum.Enum):
    CUBIN = "cubin"
    PTX = "ptx"
    FATBIN = "fatbin"


@dataclasses.dataclass(frozen=True)
class ImageSymbols:
    """Kernel entry points as the image names them (mangled for C++), global sizes in bytes."""

    kernels: tuple[str, ...]
    globals: dict[str, int]
    arch: str | None = None


_PTX_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _is_ptx(image: bytes) -> bool:
    try:
        head = image[:4096].rstrip(b"\0").decode("ascii")
    except UnicodeDecodeError:
        return False
    return _PTX_COMMENTS.sub("", head).lstrip().startswith(".version")


def detect_format(image: bytes) -> ImageFormat:
    """Name the format of ``image`` or raise ``InvalidBinaryError`` saying what was expected."""
    if len(image) >= 20 and image[:4] == b"\x7fELF":
        (machine,) = struct.unpack_from("<H", image, 18)
        if machine == EM_CUDA:
            return ImageFormat.CUBIN
        raise InvalidBinaryError(f"ELF image for e_machine {machine}, expected a CUDA cubin (e_machine {EM_CUDA})")
    if len(image) >= 16:
        (magic,) = struct.unpack_from("<I", image, 0)
        if magic == FATBIN_MAGIC:
            return ImageFormat.FATBIN
        if magic == FATBIN_WRAPPER_MAGIC:
            raise InvalidBinaryError(
                "this is a host-side fatbin wrapper (__fatBinC_Wrapper_t), which only points at "
                "the code; pass the fatbin itself (nvcc -fatbin, magic 0xBA55ED50)"
            )
    if _is_ptx(image):
        return ImageFormat.PTX
    raise InvalidBinaryError(
        "not a CUDA image: expected a cubin (ELF, e_machine 190), PTX text (.version ...) "
        "or a fatbin (magic 0xBA55ED50)"
    )


_ELF64_SYM = struct.Struct("<IBBHQQ")


def cubin_symbols(image: bytes) -> ImageSymbols:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        elf = ELFFile(io.BytesIO(image))
        symtab = elf.get_section_by_name(".symtab")
        if symtab is None:
            raise InvalidBinaryError("cubin has no symbol table")
        strtab = cast("StringTableSection", elf.get_section(symtab["sh_link"]))  # sh_link of .symtab: its strings
        sections = [elf.get_section(i).name for i in range(elf.num_sections())]
        data = symtab.data()
        # The SM number moved from bits 0-7 to bits 8-15 of e_flags in ELF ABI version 8.
        flags = elf.header["e_flags"]
        sm = (flags >> 8) & 0xFF if elf.header["e_ident"]["EI_ABIVERSION"] >= 8 else flags & 0xFF
        kernels: list[str] = []
        globals_: dict[str, int] = {}
        # pyelftools folds st_other into visibility and drops the CUDA entry flag: read it raw.
        for off in range(0, len(data) - _ELF64_SYM.size + 1, _ELF64_SYM.size):
            st_name, st_info, st_other, st_shndx, _value, st_size = _ELF64_SYM.unpack_from(data, off)
            if not st_name or not 0 < st_shndx < len(sections):
                continue
            if st_info & 0xF == 2 and st_other & STO_CUDA_ENTRY:  # STT_FUNC entry point
                kernels.append(strtab.get_string(st_name))
            elif st_info & 0xF == 1 and sections[st_shndx].startswith((".nv.global", ".nv.constant")):
                globals_[strtab.get_string(st_name)] = st_size
    except (
        ELFError,
        struct.error,
        ValueError,
        KeyError,
        TypeError,
        OverflowError,
        IndexError,
        AttributeError,
        UnicodeDecodeError,
    ) as exc:  # what pyelftools raises on corrupt input
        raise InvalidBinaryError(f"malformed cubin: {exc}") from exc
    return ImageSymbols(tuple(kernels), globals_, f"sm_{sm}" if sm else None)


_PTX_SIZES = {
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
PTX_ENTRY = re.compile(r"\.entry\s+([\w$%]+)\s*(?:\(([^)]*)\))?")
# Module-scope variables (function bodies declare .reg/.local/.shared, never .global or .const).
PTX_VAR = re.compile(
    r"^[ \t]*(?:\.visible\s+|\.weak\s+|\.common\s+)?\.(?:global|const)\s+(?:\.align\s+\d+\s+)?"
    r"(?:\.v(\d)\s+)?\.(\w+)\s+([\w$%]+)\s*((?:\[\d*\])*)\s*(?:=\s*([^;]*))?;",
    re.M,
)


def ptx_text(image: bytes) -> str:
    return _PTX_COMMENTS.sub("", image.rstrip(b"\0").decode("ascii", errors="replace"))


def ptx_symbols(image: bytes) -> ImageSymbols:
    text = ptx_text(image)
    target = re.search(r"^\s*\.target\s+(sm_\w+)", text, re.M)
    globals_: dict[str, int] = {}
    for vec, type_name, name, dims, init in PTX_VAR.findall(text):
        count = 1
        for d in re.findall(r"\[(\d*)\]", dims):
            count *= int(d) if d else len([v for v in init.strip("{} ").split(",") if v.strip()])
        globals_[name] = _PTX_SIZES.get(type_name, 0) * int(vec or 1) * count
    kernels = tuple(m.group(1) for m in PTX_ENTRY.finditer(text))
    return ImageSymbols(kernels, globals_, target.group(1) if target else None)


_FATBIN_HEADER = struct.Struct("<IHHQ")
_FATBIN_ENTRY = struct.Struct("<HHIQ")
_FATBIN_COMPRESSED = 0x2000 | 0x8000


@dataclasses.dataclass(frozen=True)
class FatbinEntry:
    kind: str  # "ptx" or "cubin"
    arch: int  # e.g. 80 for sm_80 / compute_80
    payload: bytes | None  # None when compressed


def fatbin_entries(image: bytes) -> list[FatbinEntry]:
    _magic, _version, header_size, fat_size = _FATBIN_HEADER.unpack_from(image, 0)
    entries = []
    off, end = header_size, min(len(image), header_size + fat_size)
    while off + _FATBIN_ENTRY.size <= end:
        kind, _ver, ehs, payload_size = _FATBIN_ENTRY.unpack_from(image, off)
        if ehs < _FATBIN_ENTRY.size or off + ehs + payload_size > len(image):
            raise InvalidBinaryError(f"malformed fatbin entry at offset {off}")
        words = struct.unpack_from(f"<{ehs // 4}I", image, off)
        payload = image[off + ehs : off + ehs + payload_size]
        name = {1: "ptx", 2: "cubin"}.get(kind)
        if name is not None:
            compressed = len(words) > 10 and words[10] & _FATBIN_COMPRESSED
            entries.append(FatbinEntry(name, words[7] if len(words) > 7 else 0, None if compressed else payload))
        off += ehs + payload_size
    return entries


def image_symbols(image: bytes, fmt: ImageFormat) -> ImageSymbols:
    """The image's symbols; for a fatbin, those of its first readable entry (cubins first)."""
    if fmt is ImageFormat.CUBIN:
        return cubin_symbols(image)
    if fmt is ImageFormat.PTX:
        return ptx_symbols(image)
    entries = fatbin_entries(image)
    for entry in sorted(entries, key=lambda e: e.kind != "cubin"):
        if entry.payload is not None:
            syms = image_symbols(entry.payload, ImageFormat.CUBIN if entry.kind == "cubin" else ImageFormat.PTX)
            return dataclasses.replace(syms, arch=None)
    if entries:
        raise InvalidBinaryError("every entry of this fatbin is compressed; its symbols cannot be listed")
    raise InvalidBinaryError("fatbin holds no cubin or PTX entry")


# Itanium C++ ABI codes of the builtin parameter types pyoffload passes (LP64); DF16_ first.
_BUILTIN = {
    "DF16_": "f16",
    "a": "i8",
    "c": "i8",
    "h": "u8",
    "b": "u8",
    "s": "i16",
    "t": "u16",
    "i": "i32",
    "j": "u32",
    "l": "i64",
    "m": "u64",
    "x": "i64",
    "y": "u64",
    "f": "f32",
    "d": "f64",
}
LOCAL_TAG = "pyoffload_local"  # kernels declare a LocalMemory parameter as `pyoffload_local *`
_NUMBER = re.compile(r"\d+")


def demangle(symbol: str) -> tuple[str, tuple[str, ...]] | None:
    """``(name, parameter kinds)`` of a mangled free function taking pyoffload's parameter types
    (``_Z8iota_i32Piii`` -> ``("iota_i32", ("ptr", "i32", "i32"))``); ``None`` for anything else
    (C names, namespaces, templates, class types passed by value)."""
    m = re.match(r"_Z(\d+)", symbol)
    if m is None:
        return None
    name, s = symbol[m.end() : m.end() + int(m.group(1))], symbol[m.end() + int(m.group(1)) :]
    if s in ("", "v"):
        return (name, ()) if s else None
    subs: list[str] = []  # substitution candidates (qualified, pointer and class types), in order
    pos = 0

    def parse() -> str:
        nonlocal pos
        for code, kind in _BUILTIN.items():
            if s.startswith(code, pos):
                pos += len(code)
                return kind
        c = s[pos]
        if c in "KVr":
            pos += 1
            kind = parse()
        elif c == "P":
            pos += 1
            kind = "local" if parse() == LOCAL_TAG else "ptr"
        elif (num := _NUMBER.match(s, pos)) is not None:  # a class name
            kind, pos = s[num.end() : num.end() + int(num.group())], num.end() + int(num.group())
        elif c == "S":
            end = s.index("_", pos)
            kind, pos = subs[int(s[pos + 1 : end], 36) + 1 if end > pos + 1 else 0], end + 1
            return kind
        else:
            raise ValueError(c)
        subs.append(kind)
        return kind

    kinds = []
    try:
        while pos < len(s):
            kinds.append(parse())
    except (ValueError, IndexError):
        return None
    if any(k not in _BUILTIN.values() and k not in ("ptr", "local") for k in kinds):
        return None
    return name, tuple(kinds)
