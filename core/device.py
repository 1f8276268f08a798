"""Platforms and the generic device: identity, information, limits and the pinned-memory map.

:class:`GenericDevice` is what every layer above sees of a device (LLVM's ``GenericDeviceTy``):
the backend's handle and dispatcher, the typed information and the limits that the generic
layer checks launches and allocations against, and the pinned-host-memory map.  The public
:class:`pyoffload.Device` (:mod:`pyoffload.api`) adds the factories of the layers above it
(``alloc``, ``create_queue``, ``load_program``, ``lock`` ...); every device object the runtime
hands out is one.
"""

from __future__ import annotations

import re
from typing import Any

from .addresses.pinned import PinnedMap
from .backend import INFO_KEYS, DeviceDesc, PlatformDesc
from .enums import AllocKind, DeviceType
from .hooks.discovery import Backend
from .runtime import Runtime, warn_teardown

UNLIMITED = (1 << 64) - 1


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


class Platform:
    """A backend's driver instance; devices of one platform can share a context."""

    def __init__(self, rt: Runtime, backend: Backend, desc: PlatformDesc) -> None:
        self.rt = rt
        self.plugin = backend
        self.name = desc.name
        self.vendor = desc.vendor
        self.version = desc.version
        self.handle = desc.handle
        self.short_name = _slug(desc.short_name or desc.name)[:16].strip("-")
        self.devices: list[GenericDevice] = []
        self.default_context_slot: Any = None  # set by the public layer on first use

    @property
    def backend(self) -> str:
        return self.plugin.name

    def __repr__(self) -> str:
        return f"<pyoffload.Platform {self.backend}:{self.name!r} devices={len(self.devices)}>"


class Limits:
    """What the generic layer checks before a backend sees a launch or an allocation."""

    __slots__ = ("block_threads", "block", "grid", "local_memory", "max_alloc", "kinds", "host_kinds")

    def __init__(self, info: dict[str, Any]) -> None:
        def dims(key: str) -> tuple[int, int, int]:
            value = info.get(key)
            if not value:
                return (UNLIMITED, UNLIMITED, UNLIMITED)
            got = tuple(int(v) for v in value)[:3]
            return got + (UNLIMITED,) * (3 - len(got))  # type: ignore[return-value]

        self.block_threads: int = int(info.get("max_work_group_size") or UNLIMITED)
        self.block = dims("max_work_item_sizes")
        self.grid = dims("max_grid_size")
        self.local_memory: int = int(info.get("local_memory_bytes") or UNLIMITED)
        self.max_alloc: int = int(info.get("max_alloc_bytes") or UNLIMITED)
        kinds = info.get("memory_kinds")
        # A tuple: membership by identity, without hashing Enum members (which runs Python code).
        self.kinds: tuple[AllocKind, ...] = (
            tuple(AllocKind) if kinds is None else tuple(AllocKind[str(k).upper()] for k in kinds)
        )
        # The kinds whose memory the host may read and write at its address (INFO_KEYS).  HOST and
        # MANAGED memory is the host's by definition, whatever the backend says.
        host = info.get("host_addressable_kinds")
        if host is None:
            host = ("DEVICE",) if info.get("type") == DeviceType.HOST.value else ()
        named = {AllocKind[str(k).upper()] for k in host} | {AllocKind.HOST, AllocKind.MANAGED}
        self.host_kinds: tuple[AllocKind, ...] = tuple(k for k in self.kinds if k in named)


class GenericDevice:
    """One device, as the generic layer sees it.  ``handle`` is the backend's own object."""

    def __init__(self, platform: Platform, desc: DeviceDesc, index: int) -> None:
        self.platform = platform
        self.name = desc.name
        self.vendor = desc.vendor
        self.type: DeviceType = desc.type
        self.handle = desc.handle
        self.index = index  # position among this backend's devices
        self.plugin = platform.plugin
        self.disp = platform.plugin.dispatch
        self.rt = platform.rt
        self._info: dict[str, Any] | None = None
        self.limits_cache: Limits | None = None
        self._target: str | None | bool = False  # False: not asked yet
        self.pins = PinnedMap()
        # Allocation sites of the default context by id(kind) (``Device.alloc``): a site that is
        # no longer open (its context closed) is looked up again.
        self.alloc_sites: dict[int, Any] = {}
        # Whether this device's memory is the host's own (its type is HOST): every pointer of it is
        # a host pointer, and copies to and from it are plain ``memmove``.  (An attribute, not a
        # property: hot paths read it.)
        self.host_memory = desc.type is DeviceType.HOST

    @property
    def backend(self) -> str:
        return self.plugin.name

    @property
    def id(self) -> str:
        """A stable test and selector id: ``host-0``, ``opencl-pocl-cpu-0``."""
        if self.type is DeviceType.HOST:
            return f"{self.backend}-{self.index}"
        return f"{self.backend}-{self.platform.short_name}-{self.type.value}-{self.index}"

    @property
    def info(self) -> dict[str, Any]:
        """The device's information: every key of :data:`pyoffload.backend.INFO_KEYS` (``None``
        where the backend does not know it) plus the backend's own ``"<backend>."`` extras."""
        if self._info is None:
            self.rt.check_alive()
            reported = dict(self.disp.device_info_impl(self.handle) or {})
            info: dict[str, Any] = dict.fromkeys(INFO_KEYS)
            info.update(reported)
            info.update(
                name=self.name,
                vendor=self.vendor,
                type=self.type.value,
                platform=self.platform.name,
                backend=self.backend,
            )
            self._info = info
        return dict(self._info)

    @property
    def target(self) -> str | None:
        """What images for this device are built for (``"host:x86_64"``, ``"cuda:sm_80"``): give
        it to ``pyoffload.build_image`` to build with no device; ``None`` where the backend builds
        only with the device itself (OpenCL: the driver compiles)."""
        if self._target is False:
            self._target = self.disp.build_target_impl(self.handle)
        return self._target  # type: ignore[return-value]

    @property
    def limits(self) -> Limits:
        if self.limits_cache is None:
            self.limits_cache = Limits(self.info)
        return self.limits_cache

    def host_addressable(self, kind: AllocKind = AllocKind.DEVICE) -> bool:
        """Whether this process may read and write this device's memory of ``kind`` at its own
        address (``ctypes``, ``memmove``, another library's I/O), once the work that uses it has
        completed: HOST and MANAGED memory wherever the device supports them, DEVICE memory where
        it is the host's own (the host backend) or the backend says so (info
        ``host_addressable_kinds``: an OpenCL CPU device whose shared virtual memory is the
        process's memory).  Unlike :attr:`host_memory` it says nothing of the device's copies,
        which still go through its queues; it tells code that moves bytes itself (a transport
        reading the memory in place) that it need not stage them."""
        return kind in self.limits.host_kinds

    @property
    def native(self) -> Any:
        """The vendor's own device object (``pycuda.driver.Device``, ``pyopencl.Device`` ...)."""
        return self.disp.native_handle_impl("device", self.handle)

    def teardown(self, at_exit: bool) -> None:
        """Unpin every range pyoffload pinned for this device (at shutdown)."""
        for entry in self.pins.entries():
            self.pins.remove(entry)
            entry.holds.clear()
            if not entry.external:
                try:
                    self.disp.data_unlock_impl(self.handle, entry.base)
                except Exception as exc:
                    warn_teardown(f"unlocking {entry!r}", exc)

    def __repr__(self) -> str:
        return f"<pyoffload.Device {self.id} {self.name!r}>"
