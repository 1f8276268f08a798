"""Model-based tests (hypothesis state machines) of the allocation registry and the pinned map.

The registry is checked against a dict ``{base: (size, kind)}``; the pinned map against a plain
list of ``[base, end, users]`` ranges with LLVM's rules: a range inside a locked one adds a user,
a partial overlap is refused, the last unlock removes the range.  Interleavings of alloc, free,
double free, interior pointers, nested and overlapping locks are generated and shrunk by
hypothesis.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, precondition, rule

import pyoffload
from pyoffload import AllocKind, InvalidArgumentError, NotFoundError

from conftest import check_registry

EXAMPLES = 150
STEPS = 40
EXAMPLES_RUN = {"registry": 0, "pinned": 0}


class RegistryMachine(RuleBasedStateMachine):
    allocs = Bundle("allocs")

    def __init__(self) -> None:
        super().__init__()
        self.devices = list(pyoffload.devices())
        self.rt = self.devices[0].rt
        self.base_count = len(self.rt.registry)
        self.model: dict[int, tuple[int, AllocKind, object]] = {}
        self.freed: list[int] = []
        EXAMPLES_RUN["registry"] += 1

    @rule(
        target=allocs,
        dev=st.integers(0, 7),
        size=st.sampled_from([1, 8, 64, 100, 4096, 8192, 8193, 70000]),
        kind=st.sampled_from(list(AllocKind)),
    )
    def alloc(self, dev, size, kind):
        d = self.devices[dev % len(self.devices)]
        a = d.alloc(size, kind)
        assert a.ptr not in self.model
        for base, (sz, _, _) in self.model.items():
            assert a.ptr + size <= base or base + sz <= a.ptr, "new allocation overlaps a live one"
        self.model[a.ptr] = (size, kind, a)
        return a

    @rule(a=consumes(allocs), by_ptr=st.booleans())
    def free(self, a, by_ptr):
        pyoffload.free(a.ptr if by_ptr else a)
        del self.model[a.ptr]
        self.freed.append(a)

    @precondition(lambda self: self.freed)
    @rule(i=st.integers(0, 1000), by_ptr=st.booleans())
    def double_free(self, i, by_ptr):
        a = self.freed[i % len(self.freed)]
        if by_ptr and a.ptr in self.model:
            return  # the address was reused by a live allocation: not a double free any more
        # a freed pointer is unknown (NOT_FOUND); a freed Allocation is a double free
        with pytest.raises(NotFoundError if by_ptr else InvalidArgumentError):
            pyoffload.free(a.ptr if by_ptr else a)

    @rule(a=allocs, frac=st.floats(0, 1, exclude_max=True))
    def interior(self, a, frac):
        off = int(frac * a.size)
        info = pyoffload.mem_info(a.ptr + off)
        size, kind, obj = self.model[a.ptr]
        assert (info.base, info.size, info.kind, info.offset) == (a.ptr, size, kind, off)
        assert info.allocation is obj
        if off:
            with pytest.raises(InvalidArgumentError, match="points"):
                pyoffload.free(a.ptr + off)

    @rule(a=allocs)
    def one_past_end(self, a):
        end = a.ptr + a.size
        hit = self.rt.registry.find(end)
        if hit is None:
            with pytest.raises(NotFoundError):
                pyoffload.mem_info(end)
        else:
            assert hit[0] == end and end in self.model

    @invariant()
    def registry_matches_model(self):
        assert len(self.rt.registry) == self.base_count + len(self.model)
        for base, (size, kind, obj) in self.model.items():
            hit = self.rt.registry.find(base)
            assert hit is not None and hit[2] is obj and hit[1] - hit[0] == size and obj.kind is kind
        for a in self.freed:
            hit = self.rt.registry.find(a.ptr)
            assert hit is None or hit[2] is not a, f"freed {a!r} still registered"

    def teardown(self):
        for _, _, obj in self.model.values():
            obj.free()
        check_registry(self.rt)


class PinnedMachine(RuleBasedStateMachine):
    """One 1 KiB buffer, ranges given by (start, length) in 16-byte units, on one device."""

    def __init__(self) -> None:
        super().__init__()
        self.dev = pyoffload.host_device()
        self.buf = np.zeros(1024, np.uint8)
        self.addr = self.buf.ctypes.data
        self.model: list[list] = []  # [lo, hi, [(lo, hi) of each lock held]], in bytes relative to buf
        EXAMPLES_RUN["pinned"] += 1

    def _find(self, lo, hi):
        for r in self.model:
            if r[0] <= lo and hi <= r[1]:
                return r
        return None

    @rule(start=st.integers(0, 63), length=st.integers(1, 16))
    def lock(self, start, length):
        lo, hi = start * 16, min(1024, (start + length) * 16)
        r = self._find(lo, hi)
        overlap = any(r2[0] < hi and lo < r2[1] for r2 in self.model)
        if r is None and overlap:
            with pytest.raises(InvalidArgumentError, match="would extend"):
                self.dev.lock(self.buf[lo:hi])
            return
        ptr = self.dev.lock(self.buf[lo:hi])
        if r is None:
            r = [lo, hi, []]
            self.model.append(r)
        r[2].append((lo, hi))
        assert ptr == self.addr + lo  # host device: the device pointer is the host pointer

    def _unlock(self, lo, hi, r):
        self.dev.unlock(self.buf[lo:hi])
        r[2].remove((lo, hi))
        if not r[2]:
            self.model.remove(r)

    @rule(start=st.integers(0, 63), length=st.integers(1, 16))
    def unlock(self, start, length):
        lo, hi = start * 16, min(1024, (start + length) * 16)
        r = self._find(lo, hi)
        if r is None:
            with pytest.raises(InvalidArgumentError, match="not locked"):
                self.dev.unlock(self.buf[lo:hi])
            return
        if (lo, hi) not in r[2]:
            # a sub-range that was never locked itself must not release its enclosing lock
            with pytest.raises(InvalidArgumentError, match="not locked itself"):
                self.dev.unlock(self.buf[lo:hi])
            return
        self._unlock(lo, hi, r)

    @precondition(lambda self: self.model)
    @rule(i=st.integers(0, 1000))
    def unlock_held(self, i):
        held = [(lo, hi, r) for r in self.model for lo, hi in r[2]]
        lo, hi, r = held[i % len(held)]
        self._unlock(lo, hi, r)

    @rule(off=st.integers(0, 1023))
    def is_pinned(self, off):
        expected = any(r[0] <= off < r[1] for r in self.model)
        assert pyoffload.is_pinned(self.addr + off) == expected

    @invariant()
    def map_matches_model(self):
        pins = self.dev.pins
        entries = sorted((b - self.addr, e - self.addr, en.users) for b, e, en in pins.by_host)
        assert entries == sorted((r[0], r[1], len(r[2])) for r in self.model)
        assert len(pins.by_dev) == len(pins.by_host)

    def teardown(self):
        for r in list(self.model):
            for lo, hi in list(r[2]):
                self._unlock(lo, hi, r)
        assert len(self.dev.pins.by_host) == 0


_settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)


def test_registry_model(twin_runtime):
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(RegistryMachine, settings=_settings)


def test_pinned_map_model(twin_runtime):
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(PinnedMachine, settings=_settings)


def test_report_examples():
    print(f"\nhypothesis examples: registry {EXAMPLES_RUN['registry']}, pinned map {EXAMPLES_RUN['pinned']}")
