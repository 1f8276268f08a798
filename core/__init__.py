"""pyoffload: a vendor-neutral offload runtime.

Find devices, manage memory, load device images, launch kernels and tear it all down through one
API on every backend::

    import numpy as np, pyoffload
    dev = pyoffload.devices()[0]
    buf = dev.alloc(4 * 1024)
    pyoffload.memcpy(buf, np.arange(1024, dtype=np.int32))

Importing is cheap: the modules behind the public names are imported when a name is first used,
and backends are discovered and initialised on the first call that needs devices.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    from .backend import HOOK_API, LocalMemory
    from .api import Context, Device, devices, host_device, platforms, plugins
    from .memory_pool import MemoryPool
    from .device import Platform
    from .hooks.discovery import PluginReport
    from .memory import Allocation, MemInfo, free, mem_info
    from .pinning import is_pinned
    from .pool import PoolStats
    from .program import GlobalVariable, Kernel, Program
    from .queue import Event, PreparedLaunch, Queue
    from .runtime import on_shutdown, shutdown
    from .context import memory_connection
    from .interop import from_dlpack, from_native
    from .memory import host_view
    from .views import TypedView
    from .build import BuiltImage, build_image
    from .transfer import advise, memcpy, memcpy_2d, memcpy_3d, memfill, memfill_2d, prefetch

__version__ = "0.1.0"

_LAZY = {
    "HOOK_API": "backend",
    "LocalMemory": "backend",
    "Context": "api",
    "Device": "api",
    "MemoryPool": "memory_pool",
    "devices": "api",
    "host_device": "api",
    "platforms": "api",
    "plugins": "api",
    "Platform": "device",
    "PluginReport": "hooks.discovery",
    "Allocation": "memory",
    "MemInfo": "memory",
    "free": "memory",
    "mem_info": "memory",
    "is_pinned": "pinning",
    "PoolStats": "pool",
    "GlobalVariable": "program",
    "Kernel": "program",
    "Program": "program",
    "Event": "queue",
    "PreparedLaunch": "queue",
    "Queue": "queue",
    "on_shutdown": "runtime",
    "shutdown": "runtime",
    "advise": "transfer",
    "memcpy": "transfer",
    "memfill": "transfer",
    "memcpy_2d": "transfer",
    "memcpy_3d": "transfer",
    "memfill_2d": "transfer",
    "prefetch": "transfer",
    "memory_connection": "context",
    "TypedView": "views",
    "host_view": "memory",
    "BuiltImage": "build",
    "build_image": "build",
    "from_dlpack": "interop",
    "from_native": "interop",
}


def __getattr__(name: str) -> Any:
    if name == "backend":  # a submodule an import of pyoffload has always made an attribute
        return importlib.import_module(".backend", __name__)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pyoffload' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "HOOK_API",
    "AllocKind",
    "Allocation",
    "BackendError",
    "BuiltImage",
    "CompileError",
    "Context",
    "Device",
    "DeviceType",
    "Errc",
    "Event",
    "GlobalVariable",
    "InvalidArgumentError",
    "InvalidBinaryError",
    "InvalidHandleError",
    "InvalidSizeError",
    "InvalidValueError",
    "Kernel",
    "LeakWarning",
    "LocalMemory",
    "MemAdvice",
    "MemInfo",
    "MemoryConnection",
    "MemoryPool",
    "NoDevicesError",
    "NotFoundError",
    "OffloadError",
    "OutOfResourcesError",
    "Platform",
    "PluginReport",
    "PoolStats",
    "PreparedLaunch",
    "Program",
    "Queue",
    "SymbolKind",
    "TeardownWarning",
    "TypedView",
    "UnsupportedError",
    "advise",
    "build_image",
    "from_dlpack",
    "from_native",
    "devices",
    "free",
    "host_device",
    "host_view",
    "is_pinned",
    "mem_info",
    "memcpy",
    "memfill",
    "memcpy_2d",
    "memcpy_3d",
    "memfill_2d",
    "memory_connection",
    "on_shutdown",
    "platforms",
    "plugins",
    "prefetch",
    "shutdown",
]
