"""pyoffload: a vendor-neutral offload runtime.

Find devices, manage memory, load device images, launch kernels and tear it all down through one
API on every backend::

    import numpy as np, pyoffload
    dev = pyoffload.devices()[0]
    buf = dev.alloc(4 * 1024)
    pyoffload.memcpy(buf, np.arange(1024, dtype=np.int32))

Importing is cheap: backends are discovered and initialised on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .backend import LocalMemory
from .enums import AllocKind, DeviceType, MemAdvice, MemoryConnection, SymbolKind
from .errors import (
    BackendError,
    CompileError,
    Errc,
    InvalidArgumentError,
    InvalidBinaryError,
    InvalidHandleError,
    InvalidSizeError,
    InvalidValueError,
    LeakWarning,
    NoDevicesError,
    NotFoundError,
    OffloadError,
    OutOfResourcesError,
    TeardownWarning,
    UnsupportedError,
)

if TYPE_CHECKING:
    from .context import Context
    from .device import Device, Platform
    from .discovery import PluginReport
    from .memory import Allocation, MemInfo, advise, free, mem_info, memcpy, memfill, memory_connection, prefetch
    from .pinning import is_pinned
    from .program import GlobalVariable, Kernel, Program
    from .queue import Event, PreparedLaunch, Queue
    from .runtime import shutdown

__version__ = "0.1.0"

_LAZY = {
    "Context": "context",
    "Device": "device",
    "Platform": "device",
    "PluginReport": "discovery",
    "Allocation": "memory",
    "MemInfo": "memory",
    "advise": "memory",
    "free": "memory",
    "mem_info": "memory",
    "memcpy": "memory",
    "memfill": "memory",
    "memory_connection": "memory",
    "prefetch": "memory",
    "is_pinned": "pinning",
    "GlobalVariable": "program",
    "Kernel": "program",
    "Program": "program",
    "Event": "queue",
    "PreparedLaunch": "queue",
    "Queue": "queue",
    "shutdown": "runtime",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pyoffload' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def platforms() -> list[Platform]:
    """Every platform of every working backend; the host platform last."""
    from .runtime import current

    return list(current().platforms)


def devices() -> list[Device]:
    """Every device of every working backend; the host device last."""
    from .runtime import current

    return list(current().devices)


def host_device() -> Device:
    """The built-in host backend's device."""
    from .enums import DeviceType
    from .runtime import current

    for d in current().devices:
        if d.type is DeviceType.HOST:
            return d
    raise NotFoundError("the host backend is not available")


def plugins() -> list[PluginReport]:
    """What happened to each installed plugin: ok, no devices, failed, conflict, disabled."""
    from .runtime import current

    return list(current().reports)


__all__ = [
    "AllocKind", "Allocation", "BackendError", "CompileError", "Context", "Device", "DeviceType", "Errc",
    "Event", "GlobalVariable", "InvalidArgumentError", "InvalidBinaryError", "InvalidHandleError",
    "InvalidSizeError", "InvalidValueError", "Kernel", "LeakWarning", "LocalMemory", "MemAdvice", "MemInfo",
    "MemoryConnection", "NoDevicesError", "NotFoundError", "OffloadError", "OutOfResourcesError", "Platform",
    "PluginReport", "PreparedLaunch", "Program", "Queue", "SymbolKind", "TeardownWarning", "UnsupportedError",
    "advise", "devices", "free", "host_device", "is_pinned", "mem_info", "memcpy", "memfill",
    "memory_connection", "platforms", "plugins", "prefetch", "shutdown",
]
