"""Contexts: devices of one platform sharing memory, and what a context owns.

:class:`GenericContext` is the generic layer's context (the public ``pyoffload.Context`` adds the
allocation factory).  It owns, and releases on ``close()``, everything made in it: programs,
queues, allocations, its memory pools and its internal queues (one per device, on which the
synchronous operations run).  It also answers and caches memory connections.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from functools import partial
from typing import Any, Protocol

from .device import GenericDevice
from .enums import AllocKind, MemoryConnection
from .errors import Errc, InvalidArgumentError, InvalidHandleError, InvalidSizeError, got
from .locks import defer, held_by_me
from .pool import CachingAllocator
from .queue_core import QueueCore
from .runtime import dead_runtime_error, warn_teardown


class Owned(Protocol):
    """Programs, queues and allocations a context releases on close, lowest rank first
    (programs' destructors run on the internal queue, then queues, then memory).  Programs and
    queues are adopted by the context; its allocations are found in the runtime's address
    registry, which records every one of them anyway."""

    teardown_rank: int

    def teardown(self, at_exit: bool) -> None: ...


class GenericContext:
    """Devices of one platform sharing memory.  HOST allocations belong to the context and are
    reachable from all its devices; MANAGED ones migrate among them; DEVICE ones live on one."""

    def __init__(self, devices: Iterable[GenericDevice] | GenericDevice) -> None:
        if isinstance(devices, GenericDevice):
            devs = [devices]
        else:
            try:
                devs = list(devices)
            except TypeError:
                raise TypeError(f"Context takes a device or an iterable of devices, got {got(devices)}") from None
        if not devs:
            raise InvalidSizeError("Context needs at least one device, got none")
        for d in devs:
            if not isinstance(d, GenericDevice):
                raise TypeError(f"Context devices must be pyoffload.Device objects, got {got(d)}")
        accelerators = [d for d in devs if not d.host_memory]
        if accelerators:
            devs = accelerators  # the host is implicit in every context
        platforms = {id(d.platform): d for d in devs}
        if len(platforms) > 1:
            names = ", ".join(f"{d.id} ({d.platform.backend}:{d.platform.name})" for d in platforms.values())
            raise InvalidArgumentError(f"devices of different platforms cannot share a context: {names}")
        if len({id(d) for d in devs}) != len(devs):
            raise InvalidArgumentError(f"a device is listed twice: {', '.join(d.id for d in devs)}")
        self.devices: tuple[GenericDevice, ...] = tuple(devs)
        self.platform = devs[0].platform
        self.rt = self.platform.rt
        self.rt.check_alive()
        self.plugin = self.platform.plugin
        self.disp = self.plugin.dispatch
        self._lock = threading.RLock()
        # -- guarded by _lock (each is also read without it: single dict reads are atomic) -----
        # Programs and queues made in this context (close() copies it under the lock).
        self.owned_objects: dict[int, Owned] = {}
        self.internal_queues: dict[int, QueueCore] = {}
        self.pools: dict[tuple[int, int], CachingAllocator] = {}
        # Pools made by create_pool, with the site each allocates through, by id of the pool;
        # a destroyed pool stays until the context releases it (its blocks may be in use).
        self.user_pools: dict[int, tuple[CachingAllocator, Any]] = {}
        # Allocation sites by (id(device), id(kind)), each over one of the pools; closed (``open``
        # cleared) when the context releases its pools.
        self.alloc_sites: dict[tuple[int, int], Any] = {}
        self._connections: dict[tuple[Any, ...], MemoryConnection] = {}  # a cache: races only recompute
        self.handle = self.disp.context_create_impl([d.handle for d in self.devices])
        self.leaked_segments = 0  # segments kept at close for memory still exported
        self.live = True
        with self.rt.lock:
            self.rt.contexts.append(self)

    @property
    def backend(self) -> str:
        return self.plugin.name

    @property
    def alive(self) -> bool:
        return self.live

    @property
    def native(self) -> Any:
        """The vendor's own context object, where the backend has one."""
        return self.disp.native_handle_impl("context", self.handle)

    def check_alive(self) -> None:
        if not self.live:
            if not self.rt.alive:
                raise dead_runtime_error(self.rt)
            raise InvalidHandleError(f"{self!r} was closed", Errc.INVALID_CONTEXT)

    def check_device(self, device: GenericDevice, what: str) -> None:
        if device not in self.devices:
            raise InvalidArgumentError(f"{what}: {device!r} is not in {self!r}")

    # -- what the context owns ----------------------------------------------------------------

    def adopt(self, obj: Owned) -> None:
        with self._lock:
            self.check_alive()
            self.owned_objects[id(obj)] = obj

    def disown(self, obj: Owned) -> None:
        with self._lock:
            self.owned_objects.pop(id(obj), None)

    def live_allocations(self) -> list[Owned]:
        """pyoffload's own allocations made in this context and not yet freed (a snapshot)."""
        return [a for _, _, a in self.rt.registry.items() if a.owned and a.context is self]

    def internal_queue(self, device: GenericDevice | None) -> QueueCore:
        """The context's own queue on ``device`` (its first device for HOST memory), on which the
        synchronous operations run as queued ones followed by a wait."""
        dev = device if device is not None and not device.host_memory else self.devices[0]
        queue = self.internal_queues.get(id(dev))
        if queue is None:
            with self._lock:
                self.check_alive()
                queue = self.internal_queues.get(id(dev))
                if queue is None:
                    queue = QueueCore(dev, self, False, f"internal queue of {self!r} on {dev.id}")
                    self.internal_queues[id(dev)] = queue
        return queue

    def pool(self, device: GenericDevice | None, kind: AllocKind) -> CachingAllocator:
        """The caching allocator for ``kind`` memory of ``device`` (``None`` for HOST memory)."""
        key = (id(device), id(kind))  # ids: hashing an Enum member runs Python code
        pool = self.pools.get(key)
        if pool is None:
            with self._lock:
                self.check_alive()
                pool = self.pools.get(key)
                if pool is None:
                    pool = self._make_pool(device, kind)
                    self.pools[key] = pool
        return pool

    def add_alloc_site(self, key: tuple[int, int], site: Any) -> None:
        """Keep ``site`` (a :class:`pyoffload.memory.AllocSite`) for allocations of ``key``."""
        with self._lock:
            if not self.live:
                site.open = False
            self.alloc_sites[key] = site

    def add_user_pool(self, pool: CachingAllocator, site: Any) -> None:
        """Keep a pool made by ``create_pool`` and its site until the context is released."""
        with self._lock:
            self.check_alive()
            self.user_pools[id(pool)] = (pool, site)

    def _make_pool(self, device: GenericDevice | None, kind: AllocKind) -> CachingAllocator:
        disp, ch = self.disp, self.handle
        dh = device.handle if device is not None else None

        def backend_alloc(size: int) -> int:
            return int(disp.data_alloc_impl(ch, dh, size, kind))

        def backend_free(ptr: int) -> None:
            disp.data_free_impl(ch, dh, ptr, kind)

        def release_siblings() -> int:
            with self._lock:
                others = [p for (dev_id, _), p in self.pools.items() if dev_id == id(device)]
                others += [p for p, site in self.user_pools.values() if site.device is device]
            return sum(other.trim() for other in others if other is not pool)

        pool = CachingAllocator(
            backend_alloc, backend_free, self.rt.settings.pool_threshold, release_siblings, self.rt.registry.lock
        )
        return pool

    # -- memory connections -------------------------------------------------------------------

    def connection(
        self, device: GenericDevice | None, other: GenericContext, other_device: GenericDevice | None
    ) -> MemoryConnection:
        """How memory of ``(self, device)`` reaches ``(other, other_device)``; a device of
        ``None`` (or the host device) means the context's HOST memory.  Cached per pair."""
        host_a = device is None or device.host_memory
        host_b = other_device is None or other_device.host_memory
        key = (None if host_a else device, other, None if host_b else other_device)
        answer = self._connections.get(key)
        if answer is not None:
            return answer
        if self.plugin is not other.plugin:
            # Only host memory on both sides is shared across backends.
            answer = MemoryConnection.UNIFIED if host_a and host_b else MemoryConnection.NONE
        else:
            reported = self.disp.memory_connection_impl(
                self.handle,
                None if host_a else device.handle,  # type: ignore[union-attr]
                other.handle,
                None if host_b else other_device.handle,  # type: ignore[union-attr]
            )
            if reported is not None:
                answer = MemoryConnection(reported)
            elif other is self:
                same = (host_a and host_b) or (not host_a and not host_b and device is other_device)
                answer = MemoryConnection.UNIFIED if same or host_a or host_b else MemoryConnection.MIGRATABLE
            elif device is not None and other_device is not None and device.host_memory and other_device.host_memory:
                answer = MemoryConnection.UNIFIED  # the host's own memory, whatever the context
            else:
                answer = MemoryConnection.NONE
        self._connections[key] = answer
        return answer

    # -- release ------------------------------------------------------------------------------

    def close(self) -> None:
        """Release everything made in the context (programs are unloaded, queues destroyed,
        allocations freed, each waiting for its work first), then the context itself.  Closing
        twice is harmless; using the context afterwards is ``INVALID_CONTEXT``."""
        if not self.live:
            return
        with self._lock:
            owned = list(self.owned_objects.values())
        owned += self.live_allocations()
        owned.sort(key=lambda o: o.teardown_rank)
        for obj in owned:
            obj.teardown(False)
        self._release(at_exit=False)
        with self.rt.lock:
            if self in self.rt.contexts:
                self.rt.contexts.remove(self)
            self.rt.epoch += 1

    def _release(self, at_exit: bool) -> None:
        with self._lock:
            if not self.live:
                return
            self.live = False
            for site in self.alloc_sites.values():
                site.open = False
            self.alloc_sites.clear()
            internal = list(self.internal_queues.values())
            pools = list(self.pools.items())
            for key, (pool, site) in self.user_pools.items():
                site.open = False
                pools.append(((key, 0), pool))
            self.internal_queues.clear()
            self.pools.clear()
            self.user_pools.clear()
        for queue in internal:
            try:
                queue.close(at_exit)
            except Exception as exc:
                warn_teardown(f"closing {queue!r}", exc)
        if self.platform.default_context_slot is self:
            self.platform.default_context_slot = None
        if any(held_by_me(pool.lock) for _, pool in pools):
            # Closed by a finalizer that a garbage collection ran in the middle of one of these
            # pools' updates, on this thread: release the memory once that update is done.
            defer(partial(self._release_memory, pools))
            return
        self._release_memory(pools)

    def _release_memory(self, pools: list[tuple[tuple[int, int], CachingAllocator]]) -> None:
        """Give the pools' cached segments back and destroy the backend's context, unless memory
        of it is still exported (then both are leaked, as the teardown warning said)."""
        leaked = 0
        for _, pool in pools:
            bases, kept = pool.release_all()
            leaked += len(kept)
            for base in bases:
                try:
                    pool.backend_free(base)
                except Exception as exc:
                    warn_teardown(f"releasing cached memory of {self!r}", exc)
        if leaked:
            # Memory of this context is still exported (it was leaked with a warning): destroying
            # the backend's context could unmap it under its consumer.  Leak the context too.
            self.leaked_segments = leaked
            return
        self.disp.context_destroy_impl(self.handle)

    def abandon(self) -> None:
        """In a forked child (one thread; the parent's locks may be held: none is taken here)."""
        self.live = False
        for site in self.alloc_sites.values():
            site.open = False
        for _, site in self.user_pools.values():
            site.open = False
        for queue in self.internal_queues.values():
            queue.abandon()

    def teardown(self, at_exit: bool) -> None:
        """Shutdown: the runtime has released programs, queues and allocations already."""
        self._release(at_exit)

    def __repr__(self) -> str:
        ids = ",".join(d.id for d in self.devices)
        return f"<pyoffload.Context {ids}{'' if self.live else ' closed'}>"


def _side(pair: Any, what: str) -> tuple[GenericContext, GenericDevice | None]:
    if isinstance(pair, GenericContext):
        return pair, None
    try:
        ctx, dev = pair
    except (TypeError, ValueError):
        raise TypeError(f"memory_connection takes (context, device) pairs, got {pair!r}") from None
    if not isinstance(ctx, GenericContext):
        raise TypeError(f"memory_connection: {what} {ctx!r} is not a Context")
    if dev is not None:
        if not isinstance(dev, GenericDevice):
            raise TypeError(f"memory_connection: {what} {dev!r} is not a Device")
        if dev not in ctx.devices and not dev.host_memory:
            raise InvalidArgumentError(f"memory_connection: {dev!r} is not in {ctx!r}")
    return ctx, dev


def memory_connection(a: Any, b: Any) -> MemoryConnection:
    """How memory of ``(ctx_a, dev_a)`` reaches ``(ctx_b, dev_b)``; a device of ``None`` (or the
    host device) means the context's HOST memory.

    UNIFIED: the same pointer works on both sides.  MIGRATABLE: the backend copies directly.
    NONE: copies go through host memory.
    """
    ca, da = _side(a, "first")
    cb, db = _side(b, "second")
    ca.check_alive()
    cb.check_alive()
    return ca.connection(da, cb, db)
