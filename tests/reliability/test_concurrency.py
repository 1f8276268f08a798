"""Concurrency: 8 threads doing thousands of random operations on every device at once.

Each thread owns its queues, programs and locked buffers but allocates and frees through the one
shared registry (and frees allocations other threads made).  Every copy and launch result is
checked, so corruption shows as wrong data, not only as a broken registry.  At the end the
registry holds exactly the allocations still alive, each once, and the pinned maps hold exactly
the buffers still locked.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import numpy as np

import pyoffload
from conftest import check_registry
from pyoffload import AllocKind
from pyoffload.host.compiler import packaged_image


def _kernels_image(dev):
    """The device's own build of the conformance kernels (an ELF for host, OpenCL C for PoCL...)."""
    return dev.disp.conformance_images_impl(dev.handle)["kernels"]


THREADS = 8
DURATION_S = 12.0
MIN_OPS_PER_THREAD = 1000
KINDS = (AllocKind.DEVICE, AllocKind.HOST, AllocKind.MANAGED)

OPS_RUN = 0


class Shared:
    def __init__(self, devices: list[Any]) -> None:
        self.lock = threading.Lock()
        self.handoff: list[tuple[Any, int]] = []  # (allocation, fill byte) any thread may free
        self.devices = devices
        self.errors: list[BaseException] = []
        self.ops = 0


def worker(seed: int, sh: Shared, deadline: float, done: list[dict[str, Any]]) -> None:
    rng = random.Random(seed)
    mine: list[tuple[Any, int]] = []
    locked: list[tuple[Any, np.ndarray]] = []
    host_buffers = [np.zeros(rng.choice([64, 256, 4096]), np.uint8) for _ in range(4)]
    queues = {d.id: d.create_queue() for d in sh.devices}
    programs: dict[str, Any] = {}
    ops = 0

    def check_contents(alloc: Any, byte: int) -> None:
        out = np.empty(alloc.size, np.uint8)
        pyoffload.memcpy(out, alloc)
        assert (out == byte).all(), f"{alloc!r} lost its contents: expected {byte}, got {np.unique(out)[:4]}"

    try:
        while ops < MIN_OPS_PER_THREAD or time.monotonic() < deadline:
            if ops >= 20 * MIN_OPS_PER_THREAD:
                break
            op = rng.randrange(100)
            dev = rng.choice(sh.devices)
            if op < 25 or not mine:  # alloc + fill
                kind = rng.choice(KINDS)
                size = rng.choice([1, 63, 200, 4096, 9000, 70000])
                a = dev.alloc(size, kind)
                byte = rng.randrange(256)
                pyoffload.memfill(a, bytes([byte]))
                info = pyoffload.mem_info(a.ptr + size - 1)
                assert info.allocation is a and info.base == a.ptr and info.size == size
                mine.append((a, byte))
            elif op < 40:  # free one of mine, after checking it kept its data
                a, byte = mine.pop(rng.randrange(len(mine)))
                check_contents(a, byte)
                pyoffload.free(a.ptr if rng.random() < 0.5 else a)
                assert a.freed
            elif op < 47:  # hand one to another thread / free one handed over
                if rng.random() < 0.5:
                    with sh.lock:
                        sh.handoff.append(mine.pop())
                else:
                    with sh.lock:
                        item = sh.handoff.pop() if sh.handoff else None
                    if item is not None:
                        check_contents(*item)
                        item[0].free()
            elif op < 60:  # copy between two of mine (possibly across devices and backends), then check
                a, byte_a = rng.choice(mine)
                b, _ = rng.choice(mine)
                if a is not b:
                    n = min(a.size, b.size)
                    pyoffload.memcpy(b, a, n)
                    if n == b.size:
                        i = mine.index(next(m for m in mine if m[0] is b))
                        mine[i] = (b, byte_a)
                        check_contents(b, byte_a)
                    else:
                        pyoffload.memfill(b, bytes([[m for m in mine if m[0] is b][0][1]]), n)
            elif op < 72:  # launch on my queue into one of my allocations
                q = queues[dev.id]
                prog = programs.get(dev.id)
                if prog is None:
                    prog = programs[dev.id] = dev.load_program(_kernels_image(dev))
                a = dev.alloc(4 * 64)
                q.launch(prog.kernel("iota_i32"), 1, 64, [a, np.int32(64), np.int32(seed)])
                out = np.empty(64, np.int32)
                q.memcpy(out, a)
                q.wait()
                assert (out == np.arange(seed, seed + 64)).all(), "launch result corrupted"
                a.free()
            elif op < 80:  # load / unload
                p = programs.pop(dev.id, None)
                if p is not None:
                    queues[dev.id].wait()
                    p.unload()
                else:
                    programs[dev.id] = dev.load_program(_kernels_image(dev))
            elif op < 92:  # lock (nested sometimes) / unlock
                if locked and rng.random() < 0.5:
                    d, view = locked.pop(rng.randrange(len(locked)))
                    d.unlock(view)
                else:
                    buf = rng.choice(host_buffers)
                    lo = rng.randrange(0, buf.size // 2)
                    view = buf[lo : lo + rng.randrange(1, buf.size // 2)]
                    try:
                        dev.lock(view)
                        locked.append((dev, view))
                        assert pyoffload.is_pinned(view.ctypes.data)
                    except pyoffload.InvalidArgumentError as exc:  # would extend a locked range
                        assert "would extend" in str(exc), exc
                    except pyoffload.UnsupportedError:  # PoCL cannot lock memory it did not allocate
                        pass
            else:  # lookups of interior pointers of mine
                a, _ = rng.choice(mine)
                off = rng.randrange(a.size)
                info = pyoffload.mem_info(a.ptr + off)
                assert info.allocation is a and info.offset == off
            ops += 1
    except BaseException as exc:  # reported by the main thread
        sh.errors.append(exc)
    finally:
        for q in queues.values():
            q.wait()
        done.append({"mine": mine, "locked": locked, "programs": programs, "queues": queues, "ops": ops})


def test_stress(twin_runtime):
    global OPS_RUN
    rt = twin_runtime
    devices = list(pyoffload.devices())
    sh = Shared(devices)
    done: list[dict[str, Any]] = []
    deadline = time.monotonic() + DURATION_S
    before = len(rt.registry)
    threads = [threading.Thread(target=worker, args=(i + 1, sh, deadline, done)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=DURATION_S + 120)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    if sh.errors:
        raise sh.errors[0]
    total = sum(d["ops"] for d in done)
    OPS_RUN += total
    print(f"\nstress: {THREADS} threads, {total} operations on {len(devices)} devices")
    assert total >= THREADS * MIN_OPS_PER_THREAD

    # the registry holds exactly what is alive: every live allocation once, no freed one
    live = [a for d in done for a, _ in d["mine"]] + [a for a, _ in sh.handoff]
    # and the globals of the programs still loaded (recorded at load, released at unload)
    globals_ = [
        p.global_variable(s.name).allocation
        for d in done
        for p in d["programs"].values()
        for s in p.symbols()
        if s.kind is pyoffload.SymbolKind.GLOBAL and s.size
    ]
    registered = {base: alloc for base, _, alloc in rt.registry}
    assert len(registered) == len(rt.registry) == before + len(live) + len(globals_)
    for a in live + globals_:
        assert registered.get(a.ptr) is a, f"live {a!r} is not registered (or registered as another)"
    check_registry(rt)
    # the pinned maps hold exactly the ranges still locked
    for dev in devices:
        views = [v for d in done for dd, v in d["locked"] if dd is dev]
        pins = dev.pins
        users = sum(e.users for _, _, e in pins.by_host) if pins is not None else 0
        assert users == len(views), f"{dev.id}: {users} pinned users, {len(views)} locks held"
        for v in views:
            assert pins.by_host.find(v.ctypes.data) is not None
    # release everything; the runtime is then empty again
    for d in done:
        for p in d["programs"].values():
            p.unload()
        for q in d["queues"].values():
            q.destroy()
        for dev, view in d["locked"]:
            dev.unlock(view)
    for a in live:
        a.free()
    assert len(rt.registry) == before and not rt.queues
    for dev in devices:
        pins = dev.pins
        assert pins is None or len(pins.by_host) == 0


def test_free_waits_for_queued_work_that_uses_the_allocation(twin_runtime):
    dev = pyoffload.host_device()
    prog = dev.load_program(packaged_image("conformance_kernels"))
    spin = prog.kernel("sleep_spin")
    q = dev.create_queue()
    try:
        for _ in range(10):
            a = dev.alloc(1 << 16)
            q.launch(spin, 1, 1, [a, np.int64(2_000_000)])
            a.free()
            b = dev.alloc(1 << 16)
            pyoffload.memfill(b, b"\x00")
            q.wait()
            out = np.ones(1, np.int64)
            pyoffload.memcpy(out, b, 8)
            b.free()
            assert out[0] == 0, "a kernel launched before free() wrote into the next allocation"
    finally:
        q.destroy()
        prog.unload()
