"""A hypothesis state machine over the public API: random sequences of alloc, free, copy, fill,
launch, load, unload, queue and lock operations on two devices (the host backend and the twin
backend, whose memory is device memory to the generic layer), some of them from other threads.

A model keeps the expected bytes of every live allocation; the checks compare the device's memory
with it (read through the host-visible path where there is one, else a copy), the registry with
the live allocations, and at the end everything is released and nothing is left.
Bounded for CI: ``PYOFFLOAD_MODEL_EXAMPLES`` raises the number of examples for a longer run.
"""

from __future__ import annotations

import os
import threading

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, precondition, rule

import pyoffload
from pyoffload import AllocKind

from conftest import check_registry

EXAMPLES = int(os.environ.get("PYOFFLOAD_MODEL_EXAMPLES", "15"))
STEPS = 30
RUNS = {"examples": 0, "steps": 0}


class ApiMachine(RuleBasedStateMachine):
    allocs = Bundle("allocs")

    def __init__(self) -> None:
        super().__init__()
        self.devices = [pyoffload.host_device(), next(d for d in pyoffload.devices() if d.backend == "twin")]
        self.rt = self.devices[0].rt
        self.base = sum(1 for _, _, a in self.rt.registry if a.owned)
        self.model: dict[int, np.ndarray] = {}  # id(allocation) -> expected bytes
        self.queues = [d.create_queue() for d in self.devices]
        self.programs: dict[int, object] = {}
        self.locked: list[tuple[object, np.ndarray]] = []
        self.host_buffer = np.zeros(4096, np.uint8)
        self.last_queue: dict[int, object] = {}  # id(allocation) -> the queue that last used it
        RUNS["examples"] += 1

    # -- helpers --------------------------------------------------------------------------------

    def _settle(self) -> None:
        for q in self.queues:
            q.wait()

    def _read(self, a) -> np.ndarray:
        self._settle()
        out = np.empty(a.size, np.uint8)
        pyoffload.memcpy(out, a)
        return out

    def _order(self, q, *allocs) -> None:
        """Work on two queues is unordered: make ``q`` wait (an event, not the host) for the queue
        that last used these allocations, as an application must."""
        for a in allocs:
            prev = self.last_queue.get(id(a))
            if q is not None and prev is not None and prev is not q and prev.live:
                q.wait_events(prev.record())
            if q is not None:
                self.last_queue[id(a)] = q

    def _program(self, d: int):
        prog = self.programs.get(d)
        if prog is None:
            dev = self.devices[d]
            prog = self.programs[d] = dev.load_program(dev.disp.conformance_images_impl(dev.handle)["kernels"])
        return prog

    # -- rules ----------------------------------------------------------------------------------

    @rule(
        target=allocs,
        d=st.integers(0, 1),
        size=st.sampled_from([4, 64, 100, 4096, 70000]),
        kind=st.sampled_from(list(AllocKind)),
        byte=st.integers(0, 255),
    )
    def alloc(self, d, size, kind, byte):
        RUNS["steps"] += 1
        a = self.devices[d].alloc(size, kind)
        pyoffload.memfill(a, bytes([byte]))
        self.model[id(a)] = np.full(size, byte, np.uint8)
        return a

    @rule(a=consumes(allocs), by_pointer=st.booleans())
    def free(self, a, by_pointer):
        RUNS["steps"] += 1
        pyoffload.free(a.ptr if by_pointer else a)
        del self.model[id(a)]

    @rule(a=allocs, byte=st.integers(0, 255), on_queue=st.integers(-1, 1), frac=st.floats(0, 1))
    def fill(self, a, byte, on_queue, frac):
        RUNS["steps"] += 1
        n = int(frac * a.size)
        q = self.queues[on_queue] if on_queue >= 0 else None
        self._order(q, a)
        pyoffload.memfill(a, bytes([byte]), n, queue=q)
        self.model[id(a)][:n] = byte

    @rule(src=allocs, dst=allocs, on_queue=st.integers(-1, 1), in_thread=st.booleans())
    def copy(self, src, dst, on_queue, in_thread):
        RUNS["steps"] += 1
        n = min(src.size, dst.size)
        q = self.queues[on_queue] if on_queue >= 0 else None
        if src is dst:
            return
        self._order(q, src, dst)
        if in_thread:
            t = threading.Thread(target=pyoffload.memcpy, args=(dst, src, n, q))
            t.start()
            t.join()
        else:
            pyoffload.memcpy(dst, src, n, queue=q)
        self.model[id(dst)][:n] = self.model[id(src)][:n]

    @rule(a=allocs, base=st.integers(-1000, 1000))
    def launch(self, a, base):
        RUNS["steps"] += 1
        dev = a.device if a.device is not None else a.context.devices[0]
        d = self.devices.index(dev)
        n = a.size // 4
        if n == 0:
            return
        prog = self._program(d)
        self._order(self.queues[d], a)
        self.queues[d].launch(prog.kernel("iota_i32"), (n + 31) // 32, 32, [a, np.int32(n), np.int32(base)])
        self.model[id(a)][: 4 * n] = np.arange(base, base + n, dtype=np.int32).view(np.uint8)

    @precondition(lambda self: self.programs)
    @rule(d=st.integers(0, 1))
    def unload(self, d):
        RUNS["steps"] += 1
        prog = self.programs.pop(d, None)
        if prog is not None:
            prog.unload()  # waits for the launches of its kernels

    @rule(d=st.integers(0, 1))
    def new_queue(self, d):
        RUNS["steps"] += 1
        old = self.queues[d]
        self.queues[d] = self.devices[d].create_queue()
        old.destroy()  # waits for its work

    @rule(lo=st.integers(0, 63), length=st.integers(1, 64))
    def lock(self, lo, length):
        RUNS["steps"] += 1
        view = self.host_buffer[lo * 64 : (lo + length) * 64]
        try:
            self.devices[0].lock(view)
        except pyoffload.InvalidArgumentError:
            return  # would extend a locked range
        self.locked.append((self.devices[0], view))

    @precondition(lambda self: self.locked)
    @rule()
    def unlock(self):
        RUNS["steps"] += 1
        dev, view = self.locked.pop()
        dev.unlock(view)

    @rule(a=allocs)
    def check(self, a):
        assert (self._read(a) == self.model[id(a)]).all(), f"{a!r} does not hold what the model expects"

    @invariant()
    def registry_holds_the_live_allocations(self):
        live = sum(1 for _, _, a in self.rt.registry if a.owned)
        assert live == self.base + len(self.model)

    def teardown(self):
        self._settle()
        for prog in self.programs.values():
            prog.unload()
        for q in self.queues:
            q.destroy()
        for dev, view in self.locked:
            dev.unlock(view)
        for _, _, a in self.rt.registry.items():
            if a.owned and id(a) in self.model:
                a.free()
        check_registry(self.rt)
        assert sum(1 for _, _, a in self.rt.registry if a.owned) == self.base, "allocations leaked"
        assert all(len(d.pins) == 0 for d in self.devices), "pinned ranges leaked"


def test_api_model(twin_runtime):
    ApiMachine.TestCase.settings = settings(
        max_examples=EXAMPLES,
        stateful_step_count=STEPS,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        database=None,
    )
    ApiMachine.TestCase().runTest()
    print(f"\nAPI model: {RUNS['examples']} examples, {RUNS['steps']} operations")
    assert RUNS["steps"] > EXAMPLES
