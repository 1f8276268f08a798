"""Memory pools as objects: the public side of the caching allocators (:mod:`pyoffload.pool`).

The pool behind ``alloc`` of each (context, device, kind), and the pools ``create_pool`` makes,
each with a cache, limit and statistics of its own, allocated from through an allocation site of
its own (:class:`pyoffload.memory.AllocSite`), so that ``free`` returns memory to the pool it came
from without asking which.
"""

from __future__ import annotations

import operator
from typing import Any

from .checks import as_int
from .context import GenericContext
from .device import GenericDevice
from .enums import AllocKind
from .errors import InvalidArgumentError, InvalidSizeError, got
from .memory import AllocSite, Allocation, allocate
from .pool import CachingAllocator, PoolStats
from .queue_core import QueueCore

__all__ = ["MemoryPool"]


def bytes_or_none(value: Any, what: str) -> int | None:
    """A byte count of a pool's property: ``None`` or an integer >= 0."""
    if value is None:
        return None
    n = as_int(value, what)
    if n < 0:
        raise InvalidSizeError(f"{what} must be >= 0 bytes, got {n}")
    return n


class MemoryPool:
    """A caching allocator of one (context, device, kind): allocation, statistics and controls.

    Each (context, device, kind) has the pool behind ``alloc`` (``Device.memory_pool``,
    ``Context.memory_pool``); ``create_pool`` makes more, each with its own cache, limit and
    statistics (UR's ``urUSMPoolCreate``, CUDA's memory pools).  ``alloc(size)`` allocates from
    this pool (as does ``alloc(..., pool=p)``); ``free`` returns the memory to the pool it came
    from.

    ``stats()`` reports bytes in use, cached and reserved (with peaks), segments and counters;
    ``trim(keep=0)`` gives cached segments back to the backend; ``limit`` caps the bytes reserved
    from the backend (``None``: no cap; beyond it an allocation first trims, then fails with
    ``OUT_OF_RESOURCES``); ``release_threshold`` bounds the bytes kept cached after a free
    (``None``: no bound; a free that leaves more trims); ``max_request`` bounds the sizes the pool
    serves (``None``: every size; 0: the pool is off and every allocation goes straight to the
    backend).  ``destroy()`` ends a created pool.
    """

    def __init__(
        self,
        allocator: CachingAllocator,
        where: str,
        context: GenericContext,
        device: GenericDevice | None,
        kind: AllocKind,
        site: AllocSite | None = None,
    ) -> None:
        self._allocator = allocator
        self._where = where
        self.context = context
        self.device = device  # None for HOST memory
        self.kind = kind
        self._site = site  # the site of a created pool (None: the pool behind alloc)
        self._destroyed = False

    @property
    def created(self) -> bool:
        """Made by ``create_pool`` (else: the pool behind ``alloc``, which cannot be destroyed)."""
        return self._site is not None

    def alloc(self, size: int, alignment: int | None = None) -> Allocation:
        """Allocate ``size`` bytes from this pool (``queue.alloc_async(size, kind, pool=p)``
        allocates from it in a queue's order)."""
        return self.alloc_for(self.context, self.device, self.kind, size, alignment, None)

    def alloc_for(
        self,
        context: Any,
        device: Any,
        kind: Any,
        size: int,
        alignment: int | None,
        queue: QueueCore | None,
    ) -> Allocation:
        """An allocation of ``kind`` on ``device`` in ``context`` asked of this pool (``alloc``,
        ``Context.alloc``, ``Device.alloc`` and ``Queue.alloc_async`` with ``pool=``): refused
        unless the pool serves exactly that (``device`` ``None``: the pool's)."""
        if context is not self.context:
            raise InvalidArgumentError(f"alloc: {self!r} belongs to {self.context!r}, not {context!r}")
        if kind is not self.kind:
            raise InvalidArgumentError(
                f"alloc: {self!r} serves {self.kind.name} memory, not {getattr(kind, 'name', kind)}"
            )
        if self.device is not None and device is not None and device is not self.device:
            raise InvalidArgumentError(f"alloc: {self!r} serves {self.device.id}, not {device.id}")
        site = self._site
        if site is None:
            return allocate(self.context, self.device, size, self.kind, queue, alignment)
        if self._destroyed:
            raise InvalidArgumentError(f"alloc: {self!r} was destroyed")
        return site.allocate(size, queue, alignment)

    def destroy(self) -> None:
        """End a pool made by ``create_pool``: no allocation comes from it any more, its cached
        memory goes back to the backend now, and each block still in use goes back when it is
        freed (as ``cuMemPoolDestroy``).  Destroying twice is harmless; the pool behind ``alloc``
        cannot be destroyed (``INVALID_ARGUMENT``): trim it instead."""
        if self._site is None:
            raise InvalidArgumentError(f"destroy: {self!r} is the pool behind alloc; trim it instead")
        self._destroyed = True
        self._site.open = False
        with self._allocator.lock:
            self._allocator.release_threshold = 0
        self._allocator.trim()

    def stats(self) -> PoolStats:
        return self._allocator.stats()

    def trim(self, keep: int = 0) -> int:
        """Release cached memory until at most ``keep`` bytes stay cached; the bytes released."""
        return self._allocator.trim(keep)

    @property
    def limit(self) -> int | None:
        return self._allocator.limit

    @limit.setter
    def limit(self, value: int | None) -> None:
        value = None if value is None else operator.index(value)
        with self._allocator.lock:
            self._allocator.limit = value

    @property
    def release_threshold(self) -> int | None:
        return self._allocator.release_threshold

    @release_threshold.setter
    def release_threshold(self, value: int | None) -> None:
        value = bytes_or_none(value, "release_threshold")
        with self._allocator.lock:
            self._allocator.release_threshold = value
        self._allocator.keep_within_threshold()

    @property
    def max_request(self) -> int | None:
        return self._allocator.max_request

    @max_request.setter
    def max_request(self, value: int | None) -> None:
        value = None if value is None else operator.index(value)
        with self._allocator.lock:
            self._allocator.max_request = value

    @property
    def enabled(self) -> bool:
        return self._allocator.enabled

    @enabled.setter
    def enabled(self, on: bool) -> None:
        with self._allocator.lock:
            if on and not self._allocator.enabled:
                self._allocator.max_request = None
            elif not on:
                self._allocator.max_request = 0
        if not on:
            self._allocator.trim()

    def __repr__(self) -> str:
        s = self.stats()
        state = " destroyed" if self._destroyed else ""
        return f"<pyoffload.MemoryPool {self._where}{state}: {s.in_use_bytes} in use, {s.cached_bytes} cached>"


def check_pool(pool: Any) -> MemoryPool:
    if not isinstance(pool, MemoryPool):
        raise TypeError(f"alloc: pool must be a pyoffload.MemoryPool, got {got(pool)}")
    return pool


def where(ctx: GenericContext, device: GenericDevice | None, kind: AllocKind, created: bool = False) -> str:
    made = "created pool of " if created else ""
    return f"{made}{kind.name} memory of {device.id if device else ctx.backend + ' host'}"
