"""The generic defaults of the optional hooks, registered ``trylast`` in every backend's manager.

A backend that implements one of these hooks and returns a value wins; ``None`` falls through to
the default here, so each hook still has exactly one answer.  Where the default is "the generic
layer does it" (host functions, cross-queue waits, stream-ordered allocation, memory connections),
it returns ``None`` and the caller knows what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .backend import InitFini, hookimpl
from .enums import AllocKind, MemAdvice, MemoryConnection
from .errors import UnsupportedError


@hookimpl(trylast=True)
def context_create_impl(devices: Sequence[Any]) -> Any:
    return tuple(devices)


@hookimpl(trylast=True)
def context_destroy_impl(context: Any) -> None:
    return None


@hookimpl(trylast=True)
def data_alloc_async_impl(context: Any, device: Any, queue: Any, size: int, kind: AllocKind) -> int | None:
    return None


@hookimpl(trylast=True)
def data_free_async_impl(context: Any, device: Any, queue: Any, ptr: int, kind: AllocKind) -> bool | None:
    return None


@hookimpl(trylast=True)
def data_lock_impl(device: Any, ptr: int, size: int) -> int:
    raise UnsupportedError("this device cannot use host memory it did not allocate; allocate HOST memory instead")


@hookimpl(trylast=True)
def memcpy_rect_impl(
    device: Any,
    queue: Any,
    dst: int | memoryview,
    dst_pitch: int,
    dst_slice_pitch: int,
    src: int | memoryview,
    src_pitch: int,
    src_slice_pitch: int,
    width: int,
    height: int,
    depth: int,
) -> None:
    raise UnsupportedError("this backend has no 2D/3D copy: copied row by row")


@hookimpl(trylast=True)
def memfill_rect_impl(device: Any, queue: Any, ptr: int, pitch: int, pattern: bytes, width: int, height: int) -> None:
    raise UnsupportedError("this backend has no 2D fill: filled row by row")


@hookimpl(trylast=True)
def data_unlock_impl(device: Any, ptr: int) -> None:
    return None


@hookimpl(trylast=True)
def data_pinned_info_impl(device: Any, ptr: int) -> tuple[int, int, int] | None:
    return None


@hookimpl(trylast=True)
def data_prefetch_impl(device: Any, queue: Any, ptr: int, size: int, to_device: bool) -> None:
    return None


@hookimpl(trylast=True)
def data_advise_impl(device: Any, ptr: int, size: int, advice: MemAdvice) -> None:
    return None


@hookimpl(trylast=True)
def memory_connection_impl(context_a: Any, device_a: Any, context_b: Any, device_b: Any) -> MemoryConnection | None:
    return None


@hookimpl(trylast=True)
def global_init_fini_impl(device: Any, program: Any) -> InitFini | None:
    return None


@hookimpl(trylast=True)
def kernel_signature_impl(device: Any, kernel: Any) -> Sequence[str] | None:
    return None


@hookimpl(trylast=True)
def kernel_attributes_impl(device: Any, kernel: Any) -> dict[str, Any] | None:
    return None


@hookimpl(trylast=True)
def kernel_packer_impl(device: Any, kernel: Any, kinds: tuple[str, ...]) -> Callable[[tuple[Any, ...]], Any] | None:
    return None


@hookimpl(trylast=True)
def launch_prepare_impl(
    device: Any, queue: Any, kernel: Any, grid: Any, block: Any, args: Any
) -> Callable[..., None] | None:
    return None


@hookimpl(trylast=True)
def enqueue_host_function_impl(device: Any, queue: Any, fn: Callable[[], None]) -> bool | None:
    return None


@hookimpl(trylast=True)
def queue_wait_events_impl(device: Any, queue: Any, events: Sequence[Any]) -> bool | None:
    return None


@hookimpl(trylast=True)
def event_release_impl(device: Any, event: Any) -> None:
    return None


@hookimpl(trylast=True)
def event_elapsed_impl(device: Any, start: Any, end: Any) -> float:
    raise UnsupportedError("this backend does not report event timings")


@hookimpl(trylast=True)
def known_failures_impl(device: Any) -> dict[str, str] | None:
    return None


@hookimpl(trylast=True)
def native_handle_impl(kind: str, handle: Any) -> Any:
    return handle


@hookimpl(trylast=True)
def queue_from_native_impl(context: Any, device: Any, native: Any, profiling: bool) -> Any:
    raise UnsupportedError("this backend cannot wrap a queue created elsewhere")


@hookimpl(trylast=True)
def compile_impl(device: Any, source: str, options: tuple[str, ...]) -> bytes:
    raise UnsupportedError("this backend builds no programs from source; load an image with load_program")


@hookimpl(trylast=True)
def compiler_id_impl(device: Any) -> str | None:
    return None


@hookimpl(trylast=True)
def build_target_impl(device: Any) -> str | None:
    return None


@hookimpl(trylast=True)
def target_compiler_id_impl(target: str, compiler: str | None) -> str | None:
    return None


@hookimpl(trylast=True)
def target_compile_impl(target: str, source: str, options: tuple[str, ...], compiler: str | None) -> bytes | None:
    return None


@hookimpl(trylast=True)
def target_link_impl(
    target: str, sources: tuple[str, ...], options: tuple[str, ...], compiler: str | None
) -> bytes | None:
    return None


@hookimpl(trylast=True)
def link_impl(device: Any, sources: tuple[str, ...], options: tuple[str, ...]) -> bytes | None:
    return None


@hookimpl(trylast=True)
def event_profiling_impl(device: Any, start: Any, end: Any) -> dict[str, int] | None:
    return None
