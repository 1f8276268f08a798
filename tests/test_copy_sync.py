"""The synchronous copy (``pyoffload.memcpy`` without a queue): one enqueue hook call and one queue
synchronisation on the context's internal queue, with the ledger's rules kept (the host buffer
held and the allocation recorded as used while the copy is in flight; a failure raised by the
wait)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pytest

import pyoffload
from pyoffload import runtime
from pyoffload.errors import BackendError
from pyoffload.hooks.wrappers import wrap_every_hook


def _device(backend: str) -> pyoffload.Device:
    devs = [d for d in pyoffload.devices() if d.backend == backend]
    if not devs:
        pytest.skip(f"no {backend} device here")
    return devs[0]


@pytest.fixture
def example() -> pyoffload.Device:
    """A device whose memory the host does not reach: its copies go through the copy hooks (the
    example backend, or OpenCL where the test run enables only that, as the unit row does)."""
    devs = [d for d in pyoffload.devices() if d.backend in ("example", "opencl")]
    if not devs:
        pytest.skip("no example or OpenCL device here")
    return devs[0]


@wrap_every_hook
class _Recorder:
    """Records every hook call; ``inspect`` runs inside ``queue_synchronize_impl``."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.inspect: Any = None
        self.fail_sync: BaseException | None = None

    def around(self, hook: str, kwargs: dict[str, Any]) -> Generator[None, Any, Any]:
        self.calls.append(hook)
        if hook == "queue_synchronize_impl":
            if self.inspect is not None:
                self.inspect()
            if self.fail_sync is not None:  # after the real wait: the work has finished, "failed"
                exc, self.fail_sync = self.fail_sync, None
                yield
                raise exc
        return (yield)


@pytest.fixture
def recorder() -> Generator[_Recorder, None, None]:
    rec = _Recorder()

    def factory(backend: str) -> Any:
        return rec

    runtime.add_wrapper(factory)
    try:
        yield rec
    finally:
        runtime.remove_wrapper(factory)


def _internal_queue(alloc: pyoffload.Allocation) -> Any:
    return alloc.context.internal_queue(alloc.device)


@pytest.mark.parametrize("direction", ["h2d", "d2h", "d2d"])
def test_one_enqueue_and_one_synchronisation_no_event(example, recorder, direction) -> None:
    a, b = example.alloc(4096), example.alloc(4096)
    host = np.arange(4096, dtype=np.uint32).view(np.uint8)[:4096].copy()
    out = np.zeros(4096, np.uint8)
    ops = {
        "h2d": lambda: pyoffload.memcpy(a, host),
        "d2h": lambda: pyoffload.memcpy(out, a),
        "d2d": lambda: pyoffload.memcpy(b, a),
    }
    pyoffload.memcpy(a, host)
    recorder.calls.clear()
    ops[direction]()
    hooks = [h for h in recorder.calls if not h.startswith("memory_connection")]
    enqueue = {"h2d": "data_submit_impl", "d2h": "data_retrieve_impl", "d2d": "data_exchange_impl"}[direction]
    assert hooks == [enqueue, "queue_synchronize_impl"]
    pyoffload.memcpy(out, b if direction == "d2d" else a)
    assert bytes(out) == bytes(host)
    a.free()
    b.free()


def test_copy_in_flight_holds_its_host_buffer_and_is_a_user_of_its_memory(example, recorder) -> None:
    a = example.alloc(4096)
    src = np.full(4096, 7, np.uint8)
    q = _internal_queue(a)
    seen: dict[str, Any] = {}

    def inspect() -> None:  # runs while the copy is waited for
        seen["held"] = [h for _, h in q._holds]
        seen["user"] = dict(a.users or {}).get(q)
        seen["seq"], seen["done"] = q.seq, q.done

    recorder.inspect = inspect
    pyoffload.memcpy(a, src)
    recorder.inspect = None
    assert seen["user"] == seen["seq"] > seen["done"]
    assert any(isinstance(h, memoryview) and h.obj is src for h in seen["held"])
    assert not q._holds and q.done == q.seq  # released once the wait observed completion
    a.free()


def test_a_failed_wait_is_raised_by_the_copy_and_the_queue_keeps_working(example, recorder) -> None:
    a = example.alloc(64)
    src = np.full(64, 3, np.uint8)
    q = _internal_queue(a)
    recorder.fail_sync = BackendError("injected: the copy failed")
    with pytest.raises(BackendError, match="the copy failed"):
        pyoffload.memcpy(a, src)
    assert q.failed_work and q.failed_work[-1][1] == q.seq
    assert q.done == q.seq and not q._holds  # the queue had finished: the ledger moved on
    pyoffload.memcpy(a, src)
    out = np.zeros(64, np.uint8)
    pyoffload.memcpy(out, a)
    assert (out == 3).all()
    a.free()


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(24, dtype=np.float64).reshape(4, 6),  # multi-byte items, 2-D
        lambda: np.arange(100, dtype=np.uint8)[10:90],  # a contiguous slice at an offset
        lambda: np.frombuffer(bytes(range(64)), np.uint8),  # read-only: host_view's path
    ],
)
def test_numpy_sources_of_every_shape_copy_their_own_bytes(example, make) -> None:
    src = make()
    a = example.alloc(src.nbytes)
    pyoffload.memcpy(a, src)
    out = np.zeros(src.nbytes, np.uint8)
    pyoffload.memcpy(out, a)
    assert bytes(out) == src.tobytes()
    a.free()


def test_a_read_only_array_is_still_refused_as_a_destination(example) -> None:
    a = example.alloc(64)
    ro = np.zeros(64, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(pyoffload.InvalidArgumentError, match="read-only"):
        pyoffload.memcpy(ro, a)
    a.free()
