"""Bad input across the public API, one table row per invalid call.

Each row asserts the exception class, its ``errc``, that the message names the bad value, and
that the call left nothing behind: the registry, every device's pinned map, the program, queue
and context lists are exactly as before.  On the host backend an invalid pointer never reaches
``memmove`` or a kernel: if it did, these rows would crash the interpreter, not raise.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pyoffload
from pyoffload import (
    AllocKind,
    CompileError,
    Errc,
    InvalidArgumentError,
    InvalidBinaryError,
    InvalidHandleError,
    InvalidSizeError,
    InvalidValueError,
    LocalMemory,
    MemAdvice,
    NotFoundError,
    OffloadError,
    OutOfResourcesError,
    UnsupportedError,
)
from pyoffload.host.compiler import packaged_image

from conftest import check_registry, snapshot


class Env:
    """Objects for the rows to misuse: live, freed, destroyed and foreign ones."""

    def __init__(self) -> None:
        self.rt = pyoffload.host_device().rt
        self.dev = pyoffload.host_device()
        self.ctx = self.dev.default_context
        self.twins = [d for d in pyoffload.devices() if d.backend == "twin"]
        self.a = self.dev.alloc(256)  # DEVICE, from the pool
        self.big = self.dev.alloc(1 << 16)  # DEVICE, straight from the backend
        self.h = self.ctx.alloc(256, AllocKind.HOST)
        self.freed = self.dev.alloc(1 << 15)
        self.freed_ptr = self.freed.ptr
        self.freed.free()
        self.buf = np.zeros(4096, np.uint8)
        self.image = packaged_image("conformance_kernels")
        self.prog = self.dev.load_program(self.image)
        self.iota = self.prog.kernel("iota_i32")
        self.noop = self.prog.kernel("noop")
        self.table = self.prog.global_variable("table")
        self.dead_prog = self.dev.load_program(self.image)
        self.dead_kernel = self.dead_prog.kernel("noop")
        self.dead_global = self.dead_prog.global_variable("counter")
        self.dead_prog.unload()
        self.q = self.dev.create_queue()
        self.dq = self.dev.create_queue()
        self.dq_event = self.dq.launch(self.noop, 1, 1)
        self.dq.destroy()
        self.event = self.q.launch(self.noop, 1, 1)
        self.closed_ctx = pyoffload.Context([self.dev])
        self.closed_ctx.close()
        self.t0 = self.twins[0] if self.twins else None
        self.tq = self.t0.create_queue() if self.t0 else None
        self.tq2 = pyoffload.Context([self.t0]).create_queue() if self.t0 else None
        self.ta = self.t0.alloc(512) if self.t0 else None
        self.tprog = self.t0.load_program(self.image) if self.t0 else None
        self.extra: list[Callable[[], Any]] = []

    def close(self) -> None:
        for fn in reversed(self.extra):
            fn()
        self.q.wait()
        for x in (self.a, self.big, self.h, self.ta):
            if x is not None and x.live:
                x.free()
        self.prog.unload()
        self.q.destroy()
        if self.tq is not None:
            self.tq.destroy()
            self.tq2.context.close()
            self.tprog.unload()


@pytest.fixture
def env(twin_runtime):
    e = Env()
    yield e
    e.close()
    check_registry(e.rt)


@dataclasses.dataclass
class Row:
    id: str
    exc: type[BaseException]
    errc: Errc | None  # None for a wrong Python type: a TypeError
    # env -> (the invalid call, a piece of text the message must contain)
    make: Callable[[Env], tuple[Callable[[], Any], str]]
    needs_twin: bool = False


def _pool(e: Env) -> Any:
    """A pool made for one row, destroyed after it."""
    pool = e.dev.create_pool()
    e.extra.append(pool.destroy)
    return pool


def _destroyed_pool(e: Env) -> Any:
    pool = e.dev.create_pool()
    pool.destroy()
    return pool


def hx(p: int) -> str:
    return f"0x{p:x}"


def _lock_then(e: Env, first: slice, second: slice) -> tuple[Callable[[], Any], str]:
    e.dev.lock(e.buf[first])
    e.extra.append(lambda: e.dev.unlock(e.buf[first]))
    view = e.buf[second]
    return (lambda: e.dev.lock(view)), hx(view.ctypes.data)


def _with_view(e: Env) -> tuple[Callable[[], Any], str]:
    h = e.ctx.alloc(64, AllocKind.HOST)
    e._view = h.view()

    def cleanup() -> None:
        e._view = None
        gc.collect()
        h.free()

    e.extra.append(cleanup)
    return (lambda: pyoffload.free(h)), "still exported"


def _unload_with_view(e: Env) -> tuple[Callable[[], Any], str]:
    e._global_view = e.table.allocation.view(np.int32)

    def cleanup() -> None:
        e._global_view = None
        gc.collect()

    e.extra.append(cleanup)
    return (lambda: e.prog.unload()), "'table' (1 export)"


def _struct_arg(e: Env, value: Any) -> tuple[Callable[[], Any], str]:
    prog = e.dev.build_program(
        "struct pair { int a; float b; };\nvoid take(float *out, struct pair p) { out[0] = p.b; }"
    )
    e.extra.append(prog.unload)
    return (lambda: e.q.launch(prog.kernel("take"), 1, 1, [e.a, value])), "argument 1"


def _overflowing_grid(e: Env) -> tuple[Callable[[], Any], str]:
    # Every axis at the device's limit, the block at its own: each is allowed, their product
    # (2**76 work-items on the host) cannot be numbered in 64 bits.
    lim = e.dev.limits
    grid, block = tuple(lim.grid), (lim.block_threads, 1, 1)
    assert grid[0] * grid[1] * grid[2] * block[0] >= 1 << 64, (grid, block)
    return (lambda: e.q.launch(e.noop, grid, block)), "overflows 64 bits"


def _untimed(e: Env) -> tuple[Callable[[], Any], str]:
    # The twin backend leaves event_profiling_impl to the generic default, which, as on CUDA,
    # times only "started" and "ended" (the driver's events give only the times between them).
    q = e.t0.create_queue(profiling=True)
    ev = q.launch(e.tprog.kernel("noop"), 1, 1)
    ev.wait()
    e.extra.append(q.destroy)
    return (lambda: ev.profiling_info("queued")), "'queued'"


def _driver_compiles(e: Env) -> tuple[Callable[[], Any], str]:
    # A device without a build target (OpenCL's: the driver compiles) takes no compiler choice.
    e.dev._target = None
    e.extra.append(lambda: setattr(e.dev, "_target", False))
    return (lambda: e.dev.build_program("int x;", compiler="cc", cache=False)), "compiler='cc'"


def _link_without_linker(e: Env) -> tuple[Callable[[], Any], str]:
    # A device with no build target and no link_impl (as a remote OpenCL device): nothing links.
    e.dev._target = None
    e.extra.append(lambda: setattr(e.dev, "_target", False))
    return (lambda: e.dev.build_program(["int f(void);", "int f(void) { return 1; }"], cache=False)), "cannot link"


def _prepared_new_args(e: Env) -> tuple[Callable[[], Any], str]:
    prepared = e.q.prepare(e.prog.kernel("iota_i32"), 1, 1, [e.a, np.int32(1), np.int32(0)])
    return (lambda: prepared(e.a, np.int32(1))), "takes 3 arguments"


def _fixed_block(e: Env) -> tuple[Callable[[], Any], str]:
    # The host backend's kernels require no work-group size: give a kernel the attributes an
    # OpenCL driver reports for reqd_work_group_size(8, 1, 1), as kernel_attributes_impl would.
    k = e.prog.kernel("iota_i32")
    k._attributes = {**k.attributes, "required_work_group_size": (8, 1, 1)}
    k._block_rule = False
    return (lambda: e.q.launch(k, 1, 16, [e.a, np.int32(1), np.int32(0)])), "required_work_group_size"


ROWS: list[Row] = [
    # --- sizes and kinds ----------------------------------------------------------------
    Row("alloc-size-zero", InvalidSizeError, Errc.INVALID_SIZE, lambda e: (lambda: e.dev.alloc(0), "0")),
    Row("alloc-size-negative", InvalidSizeError, Errc.INVALID_SIZE, lambda e: (lambda: e.dev.alloc(-5), "-5")),
    Row("alloc-size-float", TypeError, None, lambda e: (lambda: e.dev.alloc(1.5), "1.5")),
    Row("alloc-size-str", TypeError, None, lambda e: (lambda: e.dev.alloc("10"), "str")),
    Row("alloc-size-bool", TypeError, None, lambda e: (lambda: e.dev.alloc(True), "bool")),
    Row("alloc-size-none", TypeError, None, lambda e: (lambda: e.dev.alloc(None), "NoneType")),
    Row(
        "alloc-size-2-to-the-64",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: e.dev.alloc(2**64 + 64), str(2**64 + 64)),
    ),
    Row(
        "alloc-size-huge",
        OutOfResourcesError,
        Errc.OUT_OF_RESOURCES,
        lambda e: (lambda: e.dev.alloc(1 << 62), str(1 << 62)),
    ),
    Row("alloc-kind-str", TypeError, None, lambda e: (lambda: e.dev.alloc(16, kind="device"), "'device'")),
    Row("alloc-kind-int", TypeError, None, lambda e: (lambda: e.ctx.alloc(16, kind=3), "3")),
    Row(
        "alloc-alignment-not-power-of-two",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.dev.alloc(64, alignment=48), "48"),
    ),
    Row("alloc-alignment-float", TypeError, None, lambda e: (lambda: e.dev.alloc(64, alignment=64.0), "float")),
    Row(
        "pool-limit-negative",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: e.dev.create_pool(limit=-1), "limit must be >= 0"),
    ),
    Row("pool-limit-float", TypeError, None, lambda e: (lambda: e.dev.create_pool(limit=1.5), "float")),
    Row("alloc-pool-not-pool", TypeError, None, lambda e: (lambda: e.dev.alloc(64, pool="p"), "str")),
    Row(
        "alloc-pool-wrong-kind",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.dev.alloc(64, AllocKind.HOST, pool=_pool(e)), "serves DEVICE memory, not HOST"),
    ),
    Row(
        "alloc-pool-destroyed",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: _destroyed_pool(e).alloc(64), "was destroyed"),
    ),
    Row(
        "pool-destroy-default",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.dev.memory_pool().destroy(), "trim it instead"),
    ),
    Row(
        "alloc-device-not-device",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.ctx.alloc(16, device="gpu0"), "'gpu0'"),
    ),
    Row(
        "alloc-device-of-other-backend",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.ctx.alloc(16, device=e.t0), e.t0.id),
        needs_twin=True,
    ),
    Row(
        "alloc-device-of-other-platform",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.t0.default_context.alloc(16, device=e.twins[2]), e.twins[2].id),
        needs_twin=True,
    ),
    Row(
        "alloc-closed-context",
        InvalidHandleError,
        Errc.INVALID_CONTEXT,
        lambda e: (lambda: e.closed_ctx.alloc(16), "closed"),
    ),
    Row("local-memory-size-zero", InvalidSizeError, Errc.INVALID_SIZE, lambda e: (lambda: LocalMemory(0), "0")),
    # --- free and mem_info: unknown, freed, interior, wrong kind ------------------------------
    Row("free-unknown-pointer", NotFoundError, Errc.NOT_FOUND, lambda e: (lambda: pyoffload.free(0xDEAD0), "0xdead0")),
    Row("free-null", InvalidArgumentError, Errc.INVALID_NULL_POINTER, lambda e: (lambda: pyoffload.free(0), "NULL")),
    Row(
        "free-double-allocation",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.free(e.freed), hx(e.freed_ptr)),
    ),
    Row(
        "free-double-pointer",
        NotFoundError,
        Errc.NOT_FOUND,
        lambda e: (lambda: pyoffload.free(e.freed_ptr), hx(e.freed_ptr)),
    ),
    Row(
        "free-interior-pointer",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.free(e.big.ptr + 8), hx(e.big.ptr + 8)),
    ),
    Row("free-str", TypeError, None, lambda e: (lambda: pyoffload.free("abc"), "str")),
    Row("free-bool", TypeError, None, lambda e: (lambda: pyoffload.free(True), "bool")),
    Row(
        "free-wrong-kind",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.free(e.a, kind=AllocKind.HOST), "HOST"),
    ),
    Row("free-with-live-view", InvalidArgumentError, Errc.INVALID_ARGUMENT, _with_view),
    Row("mem-info-unknown", NotFoundError, Errc.NOT_FOUND, lambda e: (lambda: pyoffload.mem_info(0x1234), "0x1234")),
    Row(
        "mem-info-freed-allocation",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.mem_info(e.freed), hx(e.freed_ptr)),
    ),
    Row(
        "mem-info-one-past-end",
        NotFoundError,
        Errc.NOT_FOUND,
        lambda e: (lambda: pyoffload.mem_info(e.big.ptr + e.big.size), hx(e.big.ptr + e.big.size)),
    ),
    Row("mem-info-float", TypeError, None, lambda e: (lambda: pyoffload.mem_info(1.0), "float")),
    # --- memcpy ------------------------------------------------------------------------------
    Row(
        "memcpy-reads-past-src",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memcpy(e.big, e.buf, 4097), "4097"),
    ),
    Row(
        "memcpy-writes-past-dst",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memcpy(e.a, e.buf, 257), "257"),
    ),
    Row(
        "memcpy-interior-out-of-bounds",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memcpy(e.a.ptr + 250, e.buf, 8), "8"),
    ),
    Row(
        "memcpy-size-negative",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memcpy(e.a, e.buf, -3), "-3"),
    ),
    Row(
        "memcpy-unknown-dst",
        NotFoundError,
        Errc.NOT_FOUND,
        lambda e: (lambda: pyoffload.memcpy(0x4000, e.buf, 8), "0x4000"),
    ),
    Row(
        "memcpy-null-dst",
        InvalidArgumentError,
        Errc.INVALID_NULL_POINTER,
        lambda e: (lambda: pyoffload.memcpy(np.uint64(0), e.buf, 8), "NULL"),
    ),
    Row(
        "memcpy-null-src",
        InvalidArgumentError,
        Errc.INVALID_NULL_POINTER,
        lambda e: (lambda: pyoffload.memcpy(e.a, 0, 8), "NULL"),
    ),
    Row(
        "memcpy-no-size-sides-differ",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memcpy(e.a, e.buf), "4096 bytes"),
    ),
    Row(
        "build-image-unknown-backend",
        NotFoundError,
        Errc.NOT_FOUND,
        lambda e: (lambda: pyoffload.build_image("int x;", target="nosuchbackend:x"), "nosuchbackend"),
    ),
    Row(
        "build-image-unknown-target",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.build_image("int x;", target="host:no-such-machine"), "host:no-such-machine"),
    ),
    Row(
        "build-image-target-int", TypeError, None, lambda e: (lambda: pyoffload.build_image("int x;", target=5), "int")
    ),
    Row(
        "build-missing-compiler",
        OffloadError,
        Errc.HOST_TOOL_NOT_FOUND,
        lambda e: (lambda: e.dev.build_program("int x;", compiler="/nonexistent/cc", cache=False), "/nonexistent/cc"),
    ),
    Row(
        "build-compiler-int",
        TypeError,
        None,
        lambda e: (lambda: e.dev.build_program("int x;", compiler=3, cache=False), "compiler"),
    ),
    Row(
        "host-view-past-end",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.host_view(e.a.ptr + 200, 64), "overruns"),
    ),
    Row(
        "host-view-partial-item",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.host_view(e.a.ptr, 6, np.int32), "int32"),
    ),
    Row(
        "host-view-unknown-pointer",
        NotFoundError,
        Errc.NOT_FOUND,
        lambda e: (lambda: pyoffload.host_view(e.freed_ptr, 8), hx(e.freed_ptr)),
    ),
    Row("host-view-size-float", TypeError, None, lambda e: (lambda: pyoffload.host_view(e.a.ptr, 8.0), "float")),
    Row(
        "host-view-device-memory",
        UnsupportedError,
        Errc.UNSUPPORTED,
        lambda e: (lambda: pyoffload.host_view(e.ta.ptr, 8), "host_view"),
        needs_twin=True,
    ),
    Row(
        "event-profiling-info-not-profiling",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.event.profiling_info("ended"), "profiling=True"),
    ),
    Row(
        "event-profiling-info-unknown-name",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.event.profiling_info("finished"), "'finished'"),
    ),
    Row("event-profiling-info-int", TypeError, None, lambda e: (lambda: e.event.profiling_info(0), "int")),
    Row("event-profiling-info-not-timed", UnsupportedError, Errc.UNSUPPORTED, _untimed, needs_twin=True),
    Row("build-compiler-on-driver-compiled-backend", UnsupportedError, Errc.UNSUPPORTED, _driver_compiles),
    Row(
        "build-link-undefined",
        CompileError,
        Errc.LINK_FAILURE,
        lambda e: (
            lambda: e.dev.build_program(
                ["int f(void);\nvoid k(int *o) { o[0] = f(); }", "int g(void) { return 1; }"], cache=False
            ),
            "undefined reference to `f'",
        ),
    ),
    Row(
        "build-link-no-sources",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.dev.build_program([], cache=False), "empty list of sources"),
    ),
    Row("build-link-unsupported", UnsupportedError, Errc.UNSUPPORTED, _link_without_linker),
    Row("prepared-new-args-count", InvalidArgumentError, Errc.INVALID_ARGUMENT, _prepared_new_args),
    Row(
        "build-not-c",
        CompileError,
        Errc.COMPILE_FAILURE,
        lambda e: (lambda: e.dev.build_program("\nthis is not C", cache=False), "image.c:2:1: error"),
    ),
    Row(
        "memcpy-unknown-src",
        NotFoundError,
        Errc.NOT_FOUND,
        lambda e: (lambda: pyoffload.memcpy(e.buf, 0x4000, 8), "0x4000"),
    ),
    Row(
        "memcpy-freed-dst",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.memcpy(e.freed, e.buf, 8), hx(e.freed_ptr)),
    ),
    Row(
        "memcpy-freed-pointer-src",
        NotFoundError,
        Errc.NOT_FOUND,
        lambda e: (lambda: pyoffload.memcpy(e.buf, e.freed_ptr, 8), hx(e.freed_ptr)),
    ),
    Row(
        "memcpy-readonly-dst",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.memcpy(b"\0" * 16, e.a, 16), "read-only"),
    ),
    Row("memcpy-float-src", TypeError, None, lambda e: (lambda: pyoffload.memcpy(e.a, 3.5, 4), "float")),
    Row(
        "memcpy-strided-src",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.memcpy(e.a, e.buf[::2], 16), "C-contiguous"),
    ),
    Row(
        "memcpy-destroyed-queue",
        InvalidHandleError,
        Errc.INVALID_QUEUE,
        lambda e: (lambda: pyoffload.memcpy(e.a, e.buf, 16, queue=e.dq), "destroyed"),
    ),
    Row(
        "memcpy-queue-of-another-context",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.memcpy(e.ta, e.buf, 16, queue=e.tq2), "cannot order"),
        needs_twin=True,
    ),
    Row(
        "memcpy-object-array-dst",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.memcpy(np.empty(4, dtype=object), e.a, 32), "objects"),
    ),
    Row(
        "memcpy-past-end-of-other-backend-alloc",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memcpy(e.ta, e.big, 513), "513"),
        needs_twin=True,
    ),
    # --- memfill -------------------------------------------------------------------------------
    Row("memfill-int-pattern", TypeError, None, lambda e: (lambda: pyoffload.memfill(e.a, 7, 16), "int")),
    Row(
        "memfill-empty-pattern",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memfill(e.a, b"", 16), "empty"),
    ),
    Row(
        "memfill-size-not-multiple",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memfill(e.a, b"abc", 64), "64"),
    ),
    Row(
        "memfill-past-end",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memfill(e.a, b"\0", 1000), "1000"),
    ),
    Row(
        "memfill-freed",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.memfill(e.freed, b"\0", 8), hx(e.freed_ptr)),
    ),
    Row(
        "memfill-unknown",
        NotFoundError,
        Errc.NOT_FOUND,
        lambda e: (lambda: pyoffload.memfill(0x7777000, b"\0", 8), "0x7777000"),
    ),
    Row(
        "memfill-null",
        InvalidArgumentError,
        Errc.INVALID_NULL_POINTER,
        lambda e: (lambda: pyoffload.memfill(0, b"\0", 8), "NULL"),
    ),
    Row(
        "memcpy-2d-pitch-below-width",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memcpy_2d(e.a, 8, e.buf, 64, 16, 2), "dst pitch 8 is less than the width 16"),
    ),
    Row(
        "memcpy-2d-zero-height",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memcpy_2d(e.a, 16, e.buf, 16, 16, 0), "height must be positive"),
    ),
    Row(
        "memcpy-2d-negative-width",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memcpy_2d(e.a, 16, e.buf, 16, -4, 2), "width must be positive"),
    ),
    Row(
        "memcpy-2d-past-dst",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memcpy_2d(e.a, 32, e.buf, 16, 16, 9), "ends 272 bytes"),
    ),
    Row(
        "memcpy-2d-past-src",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memcpy_2d(e.buf, 16, e.a.ptr + 200, 32, 16, 3), "reads past the end of src"),
    ),
    Row(
        "memcpy-2d-null-dst",
        InvalidArgumentError,
        Errc.INVALID_NULL_POINTER,
        lambda e: (lambda: pyoffload.memcpy_2d(0, 16, e.buf, 16, 16, 2), "NULL"),
    ),
    Row(
        "memcpy-2d-regions-overlap",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.memcpy_2d(e.a.ptr + 8, 32, e.a, 32, 16, 4), "overlap"),
    ),
    Row(
        "memcpy-2d-float-width",
        TypeError,
        None,
        lambda e: (lambda: pyoffload.memcpy_2d(e.a, 16, e.buf, 16, 16.0, 2), "float"),
    ),
    Row(
        "memcpy-3d-slice-pitch-not-multiple",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (
            lambda: pyoffload.memcpy_3d(
                e.a, e.buf, (8, 2, 2), dst_pitch=16, dst_slice_pitch=40, src_pitch=16, src_slice_pitch=32
            ),
            "not a multiple of its pitch",
        ),
    ),
    Row(
        "memcpy-3d-slice-pitch-too-small",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (
            lambda: pyoffload.memcpy_3d(
                e.a, e.buf, (8, 4, 2), dst_pitch=16, dst_slice_pitch=32, src_pitch=16, src_slice_pitch=64
            ),
            "slice pitch 32 is less than",
        ),
    ),
    Row(
        "memcpy-3d-origin-past-pitch",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (
            lambda: pyoffload.memcpy_3d(
                e.a,
                e.buf,
                (8, 2, 1),
                dst_pitch=16,
                dst_slice_pitch=32,
                src_pitch=16,
                src_slice_pitch=32,
                dst_origin=(9, 0, 0),
            ),
            "origin x 9",
        ),
    ),
    Row(
        "memcpy-3d-region-not-a-tuple",
        TypeError,
        None,
        lambda e: (
            lambda: pyoffload.memcpy_3d(
                e.a, e.buf, 64, dst_pitch=16, dst_slice_pitch=32, src_pitch=16, src_slice_pitch=32
            ),
            "region",
        ),
    ),
    Row(
        "memcpy-3d-region-of-two",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (
            lambda: pyoffload.memcpy_3d(
                e.a, e.buf, (8, 2), dst_pitch=16, dst_slice_pitch=32, src_pitch=16, src_slice_pitch=32
            ),
            "3 entries",
        ),
    ),
    Row(
        "memfill-2d-width-not-multiple",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memfill_2d(e.a, 16, np.uint32(1), 6, 2), "multiple of the pattern"),
    ),
    Row(
        "memfill-2d-pitch-below-width",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memfill_2d(e.a, 4, b"\0", 8, 2), "pitch 4 is less than the width 8"),
    ),
    Row(
        "memfill-2d-past-end",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memfill_2d(e.a, 64, b"\0", 8, 5), "writes past the end"),
    ),
    Row(
        "memfill-2d-null",
        InvalidArgumentError,
        Errc.INVALID_NULL_POINTER,
        lambda e: (lambda: pyoffload.memfill_2d(0, 16, b"\0", 8, 2), "NULL"),
    ),
    Row(
        "prefetch-null",
        InvalidArgumentError,
        Errc.INVALID_NULL_POINTER,
        lambda e: (lambda: pyoffload.prefetch(0, 8), "NULL"),
    ),
    Row(
        "advise-null",
        InvalidArgumentError,
        Errc.INVALID_NULL_POINTER,
        lambda e: (lambda: pyoffload.advise(0, 8, MemAdvice.SET_READ_MOSTLY), "NULL"),
    ),
    Row(
        "memfill-past-end-other-backend",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.memfill(e.ta.ptr + 500, np.uint32(1), 16), "16"),
        needs_twin=True,
    ),
    # --- lock / unlock / is_pinned ----------------------------------------------------------------
    Row(
        "lock-allocation", InvalidArgumentError, Errc.INVALID_ARGUMENT, lambda e: (lambda: e.dev.lock(e.a), hx(e.a.ptr))
    ),
    Row("lock-empty", InvalidSizeError, Errc.INVALID_SIZE, lambda e: (lambda: e.dev.lock(e.buf[:0]), "empty")),
    Row("lock-object", TypeError, None, lambda e: (lambda: e.dev.lock(object()), "object")),
    Row(
        "lock-strided",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.dev.lock(e.buf[::4]), "C-contiguous"),
    ),
    Row(
        "lock-extends-end",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: _lock_then(e, slice(0, 64), slice(32, 128)),
    ),
    Row(
        "lock-extends-start",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: _lock_then(e, slice(64, 128), slice(0, 96)),
    ),
    Row(
        "lock-superset",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: _lock_then(e, slice(64, 128), slice(0, 256)),
    ),
    Row(
        "lock-extends-host-allocation",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (
            lambda: e.dev.lock(np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * 512).from_address(e.h.ptr))),
            hx(e.h.ptr),
        ),
    ),
    Row(
        "unlock-never-locked",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.dev.unlock(e.buf[:32]), hx(e.buf.ctypes.data)),
    ),
    Row(
        "unlock-twice",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (
            e.dev.lock(e.buf[:32]),
            e.dev.unlock(e.buf[:32]),
            (lambda: e.dev.unlock(e.buf[:32]), hx(e.buf.ctypes.data)),
        )[-1],
    ),
    Row(
        "unlock-beyond-locked",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (
            e.dev.lock(e.buf[:32]),
            e.extra.append(lambda: e.dev.unlock(e.buf[:32])),
            (lambda: e.dev.unlock(e.buf[:64]), hx(e.buf.ctypes.data)),
        )[-1],
    ),
    Row(
        "unlock-on-other-device",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (
            e.dev.lock(e.buf[:32]),
            e.extra.append(lambda: e.dev.unlock(e.buf[:32])),
            (lambda: e.t0.unlock(e.buf[:32]), e.t0.id),
        )[-1],
        needs_twin=True,
    ),
    Row("is-pinned-str", TypeError, None, lambda e: (lambda: pyoffload.is_pinned("text"), "str")),
    # --- images and names --------------------------------------------------------------------------
    Row(
        "load-empty-image",
        InvalidBinaryError,
        Errc.INVALID_BINARY,
        lambda e: (lambda: e.dev.load_program(b""), "empty"),
    ),
    Row(
        "load-garbage-image",
        InvalidBinaryError,
        Errc.INVALID_BINARY,
        lambda e: (lambda: e.dev.load_program(b"garbage!"), "garb"),
    ),
    Row("load-str-image", TypeError, None, lambda e: (lambda: e.dev.load_program("not bytes"), "str")),
    Row(
        "load-truncated-elf",
        InvalidBinaryError,
        Errc.INVALID_BINARY,
        lambda e: (lambda: e.dev.load_program(e.image[:200]), "ELF"),
    ),
    Row(
        "load-elf-executable",
        InvalidBinaryError,
        Errc.INVALID_BINARY,
        lambda e: (lambda: e.dev.load_program(open("/bin/true", "rb").read()), "exec"),
    ),
    Row(
        "load-on-device-not-in-context",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.dev.load_program(e.image, context=e.t0.default_context), e.dev.id),
        needs_twin=True,
    ),
    Row(
        "kernel-unknown-name",
        NotFoundError,
        Errc.NOT_FOUND,
        lambda e: (lambda: e.prog.kernel("no_such_kernel"), "'no_such_kernel'"),
    ),
    Row("kernel-empty-name", NotFoundError, Errc.NOT_FOUND, lambda e: (lambda: e.prog.kernel(""), "''")),
    Row("kernel-int-name", TypeError, None, lambda e: (lambda: e.prog.kernel(5), "int")),
    Row(
        "kernel-is-a-global",
        InvalidArgumentError,
        Errc.SYMBOL_KIND,
        lambda e: (lambda: e.prog.kernel("counter"), "'counter'"),
    ),
    Row(
        "global-unknown-name",
        NotFoundError,
        Errc.NOT_FOUND,
        lambda e: (lambda: e.prog.global_variable("nothing"), "'nothing'"),
    ),
    Row(
        "global-is-a-kernel",
        InvalidArgumentError,
        Errc.SYMBOL_KIND,
        lambda e: (lambda: e.prog.global_variable("noop"), "'noop'"),
    ),
    Row(
        "global-write-overrun",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: e.table.write(np.zeros(17, np.int32)), "68"),
    ),
    Row(
        "global-write-negative-offset",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: e.table.write(b"\0", offset=-1), "-1"),
    ),
    Row("global-write-empty", InvalidSizeError, Errc.INVALID_SIZE, lambda e: (lambda: e.table.write(b""), "empty")),
    Row(
        "unloaded-program-kernel",
        InvalidHandleError,
        Errc.INVALID_PROGRAM,
        lambda e: (lambda: e.dead_prog.kernel("noop"), "unloaded"),
    ),
    Row(
        "unloaded-program-unload",
        InvalidHandleError,
        Errc.INVALID_PROGRAM,
        lambda e: (lambda: e.dead_prog.unload(), "unloaded"),
    ),
    Row("unload-with-exported-global", InvalidArgumentError, Errc.INVALID_ARGUMENT, _unload_with_view),
    Row(
        "unloaded-program-symbols",
        InvalidHandleError,
        Errc.INVALID_PROGRAM,
        lambda e: (lambda: e.dead_prog.symbols(), "unloaded"),
    ),
    Row(
        "unloaded-global-read",
        InvalidHandleError,
        Errc.INVALID_PROGRAM,
        lambda e: (lambda: e.dead_global.read(), "unloaded"),
    ),
    # --- launches --------------------------------------------------------------------------------
    Row("launch-grid-zero", InvalidValueError, Errc.INVALID_VALUE, lambda e: (lambda: e.q.launch(e.noop, 0, 1), "0")),
    Row(
        "launch-block-four-dims",
        InvalidValueError,
        Errc.INVALID_VALUE,
        lambda e: (lambda: e.q.launch(e.noop, 1, (1, 2, 3, 4)), "(1, 2, 3, 4)"),
    ),
    Row("launch-grid-str", TypeError, None, lambda e: (lambda: e.q.launch(e.noop, "ab", 1), "str")),
    Row("launch-grid-float", TypeError, None, lambda e: (lambda: e.q.launch(e.noop, (1.5,), 1), "float")),
    Row(
        "launch-grid-beyond-limits",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.noop, (2**32, 1, 1), 1), "max_grid_size"),
    ),
    Row(
        "launch-block-beyond-limits",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.noop, 1, (e.dev.info["max_work_group_size"] + 1,)), "max_work_group_size"),
    ),
    Row(
        "launch-local-memory-beyond-limits",
        OutOfResourcesError,
        Errc.OUT_OF_RESOURCES,
        lambda e: (
            lambda: e.q.launch(
                e.prog.kernel("local_reverse"),
                1,
                1,
                [e.a, e.a, LocalMemory(1 << 40), np.int32(1), np.int32(1)],
            ),
            "local_memory_bytes",
        ),
    ),
    Row(
        "launch-arg-struct-size",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: _struct_arg(e, np.zeros((), [("a", "<i4")])[()]),
    ),
    Row(
        "launch-arg-array",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: _struct_arg(e, np.zeros(2, [("a", "<i4"), ("b", "<f4")])),
    ),
    Row(
        "launch-grid-2-to-the-64-work-items",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        # beyond the host's grid limit per axis, or (a device without one) beyond 64 bits in all
        lambda e: (lambda: e.q.launch(e.noop, (2**32, 2**32, 1), 1), "grid (4294967296, 4294967296, 1)"),
    ),
    Row(
        "launch-grid-within-the-limits-overflowing-64-bits",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        _overflowing_grid,
    ),
    Row("launch-block-breaks-required-size", InvalidArgumentError, Errc.INVALID_ARGUMENT, _fixed_block),
    Row(
        "launch-global-size-not-multiple",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.noop, block=64, global_size=1000), "15.625"),
    ),
    Row(
        "launch-grid-and-global-size",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.noop, 2, 8, global_size=16), "global_size 16"),
    ),
    Row("launch-no-grid", TypeError, None, lambda e: (lambda: e.q.launch(e.noop, block=8), "global_size")),
    Row(
        "launch-block-negative",
        InvalidValueError,
        Errc.INVALID_VALUE,
        lambda e: (lambda: e.q.launch(e.noop, 1, (4, -1)), "-1"),
    ),
    Row("launch-not-a-kernel", TypeError, None, lambda e: (lambda: e.q.launch("noop", 1, 1), "str")),
    Row(
        "launch-arg-count",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.iota, 1, 1, [e.a, np.int32(4)]), "got 2"),
    ),
    Row(
        "launch-arg-python-float",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.iota, 1, 1, [e.a, 2.0, np.int32(0)]), "float"),
    ),
    Row(
        "launch-arg-int-overflows-i32",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.iota, 1, 1, [e.a, 2**40, np.int32(0)]), str(2**40)),
    ),
    Row(
        "launch-arg-unknown-pointer",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.iota, 1, 1, [0x1230, np.int32(4), np.int32(0)]), "0x1230"),
    ),
    Row(
        "launch-arg-freed-allocation",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.iota, 1, 1, [e.freed, np.int32(4), np.int32(0)]), hx(e.freed_ptr)),
    ),
    Row(
        "launch-arg-freed-pointer",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.iota, 1, 1, [e.freed_ptr, np.int32(4), np.int32(0)]), hx(e.freed_ptr)),
    ),
    Row(
        "launch-arg-wrong-scalar-type",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.iota, 1, 1, [e.a, np.float32(4), np.int32(0)]), "f32"),
    ),
    Row(
        "launch-arg-complex-scalar",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.iota, 1, 1, [e.a, np.complex64(1), np.int32(0)]), "complex64"),
    ),
    Row(
        "launch-args-generator",
        TypeError,
        None,
        lambda e: (lambda: e.q.launch(e.iota, 1, 1, (x for x in [e.a])), "generator"),
    ),
    Row(
        "launch-arg-pointer-of-other-backend",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.launch(e.iota, 1, 1, [e.ta, np.int32(4), np.int32(0)]), hx(e.ta.ptr)),
        needs_twin=True,
    ),
    Row(
        "launch-kernel-of-other-device",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.tq.launch(e.noop, 1, 1), e.dev.id),
        needs_twin=True,
    ),
    Row(
        "launch-destroyed-queue",
        InvalidHandleError,
        Errc.INVALID_QUEUE,
        lambda e: (lambda: e.dq.launch(e.noop, 1, 1), "destroyed"),
    ),
    Row(
        "launch-unloaded-kernel",
        InvalidHandleError,
        Errc.INVALID_PROGRAM,
        lambda e: (lambda: e.q.launch(e.dead_kernel, 1, 1), "unloaded"),
    ),
    Row(
        "prepare-arg-unknown-pointer",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.prepare(e.iota, 1, 1, [0x5550, np.int32(4), np.int32(0)]), "0x5550"),
    ),
    # --- queues and events ------------------------------------------------------------------------
    Row("queue-wait-after-destroy", InvalidHandleError, Errc.INVALID_QUEUE, lambda e: (e.dq.wait, "destroyed")),
    Row("queue-destroy-twice", InvalidHandleError, Errc.INVALID_QUEUE, lambda e: (e.dq.destroy, "destroyed")),
    Row("queue-query-after-destroy", InvalidHandleError, Errc.INVALID_QUEUE, lambda e: (e.dq.query, "destroyed")),
    Row(
        "queue-host-function-after-destroy",
        InvalidHandleError,
        Errc.INVALID_QUEUE,
        lambda e: (lambda: e.dq.launch_host_function(lambda: None), "destroyed"),
    ),
    Row(
        "queue-alloc-async-after-destroy",
        InvalidHandleError,
        Errc.INVALID_QUEUE,
        lambda e: (lambda: e.dq.alloc_async(64), "destroyed"),
    ),
    Row(
        "queue-alloc-async-size-zero", InvalidSizeError, Errc.INVALID_SIZE, lambda e: (lambda: e.q.alloc_async(0), "0")
    ),
    Row("queue-alloc-async-bad-kind", TypeError, None, lambda e: (lambda: e.q.alloc_async(64, kind="host"), "'host'")),
    Row(
        "queue-free-async-interior",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.free_async(e.big.ptr + 64), "64"),
    ),
    Row(
        "queue-free-async-unknown", NotFoundError, Errc.NOT_FOUND, lambda e: (lambda: e.q.free_async(0x9990), "0x9990")
    ),
    Row(
        "queue-free-async-other-context",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.q.free_async(e.ta), hx(e.ta.ptr)),
        needs_twin=True,
    ),
    Row("queue-host-function-not-callable", TypeError, None, lambda e: (lambda: e.q.launch_host_function(5), "5")),
    Row(
        "create-queue-device-not-in-context",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.dev.create_queue(context=e.t0.default_context), e.dev.id),
        needs_twin=True,
    ),
    Row("event-elapsed-not-event", TypeError, None, lambda e: (lambda: e.event.elapsed_ms(42), "int")),
    Row(
        "event-wait-negative-timeout",
        InvalidValueError,
        Errc.INVALID_VALUE,
        lambda e: (lambda: e.event.wait(timeout=-1), "timeout"),
    ),
    Row("queue-wait-timeout-not-a-number", TypeError, None, lambda e: (lambda: e.q.wait(timeout="1"), "str")),
    Row(
        "event-elapsed-not-profiling",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: e.event.elapsed_ms(e.event), "profiling"),
    ),
    # --- hints, connections, contexts -------------------------------------------------------------
    Row(
        "advise-not-advice",
        TypeError,
        None,
        lambda e: (lambda: pyoffload.advise(e.a, 16, "read_mostly"), "'read_mostly'"),
    ),
    Row(
        "advise-past-end",
        InvalidSizeError,
        Errc.INVALID_SIZE,
        lambda e: (lambda: pyoffload.advise(e.a, 4096, MemAdvice.SET_READ_MOSTLY), "4096"),
    ),
    Row("prefetch-size-zero", InvalidSizeError, Errc.INVALID_SIZE, lambda e: (lambda: pyoffload.prefetch(e.a, 0), "0")),
    Row(
        "prefetch-unknown", NotFoundError, Errc.NOT_FOUND, lambda e: (lambda: pyoffload.prefetch(0x3330, 16), "0x3330")
    ),
    Row(
        "memory-connection-not-pair",
        TypeError,
        None,
        lambda e: (lambda: pyoffload.memory_connection(5, (e.ctx, e.dev)), "5"),
    ),
    Row(
        "memory-connection-not-context",
        TypeError,
        None,
        lambda e: (lambda: pyoffload.memory_connection(("ctx", e.dev), (e.ctx, e.dev)), "'ctx'"),
    ),
    Row(
        "memory-connection-device-not-in-context",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (
            lambda: pyoffload.memory_connection((e.t0.default_context, e.twins[2]), (e.ctx, e.dev)),
            e.twins[2].id,
        ),
        needs_twin=True,
    ),
    Row(
        "memory-connection-closed-context",
        InvalidHandleError,
        Errc.INVALID_CONTEXT,
        lambda e: (lambda: pyoffload.memory_connection((e.closed_ctx, e.dev), (e.ctx, e.dev)), "closed"),
    ),
    Row("context-no-devices", InvalidSizeError, Errc.INVALID_SIZE, lambda e: (lambda: pyoffload.Context([]), "none")),
    Row("context-not-devices", TypeError, None, lambda e: (lambda: pyoffload.Context(["gpu"]), "str")),
    Row(
        "context-device-twice",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.Context([e.dev, e.dev]), e.dev.id),
    ),
    Row(
        "context-across-platforms",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.Context([e.twins[0], e.twins[2]]), e.twins[2].id),
        needs_twin=True,
    ),
    Row(
        "context-across-backends",
        InvalidArgumentError,
        Errc.INVALID_ARGUMENT,
        lambda e: (lambda: pyoffload.Context(_two_backends()), _two_backends()[1].id),
        needs_twin=True,
    ),
]


def _two_backends() -> list[Any]:
    seen: dict[str, Any] = {}
    for d in pyoffload.devices():
        if not d.host_memory:
            seen.setdefault(d.backend, d)
    devs = list(seen.values())
    if len(devs) < 2:
        # only the twin: its two platforms stand in for two backends' worth of devices
        devs = [d for d in pyoffload.devices() if d.backend == "twin"][::2]
    return devs


def _row(r: Any) -> Row:
    return r.values[0] if not isinstance(r, Row) else r


def test_table_is_big_enough():
    assert len(ROWS) >= 60
    assert len({_row(r).id for r in ROWS}) == len(ROWS), "duplicate row ids"


@pytest.mark.parametrize("row", ROWS, ids=[_row(r).id for r in ROWS])
def test_bad_input(env, row):
    if row.needs_twin and len(env.twins) < 3:
        pytest.skip("needs the twin backend")
    call, needle = row.make(env)
    before = snapshot(env.rt)
    with pytest.raises((OffloadError, TypeError)) as info:
        call()
    err = info.value
    assert type(err) is row.exc or isinstance(err, row.exc), f"{type(err).__name__}: {err}"
    if row.errc is None:
        assert not isinstance(err, OffloadError), f"a wrong type is a TypeError, not {err!r}"
    else:
        assert err.errc is row.errc, f"errc {err.errc.name}, expected {row.errc.name}: {err}"
    assert needle.lower() in str(err).lower(), f"message does not name {needle!r}: {err}"
    assert snapshot(env.rt) == before, "the failing call left something behind"
    check_registry(env.rt)


def test_shutdown_twice(fresh_runtime):
    pyoffload.devices()
    pyoffload.shutdown()
    with pytest.raises(OffloadError) as info:
        pyoffload.shutdown()
    assert info.value.errc is Errc.UNINITIALIZED and "shutdown" in str(info.value)


def test_objects_after_shutdown(fresh_runtime):
    dev = pyoffload.host_device()
    a = dev.alloc(128)
    q = dev.create_queue()
    prog = dev.load_program(packaged_image("conformance_kernels"))
    pyoffload.shutdown()
    calls = [
        (lambda: a.free(), Errc.UNINITIALIZED, "shut down"),
        (lambda: dev.alloc(64), Errc.UNINITIALIZED, "shut down"),
        (lambda: q.wait(), Errc.UNINITIALIZED, "shut down"),
        (lambda: prog.kernel("noop"), Errc.UNINITIALIZED, "shut down"),
        (lambda: dev.lock(bytearray(16)), Errc.UNINITIALIZED, "shut down"),
    ]
    for call, errc, needle in calls:
        with pytest.raises(InvalidHandleError) as info:
            call()
        assert info.value.errc is errc and needle in str(info.value), info.value
    # before a new runtime starts, pointers of the old one are UNINITIALIZED (as after olShutDown);
    # a fresh runtime does not know them
    with pytest.raises(OffloadError) as info:
        pyoffload.mem_info(a.ptr)
    assert info.value.errc is Errc.UNINITIALIZED
    fresh = pyoffload.host_device().rt
    with pytest.raises(NotFoundError, match=f"{a.ptr:x}"):
        pyoffload.mem_info(a.ptr)
    assert len(fresh.registry) == 0
