"""CUDA device images: recognise cubin, PTX and fatbin from their bytes, and list their symbols.

Everything here is pure Python and runs before any driver call: ``load_binary_impl`` refuses
anything that is not one of the three formats with ``InvalidBinaryError``, and the symbol lists
serve ``get_symbols_impl`` (the driver API has no portable way to enumerate a module) and the
fake driver (which "loads" a module by reading exactly these symbols).
"""

from __future__ import annotations

import dataclasses
import enum
import io
import re
import struct

from pyoffload.backend import InvalidBinaryError

EM_CUDA = 190
# A cubin's st_other carries this flag on kernel entry points (device functions lack it).
STO_CUDA_ENTRY = 0x10
FATBIN_MAGIC = 0xBA55ED50
# The host-side __fatBinC_Wrapper_t that points at a fatbin; it holds a pointer, not the code.
FATBIN_WRAPPER_MAGIC = 0x466243B1
_FATBIN_KIND_PTX = 1
_FATBIN_KIND_ELF = 2


class ImageFormat(enum.Enum):
    CUBIN = "cubin"
    PTX = "ptx"
    FATBIN = "fatbin"


@dataclasses.dataclass(frozen=True)
class GlobalVar:
    """A module-scope variable: its size and the bytes it starts with (zeros where unknown)."""

    name: str
    size: int
    init: bytes


@dataclasses.dataclass(frozen=True)
class ImageSymbols:
    """What an image declares: kernel entry points with their parameter sizes (``None`` where
    the image does not say), and global variables."""

    kernels: dict[str, tuple[int, ...] | None]
    globals: dict[str, GlobalVar]
    arch: str | None = None


# --------------------------------------------------------------------------------------------
# Detection
# --------------------------------------------------------------------------------------------

_PTX_COMMENTS = re.compile(rb"//[^\n]*|/\*.*?\*/", re.S)


def _is_ptx(image: bytes) -> bool:
    head = image[:4096].rstrip(b"\0")
    try:
        head.decode("ascii")
    except UnicodeDecodeError:
        return False
    return _PTX_COMMENTS.sub(b"", head).lstrip().startswith(b".version")


def detect_format(image: bytes) -> ImageFormat:
    """Name the format of ``image`` or raise ``InvalidBinaryError`` saying what was expected."""
    if len(image) >= 20 and image[:4] == b"\x7fELF":
        (machine,) = struct.unpack_from("<H", image, 18)
        if machine == EM_CUDA:
            return ImageFormat.CUBIN
        raise InvalidBinaryError(
            f"ELF image for e_machine {machine}, expected a CUDA cubin (e_machine {EM_CUDA})"
        )
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


# --------------------------------------------------------------------------------------------
# Cubin (ELF)
# --------------------------------------------------------------------------------------------

_ELF64_SYM = struct.Struct("<IBBHQQ")
# .nv.info.<kernel> attributes: (format, attribute) pairs; EIATTR_KPARAM_INFO describes one
# parameter: u32 index, u16 ordinal, u16 offset, u32 flags with the size in bits 18-31.
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4
_EIATTR_KPARAM_INFO = 0x17


def _kernel_param_sizes(info: bytes) -> tuple[int, ...] | None:
    """Parameter sizes in order, from a kernel's .nv.info section (``None`` if unreadable)."""
    params: dict[int, int] = {}
    i = 0
    while i + 2 <= len(info):
        fmt, attr = info[i], info[i + 1]
        if fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):  # padded to 4 bytes
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


def cubin_symbols(image: bytes) -> ImageSymbols:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        elf = ELFFile(io.BytesIO(image))
        symtab = elf.get_section_by_name(".symtab")
        if symtab is None:
            raise InvalidBinaryError("cubin has no symbol table")
        strtab = elf.get_section(symtab["sh_link"])
        sections = [elf.get_section(i) for i in range(elf.num_sections())]
        data = symtab.data()
        # The SM number moved from bits 0-7 to bits 8-15 of e_flags in ELF ABI version 8.
        flags = elf.header["e_flags"]
        sm = (flags >> 8) & 0xFF if elf.header["e_ident"]["EI_ABIVERSION"] >= 8 else flags & 0xFF
        arch = f"sm_{sm}" if sm else None
    except ELFError as exc:
        raise InvalidBinaryError(f"malformed cubin: {exc}") from exc
    kernels: dict[str, tuple[int, ...] | None] = {}
    globals_: dict[str, GlobalVar] = {}
    # pyelftools folds st_other into visibility and drops the CUDA entry flag: read it raw.
    for off in range(0, len(data) - _ELF64_SYM.size + 1, _ELF64_SYM.size):
        st_name, st_info, st_other, st_shndx, st_value, st_size = _ELF64_SYM.unpack_from(data, off)
        if not st_name or st_shndx == 0 or st_shndx >= len(sections):
            continue
        name = strtab.get_string(st_name)
        sym_type = st_info & 0xF
        section = sections[st_shndx]
        if sym_type == 2 and st_other & STO_CUDA_ENTRY:  # STT_FUNC entry point
            info = elf.get_section_by_name(f".nv.info.{name}")
            kernels[name] = _kernel_param_sizes(info.data()) if info is not None else ()
        elif sym_type == 1 and section.name.startswith((".nv.global", ".nv.constant")):
            if section["sh_type"] == "SHT_NOBITS":
                init = bytes(st_size)
            else:
                init = bytes(section.data()[st_value : st_value + st_size])
            globals_[name] = GlobalVar(name, st_size, init)
    return ImageSymbols(kernels, globals_, arch)


# --------------------------------------------------------------------------------------------
# PTX
# --------------------------------------------------------------------------------------------

_PTX_TYPE_SIZES = {
    "b8": 1, "u8": 1, "s8": 1, "pred": 1,
    "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
    "b32": 4, "u32": 4, "s32": 4, "f32": 4,
    "b64": 8, "u64": 8, "s64": 8, "f64": 8,
}
_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$%]+)\s*(?:\((.*?)\))?", re.S)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+[\w$%]+(?:\[(\d+)\])?")
_VAR = re.compile(
    r"^\s*(?:\.visible\s+|\.weak\s+|\.common\s+)?\.(global|const)\s+(?:\.align\s+\d+\s+)?"
    r"(?:\.v(\d)\s+)?\.(\w+)\s+([\w$%]+)\s*((?:\[\d*\])*)\s*(?:=\s*(.*))?$",
    re.S,
)


def _strip_ptx_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def _top_level_statements(text: str) -> list[str]:
    """Split PTX into module-scope statements; a function body ends its header's statement."""
    out: list[str] = []
    current: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "{":
            depth, j = 1, i + 1
            while j < n and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            if "=" in "".join(current):  # an initialiser list: part of the statement
                current.append(text[i:j])
            else:  # a function body: the statement so far is its header
                out.append("".join(current))
                current = []
            i = j
            continue
        if ch == ";":
            out.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    out.append("".join(current))
    return [s.strip() for s in out if s.strip()]


def _ptx_initializer(type_name: str, elem_size: int, count: int, text: str) -> bytes:
    values = [v.strip() for v in text.strip().strip(";").strip().strip("{}").split(",") if v.strip()]
    fmt = {
        ("b", 1): "B", ("u", 1): "B", ("s", 1): "b",
        ("b", 2): "H", ("u", 2): "H", ("s", 2): "h",
        ("b", 4): "I", ("u", 4): "I", ("s", 4): "i",
        ("b", 8): "Q", ("u", 8): "Q", ("s", 8): "q",
    }
    out = bytearray()
    for v in values[:count]:
        if v.startswith(("0f", "0F")):
            out += bytes.fromhex(v[2:])[::-1]
        elif v.startswith(("0d", "0D")):
            out += bytes.fromhex(v[2:])[::-1]
        elif type_name.startswith("f"):
            out += struct.pack("<f" if elem_size == 4 else "<d", float(v))
        else:
            try:
                value = int(v, 0)
            except ValueError:
                # generic(sym) and similar address initialisers are resolved by the loader.
                value = 0
            f = fmt.get((type_name[0], elem_size), "B")
            out += struct.pack("<" + f.upper() if value >= 0 else "<" + f.lower(), value)
    return bytes(out[: elem_size * count]).ljust(elem_size * count, b"\0")


def ptx_symbols(image: bytes) -> ImageSymbols:
    text = _strip_ptx_comments(image.rstrip(b"\0").decode("ascii", errors="replace"))
    target = re.search(r"^\s*\.target\s+(sm_\w+)", text, re.M)
    # Header directives end at the line, not at a semicolon.
    text = re.sub(r"^\s*\.(?:version|target|address_size)\b[^\n]*$", "", text, flags=re.M)
    kernels: dict[str, tuple[int, ...] | None] = {}
    globals_: dict[str, GlobalVar] = {}
    for stmt in _top_level_statements(text):
        m = _ENTRY.match(stmt)
        if m:
            sizes = []
            for pm in _PARAM.finditer(m.group(2) or ""):
                size = _PTX_TYPE_SIZES.get(pm.group(1), 0) * int(pm.group(2) or 1)
                sizes.append(size)
            kernels[m.group(1)] = tuple(sizes)
            continue
        if stmt.lstrip().startswith(".extern"):
            continue
        m = _VAR.match(stmt)
        if m:
            _space, vec, type_name, name, dims, init = m.groups()
            elem = _PTX_TYPE_SIZES.get(type_name, 0) * int(vec or 1)
            count = 1
            for d in re.findall(r"\[(\d*)\]", dims or ""):
                count *= int(d) if d else 0
            if dims and count == 0 and init:
                count = len([v for v in init.strip("{} ;").split(",") if v.strip()])
            size = elem * count
            data = _ptx_initializer(type_name, elem // int(vec or 1), count * int(vec or 1), init) if init else bytes(size)
            globals_[name] = GlobalVar(name, size, data)
    return ImageSymbols(kernels, globals_, target.group(1) if target else None)


# --------------------------------------------------------------------------------------------
# Fatbin
# --------------------------------------------------------------------------------------------

_FATBIN_HEADER = struct.Struct("<IHHQ")
_FATBIN_ENTRY = struct.Struct("<HHIQ")
_FATBIN_FLAG_COMPRESSED = 0x2000 | 0x8000


@dataclasses.dataclass(frozen=True)
class FatbinEntry:
    kind: str  # "ptx" or "cubin"
    arch: int  # e.g. 80 for sm_80 / compute_80
    payload: bytes | None  # None when compressed


def fatbin_entries(image: bytes) -> list[FatbinEntry]:
    magic, _version, header_size, fat_size = _FATBIN_HEADER.unpack_from(image, 0)
    if magic != FATBIN_MAGIC:
        raise InvalidBinaryError("not a fatbin")
    entries = []
    off, end = header_size, min(len(image), header_size + fat_size)
    while off + _FATBIN_ENTRY.size <= end:
        kind, _ver, ehs, payload_size = _FATBIN_ENTRY.unpack_from(image, off)
        if ehs < _FATBIN_ENTRY.size or off + ehs + payload_size > len(image):
            raise InvalidBinaryError(f"malformed fatbin entry at offset {off}")
        words = struct.unpack_from(f"<{ehs // 4}I", image, off)
        arch = words[7] if len(words) > 7 else 0
        flags = words[10] if len(words) > 10 else 0
        payload = image[off + ehs : off + ehs + payload_size]
        name = {_FATBIN_KIND_PTX: "ptx", _FATBIN_KIND_ELF: "cubin"}.get(kind)
        if name is not None:
            entries.append(FatbinEntry(name, arch, None if flags & _FATBIN_FLAG_COMPRESSED else payload))
        off += ehs + payload_size
    return entries


def fatbin_symbols(image: bytes) -> ImageSymbols:
    """Symbols of the fatbin's first readable entry (cubins first: their sizes are exact)."""
    entries = fatbin_entries(image)
    for kind in ("cubin", "ptx"):
        for entry in entries:
            if entry.kind == kind and entry.payload is not None:
                syms = cubin_symbols(entry.payload) if kind == "cubin" else ptx_symbols(entry.payload)
                return dataclasses.replace(syms, arch=None)
    if entries:
        raise InvalidBinaryError("every entry of this fatbin is compressed; its symbols cannot be listed")
    raise InvalidBinaryError("fatbin holds no cubin or PTX entry")


def image_symbols(image: bytes, fmt: ImageFormat | None = None) -> ImageSymbols:
    fmt = fmt or detect_format(image)
    if fmt is ImageFormat.CUBIN:
        return cubin_symbols(image)
    if fmt is ImageFormat.PTX:
        return ptx_symbols(image)
    return fatbin_symbols(image)
