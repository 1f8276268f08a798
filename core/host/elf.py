"""Reading host images: ELF checks, exported symbols and (from DWARF) kernel signatures.

Parsing happens once per distinct image (keyed by digest): programs are often loaded many times.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import platform
import struct
from typing import Any

from ..backend import InvalidBinaryError, SymbolDesc, SymbolKind

_MACHINES = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64", "arm64": "EM_AARCH64", "ppc64le": "EM_PPC64",
             "riscv64": "EM_RISCV", "s390x": "EM_S390"}
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
    _check_header(elf)
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

    if image[:4] != b"\x7fELF":
        raise InvalidBinaryError(
            f"host backend: image is not an ELF shared object (starts with {image[:4]!r}); "
            "build one with `cc -shared -fPIC`"
        )
    try:
        return _inspect(hashlib.blake2b(image, digest_size=16).digest(), image)
    except (ELFError, KeyError, ValueError, struct.error) as exc:  # truncated or malformed
        raise InvalidBinaryError(f"host backend: malformed ELF image: {exc!r}") from None


def _type_kind(die) -> str | None:  # type: ignore[no-untyped-def]
    seen = 0
    while die is not None and seen < 32:
        seen += 1
        tag = die.tag
        if tag in ("DW_TAG_pointer_type", "DW_TAG_array_type"):
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
        if "DW_AT_type" not in die.attributes:  # typedef of void and the like
            return None
        die = die.get_DIE_from_attribute("DW_AT_type")
    return None


def _signatures(elf: Any, kernels: set[str]) -> dict[str, tuple[str, ...]]:
    """Parameter kinds of exported functions, from DWARF (images built with ``-g``)."""
    if not elf.has_dwarf_info():
        return {}
    sigs: dict[str, tuple[str, ...]] = {}
    try:
        dwarf = elf.get_dwarf_info()
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
