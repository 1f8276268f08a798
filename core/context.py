"""Contexts: a set of devices of one platform (plus the implicit host) that own allocations."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .enums import AllocKind
from .errors import InvalidArgumentError
from .memory import allocate

if TYPE_CHECKING:
    from .device import Device
    from .memory import Allocation
    from .pool import Pool


class Context:
    """Devices of one platform sharing memory.  HOST allocations belong to the context and are
    accessible from all its devices; MANAGED ones migrate among them; DEVICE ones live on one.

    ``Context([dev0, dev1])``; the host device may be listed too and is implicit anyway.  Closing
    a context (``close()`` or leaving a ``with`` block) frees the allocations it still owns.
    """

    def __init__(self, devices: Iterable[Device]) -> None:
        from .device import Device

        devs = list(devices) if not isinstance(devices, Device) else [devices]
        if not devs:
            raise InvalidArgumentError("Context needs at least one device, got none")
        for d in devs:
            if not isinstance(d, Device):
                raise InvalidArgumentError(f"Context devices must be pyoffload.Device objects, got {d!r}")
        accelerators = [d for d in devs if not d.host_memory]
        if accelerators:
            devs = accelerators  # the host is implicit in every context
        platforms = {id(d.platform): d for d in devs}
        if len(platforms) > 1:
            names = ", ".join(f"{d.id} ({d.platform.backend}:{d.platform.name})" for d in platforms.values())
            raise InvalidArgumentError(f"devices of different platforms cannot share a context: {names}")
        if len({id(d) for d in devs}) != len(devs):
            raise InvalidArgumentError(f"a device is listed twice in {devs!r}")
        self.devices: tuple[Device, ...] = tuple(devs)
        self.platform = devs[0].platform
        self._rt = self.platform._rt
        self._rt.check_alive()
        self._backend = self.platform._backend
        self._disp = self._backend.dispatch
        self._allocs: dict[int, Allocation] = {}
        self._pools: dict[int, Pool] = {}
        self.handle = self._disp.context_create_impl([d.handle for d in self.devices])
        self.alive = True
        with self._rt.lock:
            self._rt.contexts.append(self)

    @property
    def backend(self) -> str:
        return self._backend.name

    def alloc(self, size: int, kind: AllocKind = AllocKind.DEVICE, device: Device | None = None) -> Allocation:
        """Allocate ``size`` bytes of ``kind``; ``device`` defaults to the context's first device
        (ignored for HOST memory, which has none)."""
        return allocate(self, device, size, kind)

    def close(self) -> None:
        """Free what the context still owns and release it.  Closing twice is harmless."""
        from .memory import free_context_allocations

        if not self.alive:
            return
        free_context_allocations(self)
        self._release_handle()
        with self._rt.lock:
            if self in self._rt.contexts:
                self._rt.contexts.remove(self)
            if self.platform._default_context is self:
                self.platform._default_context = None

    def _release_handle(self) -> None:
        if self.alive:
            self.alive = False
            for pool in self._pools.values():
                pool.release_all()
            self._disp.context_destroy_impl(self.handle)

    def check_alive(self) -> None:
        self._rt.check_alive()
        if not self.alive:
            raise InvalidArgumentError(f"{self!r} was closed")

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        ids = ",".join(d.id for d in self.devices)
        return f"<pyoffload.Context {ids}{'' if self.alive else ' closed'}>"
