"""Generic defaults for the optional hooks, registered ``trylast`` in every backend's manager.

A backend that implements one of these hooks and returns a value wins; ``None`` falls through to
the default here, so each hook still has exactly one answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .backend import hookimpl
from .enums import AllocKind, MemAdvice
from .errors import UnsupportedError


@hookimpl(trylast=True)
def context_create_impl(devices: Sequence[Any]) -> Any:
    return tuple(devices)


@hookimpl(trylast=True)
def context_destroy_impl(context: Any) -> None:
    return None


@hookimpl(trylast=True)
def data_pinned_info_impl(device: Any, ptr: int) -> None:
    return None


@hookimpl(trylast=True)
def data_prefetch_impl(device: Any, queue: Any, ptr: int, size: int, to_device: bool) -> None:
    return None


@hookimpl(trylast=True)
def data_advise_impl(device: Any, ptr: int, size: int, advice: MemAdvice) -> None:
    return None


@hookimpl(trylast=True)
def data_alloc_async_impl(context: Any, device: Any, queue: Any, size: int, kind: AllocKind) -> None:
    return None


@hookimpl(trylast=True)
def data_free_async_impl(context: Any, device: Any, queue: Any, ptr: int, kind: AllocKind) -> None:
    return None


@hookimpl(trylast=True)
def global_init_fini_impl(device: Any, program: Any) -> None:
    return None


@hookimpl(trylast=True)
def kernel_signature_impl(device: Any, kernel: Any) -> None:
    return None


@hookimpl(trylast=True)
def launch_prepare_impl(device: Any, queue: Any, kernel: Any, grid: Any, block: Any, args: Any) -> None:
    return None


@hookimpl(trylast=True)
def event_elapsed_impl(device: Any, start: Any, end: Any) -> float:
    raise UnsupportedError("this backend does not report event timings")


@hookimpl(trylast=True)
def known_failures_impl(device: Any) -> dict[str, str]:
    return {}


@hookimpl(trylast=True)
def memory_connection_impl(context_a: Any, device_a: Any, context_b: Any, device_b: Any) -> None:
    # None lets the generic layer give its own answer (see pyoffload.memory.memory_connection).
    return None
