"""The C fast path of allocation and free (``pyoffload._fastpath``) against the Python path.

The Python path is the reference: the same operations through a context whose pools never get the
fast path must leave the same pool statistics, the same registry and the same owned objects.  The
fast path must take the common case (counted in Python frames), decline every case it does not
handle (a lock held by a Python path half-way through, another backend's live memory, queued
users, exports, a closed context), and stay consistent under threads.
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, InvalidArgumentError, NotFoundError, memory, runtime
from pyoffload._fastpath import Lock

KiB = 1 << 10
MiB = 1 << 20


def frames(fn: Callable[[], Any]) -> list[str]:
    """The Python functions ``fn`` enters (its own frame left out)."""
    calls: list[str] = []

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls.append(frame.f_code.co_qualname)

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return [c for c in calls if not c.endswith("<lambda>")]


@pytest.fixture
def ctx(host: Any) -> Iterator[Any]:
    c = pyoffload.Context(host)
    yield c
    c.close()


@pytest.fixture
def python_only_ctx(host: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A context whose pools are served by the Python path alone."""
    c = pyoffload.Context(host)
    real = memory._enable_fast_path
    monkeypatch.setattr(memory, "_enable_fast_path", lambda ctx, *args: None if ctx is c else real(ctx, *args))
    yield c
    c.close()


def test_the_entry_points_read_as_their_python_functions() -> None:
    import inspect

    from pyoffload import memory as m
    for entry, name in ((pyoffload.free, "free"), (pyoffload.Device.alloc, "alloc")):
        fn = entry.__wrapped__
        assert inspect.isfunction(fn) and entry.__name__ == fn.__name__ == name
        assert entry.__doc__ == fn.__doc__ and entry.__doc__
        assert entry.__qualname__ == fn.__qualname__ and entry.__module__ == fn.__module__
        assert inspect.signature(entry) == inspect.signature(fn)
    assert m.free is pyoffload.free
    dev = pyoffload.host_device()
    assert inspect.signature(dev.alloc) == inspect.signature(pyoffload.Device.alloc.__wrapped__.__get__(dev))
    with pytest.raises(TypeError):
        pyoffload.free()
    with pytest.raises(TypeError):
        dev.alloc()


def test_the_common_case_is_one_c_call_each(host: Any) -> None:
    pyoffload.free(host.alloc(64))  # the first request of (device, kind) sets the pool up
    assert frames(lambda: pyoffload.free(host.alloc(64))) == []  # no Python frame at all
    assert frames(lambda: host.alloc(64).free()) == ["Allocation.free"]
    # what the fast path declines reaches the Python functions, keywords included
    assert "allocate" in frames(lambda: pyoffload.free(host.alloc(size=64)))
    assert "free" in frames(lambda: pyoffload.free(host.alloc(64), kind=AllocKind.DEVICE))
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


def _run(ctx: Any, dev: Any, seed: int, steps: int) -> list[Any]:
    """A seeded mix of sizes (pooled, split, grown, above the bound), kinds and frees."""
    rng = random.Random(seed)
    live: list[Any] = []
    for _ in range(steps):
        if live and rng.random() < 0.45:
            pyoffload.free(live.pop(rng.randrange(len(live))))
        else:
            size = rng.choice([1, 64, 511, 512, 513, 4 * KiB, 100 * KiB, 1 * MiB, 3 * MiB])
            kind = rng.choice([AllocKind.DEVICE, AllocKind.DEVICE, AllocKind.HOST])
            live.append(ctx.alloc(size, kind, dev if kind is AllocKind.DEVICE else None))
    return live


@pytest.mark.parametrize("seed", [1, 2])
def test_fast_path_leaves_what_the_python_path_leaves(host: Any, ctx: Any, python_only_ctx: Any, seed: int) -> None:
    fast, slow = _run(ctx, host, seed, 1500), _run(python_only_ctx, host, seed, 1500)
    for kind, dev in ((AllocKind.DEVICE, host), (AllocKind.HOST, None)):
        assert ctx.memory_pool(dev, kind).stats() == python_only_ctx.memory_pool(dev, kind).stats()
    assert ctx.pools and all(p.fast_path_state is not None for p in ctx.pools.values())
    assert all(p.fast_path_state is None for p in python_only_ctx.pools.values())
    rt = runtime.active()
    for c, live in ((ctx, fast), (python_only_ctx, slow)):
        allocs = {id(o) for o in c.owned_objects.values() if isinstance(o, pyoffload.Allocation)}
        assert allocs == {id(a) for a in live}
        for a in live:
            assert rt.registry.find(a.ptr + a.size - 1)[2] is a
    assert [(a.size, a.kind) for a in fast] == [(a.size, a.kind) for a in slow]
    for a in fast + slow:
        pyoffload.free(a)
    assert ctx.memory_pool(host).stats().in_use_bytes == 0


@pytest.mark.parametrize("which", ["pool", "registry"])
def test_alloc_waits_for_a_python_path_holding_a_lock(host: Any, which: str) -> None:
    pyoffload.free(host.alloc(64))
    pool = host.default_context.pools[(id(host), id(AllocKind.DEVICE))]
    lock = pool._lock if which == "pool" else runtime.active().registry.parts()[3]
    assert isinstance(lock, Lock)
    got: list[Any] = []
    with lock:  # as if a Python path were half-way through an update
        t = threading.Thread(target=lambda: got.append(host.alloc(64)), daemon=True)
        t.start()
        t.join(0.3)
        assert t.is_alive() and not got, f"the allocation went past the held {which} lock"
    t.join(10)
    assert len(got) == 1 and got[0].live
    pyoffload.free(got[0])


def test_free_waits_for_a_claim_in_progress(host: Any) -> None:
    a = host.alloc(64)
    done: list[bool] = []
    with memory._claim:  # another free is deciding whether this allocation is still live
        t = threading.Thread(target=lambda: done.append(pyoffload.free(a) is None), daemon=True)
        t.start()
        t.join(0.3)
        assert t.is_alive() and a.live, "the free went past the held claim lock"
    t.join(10)
    assert done == [True] and not a.live


def test_declines_what_it_does_not_handle(host: Any) -> None:
    pyoffload.free(host.alloc(64))
    # exported memory: refused, as by the Python path
    a = host.alloc(64)
    view = memoryview(a)
    with pytest.raises(InvalidArgumentError, match="still exported"):
        pyoffload.free(a)
    view.release()
    pyoffload.free(a)
    # free by pointer and free by kind: the Python path
    b = host.alloc(64)
    assert "claim" in frames(lambda: pyoffload.free(b.ptr))
    c = host.alloc(64)
    with pytest.raises(InvalidArgumentError, match="not HOST"):
        pyoffload.free(c, AllocKind.HOST)
    pyoffload.free(c, AllocKind.DEVICE)
    # above the pool's request bound: a backend allocation of its own, freed back to the backend
    pool = host.memory_pool()
    saved, pool.max_request = pool.max_request, 4 * KiB
    try:
        backend_frees = pool.stats().backend_frees
        big = host.alloc(64 * KiB)
        assert "allocate" in frames(lambda: pyoffload.free(host.alloc(64 * KiB)))
        pyoffload.free(big)
        assert pool.stats().backend_frees == backend_frees + 2
    finally:
        pool.max_request = saved


def test_queued_users_are_waited_for(host: Any) -> None:
    a = host.alloc(4 * KiB, AllocKind.HOST)
    q = host.create_queue()
    src = np.arange(4 * KiB, dtype=np.uint8)
    q.memcpy(a, src, 4 * KiB)
    assert a.users, "the queued copy records itself as a user"
    pyoffload.free(a)  # declined by the fast path: the Python path waits for the copy first
    assert not a.live
    q.close()


def test_another_backend_with_live_memory_gets_the_overlap_check(host: Any) -> None:
    others = [d for d in pyoffload.devices() if d.platform.backend != host.platform.backend]
    if not others:
        pytest.skip("only the host backend is installed")
    pyoffload.free(host.alloc(64))
    assert "allocate" not in frames(lambda: pyoffload.free(host.alloc(64)))
    foreign = others[0].alloc(64)
    try:
        assert "allocate" in frames(lambda: pyoffload.free(host.alloc(64))), \
            "with two address spaces live, allocations must take the path that checks overlaps"
    finally:
        pyoffload.free(foreign)
    assert "allocate" not in frames(lambda: pyoffload.free(host.alloc(64)))


def test_a_closed_context_is_not_served(host: Any) -> None:
    c = pyoffload.Context(host)
    pyoffload.free(c.alloc(64))
    pool = c.pools[(id(host), id(AllocKind.DEVICE))]
    assert pool.fast_path_state is not None
    c.close()
    assert pool.fast_path_state is None
    assert c.lanes.alloc(host, 64, AllocKind.DEVICE) is None
    with pytest.raises(pyoffload.OffloadError):
        c.alloc(64)


def test_a_default_context_that_closed_is_not_served_from_the_entrys_memory(host: Any) -> None:
    """``device.alloc`` remembers the last device's lanes; a closed default context's lanes are
    empty, so the next request finds the new default context."""
    for _ in range(3):
        pyoffload.free(host.alloc(64))
    old = host.default_context
    old.close()
    assert host.platform.default_context_slot is None
    a = host.alloc(64)
    assert a.context is host.default_context is not old and a.context.live
    pyoffload.free(a)
    b = host.alloc(64)  # served by the fast path again, from the new context's pool
    assert b.context is a.context
    pyoffload.free(b)
    assert frames(lambda: pyoffload.free(host.alloc(64))) == []


def test_threads_allocating_and_freeing_stay_consistent(host: Any) -> None:
    pyoffload.free(host.alloc(64))
    ctx = host.default_context
    before = len(ctx.owned_objects)
    rt = runtime.active()
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        mine: list[Any] = []
        try:
            for _ in range(3000):
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

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert host.memory_pool().stats().in_use_bytes == 0
    assert len(ctx.owned_objects) == before
    assert not [e for e in rt.registry.items() if e[2].context is ctx and e[2].owned]


def test_finalizers_run_by_a_collection_inside_the_allocator(host: Any) -> None:
    """With a collection on (nearly) every container allocation, finalizers free and allocate
    memory, and close a context, in the middle of allocations and frees on the same thread: inside
    the C fast path (Python 3.11 collects inside an allocation) and between the bytecodes of the
    Python path, holding its locks.  Nothing hangs: their frees are deferred until the interrupted
    operation is done; an allocation that would wait for its own thread's lock raises instead."""
    import gc

    pyoffload.free(host.alloc(64))
    side = pyoffload.Context(host)
    pyoffload.free(side.alloc(64))
    pending: list[Any] = [host.alloc(64) for _ in range(200)]
    made: list[Any] = []
    refused: list[str] = []
    armed, inside, closed_inside = [False], [False], [False]

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
            if armed[0] and side.live:
                side.close()
                closed_inside[0] = inside[0]

    side_alloc = side.lanes.alloc  # bound here: the call itself then makes no container before the C code
    saved = gc.get_threshold()
    gc.set_threshold(1)
    try:
        kept = []
        for i in range(600):
            Churn()
            if side.live and i > 300:  # the next collection may close the context inside this call
                armed[0] = inside[0] = True
                got = side_alloc(host, 64, AllocKind.DEVICE)
                inside[0] = False
                # served, then torn down by the close; never served by a closed context
                assert got is None or side.live or not got.live, "served by a context closed meanwhile"
            elif side.live:
                pyoffload.free(side_alloc(host, 64, AllocKind.DEVICE))
            a = host.alloc(64 if i % 2 else 700)
            if i % 3:
                pyoffload.free(a)
            else:
                kept.append(a)
            if not side.live:
                assert side.lanes.alloc(host, 64, AllocKind.DEVICE) is None
    finally:
        gc.set_threshold(*saved)
    gc.collect()
    assert not side.live
    if sys.version_info < (3, 12):
        assert closed_inside[0], "the context was not closed from inside the fast path"
    assert all("inside the allocator already" in r for r in refused)
    assert not pending, "a free made by a finalizer was lost"
    for a in kept + made:
        pyoffload.free(a)
    assert host.memory_pool().stats().in_use_bytes == 0
    rt = runtime.active()
    assert not [e for e in rt.registry.items() if e[2].context is host.default_context and e[2].owned]


def test_lock_behaves_as_threading_lock_and_refuses_self_deadlock() -> None:
    lock = Lock()
    assert not lock.locked() and lock.acquire() and lock.locked()
    assert lock.acquire(False) is False, "non-reentrant"
    with pytest.raises(RuntimeError, match="inside the allocator already"):
        lock.acquire()  # the holder would wait for itself forever
    with pytest.raises(ValueError):
        lock.acquire(False, 1.0)
    other: list[bool] = []
    t = threading.Thread(target=lambda: other.append(lock.acquire(timeout=0.05)))
    t.start()
    t.join(10)
    assert other == [False], "another thread times out while the lock is held"
    lock.release()
    assert not lock.locked()
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        lock.release()
    with lock:
        assert lock.locked()
    assert not lock.locked()
    t = threading.Thread(target=lambda: other.append(lock.acquire(timeout=5)))
    t.start()
    t.join(10)
    assert other[-1] is True and lock.locked()


def test_a_free_inside_the_allocator_is_deferred_until_it_is_done(host: Any) -> None:
    """What a finalizer sees when it interrupts this thread inside a Python path of the allocator."""
    from pyoffload._fastpath import inside_allocator

    a, b = host.alloc(64), host.alloc(64)
    pool = host.default_context.pools[(id(host), id(AllocKind.DEVICE))]
    with pool._lock:  # as a Python path of alloc or free holds it
        assert inside_allocator()
        pyoffload.free(a)  # would wait for this thread's own lock
        assert a.live, "freed while the allocator was in the middle of something"
    assert not inside_allocator()
    assert not a.live, "the deferred free did not run when the lock was released"
    pyoffload.free(b)


def test_an_error_of_a_deferred_free_is_reported_like_a_finalizers(host: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    a, b = host.alloc(64), host.alloc(64)
    pool = host.default_context.pools[(id(host), id(AllocKind.DEVICE))]
    with pool._lock:
        pyoffload.free(a)
        pyoffload.free(a)  # a double free, found when the deferred frees run
        pyoffload.free(b)
    assert not a.live and not b.live, "a failing deferred free stopped the others"
    assert len(reported) == 1 and isinstance(reported[0].exc_value, InvalidArgumentError)
    assert "double free" in str(reported[0].exc_value)
