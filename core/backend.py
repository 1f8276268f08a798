"""What a backend author imports: the hook marker and the small records hooks return.

A backend is a module or object with functions marked ``@hookimpl`` whose names are the hook
specifications in :mod:`pyoffload.hookspecs`.  It is registered in the ``pyoffload.plugins``
entry-point group::

    [project.entry-points."pyoffload.plugins"]
    mybackend = "pyoffload_mybackend.plugin"

The generic layer hands each hook only the backend's own handles (whatever the backend returned
from ``init_impl``, ``context_create_impl``, ``load_binary_impl``, ...), never pyoffload's public
objects, so a backend never needs to know about the registry, the pool or the pinned map.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pluggy

from .enums import AllocKind, DeviceType, MemAdvice, MemoryConnection, SymbolKind
from .errors import (
    BackendError,
    CompileError,
    Errc,
    InvalidArgumentError,
    InvalidBinaryError,
    InvalidSizeError,
    InvalidValueError,
    NoDevicesError,
    NotFoundError,
    OffloadError,
    OutOfResourcesError,
    UnsupportedError,
)

PROJECT = "pyoffload"
ENTRY_POINT_GROUP = "pyoffload.plugins"

hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marker for backend hook implementations: ``@hookimpl def data_alloc_impl(...)``."""


@dataclasses.dataclass(frozen=True)
class DeviceDesc:
    """One device as a backend reports it from ``init_impl``.

    ``handle`` is the backend's own object; it is what every later hook receives as ``device``.
    """

    name: str
    vendor: str
    type: DeviceType
    handle: Any


@dataclasses.dataclass(frozen=True)
class PlatformDesc:
    """One platform (a driver instance grouping devices that can share a context)."""

    name: str
    vendor: str
    version: str
    devices: tuple[DeviceDesc, ...]
    handle: Any = None
    short_name: str = ""  # for device ids such as ``opencl-pocl-cpu-0``; default: from ``name``


@dataclasses.dataclass(frozen=True)
class SymbolDesc:
    """A symbol of a loaded program: a kernel, or a global variable with its size in bytes."""

    name: str
    kind: SymbolKind
    size: int = 0


@dataclasses.dataclass(frozen=True)
class InitFini:
    """Global constructor and destructor entry points of a loaded program.

    Each name is a kernel the generic layer launches once, with no arguments, on a 1x1x1 grid,
    synchronously, in list order: ``init`` after load, ``fini`` before unload.
    """

    init: tuple[str, ...] = ()
    fini: tuple[str, ...] = ()


# OpenCL C / HIP scalar type names, as images' kernel metadata spells them, -> parameter kinds
# (the strings ``kernel_signature_impl`` returns).
_C_SCALAR_KINDS = {
    "char": "i8", "signed char": "i8", "uchar": "u8", "unsigned char": "u8", "bool": "u8",
    "short": "i16", "ushort": "u16", "unsigned short": "u16",
    "int": "i32", "uint": "u32", "unsigned int": "u32",
    "long": "i64", "ulong": "u64", "unsigned long": "u64",
    "half": "f16", "float": "f32", "double": "f64",
}


def scalar_kind(type_name: str) -> str | None:
    """The parameter kind of an OpenCL C / HIP scalar type name (``"uint"`` -> ``"u32"``), or
    ``None`` for anything else (vectors, structs), for ``kernel_signature_impl``."""
    return _C_SCALAR_KINDS.get(type_name.strip())


@dataclasses.dataclass(frozen=True)
class LocalMemory:
    """A kernel argument that reserves ``size`` bytes of work-group local (shared) memory."""

    size: int

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or self.size <= 0:
            raise InvalidSizeError(f"LocalMemory size must be a positive int, got {self.size!r}")


__all__ = [
    "AllocKind",
    "BackendError",
    "CompileError",
    "DeviceDesc",
    "DeviceType",
    "ENTRY_POINT_GROUP",
    "Errc",
    "InitFini",
    "InvalidArgumentError",
    "InvalidBinaryError",
    "InvalidSizeError",
    "InvalidValueError",
    "LocalMemory",
    "MemAdvice",
    "MemoryConnection",
    "NoDevicesError",
    "NotFoundError",
    "OffloadError",
    "OutOfResourcesError",
    "PlatformDesc",
    "SymbolDesc",
    "SymbolKind",
    "UnsupportedError",
    "hookimpl",
    "scalar_kind",
]
