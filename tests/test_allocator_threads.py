"""Allocation and free under threads, interrupts, finalizers and teardown: the allocator's rules
hold whoever runs them and wherever they are interrupted.

Each test here asserts behaviour: counts that stay consistent, memory that is never freed under an
export, locks that are never left held, frees from finalizers that are never lost.
"""

from __future__ import annotations

import gc
import random
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import pyoffload
from pyoffload import AllocKind, InvalidArgumentError, NotFoundError, locks, memory, runtime

KiB = 1 << 10
MiB = 1 << 20


@pytest.fixture
def ctx(host: Any) -> Iterator[Any]:
    c = pyoffload.Context(host)
    yield c
    c.close()


def _owned_live(ctx: Any) -> list[Any]:
    return [e[2] for e in runtime.active().registry.items() if e[2].context is ctx and e[2].owned]


def test_the_common_case(host: Any) -> None:
    a = host.alloc(100)
    assert a.size == 100 and a.kind is AllocKind.DEVICE and a.device is host and a.live and a.owned
    info = pyoffload.mem_info(a.ptr + 99)
    assert (info.base, info.size, info.offset, info.allocation) == (a.ptr, 100, 99, a)
    pyoffload.free(a)
    assert not a.live
    with pytest.raises(NotFoundError):
        pyoffload.mem_info(a.ptr + 1)
    with pytest.raises(InvalidArgumentError, match="double free"):
        pyoffload.free(a)


def test_threads_allocating_and_freeing_keep_the_per_backend_counts(host: Any) -> None:
    """Finding: unlocked read-modify-writes of the per-backend live counts left e.g. {'host': 165}
    with nothing live (and, the other way, a raw KeyError and a leaked block)."""
    ctx = host.default_context
    pyoffload.free(host.alloc(64))
    rt = runtime.active()
    before = rt.live_counts.snapshot()
    owned_before = len(ctx.live_allocations())
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def work(seed: int) -> None:
        rng = random.Random(seed)
        mine: list[Any] = []
        try:
            barrier.wait()
            for _ in range(1500):
                if mine and rng.random() < 0.5:
                    a = mine.pop(rng.randrange(len(mine)))
                    assert rt.registry.find(a.ptr)[2] is a
                    pyoffload.free(a)
                else:
                    mine.append(host.alloc(rng.choice([64, 512, 700, 8 * KiB])))
            for a in mine:
                pyoffload.free(a)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    assert rt.live_counts.snapshot() == before, "the per-backend live counts drifted"
    assert rt.live_counts.total == sum(before.values())
    assert host.memory_pool().stats().in_use_bytes == 0
    assert len(ctx.live_allocations()) == owned_before
    assert not [a for a in _owned_live(ctx) if a.size in (64, 512, 700, 8 * KiB)]


def test_a_free_from_a_finalizer_inside_the_allocator_is_deferred_until_it_is_done(host: Any) -> None:
    """What a finalizer sees when a collection interrupts this thread inside the allocator."""
    a, b, c = host.alloc(64), host.alloc(64), host.alloc(64)
    pool = host.default_context.pools[(id(host), id(AllocKind.DEVICE))]
    with pool.lock:  # as alloc or free holds it
        pyoffload.free(a)  # would wait for this thread's own lock
        assert a.live, "freed while the allocator was in the middle of something"
        with pytest.raises(RuntimeError, match="re-entered"):
            host.alloc(64)  # cannot be deferred: raises instead of hanging
    pyoffload.free(b)  # leaving an allocator call runs what was deferred
    assert not a.live and not b.live, "the deferred free did not run"
    with runtime.active().registry.lock:
        pyoffload.free(c.ptr)  # by pointer too
        assert c.live
    pyoffload.free(host.alloc(64))
    assert not c.live


def test_an_error_of_a_deferred_free_is_reported_like_a_finalizers(host: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    a, b = host.alloc(64), host.alloc(64)
    pool = host.default_context.pools[(id(host), id(AllocKind.DEVICE))]
    with pool.lock:
        pyoffload.free(a)
        pyoffload.free(a)  # a double free, found when the deferred frees run
        pyoffload.free(b)
    locks.run_deferred()
    assert not a.live and not b.live, "a failing deferred free stopped the others"
    assert len(reported) == 1 and isinstance(reported[0].exc_value, InvalidArgumentError)
    assert "double free" in str(reported[0].exc_value)


def test_finalizers_run_by_a_collection_inside_the_allocator(host: Any) -> None:
    """With a collection on (nearly) every container allocation, finalizers free and allocate
    memory and close a context in the middle of allocations and frees on the same thread.
    Nothing hangs, no free is lost, and an allocation that would re-enter raises instead."""
    pyoffload.free(host.alloc(64))
    side = pyoffload.Context(host)
    pending: list[Any] = [host.alloc(64) for _ in range(200)]
    made: list[Any] = []
    refused: list[str] = []

    class Churn:
        def __init__(self) -> None:
            self.me = self  # a cycle: only a collection frees it

        def __del__(self) -> None:
            if pending:
                pyoffload.free(pending.pop())
            try:
                made.append(host.alloc(512 + 512 * (len(made) % 3)))
            except RuntimeError as exc:
                refused.append(str(exc))
            if len(made) > 300 and side.live:
                side.close()

    saved = gc.get_threshold()
    gc.set_threshold(1)
    try:
        kept = []
        for i in range(600):
            Churn()
            if side.live:
                try:
                    pyoffload.free(side.alloc(64))
                except pyoffload.OffloadError:
                    assert not side.live  # closed by a finalizer meanwhile
            a = host.alloc(64 if i % 2 else 700)
            if i % 3:
                pyoffload.free(a)
            else:
                kept.append(a)
    finally:
        gc.set_threshold(*saved)
    gc.collect()
    locks.run_deferred()
    assert all("re-entered" in r for r in refused)
    assert not pending, "a free made by a finalizer was lost"
    assert not [p for p in made if not p.live]
    for a in kept + made:
        pyoffload.free(a)
    assert locks.pending() == 0
    assert host.memory_pool().stats().in_use_bytes == 0


def test_a_pool_limit_holds_under_threads_racing_for_the_last_bytes(ctx: Any, host: Any) -> None:
    """Finding: the limit was read outside the pool's lock: eight threads at a barrier reserved
    24-32 MiB under an 8 MiB limit (and a concurrent ``limit = None`` raised a raw TypeError)."""
    pool = ctx.memory_pool(host)
    pool.limit = 8 * MiB
    barrier = threading.Barrier(8)
    got: list[Any] = []
    refused: list[BaseException] = []
    lock = threading.Lock()

    def grab() -> None:
        barrier.wait()
        try:
            a = ctx.alloc(3 * MiB, device=host)  # a segment of its own: 4 MiB each
        except pyoffload.OutOfResourcesError as exc:
            with lock:
                refused.append(exc)
        else:
            with lock:
                got.append(a)

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stats = pool.stats()
    assert stats.peak_reserved_bytes <= 8 * MiB, f"reserved {stats.peak_reserved_bytes} under an 8 MiB limit"
    assert len(got) == 2 and len(refused) == 6
    for a in got:
        pyoffload.free(a)


def test_changing_the_limit_while_threads_allocate(ctx: Any, host: Any) -> None:
    pool = ctx.memory_pool(host)
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        while not stop.is_set():
            try:
                pyoffload.free(ctx.alloc(3 * MiB, device=host))
            except pyoffload.OutOfResourcesError:
                pass
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=churn) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(300):
        pool.limit = None if i % 2 else 4 * MiB
        pool.trim()
    stop.set()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_a_free_racing_an_export_never_frees_under_it(host: Any) -> None:
    """Finding: a memoryview taken while a free ran survived the free (the export count was
    checked before ``exportable`` was cleared).  Whatever the interleaving, either the free is
    refused or the export is."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(300):
            a = host.alloc(4 * KiB, AllocKind.HOST)
            views: list[memoryview] = []
            start = threading.Barrier(2)

            def export(a: Any = a, views: list[memoryview] = views) -> None:
                start.wait()
                try:
                    views.append(memoryview(a))
                except BufferError:
                    pass

            t = threading.Thread(target=export)
            t.start()
            start.wait()
            try:
                pyoffload.free(a)
                freed = True
            except InvalidArgumentError:
                freed = False
            t.join(30)
            if views:
                assert not freed, "freed while a memoryview points into it"
                views[0].release()
                pyoffload.free(a)
            else:
                assert freed or a.live
                if a.live:
                    pyoffload.free(a)
    finally:
        sys.setswitchinterval(old)


def _run(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    full = dict(os.environ, PYOFFLOAD_PLUGINS="", **(env or {}))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=full
    )


@pytest.mark.parametrize("what", ["close", "shutdown"])
@pytest.mark.parametrize("size", [4 * KiB, 8 * MiB])
@pytest.mark.parametrize("export", ["numpy", "memoryview", "dlpack"])
def test_teardown_keeps_exported_memory_mapped(what: str, size: int, export: str) -> None:
    """Finding: close() or shutdown() leaked an exported allocation with a warning, then handed its
    segment back to the backend anyway: the consumer read unmapped memory (SIGSEGV)."""
    code = f"""
        import warnings, numpy as np, pyoffload
        warnings.simplefilter("ignore")
        dev = pyoffload.host_device()
        ctx = pyoffload.Context(dev)
        a = ctx.alloc({size}, pyoffload.AllocKind.HOST)
        np.frombuffer(a, dtype=np.uint8)[:] = 7
        if {export!r} == "numpy":
            v = a.view(np.uint8)
        elif {export!r} == "memoryview":
            v = np.asarray(memoryview(a))
        else:
            v = np.from_dlpack(a)
        others = [ctx.alloc({size}, pyoffload.AllocKind.HOST) for _ in range(3)]  # same segments
        if {what!r} == "close":
            ctx.close()
        else:
            pyoffload.shutdown()
        junk = [bytearray({size}) for _ in range(50)]  # reuse what the process freed
        assert int(v.sum()) == 7 * {size}, v.sum()
        print("read", int(v[:8].sum()))
    """
    done = _run(code)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "read 56" in done.stdout


def test_an_interrupt_inside_free_leaves_no_lock_held(host: Any) -> None:
    """Finding: a KeyboardInterrupt inside ``free`` left its claim lock held: every later free on
    that thread was deferred for ever and other threads' frees hung.  Interrupt ``free`` at every
    line it runs, then check that the allocator still allocates and frees, on this thread and on
    another."""
    from interrupts import interrupt_each_line

    pyoffload.free(host.alloc(64))
    seen = interrupt_each_line(
        lambda: pyoffload.free(host.alloc(64)),
        modules=("pyoffload.memory", "pyoffload.pool", "pyoffload.addresses.intervals"),
    )
    if not memory.__file__.endswith(".py"):  # compiled: no line events (the interpreted row runs it)
        pytest.skip(f"pyoffload.memory is compiled ({memory.__file__}): its lines cannot be traced")
    assert seen > 10, "the interruption reached too few lines"
    gc.collect()
    locks.run_deferred()
    a = host.alloc(64)
    pyoffload.free(a)
    assert not a.live
    other: list[Any] = []
    t = threading.Thread(target=lambda: other.append(pyoffload.free(host.alloc(64))))
    t.start()
    t.join(30)
    assert other == [None], "another thread's alloc/free hung"
    assert locks.pending() == 0


def test_private_structures_are_plain_and_safe() -> None:
    """Finding: private C types crashed from Python (an uninitialised FastState, Lanes.clear()
    on a bare instance, Lock.acquire(timeout=1e300), a 300,000-long chain of blocks overflowing the
    C stack in dealloc).  What is left is plain Python: misuse raises, deep chains are freed."""
    from pyoffload.pool import Block, Segment

    seg = Segment(4096, 1 << 30, True)
    head = prev = Block(4096, 512, seg)
    for i in range(1, 300_000):
        b = Block(4096 + 512 * i, 512, seg)
        b.prev, prev.next = prev, b
        prev = b
    del head, prev, b
    gc.collect()  # no crash: the interpreter frees deep chains of objects without recursion
    lock = locks.allocator_lock()
    with pytest.raises((OverflowError, ValueError)):
        lock.acquire(timeout=1e300)
    with pytest.raises(ValueError):
        lock.acquire(timeout=float("nan"))
    assert not locks.held_by_me(lock)


SWEEP = r"""
import gc, sys, warnings
import numpy as np
import pyoffload
from pyoffload import AllocKind, locks
from pyoffload.host.compiler import packaged_image
sys.path.insert(0, {tests!r})
from interrupts import interrupt_each_line

warnings.simplefilter("ignore")  # teardown warnings of interrupted closes
MODULES = ("pyoffload.memory", "pyoffload.pool", "pyoffload.addresses", "pyoffload.transfer",
           "pyoffload.context", "pyoffload.program", "pyoffload.queue_core", "pyoffload.locks")
dev = pyoffload.host_device()
image = packaged_image("conformance_kernels")
src = np.arange(4096, dtype=np.uint8)
out = np.empty(4096, dtype=np.uint8)
a = dev.alloc(4096)

def copy():
    pyoffload.memcpy(a, src)
    pyoffload.memcpy(out, a)

def close():
    ctx = pyoffload.Context(dev)
    ctx.alloc(4096)
    ctx.alloc(64, AllocKind.HOST)
    ctx.close()

def unload():
    prog = dev.load_program(image)
    try:
        prog.unload()
    finally:
        if prog.state != "unloaded":  # interrupted: unload again (it resumes where it stopped)
            prog.unload()

fn = {{"memcpy": copy, "close": close, "unload": unload}}[{what!r}]
# A close runs some 650 lines, and interrupted closes leak contexts whose teardown later closes
# add lines to: the sweep takes a few thousand calls.
count = interrupt_each_line(fn, MODULES, limit=8000)
gc.collect()
locks.run_deferred()
copy()  # the runtime still copies, allocates, frees, loads and closes
assert (out == src).all()
close()
unload()
compiled = not pyoffload.memory.__file__.endswith(".py")
assert compiled or count > 5, count
pyoffload.free(a)
print("OK", count)
"""


@pytest.mark.parametrize("what", ["memcpy", "close", "unload"])
def test_an_interrupt_in_memcpy_close_or_unload_leaves_the_runtime_working(what: str) -> None:
    """A KeyboardInterrupt at each line of a synchronous copy, a context close and a program
    unload (and the allocator, the ledger and the locks beneath them): afterwards the runtime
    still copies, allocates, frees, loads and closes, and the process exits cleanly."""
    import os

    code = SWEEP.format(tests=os.path.dirname(__file__), what=what)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYOFFLOAD_PLUGINS=""),
    )
    assert done.returncode == 0 and done.stdout.startswith("OK"), (done.stdout[-2000:], done.stderr[-4000:])


def test_device_alloc_after_its_default_context_closed(host: Any) -> None:
    """``Device.alloc`` keeps what it needs of its default context; once that context is closed,
    the next allocation comes from the new default context, never from the closed one."""
    first = host.alloc(64)
    old = first.context
    old.close()
    assert first.freed
    second = host.alloc(64)
    try:
        assert second.context is host.default_context
        assert second.context is not old and second.context.alive
        assert pyoffload.mem_info(second.ptr).allocation is second
        assert second.ptr % memory.MIN_ALIGNMENT == 0
    finally:
        pyoffload.free(second)
