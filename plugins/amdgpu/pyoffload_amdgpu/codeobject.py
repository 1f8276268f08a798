"""Reading AMDGPU code objects: format detection, kernels, globals and kernel-argument metadata.

Everything works on the image bytes alone, before any driver call: anything else is rejected as
``INVALID_BINARY`` without touching HIP, and the fake driver "loads" exactly what HIP would see.
A code object is an ELF with ``e_machine == EM_AMDGPU`` (224): kernels are ``STT_FUNC`` symbols
with a ``<name>.kd`` descriptor beside them, globals the other ``STT_OBJECT`` dynamic symbols, and
the ``NT_AMDGPU_METADATA`` note (MessagePack) describes each kernel's arguments and resources.
Clang offload bundles (``hipcc --genco``) are unwrapped to their amdgcn entry.
"""

from __future__ import annotations

import dataclasses
import re
import io
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from pyoffload.backend import InvalidBinaryError, scalar_kind

if TYPE_CHECKING:
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection
    from elftools.elf.segments import NoteSegment

EM_AMDGPU = 224
NT_AMDGPU_METADATA = 32
ELF_MAGIC = b"\x7fELF"
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_BUNDLE_MAGIC = b"CCOB"
INIT_KERNEL = "amdgcn.device.init"
FINI_KERNEL = "amdgcn.device.fini"


@dataclasses.dataclass(frozen=True)
class KernelArg:
    """One explicit kernel argument as the code object's metadata describes it."""

    offset: int
    size: int
    value_kind: str  # "global_buffer", "by_value", "dynamic_shared_pointer", ...
    type_name: str = ""
    pointee_align: int = 0

    @property
    def kind(self) -> str | None:
        """pyoffload's argument kind, or ``None`` when the metadata does not say."""
        if self.value_kind == "global_buffer":
            return "ptr"
        if self.value_kind == "dynamic_shared_pointer":
            return "local"
        if self.value_kind == "by_value":
            # A scalar by its type name; anything else by value (a struct, a union) by its size.
            return scalar_kind(self.type_name) or (f"v{self.size}" if _AGGREGATE.match(self.type_name) else None)
        return None


_AGGREGATE = re.compile(r"^\s*(struct|union)\b")  # clang spells aggregates "struct pair", "union u"


@dataclasses.dataclass(frozen=True)
class KernelInfo:
    """A kernel: its argument layout and the resources the metadata reports for it."""

    name: str
    args: tuple[KernelArg, ...]
    group_segment_size: int = 0  # static LDS bytes; dynamic LDS starts after it
    max_flat_workgroup_size: int = 1024
    private_segment_size: int = 0  # scratch bytes per work-item
    sgpr_count: int = 0
    vgpr_count: int = 0
    wavefront_size: int = 64
    kind: str = "normal"  # "init" / "fini" for the ctor/dtor entry points
    described: bool = True  # False: only a kernel descriptor names it (no metadata)
    reqd_workgroup_size: tuple[int, int, int] | None = None  # OpenCL's reqd_work_group_size

    @property
    def kernarg_size(self) -> int:
        """Bytes of the explicit arguments: offset + size of the last one."""
        return max((a.offset + a.size for a in self.args), default=0)

    @property
    def signature(self) -> tuple[str, ...] | None:
        kinds = tuple(a.kind for a in self.args)
        return None if not self.described or None in kinds else kinds  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True)
class GlobalInfo:
    """A global variable: where it sits in the image and its initial bytes."""

    name: str
    vaddr: int
    size: int
    initial: bytes  # ``size`` bytes: file contents, or zeros for .bss


@dataclasses.dataclass(frozen=True)
class CodeObject:
    """What pyoffload needs to know about one code object, read from its bytes."""

    image: bytes  # the ELF itself (unwrapped from a bundle if need be)
    target: str  # e.g. "amdgcn-amd-amdhsa--gfx90a"; "" if the metadata does not say
    kernels: Mapping[str, KernelInfo]
    globals: Mapping[str, GlobalInfo]

    @property
    def arch(self) -> str:
        """The processor, e.g. ``gfx90a``, without target features."""
        return arch_name(self.target.rsplit("-", 1)[-1]) if self.target else ""


def arch_name(gcn_arch: str) -> str:
    """``gfx90a:sramecc+:xnack-`` -> ``gfx90a``."""
    return gcn_arch.split(":", 1)[0].strip()


def is_amdgpu_elf(image: bytes | memoryview) -> bool:
    """True if the bytes start like a 64-bit little-endian ELF for EM_AMDGPU."""
    head = bytes(image[:20])  # ELFCLASS64 (2), little endian (1), e_machine
    return (
        len(head) == 20 and head[:6] == ELF_MAGIC + b"\x02\x01" and struct.unpack_from("<H", head, 18)[0] == EM_AMDGPU
    )


def unwrap(image: bytes, arch: str = "") -> bytes:
    """Return the AMDGPU ELF inside ``image``: the image itself, or a bundle's amdgcn entry.

    ``arch`` prefers the bundle entry built for that processor.  Raises ``InvalidBinaryError``
    naming what was expected for anything else.
    """
    if is_amdgpu_elf(image):
        return bytes(image)
    if image[: len(BUNDLE_MAGIC)] == BUNDLE_MAGIC:
        return _bundle_entry(image, arch)
    if image[:4] == COMPRESSED_BUNDLE_MAGIC:
        raise InvalidBinaryError(
            "compressed clang offload bundles are not supported; "
            "unbundle with clang-offload-bundler or build without --offload-compress"
        )
    if image[:4] == ELF_MAGIC:
        machine = struct.unpack_from("<H", image, 18)[0] if len(image) >= 20 else -1
        raise InvalidBinaryError(
            f"ELF image for e_machine {machine}, expected an AMDGPU code object (e_machine {EM_AMDGPU})"
        )
    raise InvalidBinaryError(
        "not an AMDGPU code object: expected an ELF with e_machine EM_AMDGPU (224) or a clang offload bundle"
    )


def _bundle_entry(image: bytes, arch: str) -> bytes:
    # Layout (clang-offload-bundler, binary format): magic, u64 count, then per entry
    # u64 offset, u64 size, u64 triple length, triple; offsets are from the start of the file.
    try:
        pos = len(BUNDLE_MAGIC)
        (count,) = struct.unpack_from("<Q", image, pos)
        pos += 8
        entries: list[tuple[str, bytes]] = []
        for _ in range(count):
            offset, size, tlen = struct.unpack_from("<QQQ", image, pos)
            pos += 24
            triple = image[pos : pos + tlen].decode("ascii")
            pos += tlen
            if offset + size > len(image):
                raise InvalidBinaryError(f"offload bundle entry {triple!r} is truncated")
            entries.append((triple, bytes(image[offset : offset + size])))
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidBinaryError(f"malformed clang offload bundle: {exc}") from exc
    amdgcn = [(t, data) for t, data in entries if "amdgcn" in t and is_amdgpu_elf(data)]
    if not amdgcn:
        triples = ", ".join(t for t, _ in entries) or "none"
        raise InvalidBinaryError(f"offload bundle has no amdgcn code object (entries: {triples})")
    for triple, data in amdgcn:
        if arch and arch_name(triple.rsplit("-", 1)[-1]) == arch:
            return data
    return amdgcn[0][1]


def parse(image: bytes, arch: str = "") -> CodeObject:
    """Unwrap and read a code object.  Raises ``InvalidBinaryError`` if it cannot be read."""
    # pyelftools and msgpack are imported on first load, not when pyoffload discovers devices
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    elf_bytes = unwrap(image, arch)
    try:
        elf = ELFFile(io.BytesIO(elf_bytes))
        metadata = _metadata(elf)
        globals_ = _globals(elf, elf_bytes)
        kernels = _kernels(elf, metadata)
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
    ) as exc:  # what pyelftools and msgpack raise on corrupt input
        raise InvalidBinaryError(f"malformed AMDGPU code object: {exc}") from exc
    return CodeObject(elf_bytes, str(metadata.get("amdhsa.target", "")), kernels, globals_)


def _metadata(elf: ELFFile) -> dict[str, Any]:
    for segment in elf.iter_segments():
        if segment["p_type"] != "PT_NOTE":
            continue
        # pyelftools makes a PT_NOTE segment a NoteSegment; its notes' n_type is the raw int where
        # its enums do not name the type, as for AMDGPU's (its annotations say str).
        notes: Iterator[Mapping[str, Any]] = cast("NoteSegment", segment).iter_notes()
        for note in notes:
            if note["n_name"] == "AMDGPU" and note["n_type"] == NT_AMDGPU_METADATA:
                desc = note["n_desc"]
                raw = desc if isinstance(desc, bytes) else str(desc).encode("latin-1")
                import msgpack

                data = msgpack.unpackb(raw, raw=False, strict_map_key=False)
                if not isinstance(data, dict):
                    raise ValueError("AMDGPU metadata note is not a map")
                return data
    return {}


def _dynamic_symbols(elf: ELFFile) -> Sequence[Any]:
    # The loader resolves names through the dynamic symbol table; fall back to .symtab for
    # relocatable-looking images that lack one.
    table = cast("SymbolTableSection | None", elf.get_section_by_name(".dynsym") or elf.get_section_by_name(".symtab"))
    return list(table.iter_symbols()) if table is not None else []


def _kernels(elf: ELFFile, metadata: Mapping[str, Any]) -> dict[str, KernelInfo]:
    symbols = _dynamic_symbols(elf)
    descriptors = {s.name[:-3] for s in symbols if s.name.endswith(".kd") and s["st_info"]["type"] == "STT_OBJECT"}
    kernels: dict[str, KernelInfo] = {}
    for entry in metadata.get("amdhsa.kernels", []):
        args = tuple(
            KernelArg(
                int(a[".offset"]),
                int(a[".size"]),
                str(a[".value_kind"]),
                str(a.get(".type_name", "")),
                int(a.get(".pointee_align", 0)),
            )
            for a in entry.get(".args", [])
            if not str(a[".value_kind"]).startswith("hidden_")
        )
        name = str(entry[".name"])
        kernels[name] = KernelInfo(
            name,
            args,
            int(entry.get(".group_segment_fixed_size", 0)),
            int(entry.get(".max_flat_workgroup_size", 1024)),
            int(entry.get(".private_segment_fixed_size", 0)),
            int(entry.get(".sgpr_count", 0)),
            int(entry.get(".vgpr_count", 0)),
            int(entry.get(".wavefront_size", 64)),
            str(entry.get(".kind", "normal")),
            reqd_workgroup_size=_reqd(entry.get(".reqd_workgroup_size")),
        )
    # Code objects without metadata still name their kernels through descriptors.
    for name in descriptors - kernels.keys():
        kernels[name] = KernelInfo(name, (), described=False)
    return {n: k for n, k in kernels.items() if n in descriptors or not descriptors}


def _globals(elf: ELFFile, elf_bytes: bytes) -> dict[str, GlobalInfo]:
    sections = list(elf.iter_sections())
    result: dict[str, GlobalInfo] = {}
    for sym in _dynamic_symbols(elf):
        if (
            sym["st_info"]["type"] != "STT_OBJECT"
            or sym.name.endswith(".kd")
            or sym["st_shndx"] in ("SHN_UNDEF", "SHN_ABS")
            or sym["st_info"]["bind"] == "STB_LOCAL"
        ):
            continue
        section = sections[sym["st_shndx"]]
        size = int(sym["st_size"])
        if section["sh_type"] == "SHT_NOBITS":
            initial = bytes(size)
        else:
            start = section["sh_offset"] + sym["st_value"] - section["sh_addr"]
            initial = elf_bytes[start : start + size]
        result[sym.name] = GlobalInfo(sym.name, int(sym["st_value"]), size, initial)
    return result


def _reqd(value: Any) -> tuple[int, int, int] | None:
    """``.reqd_workgroup_size`` (three ints) as a tuple; ``None`` where the metadata has none."""
    if not value:
        return None
    dims = tuple(int(v) for v in value)[:3]
    return dims + (1,) * (3 - len(dims))  # type: ignore[return-value]
