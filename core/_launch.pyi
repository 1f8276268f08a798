from collections.abc import Callable, Sequence
from typing import Any

class EventBase:
    queue: Any
    seq: int
    marker: Any

class QueueBase:
    _lock: Any
    rt: Any
    disp: Any
    backlog: Any
    seq: int
    submitted: int
    live: bool
    profiling: bool
    def enqueue_launch(self, prog: Any, allocs: Sequence[Any], fn: Callable[..., object],
                       args: tuple[Any, ...], /) -> Any: ...

class PreparedBase:
    queue: Any
    kernel: Any
    _program: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: Any
    _allocs: tuple[Any, ...]
    _fast: Callable[[], None] | None
    _call: Callable[[], Any]
    _epoch: int
    _binder: Any
    def __call__(self) -> Any: ...
    def launch(self) -> Any: ...

def configure(event_type: type[EventBase], loaded_state: object, offload_error: type[BaseException],
              invalid_argument: type[BaseException], /) -> None: ...
