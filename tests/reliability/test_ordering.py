"""Ordering and timing: work enqueued on a queue runs after the work before it, stream-ordered
frees wait for the other queues that still use the memory, and event timestamps measure time.

Each case makes the wrong order visible in the data: a slow kernel (the conformance image's
``sleep_spin``, which writes its result only when it finishes) is the earlier work, and what
runs too early reads or overwrites the memory before that write.  Runs on the host backend and
on the twin backend (whose memory the generic layer treats as device memory, so copies between
its platforms are staged through host memory).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import pyoffload

# Iterations of sleep_spin for a kernel of tens of milliseconds: long enough that work which does
# not wait for it certainly runs first, short enough for the suite.
SPIN = 20_000_000


@pytest.fixture(params=["host", "twin"])
def dev(request: Any, twin_runtime: Any) -> Any:
    if request.param == "host":
        return pyoffload.host_device()
    return next(d for d in pyoffload.devices() if d.backend == "twin" and d.handle.label == "a0")


@pytest.fixture
def kernels(dev: Any) -> Any:
    with dev.load_program(dev.disp.conformance_images_impl(dev.handle)["kernels"]) as prog:
        yield prog


def _read_i64(alloc: Any) -> int:
    out = np.zeros(1, np.int64)
    pyoffload.memcpy(out, alloc, 8)
    return int(out[0])


def _other_side(dev: Any) -> tuple[Any, Any]:
    """A device and context with no direct copy path from ``dev``'s default context: a second
    context on the host; the twin backend's other platform."""
    if dev.backend == "twin":
        other = next(d for d in pyoffload.devices() if d.backend == "twin" and d.handle.label == "b0")
        return other, other.default_context
    return dev, pyoffload.Context([dev])


def test_staged_copy_waits_for_earlier_work_on_its_queue(dev: Any, kernels: Any) -> None:
    """On the twin backend the copy between its platforms is staged through host memory as a host
    function on the queue; on the host backend the copy between two contexts is a memmove the
    queue runs.  Either way it must read its source after the kernel ahead of it wrote it."""
    other, ctx = _other_side(dev)
    src = dev.alloc(8)
    dst = ctx.alloc(8, device=other) if ctx is not other.default_context else other.alloc(8)
    pyoffload.memfill(src, np.int64(-1))
    pyoffload.memfill(dst, np.int64(-2))
    q = dev.create_queue()
    try:
        q.launch(kernels.kernel("sleep_spin"), 1, 1, [src, np.int64(SPIN)])
        ev = q.memcpy(dst, src, 8)
        ev.wait()
        got = _read_i64(dst)
        assert got == SPIN, (
            f"the staged copy ran before the kernel ahead of it on its queue wrote its source "
            f"(copied {got}, the kernel writes {SPIN})"
        )
    finally:
        q.destroy()
        src.free()
        dst.free()
        if ctx is not other.default_context:
            ctx.close()


def test_free_async_waits_for_other_queues_before_the_block_is_reused(dev: Any, kernels: Any) -> None:
    q_user, q_free = dev.create_queue(), dev.create_queue()
    try:
        a = q_free.alloc_async(64)
        pyoffload.memfill(a, np.int64(0))
        q_user.launch(kernels.kernel("sleep_spin"), 1, 1, [a, np.int64(SPIN)])  # writes a[0] when it ends
        q_free.free_async(a)
        b = q_free.alloc_async(64)
        assert b.ptr == a.ptr, "the freed block was not reused: this test would check nothing"
        q_free.memfill(b, np.int64(7))
        q_free.wait()
        q_user.wait()
        got = _read_i64(b)
        assert got == 7, (
            f"the reused block was written by the other queue's kernel after its new owner's fill "
            f"(read {got}): free_async did not wait for that queue"
        )
        q_free.free_async(b)
        q_free.wait()
    finally:
        q_user.destroy()
        q_free.destroy()


def _one_device_per_backend() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for d in pyoffload.devices():
        if d.backend != "twin" or d.handle.label == "a0":
            found.setdefault(d.backend, d)
    return found


def test_free_async_waits_for_queues_of_other_backends_that_use_the_memory(twin_runtime: Any) -> None:
    """A queue of another backend that still reads the memory (a copy it orders as a host
    function) is waited for through a waiter: that backend's events never reach this backend's
    wait hook (the OpenCL backend's raised on a host queue's event, and the allocation leaked).
    Every ordered pair of the backends present."""
    devices = _one_device_per_backend()
    pairs = [(mine, theirs) for mine in devices for theirs in devices if mine != theirs]
    assert pairs, "one backend only: this test would check nothing"
    for mine, theirs in pairs:
        dev, other = devices[mine], devices[theirs]
        q_other, q_free = other.create_queue(), dev.create_queue()
        out = np.zeros(8, np.int64)
        try:
            a = q_free.alloc_async(64)
            pyoffload.memfill(a, np.int64(5))
            q_other.launch_host_function(lambda: time.sleep(0.1))
            q_other.memcpy(out, a)  # reads a after the sleep
            assert q_other in (a.users or {}), (mine, theirs, "the other queue is not a user: nothing to check")
            q_free.free_async(a)
            b = q_free.alloc_async(64)
            assert b.ptr == a.ptr, (mine, theirs, "the freed block was not reused: nothing to check")
            q_free.memfill(b, np.int64(7))
            q_free.wait()
            q_other.wait()
            assert (out == 5).all(), (
                mine,
                theirs,
                f"the other backend's copy read the block after its reuse ({out[0]})",
            )
            q_free.free_async(b)
            q_free.wait()
        finally:
            q_other.destroy()
            q_free.destroy()


def _timed(q: Any, kernels: Any, out: Any, iterations: int) -> tuple[float, float]:
    """(elapsed_ms between events recorded around a sleep_spin launch, the same read backwards)."""
    start = q.record()
    q.launch(kernels.kernel("sleep_spin"), 1, 1, [out, np.int64(iterations)])
    end = q.record()
    return end.elapsed_ms(start), start.elapsed_ms(end)


def test_event_timer_measures_the_kernel_between_two_events(dev: Any, kernels: Any) -> None:
    q = dev.create_queue(profiling=True)
    out = dev.alloc(8)
    try:
        _timed(q, kernels, out, 1000)  # warm-up: first-launch costs stay out of the comparison
        # Three of each: a busy machine can stretch any one run (the comparison takes the least).
        shorts, longs = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            short, short_back = _timed(q, kernels, out, SPIN)
            wall_short = (time.perf_counter() - t0) * 1e3
            long, long_back = _timed(q, kernels, out, 4 * SPIN)
            assert short > 0 and long > 0, f"elapsed_ms is not positive around a spinning kernel: {short}, {long}"
            assert short_back == pytest.approx(-short) and long_back == pytest.approx(-long), (
                "start.elapsed_ms(end) is not the negative of end.elapsed_ms(start): the events are not ordered"
            )
            assert short <= wall_short * 1.05 + 1, f"elapsed {short} ms exceeds the {wall_short:.1f} ms the host waited"
            shorts.append(short)
            longs.append(long)
        short, long = min(shorts), min(longs)
        assert long > 2 * short, (
            f"a kernel doing 4x the work measured {long:.2f} ms against {short:.2f} ms: "
            "the timer does not follow the kernel"
        )
    finally:
        q.destroy()
        out.free()
