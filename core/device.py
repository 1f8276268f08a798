"""Platforms and devices: what backends report, plus the operations that start from a device."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .backend import DeviceDesc, PlatformDesc
from .enums import AllocKind, DeviceType
from .memory import allocate

if TYPE_CHECKING:
    from .context import Context
    from .discovery import Backend
    from .memory import Allocation
    from .program import Program
    from .queue import Queue
    from .runtime import Runtime


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


class Platform:
    """A backend's driver instance; devices of one platform can share a context."""

    def __init__(self, rt: Runtime, backend: Backend, desc: PlatformDesc) -> None:
        self._rt = rt
        self._backend = backend
        self.name = desc.name
        self.vendor = desc.vendor
        self.version = desc.version
        self.handle = desc.handle
        self.short_name = _slug(desc.short_name or desc.name)[:16].strip("-")
        self.devices: list[Device] = []
        self._default_context: Context | None = None

    @property
    def backend(self) -> str:
        return self._backend.name

    @property
    def default_context(self) -> Context:
        """The context of all this platform's devices, used by ``Device.alloc`` and friends."""
        if self._default_context is None:
            from .context import Context

            with self._rt.lock:
                if self._default_context is None:
                    self._default_context = Context(self.devices)
        return self._default_context

    def __repr__(self) -> str:
        return f"<pyoffload.Platform {self.backend}:{self.name!r} devices={len(self.devices)}>"


class Device:
    """One device.  ``backend`` is the backend's name; ``handle`` is the backend's own object."""

    def __init__(self, platform: Platform, desc: DeviceDesc, index: int) -> None:
        self.platform = platform
        self.name = desc.name
        self.vendor = desc.vendor
        self.type: DeviceType = desc.type
        self.handle = desc.handle
        self.index = index  # position among this backend's devices
        self._backend = platform._backend
        self._disp = platform._backend.dispatch
        self._rt = platform._rt
        self._info: dict[str, Any] | None = None

    @property
    def backend(self) -> str:
        return self._backend.name

    @property
    def id(self) -> str:
        """A stable test/selector id: ``host-0``, ``opencl-pocl-cpu-0``."""
        if self.type is DeviceType.HOST:
            return f"{self.backend}-{self.index}"
        return f"{self.backend}-{self.platform.short_name}-{self.type.value}-{self.index}"

    @property
    def host_memory(self) -> bool:
        """Whether this device's memory is the host's own (the host backend)."""
        return self.type is DeviceType.HOST

    @property
    def info(self) -> dict[str, Any]:
        """All information keys: the backend's ``device_info_impl`` plus the generic ones."""
        if self._info is None:
            self._rt.check_alive()
            info = dict(self._disp.device_info_impl(self.handle) or {})
            info.update(
                name=self.name,
                vendor=self.vendor,
                type=self.type.value,
                platform=self.platform.name,
                backend=self.backend,
            )
            self._info = info
        return self._info

    @property
    def default_context(self) -> Context:
        return self.platform.default_context

    def alloc(self, size: int, kind: AllocKind = AllocKind.DEVICE) -> Allocation:
        """Allocate in the platform's default context; HOST memory belongs to no device."""
        ctx = self.platform._default_context or self.platform.default_context
        return allocate(ctx, self, size, kind)

    def create_queue(self, profiling: bool = False, context: Context | None = None) -> Queue:
        from .queue import Queue

        return Queue(context or self.default_context, self, profiling)

    def load_program(self, image: bytes | bytearray | memoryview, context: Context | None = None) -> Program:
        from .program import Program

        return Program(context or self.default_context, self, image)

    def lock(self, buffer: Any) -> int:
        """Pin a host buffer for this device and return the device-accessible pointer."""
        from .pinning import lock

        return lock(self, buffer)

    def unlock(self, buffer: Any) -> None:
        from .pinning import unlock

        unlock(self, buffer)

    def __repr__(self) -> str:
        return f"<pyoffload.Device {self.id} {self.name!r}>"
