from collections.abc import Callable
from typing import Any, TypeVar

from ._buffer import BufferBase

class Lock:
    """A non-reentrant lock, as threading.Lock, whose state the C fast path can read; a thread
    that tries to take it twice gets RuntimeError, not a hang."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...
    def release(self) -> None: ...
    def locked(self) -> bool: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, *args: object) -> None: ...

class AllocationBase(BufferBase):
    size: int
    kind: Any
    device: Any
    context: Any
    origin: str | None
    owner: Any
    pool_block: Any
    source_pool: Any
    users: Any
    owned: bool
    live: bool
    prepared: bool
    dl_exports: int

class BlockBase:
    ptr: int
    size: int
    segment: Any
    prev: Any
    next: Any
    queue: Any
    free: bool
    pooled: bool
    seq: int

class FastState:
    def __init__(self, rt: Any, live_state: Any, host_kind: Any, entries: dict[int, Any], to_add: set[int],
                 to_remove: set[int], registry_lock: Lock, live_per_space: dict[str, int], claim_lock: Lock,
                 allocation_type: type[AllocationBase]) -> None: ...

class PoolBase:
    _lists: dict[int, list[Any]]
    _sizes: list[int]
    _lock: Lock
    max_request: int | None
    in_use: int
    peak_in_use: int
    allocations: int
    hits: int
    @property
    def fast_path_state(self) -> FastState | None: ...
    def enable_fast_path(self, state: FastState, ctx: Any, device: Any, kind: Any, space: str,
                         owned_objects: dict[int, Any], exportable: bool, max_alloc: int, /) -> None: ...
    def disable_fast_path(self) -> None: ...

class Lanes:
    def __init__(self, host_kind: Any, /) -> None: ...
    def add(self, device: Any, kind: Any, pool: PoolBase, /) -> None: ...
    def clear(self) -> None: ...
    def alloc(self, device: Any, size: Any, kind: Any, /) -> Any: ...

def free(target: object, kind: object = None, /) -> bool | None: ...
def set_drain(fn: Callable[[], object], /) -> None: ...
def inside_allocator() -> bool: ...

_F = TypeVar("_F", bound=Callable[..., Any])

def free_entry(fn: _F, /) -> _F: ...
def alloc_entry(fn: _F, /) -> _F: ...
