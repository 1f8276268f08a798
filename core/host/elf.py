"""Reading host images: structural ELF validation, exported symbols and (from DWARF) kernel
signatures.

Validation (:func:`validate`) runs before the dynamic loader ever sees an image, so a malformed
image is an ``InvalidBinaryError`` and never a crash inside ``dlopen``.  Parsing happens once per
distinct image (keyed by digest): programs are often loaded many times.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import itertools
import platform
import struct
import sys
from typing import Any

from ..backend import InvalidBinaryError, SymbolDesc, SymbolKind

_MACHINES = {
    "x86_64": "EM_X86_64",
    "aarch64": "EM_AARCH64",
    "arm64": "EM_AARCH64",
    "ppc64le": "EM_PPC64",
    "riscv64": "EM_RISCV",
    "s390x": "EM_S390",
}
HOST_MACHINE = _MACHINES.get(platform.machine(), platform.machine())

# Symbols every shared object exports that are not the program's own.
_RUNTIME_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start", "_DYNAMIC", "_GLOBAL_OFFSET_TABLE_"}

# DWARF base-type encodings (DWARF 5, section 7.8).
_DW_ATE_FLOAT, _DW_ATE_SIGNED, _DW_ATE_SIGNED_CHAR, _DW_ATE_UNSIGNED, _DW_ATE_UNSIGNED_CHAR = 4, 5, 6, 7, 8


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    symbols: tuple[SymbolDesc, ...]
    signatures: dict[str, tuple[str, ...]]

    def find(self, name: str, kind: SymbolKind) -> SymbolDesc | None:
        for s in self.symbols:
            if s.name == name and s.kind is kind:
                return s
        return None


def _check_header(elf: Any) -> None:
    e_type, machine = elf.header["e_type"], elf.header["e_machine"]
    if e_type != "ET_DYN":
        raise InvalidBinaryError(f"host backend: ELF image is {e_type}, not a shared object (ET_DYN)")
    if machine != HOST_MACHINE:
        raise InvalidBinaryError(f"host backend: ELF image is for {machine}, this host is {HOST_MACHINE}")


@functools.lru_cache(maxsize=64)
def _inspect(digest: bytes, image: bytes) -> ImageInfo:
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(image))
    validate(image, elf)
    symbols: list[SymbolDesc] = []
    dynsym = elf.get_section_by_name(".dynsym")
    for sym in getattr(dynsym, "iter_symbols", lambda: ())():
        if sym["st_shndx"] == "SHN_UNDEF" or sym.name in _RUNTIME_SYMBOLS or not sym.name:
            continue
        if sym["st_info"]["bind"] not in ("STB_GLOBAL", "STB_WEAK"):
            continue
        if sym["st_other"]["visibility"] not in ("STV_DEFAULT", "STV_PROTECTED"):
            continue
        stype = sym["st_info"]["type"]
        if stype == "STT_FUNC":
            symbols.append(SymbolDesc(sym.name, SymbolKind.KERNEL))
        elif stype in ("STT_OBJECT", "STT_TLS"):
            symbols.append(SymbolDesc(sym.name, SymbolKind.GLOBAL, int(sym["st_size"])))
    kernels = {s.name for s in symbols if s.kind is SymbolKind.KERNEL}
    return ImageInfo(tuple(symbols), _signatures(elf, kernels))


def inspect_image(image: bytes) -> ImageInfo:
    """Check that ``image`` is a shared object for this machine and read its symbols and kernel
    signatures; raises InvalidBinaryError otherwise.  Cached per distinct image."""
    from elftools.common.exceptions import ELFError
    from elftools.construct import ConstructError

    if image[:4] != b"\x7fELF":
        raise InvalidBinaryError(
            f"host backend: image is not an ELF shared object (starts with {image[:4]!r}); "
            "build one with `cc -shared -fPIC`"
        )
    try:
        import hashlib  # OpenSSL's start-up: on the first load, not at discovery

        return _inspect(hashlib.blake2b(image, digest_size=16).digest(), image)
    except InvalidBinaryError:
        raise
    # what pyelftools raises on bytes the checks above do not cover (sections ld.so never reads)
    except (
        ELFError,
        ConstructError,
        KeyError,
        ValueError,
        IndexError,
        ZeroDivisionError,
        OverflowError,
        struct.error,
    ) as exc:
        raise InvalidBinaryError(f"host backend: malformed ELF image: {exc!r}") from None


def _type_kind(die) -> str | None:  # type: ignore[no-untyped-def]
    seen = 0
    while die is not None and seen < 32:
        seen += 1
        tag = die.tag
        if tag == "DW_TAG_pointer_type":
            return "launch" if _points_to_launch_context(die) else "ptr"
        if tag == "DW_TAG_array_type":
            return "ptr"
        if tag == "DW_TAG_base_type":
            enc = die.attributes["DW_AT_encoding"].value
            bits = die.attributes["DW_AT_byte_size"].value * 8
            if enc == _DW_ATE_FLOAT:
                return f"f{bits}"
            if enc in (_DW_ATE_SIGNED, _DW_ATE_SIGNED_CHAR):
                return f"i{bits}"
            if enc in (_DW_ATE_UNSIGNED, _DW_ATE_UNSIGNED_CHAR):
                return f"u{bits}"
            return None
        if tag == "DW_TAG_enumeration_type":
            return f"i{die.attributes['DW_AT_byte_size'].value * 8}"
        if tag in ("DW_TAG_structure_type", "DW_TAG_union_type"):  # by value: its size
            size = die.attributes.get("DW_AT_byte_size")
            return f"v{size.value}" if size is not None else None
        if "DW_AT_type" not in die.attributes:  # typedef of void and the like
            return None
        die = die.get_DIE_from_attribute("DW_AT_type")
    return None


def _points_to_launch_context(die) -> bool:  # type: ignore[no-untyped-def]
    """Whether pointer type ``die`` points to ``pyoffload_launch`` (pyoffload_host.h), through
    qualifiers and typedefs: the launch-context parameter of a plain C data-parallel kernel."""
    for _ in range(8):
        if "DW_AT_type" not in die.attributes:
            return False
        die = die.get_DIE_from_attribute("DW_AT_type")
        if die.tag in ("DW_TAG_typedef", "DW_TAG_structure_type"):
            name = die.attributes.get("DW_AT_name")
            if name is not None and name.value == b"pyoffload_launch":
                return True
        if die.tag not in ("DW_TAG_const_type", "DW_TAG_volatile_type", "DW_TAG_restrict_type", "DW_TAG_typedef"):
            return False
    return False


def _signatures(elf: Any, kernels: set[str]) -> dict[str, tuple[str, ...]]:
    """Parameter kinds of exported functions, from DWARF (images built with ``-g``)."""
    if not elf.has_dwarf_info():
        return {}
    sigs: dict[str, tuple[str, ...]] = {}
    try:
        # A linked shared object's debug sections already hold final values (the linker applied
        # their relocations), so pyelftools' relocation pass, which re-reads every section header
        # per debug section and was two thirds of this function's time, is skipped.
        dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
        for cu in dwarf.iter_CUs():
            for die in cu.iter_DIEs():
                if die.tag != "DW_TAG_subprogram" or "DW_AT_name" not in die.attributes:
                    continue
                name = die.attributes["DW_AT_name"].value.decode()
                if name not in kernels or name in sigs or "DW_AT_declaration" in die.attributes:
                    continue
                params: list[str] | None = []
                for child in die.iter_children():
                    if child.tag == "DW_TAG_unspecified_parameters":
                        params = None
                        break
                    if child.tag == "DW_TAG_formal_parameter":
                        kind = _type_kind(child.get_DIE_from_attribute("DW_AT_type"))
                        if kind is None:
                            params = None
                            break
                        params.append(kind)  # type: ignore[union-attr]
                if params is not None:
                    sigs[name] = tuple(params)
    except Exception:  # incomplete or exotic DWARF: launch without a signature check
        return sigs
    return sigs


def frame_sizes(image: bytes) -> dict[str, int]:
    """Stack frame bytes of each exported function (beyond the return address), from the call
    frame information every x86-64 and AArch64 shared object has for unwinding (``.eh_frame``):
    the largest offset of the canonical frame address from the stack pointer, less its offset at
    entry.  Functions without CFI are left out; an image without any gives ``{}``."""
    from elftools.elf.elffile import ELFFile

    sizes: dict[str, int] = {}
    try:
        elf = ELFFile(io.BytesIO(image))
        dynsym = elf.get_section_by_name(".dynsym")
        names: dict[int, str] = {}
        for sym in getattr(dynsym, "iter_symbols", lambda: ())():
            if sym["st_info"]["type"] == "STT_FUNC" and sym["st_shndx"] != "SHN_UNDEF" and sym.name:
                names.setdefault(int(sym["st_value"]), sym.name)
        dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)  # linked: nothing to relocate
        if not dwarf.has_EH_CFI():
            return sizes
        from elftools.dwarf.callframe import FDE

        for entry in dwarf.EH_CFI_entries():
            if not isinstance(entry, FDE):
                continue
            name = names.get(entry.header["initial_location"])
            if name is None:
                continue
            offsets = [row["cfa"].offset for row in entry.get_decoded().table if row.get("cfa") is not None]
            offsets = [o for o in offsets if o is not None]
            if offsets:
                sizes[name] = max(offsets) - offsets[0]
    except Exception:  # exotic CFI: the sizes found so far
        return sizes
    return sizes


# -- structural validation ------------------------------------------------------------------
#
# The dynamic loader trusts the image it maps: a wrong offset, count or address in it becomes a
# wild read, a wild write or a jump inside dlopen, i.e. a crash of the whole process rather than
# an error.  So everything ld.so reads, writes or calls while it loads and unloads an image is
# checked here first, with the same interpretation ld.so gives it (the last of duplicate dynamic
# tags wins, reads go through the segments' memory, not the section headers).  What stays out of
# reach is the machine code itself: see docs/reliability.md.

_EHDR_SIZE, _PHDR_SIZE, _SHDR_SIZE, _DYN_SIZE, _SYM_SIZE, _RELA_SIZE = 64, 56, 64, 16, 24, 24
_U64 = (1 << 64) - 1
_ADDRESS_SPACE = 1 << 47  # user address space of every 64-bit host listed in _MACHINES
# Thread-local storage per thread: ld.so allocates it lazily in every thread that touches it and
# aborts the whole process (not dlopen) when that allocation fails.
_TLS_LIMIT = 1 << 30
_PF_X, _PF_W, _PF_R = 1, 2, 4
_SHF_ALLOC = 0x2

(
    DT_NULL,
    DT_NEEDED,
    DT_PLTRELSZ,
    DT_PLTGOT,
    DT_HASH,
    DT_STRTAB,
    DT_SYMTAB,
    DT_RELA,
    DT_RELASZ,
    DT_RELAENT,
    DT_STRSZ,
    DT_SYMENT,
    DT_INIT,
    DT_FINI,
    DT_SONAME,
    DT_RPATH,
    _,
    DT_REL,
    _,
    _,
    DT_PLTREL,
    _,
    DT_TEXTREL,
    DT_JMPREL,
    _,
    DT_INIT_ARRAY,
    DT_FINI_ARRAY,
    DT_INIT_ARRAYSZ,
    DT_FINI_ARRAYSZ,
    DT_RUNPATH,
    DT_FLAGS,
    _,
    DT_PREINIT_ARRAY,
    _,
    _,
    DT_RELRSZ,
    DT_RELR,
    DT_RELRENT,
) = range(38)
DT_GNU_HASH, DT_VERSYM, DT_RELACOUNT, DT_VERDEF, DT_VERDEFNUM, DT_VERNEED, DT_VERNEEDNUM = (
    0x6FFFFEF5,
    0x6FFFFFF0,
    0x6FFFFFF9,
    0x6FFFFFFC,
    0x6FFFFFFD,
    0x6FFFFFFE,
    0x6FFFFFFF,
)
_DT_STRING_TAGS = {
    DT_NEEDED: "DT_NEEDED",
    DT_SONAME: "DT_SONAME",
    DT_RPATH: "DT_RPATH",
    DT_RUNPATH: "DT_RUNPATH",
    0x7FFFFFFD: "DT_AUXILIARY",
    0x7FFFFFFF: "DT_FILTER",
    0x6FFFFEFA: "DT_CONFIG",
    0x6FFFFEFB: "DT_DEPAUDIT",
    0x6FFFFEFC: "DT_AUDIT",
}
_DF_TEXTREL, _DF_1_PIE = 0x4, 0x08000000
DT_FLAGS_1 = 0x6FFFFFFB


@dataclasses.dataclass(frozen=True)
class _Relocs:
    """What ld.so does with each relocation type of a machine: the bytes it writes at r_offset
    (types not listed are refused), and which types compute the target from the addend alone
    (relative) or call the code there (irelative)."""

    widths: dict[int, int]
    relative: int
    irelative: int
    jump_slot: int
    tlsdesc: int
    symbolic: frozenset[int]  # types whose value is a symbol's address (never the null or a local one)
    got: frozenset[int]  # types that fill a GOT slot (always 8-byte aligned)


_RELOCS = {
    # R_X86_64_: NONE 64 PC32 GLOB_DAT JUMP_SLOT RELATIVE 32 32S DTPMOD64 DTPOFF64 TPOFF64 SIZE32
    # SIZE64 TLSDESC IRELATIVE (COPY is refused: it copies st_size bytes from another object).
    "EM_X86_64": _Relocs(
        {0: 0, 1: 8, 2: 4, 6: 8, 7: 8, 8: 8, 10: 4, 11: 4, 16: 8, 17: 8, 18: 8, 32: 4, 33: 8, 36: 16, 37: 8},
        relative=8,
        irelative=37,
        jump_slot=7,
        tlsdesc=36,
        symbolic=frozenset({1, 6, 7}),
        got=frozenset({6, 7, 16, 17, 18, 36, 37}),
    ),
    # R_AARCH64_: NONE ABS64 GLOB_DAT JUMP_SLOT RELATIVE TLS_DTPMOD TLS_DTPREL TLS_TPREL TLSDESC IRELATIVE
    "EM_AARCH64": _Relocs(
        {0: 0, 257: 8, 1025: 8, 1026: 8, 1027: 8, 1028: 8, 1029: 8, 1030: 8, 1031: 16, 1032: 8},
        relative=1027,
        irelative=1032,
        jump_slot=1026,
        tlsdesc=1031,
        symbolic=frozenset({257, 1025, 1026}),
        got=frozenset({1025, 1026, 1028, 1029, 1030, 1031, 1032}),
    ),
}


def _bad(what: str) -> InvalidBinaryError:
    return InvalidBinaryError(f"host backend: malformed ELF image: {what}")


class _Layout:
    """The image as ld.so will map it: its PT_LOAD segments, and reads at virtual addresses."""

    def __init__(self, image: bytes, loads: list[Any]) -> None:
        self.image = image
        self.loads = loads

    def segment(self, addr: int, size: int) -> Any | None:
        """The PT_LOAD whose memory holds [addr, addr + size)."""
        for seg in self.loads:
            if seg["p_vaddr"] <= addr and addr + size <= seg["p_vaddr"] + seg["p_memsz"]:
                return seg  # size 0 (a symbol such as _end) may sit at the very end
        return None

    def read(self, addr: int, size: int, what: str) -> bytes:
        """``size`` bytes at ``addr``, which must lie in the file-backed part of a readable PT_LOAD."""
        for seg in self.loads:
            if seg["p_vaddr"] <= addr and addr + size <= seg["p_vaddr"] + seg["p_filesz"] and seg["p_flags"] & _PF_R:
                start = seg["p_offset"] + addr - seg["p_vaddr"]
                return self.image[start : start + size]
        raise _bad(f"{what} (0x{addr:x}, {size} bytes) is not inside a readable loaded segment of the file")

    def writable(self, addr: int, size: int, what: str, textrel: bool) -> None:
        seg = self.segment(addr, size)
        if seg is None or not (textrel or seg["p_flags"] & _PF_W):
            raise _bad(f"{what} writes 0x{addr:x} ({size} bytes), outside the writable segments")

    def code(self, addr: int, what: str, starts: frozenset[int] | None, size: int = 1) -> None:
        """``addr`` (``size`` bytes) is machine code: in the file-backed part of an executable
        segment (past it the segment is zero-filled), at a function's start when ``starts``."""
        seg = self.segment(addr, size)
        if seg is None or not seg["p_flags"] & _PF_X or addr + size > seg["p_vaddr"] + seg["p_filesz"]:
            raise _bad(f"{what} 0x{addr:x} is not in the code of an executable segment")
        if starts is not None and addr not in starts:
            raise _bad(f"{what} 0x{addr:x} is not the start of a function of the symbol table")


def _check_ranges(image: bytes, elf: Any) -> tuple[list[Any], list[Any]]:
    """The ELF header, and every program and section header inside the file; returns them."""
    hdr, size = elf.header, len(image)
    if elf.elfclass != 8 * struct.calcsize("P") or elf.little_endian != (sys.byteorder == "little"):
        raise InvalidBinaryError(
            f"host backend: ELF image is {elf.elfclass}-bit {'little' if elf.little_endian else 'big'}-endian, "
            f"this host is {8 * struct.calcsize('P')}-bit {sys.byteorder}-endian"
        )
    _check_header(elf)
    if hdr["e_ident"]["EI_VERSION"] != "EV_CURRENT" or hdr["e_version"] != "EV_CURRENT":
        raise _bad("unknown ELF version")
    if hdr["e_ehsize"] != _EHDR_SIZE or hdr["e_phentsize"] != _PHDR_SIZE:
        raise _bad(f"header sizes e_ehsize={hdr['e_ehsize']} e_phentsize={hdr['e_phentsize']}")
    phnum = hdr["e_phnum"]
    if not 0 < phnum < 0xFFFF or hdr["e_phoff"] + phnum * _PHDR_SIZE > size:
        raise _bad(f"{phnum} program headers at offset {hdr['e_phoff']} do not fit in the {size}-byte file")
    phdrs = [
        elf.structs.Elf_Phdr.parse(image[off : off + _PHDR_SIZE])
        for off in range(hdr["e_phoff"], hdr["e_phoff"] + phnum * _PHDR_SIZE, _PHDR_SIZE)
    ]
    for i, ph in enumerate(phdrs):
        if ph["p_offset"] + ph["p_filesz"] > size:
            raise _bad(f"program header {i} ({ph['p_type']}) reaches past the end of the file")
        if (
            ph["p_vaddr"] + ph["p_memsz"] > _ADDRESS_SPACE
            or ph["p_filesz"] > ph["p_memsz"]
            and ph["p_type"] in ("PT_LOAD", "PT_TLS")
        ):
            raise _bad(f"program header {i} ({ph['p_type']}) has sizes filesz={ph['p_filesz']} memsz={ph['p_memsz']}")
        if ph["p_type"] == "PT_TLS" and ph["p_memsz"] > _TLS_LIMIT:
            raise _bad(f"PT_TLS of {ph['p_memsz']} bytes (each thread gets a copy; glibc aborts when it cannot)")
        align = ph["p_align"]
        if (
            ph["p_type"] in ("PT_LOAD", "PT_TLS")
            and align > 1
            and (align & (align - 1) or (ph["p_vaddr"] - ph["p_offset"]) % align)
        ):
            raise _bad(f"program header {i} ({ph['p_type']}) has alignment {align}")
    shnum = 0
    shoff = hdr["e_shoff"]
    if shoff:
        if hdr["e_shentsize"] != _SHDR_SIZE or shoff + _SHDR_SIZE > size:
            raise _bad(f"section headers at offset {shoff} (entry size {hdr['e_shentsize']}) are outside the file")
        shnum = hdr["e_shnum"] or elf.structs.Elf_Shdr.parse(image[shoff : shoff + _SHDR_SIZE])["sh_size"]
        if shoff + shnum * _SHDR_SIZE > size:
            raise _bad(f"{shnum} section headers at offset {shoff} do not fit in the {size}-byte file")
    shdrs = [
        elf.structs.Elf_Shdr.parse(image[off : off + _SHDR_SIZE])
        for off in range(shoff, shoff + shnum * _SHDR_SIZE, _SHDR_SIZE)
    ]
    for i, sh in enumerate(shdrs):
        if sh["sh_type"] != "SHT_NOBITS" and sh["sh_offset"] + sh["sh_size"] > size:
            raise _bad(f"section {i} ({sh['sh_type']}) reaches past the end of the file")
        if sh["sh_link"] >= max(shnum, 1) or sh["sh_addr"] + sh["sh_size"] > _U64:
            raise _bad(f"section {i} ({sh['sh_type']}) has link {sh['sh_link']} / address 0x{sh['sh_addr']:x}")
        if sh["sh_type"] in ("SHT_SYMTAB", "SHT_DYNSYM") and (
            sh["sh_entsize"] != _SYM_SIZE
            or sh["sh_size"] % _SYM_SIZE
            or shdrs[sh["sh_link"]]["sh_type"] != "SHT_STRTAB"
        ):
            raise _bad(f"symbol table section {i} has entry size {sh['sh_entsize']}, size {sh['sh_size']}")
    if shnum:
        for i, sh in enumerate(shdrs):  # loaded contents the file holds are mapped from where they are
            if (
                sh["sh_flags"] & _SHF_ALLOC
                and sh["sh_type"] != "SHT_NOBITS"
                and sh["sh_size"]
                and not any(
                    ph["p_type"] == "PT_LOAD"
                    and ph["p_vaddr"] <= sh["sh_addr"]
                    and sh["sh_addr"] + sh["sh_size"] <= ph["p_vaddr"] + ph["p_filesz"]
                    and sh["sh_offset"] - ph["p_offset"] == sh["sh_addr"] - ph["p_vaddr"]
                    for ph in phdrs
                )
            ):
                raise _bad(
                    f"section {i} (0x{sh['sh_addr']:x}, {sh['sh_size']} bytes) is not mapped from the file "
                    "by a PT_LOAD segment"
                )
        strndx = elf.get_shstrndx()
        if strndx >= shnum or shdrs[strndx]["sh_type"] != "SHT_STRTAB":
            raise _bad(f"section name table index {strndx} is not a string table")
        names = shdrs[strndx]
        if any(sh["sh_name"] >= names["sh_size"] for sh in shdrs) or image[names["sh_offset"] + names["sh_size"] - 1]:
            raise _bad("a section name lies outside the section name table")
    return phdrs, shdrs


def _segments(phdrs: list[Any]) -> tuple[list[Any], Any]:
    """The PT_LOAD segments, in order and apart; every other segment inside one; PT_DYNAMIC."""
    loads = [ph for ph in phdrs if ph["p_type"] == "PT_LOAD"]
    if not loads:
        raise _bad("no PT_LOAD segment")
    if any(not seg["p_flags"] & _PF_R for seg in loads):  # code reads its own data (unwind tables...) there
        raise _bad("a PT_LOAD segment is not readable")
    # ld.so reserves the span from the first to the last PT_LOAD and maps each one at a fixed
    # place in it: a segment out of order would be mapped over whatever else lives there.
    for prev, seg in itertools.pairwise(loads):
        if seg["p_vaddr"] < prev["p_vaddr"] + prev["p_memsz"]:
            raise _bad(f"PT_LOAD at 0x{seg['p_vaddr']:x} overlaps or precedes the one at 0x{prev['p_vaddr']:x}")
    layout = _Layout(b"", loads)
    dynamic = None
    for ph in phdrs:
        ptype = ph["p_type"]
        if ptype in ("PT_LOAD", "PT_GNU_STACK", "PT_NULL") or not ph["p_memsz"]:
            continue
        # PT_TLS: only its initialisation image is mapped (.tbss takes no address space)
        span = ph["p_filesz"] if ptype == "PT_TLS" else ph["p_memsz"]
        if layout.segment(ph["p_vaddr"], span) is None:
            raise _bad(f"{ptype} at 0x{ph['p_vaddr']:x} ({span} bytes) is not inside a PT_LOAD segment")
        if ptype == "PT_DYNAMIC":
            dynamic = ph
    if dynamic is None:
        raise _bad("no PT_DYNAMIC segment")
    return loads, dynamic


def _dynamic(layout: _Layout, dynamic: Any, fmt: str, strings: list[tuple[int, int]]) -> dict[int, int]:
    """The dynamic section as ld.so reads it (from memory, up to DT_NULL, the last of each tag
    winning); the entries that name strings are appended to ``strings``."""
    raw = layout.read(dynamic["p_vaddr"], dynamic["p_filesz"], "the dynamic section")
    tags: dict[int, int] = {}
    for tag, val in struct.iter_unpack(f"{fmt}qQ", raw[: len(raw) // _DYN_SIZE * _DYN_SIZE]):
        if tag == DT_NULL:
            break
        tags[tag] = val
        if tag in _DT_STRING_TAGS:
            strings.append((tag, val))
    else:
        raise _bad("the dynamic section has no DT_NULL terminator")
    return tags


def _table(
    layout: _Layout, tags: dict[int, int], addr_tag: int, size_tag: int, ent_tag: int | None, entsize: int, what: str
) -> bytes:
    """The bytes of an optional table named by an address tag and a size tag (empty if absent)."""
    if addr_tag not in tags:
        if size_tag in tags:  # an address entry lost: what it described would be left unrelocated
            raise _bad(f"{what}'s size entry without its address entry")
        return b""
    if size_tag not in tags:  # ld.so reads the size tag's entry unchecked once the address tag is there
        raise _bad(f"{what} without its size entry")
    if ent_tag is not None and tags.get(ent_tag) != entsize:
        raise _bad(f"{what} has entry size {tags.get(ent_tag)}, expected {entsize}")
    size = tags.get(size_tag, 0)
    if size % entsize:
        raise _bad(f"{what} size {size} is not a multiple of {entsize}")
    return layout.read(tags[addr_tag], size, what)


def _symbol_count(layout: _Layout, tags: dict[int, int], fmt: str) -> int:
    """How many dynamic symbols the hash tables describe, with every bucket and chain in range."""
    count: int | None = None
    if DT_HASH in tags:
        nbucket, nchain = struct.unpack(f"{fmt}II", layout.read(tags[DT_HASH], 8, "DT_HASH header"))
        if not nbucket:
            raise _bad("DT_HASH has no buckets")
        words = struct.unpack(
            f"{fmt}{nbucket + nchain}I", layout.read(tags[DT_HASH] + 8, 4 * (nbucket + nchain), "DT_HASH table")
        )
        chain = words[nbucket:]
        for start in words[:nbucket]:
            seen = 0
            i = start
            while i:  # ld.so follows each chain to index 0: a cycle would loop for ever
                if i >= nchain or seen > nchain:
                    raise _bad(f"DT_HASH chain reaches symbol {i} of {nchain} or loops")
                i, seen = chain[i], seen + 1
        count = nchain
    if DT_GNU_HASH in tags:
        base = tags[DT_GNU_HASH]
        nbuckets, symoffset, bloom_size, bloom_shift = struct.unpack(
            f"{fmt}4I", layout.read(base, 16, "DT_GNU_HASH header")
        )
        # ld.so divides by the bucket count and masks with bloom_size - 1 (asserting a power of two)
        if not nbuckets or not bloom_size or bloom_size & (bloom_size - 1) or bloom_shift >= 64:
            raise _bad(f"DT_GNU_HASH has {nbuckets} buckets, bloom size {bloom_size}, shift {bloom_shift}")
        buckets_at = base + 16 + 8 * bloom_size
        buckets = struct.unpack(f"{fmt}{nbuckets}I", layout.read(buckets_at, 4 * nbuckets, "DT_GNU_HASH buckets"))
        chains_at = buckets_at + 4 * nbuckets
        gnu_count = symoffset
        for start in buckets:
            if not start:
                continue
            if start < symoffset:
                raise _bad(f"DT_GNU_HASH bucket starts at symbol {start}, below its first hashed symbol {symoffset}")
            i = start
            while True:  # a chain ends at the entry with bit 0 set
                (h,) = struct.unpack(f"{fmt}I", layout.read(chains_at + 4 * (i - symoffset), 4, "DT_GNU_HASH chain"))
                if h & 1:
                    break
                i += 1
            gnu_count = max(gnu_count, i + 1)
        if count is not None and count != gnu_count:
            raise _bad(f"DT_HASH describes {count} symbols, DT_GNU_HASH {gnu_count}")
        count = gnu_count
    if count is None:
        raise _bad("no symbol hash table (DT_GNU_HASH or DT_HASH)")
    return count


def _string(strtab: bytes, offset: int) -> bytes:
    return strtab[offset : strtab.index(b"\0", offset)]


def _versions(layout: _Layout, tags: dict[int, int], fmt: str, strtab: bytes, needed: set[bytes], nsyms: int) -> None:
    """Version definitions and needs walked as ld.so walks them, and every symbol's version
    index within the table ld.so sizes from them (it indexes that table unchecked)."""
    strsz = len(strtab)
    high = 0
    # ld.so follows vd_next / vn_next / vna_next until a zero link (not the DT_VERDEFNUM and
    # DT_VERNEEDNUM counts nor vn_cnt); links are unsigned, so each walk moves forward and ends
    # at the first read outside the segments.
    for addr_tag, what in ((DT_VERDEF, "DT_VERDEF"), (DT_VERNEED, "DT_VERNEED")):
        at = tags.get(addr_tag)
        while at is not None:
            if what == "DT_VERDEF":
                version, _flags, ndx, _cnt, _hash, aux, nxt = struct.unpack(f"{fmt}HHHHIII", layout.read(at, 20, what))
                high = max(high, ndx & 0x7FFF)
                (name, _anext) = struct.unpack(f"{fmt}II", layout.read(at + aux, 8, f"{what} aux"))
                if name >= strsz:
                    raise _bad(f"{what} name offset {name} is outside the string table ({strsz} bytes)")
            else:
                version, _cnt, name, aux, nxt = struct.unpack(f"{fmt}HHIII", layout.read(at, 16, what))
                # ld.so asserts that each file named here is one of the DT_NEEDED libraries
                if name >= strsz or _string(strtab, name) not in needed:
                    raise _bad(f"{what} names a file (string {name}) that is not a DT_NEEDED library")
                aux_at: int | None = at + aux
                while aux_at is not None:
                    _h, _f, other, name, anext = struct.unpack(f"{fmt}IHHII", layout.read(aux_at, 16, f"{what} aux"))
                    high = max(high, other & 0x7FFF)
                    if name >= strsz:
                        raise _bad(f"{what} name offset {name} is outside the string table ({strsz} bytes)")
                    aux_at = aux_at + anext if anext else None
            if version != 1:
                raise _bad(f"{what} entry of version {version}")
            at = at + nxt if nxt else None
    if (DT_VERDEF in tags or DT_VERNEED in tags) != (DT_VERSYM in tags):  # linkers emit them together
        raise _bad("DT_VERSYM without DT_VERDEF or DT_VERNEED, or the other way round")
    if DT_VERSYM in tags:
        ndx = struct.unpack(f"{fmt}{nsyms}H", layout.read(tags[DT_VERSYM], 2 * nsyms, "DT_VERSYM"))
        worst = max((n & 0x7FFF for n in ndx), default=0)
        if worst > max(high, 1):
            raise _bad(f"a symbol has version index {worst}, the version tables define up to {high}")


def _function_starts(image: bytes, shdrs: list[Any], fmt: str) -> frozenset[int] | None:
    """Addresses of the functions of the full symbol table (None when the image is stripped)."""
    for sh in shdrs:
        if sh["sh_type"] == "SHT_SYMTAB":
            raw = image[sh["sh_offset"] : sh["sh_offset"] + sh["sh_size"]]
            return frozenset(
                value
                for _n, info, _o, _s, value, _z in struct.iter_unpack(f"{fmt}IBBHQQ", raw)
                if info & 0xF in (2, 10)
            )  # STT_FUNC, STT_GNU_IFUNC
    return None


def validate(image: bytes, elf: Any) -> None:
    """Raise InvalidBinaryError unless everything ld.so reads, writes or calls while loading and
    unloading ``image`` lies where ld.so expects it."""
    fmt = "<" if elf.little_endian else ">"
    phdrs, shdrs = _check_ranges(image, elf)
    loads, dynamic = _segments(phdrs)
    layout = _Layout(image, loads)
    strings: list[tuple[int, int]] = []
    tags = _dynamic(layout, dynamic, fmt, strings)
    if tags.get(DT_FLAGS_1, 0) & _DF_1_PIE:
        raise InvalidBinaryError(
            "host backend: ELF image is a position-independent executable, not a shared "
            "object; build one with `cc -shared -fPIC`"
        )
    if DT_STRTAB not in tags or DT_SYMTAB not in tags or DT_STRSZ not in tags:
        raise _bad("the dynamic section lacks DT_STRTAB, DT_STRSZ or DT_SYMTAB")
    strsz = tags[DT_STRSZ]
    strtab = layout.read(tags[DT_STRTAB], strsz, "the dynamic string table")
    if not strtab or strtab[-1]:
        raise _bad("the dynamic string table is empty or not NUL-terminated")
    for tag, val in strings:
        if val >= strsz:
            raise _bad(f"{_DT_STRING_TAGS[tag]} offset {val} is outside the string table ({strsz} bytes)")
        if tag == DT_NEEDED and not strtab[val]:  # ld.so takes an empty name for the main program
            raise _bad("a DT_NEEDED entry names no library")
    if tags.get(DT_SYMENT, _SYM_SIZE) != _SYM_SIZE:
        raise _bad(f"DT_SYMENT is {tags[DT_SYMENT]}, expected {_SYM_SIZE}")
    if DT_PREINIT_ARRAY in tags or DT_REL in tags:
        raise _bad("DT_PREINIT_ARRAY or DT_REL in a shared object of a RELA machine")
    nsyms = _symbol_count(layout, tags, fmt)
    # The listing reads the .dynsym section, which may hold more symbols than the hash tables
    # describe (those cannot be looked up; load_binary_impl checks each listed one resolves).
    nsyms = max([nsyms] + [sh["sh_size"] // _SYM_SIZE for sh in shdrs if sh["sh_type"] == "SHT_DYNSYM"])
    syms = list(struct.iter_unpack(f"{fmt}IBBHQQ", layout.read(tags[DT_SYMTAB], nsyms * _SYM_SIZE, "DT_SYMTAB")))
    tls = [ph for ph in phdrs if ph["p_type"] == "PT_TLS"]
    if any(syms[0]):
        raise _bad("dynamic symbol 0 is not the null symbol")
    for i, (name, info, other, shndx, value, size) in enumerate(syms):
        if name >= strsz:
            raise _bad(f"dynamic symbol {i} has name offset {name}, outside the string table ({strsz} bytes)")
        if not i:
            continue
        if info >> 4 not in (0, 1, 2, 10) or info & 0xF not in (0, 1, 2, 3, 4, 5, 6, 10):
            raise _bad(f"dynamic symbol {i} has an unknown binding or type ({info:#x})")
        if 0xFF00 <= shndx != 0xFFF1 or (shndx == 0xFFF1 and info & 0xF in (2, 10)):
            # ld.so takes any index but SHN_UNDEF as defined, at the image's base plus the value;
            # only SHN_ABS has a meaning in a shared object, and never for code
            raise _bad(f"dynamic symbol {i} has the reserved section index {shndx:#x}")
        if shndx == 0 and (info >> 4 not in (1, 2) or other & 3):
            # ld.so binds a local or non-default-visibility reference to the image itself, at its
            # value (0 for an undefined symbol): a call through it would jump to the ELF header
            raise _bad(f"undefined dynamic symbol {i} is not a global, default-visibility reference")
        if shndx == 0 or shndx == 0xFFF1:  # undefined or absolute
            continue
        if shdrs and shndx >= len(shdrs):
            raise _bad(f"dynamic symbol {i} is defined in section {shndx}, of {len(shdrs)}")
        if info & 0xF in (2, 10):  # STT_FUNC, STT_GNU_IFUNC: kernels are called there
            layout.code(value, f"function symbol {i}", None, max(size, 1))
        elif info & 0xF == 6:  # STT_TLS: an offset in the TLS block
            if not tls or value + size > tls[0]["p_memsz"]:
                raise _bad(f"TLS symbol {i} lies outside the TLS segment")
        elif layout.segment(value, size) is None:
            raise _bad(f"dynamic symbol {i} at 0x{value:x} ({size} bytes) is not inside a loaded segment")
        # The listing hands a global's size to callers as the bytes they may access: it must fit
        # the section the symbol claims (linker-made markers such as _end have no size).
        if (
            size
            and shdrs
            and info & 0xF != 6
            and not (
                shndx < len(shdrs)
                and shdrs[shndx]["sh_addr"] <= value
                and value + size <= shdrs[shndx]["sh_addr"] + shdrs[shndx]["sh_size"]
            )
        ):
            raise _bad(f"dynamic symbol {i} at 0x{value:x} ({size} bytes) is not inside its section {shndx}")
    for sh in shdrs:  # the section view the symbol listing reads must be the table ld.so uses
        if sh["sh_type"] == "SHT_DYNSYM" and (
            sh["sh_addr"] != tags[DT_SYMTAB]
            or shdrs[sh["sh_link"]]["sh_addr"] != tags[DT_STRTAB]
            or shdrs[sh["sh_link"]]["sh_size"] > strsz
        ):
            raise _bad(".dynsym section disagrees with the dynamic section's symbol table")
    needed = {_string(strtab, val) for tag, val in strings if tag == DT_NEEDED}
    _versions(layout, tags, fmt, strtab, needed, nsyms)
    starts = _function_starts(image, shdrs, fmt)
    _relocations(layout, tags, fmt, nsyms, syms, starts)


def _relocations(
    layout: _Layout,
    tags: dict[int, int],
    fmt: str,
    nsyms: int,
    syms: list[tuple[int, ...]],
    starts: frozenset[int] | None,
) -> None:
    """Every relocation writes inside a writable segment and names a symbol of the table; every
    address ld.so calls (constructors, destructors, IFUNC resolvers) is the start of code."""
    relocs = _RELOCS.get(HOST_MACHINE)
    textrel = DT_TEXTREL in tags or bool(tags.get(DT_FLAGS, 0) & _DF_TEXTREL)
    if (DT_JMPREL in tags or DT_PLTREL in tags) and tags.get(DT_PLTREL) != DT_RELA:
        raise _bad(f"DT_PLTREL is {tags.get(DT_PLTREL)}, expected DT_RELA")
    rela = _table(layout, tags, DT_RELA, DT_RELASZ, DT_RELAENT, _RELA_SIZE, "DT_RELA")
    plt = _table(layout, tags, DT_JMPREL, DT_PLTRELSZ, None, _RELA_SIZE, "DT_JMPREL")
    relr = _table(layout, tags, DT_RELR, DT_RELRSZ, DT_RELRENT, 8, "DT_RELR")
    if plt and DT_PLTGOT not in tags:
        raise _bad("PLT relocations without DT_PLTGOT")
    if plt:
        layout.writable(tags[DT_PLTGOT], 24 + len(plt) // _RELA_SIZE * 8, "DT_PLTGOT", textrel)
    nrelative = min(tags.get(DT_RELACOUNT, 0), len(rela) // _RELA_SIZE)
    got_slots: set[int] = set()
    # the PLT's GOT: three reserved words, then one slot per PLT relocation
    plt_got = tags.get(DT_PLTGOT, 0) + 24
    plt_count = sum(
        1
        for _o, info, _a in struct.iter_unpack(f"{fmt}QQq", plt)
        if relocs is None or info & 0xFFFFFFFF != relocs.tlsdesc
    )  # TLSDESC fills .got pairs
    plt_slots = (plt_got, plt_got + 8 * plt_count)
    targets: dict[int, int | None] = {}  # address written -> the code address it will hold (None: not code)
    for index, (offset, info, addend) in enumerate(struct.iter_unpack(f"{fmt}QQq", rela + plt)):
        rtype, sym = info & 0xFFFFFFFF, info >> 32
        if index < nrelative and relocs is not None and rtype != relocs.relative:  # ld.so asserts it
            raise _bad(f"relocation {index} is within DT_RELACOUNT but not a relative relocation")
        width = 8 if relocs is None else relocs.widths.get(rtype)
        if width is None:
            raise _bad(f"relocation {index} has type {rtype}, which the loader does not apply to shared objects")
        if sym >= nsyms:
            raise _bad(f"relocation {index} names symbol {sym} of {nsyms}")
        if relocs is not None and rtype in relocs.symbolic and (not sym or syms[sym][1] >> 4 == 0):
            # ld.so binds the null or a local symbol to the image itself: the slot would point at
            # the ELF header, and whoever writes or calls through it crashes
            raise _bad(f"relocation {index} fills a GOT slot from symbol {sym}, which is not a global symbol")
        if width:
            layout.writable(offset, width, f"relocation {index}", textrel)
        if relocs is not None and rtype in relocs.got:
            # A slot filled twice is a slot left unfilled: code would jump through a stale pointer.
            if offset % 8 or offset in got_slots:
                raise _bad(f"relocation {index} fills GOT slot 0x{offset:x}, misaligned or already filled")
            got_slots.add(offset)
        if (
            relocs is not None
            and index >= len(rela) // _RELA_SIZE
            and rtype != relocs.tlsdesc
            and (rtype not in (relocs.jump_slot, relocs.irelative) or not plt_slots[0] <= offset < plt_slots[1])
        ):
            # every PLT relocation fills its own slot of the PLT's GOT, so together they fill all
            raise _bad(f"PLT relocation {index} (type {rtype}) does not fill a slot of the PLT's GOT")
        if relocs is not None and rtype == relocs.irelative:
            layout.code(addend, f"relocation {index}'s IFUNC resolver", starts)
        if relocs is not None and rtype == relocs.relative:
            targets[offset] = addend
        elif sym and syms[sym][3] != 0 and syms[sym][1] & 0xF in (2, 10):  # a defined function
            targets[offset] = syms[sym][4] + addend
            if syms[sym][1] & 0xF == 10:
                layout.code(syms[sym][4], f"IFUNC resolver of symbol {sym}", starts)
        else:
            targets[offset] = None
    words = struct.unpack(f"{fmt}{len(relr) // 8}Q", relr)
    where = 0
    relr_slots: list[int] = []
    for word in words:  # RELR: an address, then bitmaps of the 63 words after it
        if not word & 1:
            relr_slots.append(word)
            where = word + 8
        else:
            relr_slots.extend(where + 8 * (bit - 1) for bit in range(1, 64) if word >> bit & 1)
            where += 8 * 63
    for slot in relr_slots:  # a relative relocation of the word already in the file
        layout.writable(slot, 8, "DT_RELR", textrel)
        stored = layout.segment(slot, 8)
        in_file = stored is not None and slot + 8 <= stored["p_vaddr"] + stored["p_filesz"]
        targets[slot] = struct.unpack(f"{fmt}Q", layout.read(slot, 8, "DT_RELR"))[0] if in_file else 0
    for tag in (DT_INIT, DT_FINI):
        if tag in tags:  # ld.so calls it whatever its value, 0 included
            layout.code(tags[tag], "DT_INIT" if tag == DT_INIT else "DT_FINI", starts)
    for addr_tag, size_tag, what in (
        (DT_INIT_ARRAY, DT_INIT_ARRAYSZ, "DT_INIT_ARRAY"),
        (DT_FINI_ARRAY, DT_FINI_ARRAYSZ, "DT_FINI_ARRAY"),
    ):
        raw = _table(layout, tags, addr_tag, size_tag, None, 8, what)
        for i, _ in enumerate(struct.iter_unpack(f"{fmt}Q", raw)):
            slot = tags[addr_tag] + 8 * i
            layout.writable(slot, 8, what, textrel)  # relocated in place, as every pointer slot is
            target = targets.get(slot)
            if target is None:
                raise _bad(f"{what} entry {i} is not relocated to a function of the image")
            layout.code(target, f"{what} entry {i}", starts)
