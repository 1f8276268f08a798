"""Fixtures for the reliability tests: a runtime with the in-process twin backend next to the
installed ones, snapshots of everything a failed call could leave behind, and device lists."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

import pyoffload
from pyoffload import api, runtime
from pyoffload.hooks import discovery

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))  # tests/: faults.py

import twin_backend  # noqa: E402


def _with_twin(original: Any) -> Any:
    def entry_points() -> list[tuple[str, Any, Any]]:
        return [*original(), (twin_backend.NAME, ("pyoffload-reliability-twin", "0"), twin_backend)]

    return entry_points


def add_twin(mp: pytest.MonkeyPatch) -> None:
    """Register the twin backend through ``mp``; where PYOFFLOAD_PLUGINS is an allow-list (the
    matrix's unit row has one), the twin joins it: it exists only in this process, so the row's
    own list cannot name it without every subprocess warning about an unknown plugin."""
    mp.setattr(discovery, "entry_points", _with_twin(discovery.entry_points))
    allow = os.environ.get("PYOFFLOAD_PLUGINS")
    if allow is not None:
        mp.setenv("PYOFFLOAD_PLUGINS", ",".join(filter(None, [allow, twin_backend.NAME])))


def owned_allocations(ctx: Any) -> list[Any]:
    return ctx.live_allocations()


@pytest.fixture(scope="module")
def twin_runtime():
    """Restart pyoffload with the twin backend registered for the whole module."""
    if runtime.active() is not None:
        pyoffload.shutdown()
    mp = pytest.MonkeyPatch()
    add_twin(mp)
    rt = api.runtime()
    assert any(d.backend == twin_backend.NAME for d in rt.devices), [r.line() for r in rt.reports]
    yield rt
    mp.undo()
    if runtime.active() is not None:
        pyoffload.shutdown()


def pinned_sizes(rt: Any) -> tuple[int, ...]:
    out = []
    for d in rt.devices:
        pins = d.pins
        out.append(len(pins.by_host))
        assert len(pins.by_host) == len(pins.by_dev), f"pinned maps of {d.id} disagree"
    return tuple(out)


def snapshot(rt: Any) -> dict[str, Any]:
    """Everything a call could create: compared before and after a failing call."""
    return {
        "registry": sum(1 for _, _, a in rt.registry if a.owned),
        "pinned": pinned_sizes(rt),
        "programs": len(rt.programs),
        "queues": len(rt.queues),
        "contexts": len(rt.contexts),
        "context_allocs": sum(len(owned_allocations(c)) for c in rt.contexts),
        "live_allocs": sum(1 for _, _, a in rt.registry if a.live and a.owned),
    }


def check_registry(rt: Any) -> None:
    """The registry is well formed: no overlaps, every entry live, keyed by its own base and size,
    and each context's own list agrees with it."""
    prev_end = -1
    seen = set()
    for base, end, alloc in rt.registry:
        assert base >= prev_end, f"registry entries overlap at 0x{base:x}"
        prev_end = end
        assert alloc.live, f"freed {alloc!r} still registered"
        assert alloc.ptr == base and alloc.size == end - base, alloc
        seen.add(id(alloc))
    for ctx in rt.contexts:
        for alloc in owned_allocations(ctx):
            assert id(alloc) in seen and alloc.live, f"{ctx!r} holds unregistered {alloc!r}"
    pinned_sizes(rt)
