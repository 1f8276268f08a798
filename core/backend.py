"""What a backend author imports: the hook marker, the hook-API version and the records hooks return.

A backend is a module (or object) with functions marked ``@hookimpl`` named after the hook
specifications in :mod:`pyoffload.hookspecs`, and a module attribute ``HOOK_API`` naming the
version of the contract it was written for::

    from pyoffload.backend import hookimpl

    HOOK_API = (1, 0)   # the contract's version you wrote the backend for: a literal, not an import

(Importing ``pyoffload.backend.HOOK_API`` would always claim the installed runtime's version, so the
check could never refuse the backend.)

It is registered in the ``pyoffload.plugins`` entry-point group::

    [project.entry-points."pyoffload.plugins"]
    mybackend = "pyoffload_mybackend.plugin"

Hooks receive only the backend's own handles (whatever it returned from ``init_impl``,
``context_create_impl``, ``load_binary_impl``, ...), never pyoffload's public objects, so a
backend needs to know nothing about the registry, the pools, the pinned map or the queues' ledgers.
Every record below is described field by field in ``docs/plugin-guide.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast, overload

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

HOOK_API: tuple[int, int] = (1, 2)
"""The hook contract's version ``(major, minor)``.  A plugin sets ``HOOK_API`` in its module to the
version it was written for; a plugin of another major version, or of a newer minor version than
this runtime's, is listed by ``pyoffload plugins`` with the reason and not loaded.  Minor versions
only add optional hooks and record fields with defaults."""

_F = TypeVar("_F", bound=Callable[..., object])


class HookimplMarker(Protocol):
    """pluggy's marker, as a type checker should see it: ``@hookimpl`` and
    ``@hookimpl(trylast=True)`` both return the function they mark, unchanged."""

    @overload
    def __call__(self, function: _F, /) -> _F: ...

    @overload
    def __call__(
        self,
        *,
        hookwrapper: bool = ...,
        optionalhook: bool = ...,
        tryfirst: bool = ...,
        trylast: bool = ...,
        specname: str | None = ...,
        wrapper: bool = ...,
    ) -> Callable[[_F], _F]: ...


hookimpl = cast(HookimplMarker, pluggy.HookimplMarker(PROJECT))
"""Marker for backend hook implementations: ``@hookimpl def data_alloc_impl(...)``."""


@dataclasses.dataclass(frozen=True)
class DeviceDesc:
    """One device, as a backend reports it from ``init_impl``.

    ``name``/``vendor``: for people.  ``type``: GPU, CPU or ACCELERATOR for a device with memory of
    its own; HOST only for a device whose memory *is* the host's (any pointer of it may be
    dereferenced by the host): the generic layer then copies to and from it with ``memmove``
    and never calls the copy hooks.  ``handle``: the backend's own object, passed back as
    ``device`` to every later hook.
    """

    name: str
    vendor: str
    type: DeviceType
    handle: Any


@dataclasses.dataclass(frozen=True)
class PlatformDesc:
    """One platform: a driver instance whose devices can share a context.

    ``short_name`` names it in device ids (``opencl-pocl-cpu-0``); empty means "from ``name``".
    ``handle`` is informational (``Platform.handle``); no hook receives it.
    """

    name: str
    vendor: str
    version: str
    devices: tuple[DeviceDesc, ...]
    handle: Any = None
    short_name: str = ""


@dataclasses.dataclass(frozen=True)
class SymbolDesc:
    """A symbol of a loaded program: a kernel, or a global variable with its size in bytes."""

    name: str
    kind: SymbolKind
    size: int = 0


@dataclasses.dataclass(frozen=True)
class InitFini:
    """A program's global constructor and destructor entry points.

    Each entry is the name of a kernel of the program; the generic layer launches it once, with no
    arguments, on a 1x1x1 grid, on the context's internal queue, and waits: ``init`` in order right
    after load, ``fini`` in order right before unload (also at shutdown and interpreter exit, in
    reverse load order).  A platform whose loader runs constructors itself (``dlopen``) returns
    nothing here.
    """

    init: tuple[str, ...] = ()
    fini: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class LocalMemory:
    """A kernel argument that reserves ``size`` bytes of work-group local (shared) memory."""

    size: int

    def __post_init__(self) -> None:
        import operator

        try:
            size = operator.index(self.size)
        except TypeError:
            raise TypeError(
                f"LocalMemory size must be an integer, got {self.size!r} ({type(self.size).__name__})"
            ) from None
        if not 0 < size < 1 << 64:
            raise InvalidSizeError(f"LocalMemory size must be positive and below 2**64, got {size}")
        object.__setattr__(self, "size", size)


PARAM_KINDS: tuple[str, ...] = (
    "ptr",
    "local",
    "i8",
    "i16",
    "i32",
    "i64",
    "u8",
    "u16",
    "u32",
    "u64",
    "f16",
    "f32",
    "f64",
)
"""The parameter kinds a kernel signature (``kernel_signature_impl``) and a packer
(``kernel_packer_impl``) speak: a pointer, local memory, or a scalar of that width.  Besides these,
``"v<N>"`` (``"v8"``) is an aggregate of ``N`` bytes passed by value (a C struct or union, UR's
``urKernelSetArgValue`` with a struct): a signature reports it where the image gives the size, and
a packer receives a ``numpy.void`` of exactly ``N`` bytes (its ``dtype`` has the fields, for ABIs
that pass structs by their members' classes; :func:`c_alignment` gives its C alignment)."""


def struct_kind(kind: str) -> int | None:
    """The byte size of a by-value aggregate kind (``"v8"`` -> 8), ``None`` for any other kind."""
    if kind[:1] == "v" and kind[1:].isdigit():
        return int(kind[1:])
    return None


def c_alignment(dtype: Any) -> int:
    """The alignment a C compiler gives a struct laid out as numpy ``dtype``: the largest of its
    members' (each scalar aligned to its size, complex to its part's), 1 for raw bytes."""
    import numpy as np

    dtype = np.dtype(dtype)
    if dtype.fields:
        return max((c_alignment(f[0]) for f in dtype.fields.values()), default=1)
    if dtype.subdtype is not None:
        return c_alignment(dtype.subdtype[0])
    if dtype.kind == "V":
        return 1
    size: int = dtype.itemsize
    return max(1, size // 2 if dtype.kind == "c" else size)


# OpenCL C / HIP / CUDA scalar type names, as images' kernel metadata spells them.
_C_SCALAR_KINDS = {
    "char": "i8",
    "signed char": "i8",
    "uchar": "u8",
    "unsigned char": "u8",
    "bool": "u8",
    "short": "i16",
    "ushort": "u16",
    "unsigned short": "u16",
    "int": "i32",
    "uint": "u32",
    "unsigned int": "u32",
    "long": "i64",
    "ulong": "u64",
    "unsigned long": "u64",
    "half": "f16",
    "float": "f32",
    "double": "f64",
}


def scalar_kind(type_name: str) -> str | None:
    """The parameter kind of a C scalar type name (``"uint"`` -> ``"u32"``), or ``None`` for
    anything else (vectors, structs): a helper for ``kernel_signature_impl``."""
    return _C_SCALAR_KINDS.get(type_name.strip())


INFO_KEYS: dict[str, str] = {
    "name": "the device's name",
    "vendor": "the vendor's name",
    "driver_version": "the driver's version, as the driver spells it",
    "type": "gpu, cpu, host or accelerator",
    "backend": "the backend's name (filled in by the generic layer)",
    "platform": "the platform's name (filled in by the generic layer)",
    "compute_units": "streaming multiprocessors, compute units, cores",
    "max_work_group_size": "the most work-items in one work-group (block)",
    "max_work_item_sizes": "the largest block per dimension, a 3-tuple",
    "max_grid_size": "the most work-groups per dimension, a 3-tuple",
    "global_memory_bytes": "the device's memory",
    "local_memory_bytes": "local (shared) memory one work-group can use",
    "max_alloc_bytes": "the largest single allocation",
    "clock_mhz": "the peak clock",
    "sub_group_size": "warp / wavefront / SIMD width",
    "address_bits": "bits of a device pointer",
    "dlpack_device_types": "the DLPack device type of each allocation kind, a dict of AllocKind name -> "
    "DLDeviceType (kDLCUDA 2, kDLCUDAHost 3, kDLOpenCL 4, kDLROCM 10, kDLROCMHost 11, "
    "kDLCUDAManaged 13); absent: kDLCPU for host-accessible memory, else kDLExtDev",
    "memory_kinds": "the allocation kinds the device supports, a tuple of AllocKind names "
    "(absent: all three); the generic layer refuses others with UNSUPPORTED",
    "host_addressable_kinds": "the allocation kinds whose memory this process may read and write at its "
    "address once the work using it has completed, a tuple of AllocKind names (absent: HOST and MANAGED, "
    "and DEVICE where the device's type is host); an answer, not a check: a CPU device's memory, say",
}
"""The device information keys with the same meaning on every backend (``Device.info``).  A
backend's ``device_info_impl`` returns those it knows (absent keys read as ``None``) and may add
its own extras under a ``"<backend>."`` prefix (``"opencl.extensions"``)."""

KERNEL_ATTRIBUTE_KEYS: dict[str, str] = {
    "max_work_group_size": "the most work-items a work-group of this kernel may have on the device",
    "preferred_work_group_multiple": "block sizes should be a multiple of this (warp, SIMD width)",
    "local_memory_bytes": "static local (shared) memory the kernel uses",
    "private_memory_bytes": "private (scratch) memory per work-item",
    "registers": "registers per work-item",
    "required_work_group_size": "the block the kernel was compiled for, a 3-tuple (OpenCL's reqd_work_group_size, "
    "AMDGPU's .reqd_workgroup_size); None: any block within the limits",
}
"""Kernel attribute keys with the same meaning on every backend (``Kernel.attributes``)."""


__all__ = [
    "AllocKind",
    "BackendError",
    "CompileError",
    "DeviceDesc",
    "DeviceType",
    "ENTRY_POINT_GROUP",
    "Errc",
    "HOOK_API",
    "INFO_KEYS",
    "InitFini",
    "InvalidArgumentError",
    "InvalidBinaryError",
    "InvalidSizeError",
    "InvalidValueError",
    "KERNEL_ATTRIBUTE_KEYS",
    "LocalMemory",
    "MemAdvice",
    "MemoryConnection",
    "NoDevicesError",
    "NotFoundError",
    "OffloadError",
    "OutOfResourcesError",
    "PARAM_KINDS",
    "PlatformDesc",
    "SymbolDesc",
    "SymbolKind",
    "UnsupportedError",
    "c_alignment",
    "hookimpl",
    "scalar_kind",
    "struct_kind",
]
