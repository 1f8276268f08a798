"""Fault injection: every ``*_impl`` hook a realistic workload calls fails once, on each backend.

For each backend (host, the in-process twin, OpenCL when installed) a counting run finds which
hooks the workload calls and how often.  Then, for each such hook, the workload is run again in a
fresh runtime with the hook failing on its first call and again on its last.  Checks:

* the failing call raised an ``OffloadError`` (or, in a release path, issued a TeardownWarning);
* a failing call that creates something left nothing behind (registry, pinned maps, programs,
  queues), and after cleanup the runtime holds nothing at all;
* every device, the faulted backend's included, still works afterwards;
* shutdown after the fault never raises.

Teardown after a fault at interpreter exit is checked in subprocesses at the end.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, MemAdvice, OffloadError, TeardownWarning, api, runtime
from pyoffload.hooks.wrappers import wrap_every_hook

import twin_backend
from conftest import add_twin, check_registry, snapshot
from faults import FaultPlugin

HERE = os.path.dirname(os.path.abspath(__file__))


@wrap_every_hook
class Counter:
    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def around(self, hook: str, kwargs: dict[str, Any]) -> Generator[None, Any, Any]:
        self.counts[hook] += 1
        return (yield)


# -------------------------------------------------------------------------------------------
# the workload: one public call per step
# -------------------------------------------------------------------------------------------

# steps that may fail with UnsupportedError on some backend without a fault
OPTIONAL = {"global-read", "prefetch", "advise", "elapsed", "alloc-async", "free-async", "lock-outer"}
# steps that release something: a failure may forget the object (a leak, never a dangling pointer)
RELEASES = {
    "free-a",
    "free-b",
    "free-h",
    "free-m",
    "unlock-inner",
    "unlock-outer",
    "unload-ctor-dtor",
    "unload",
    "destroy-queue",
    "close-context",
    "free-async",
}


def workload(backend: str) -> list[tuple[str, Callable[[dict[str, Any]], Any]]]:
    def dev(s: dict[str, Any]) -> Any:
        return s["dev"]

    def images(s: dict[str, Any]) -> dict[str, bytes]:
        d = dev(s)
        return d.disp.conformance_images_impl(d.handle)

    def launch(s: dict[str, Any]) -> Any:
        s["ev"] = s["q"].launch(s["k"], 1, 64, [s["b"], np.int32(64), np.int32(5)])

    def lock_outer(s: dict[str, Any]) -> Any:
        s["locked"] = dev(s).lock(s["pin"])

    return [
        ("info", lambda s: dev(s).info),
        ("images", lambda s: s.__setitem__("img", images(s))),
        ("context", lambda s: s.__setitem__("ctx", pyoffload.Context([dev(s)]))),
        ("alloc-pool", lambda s: s.__setitem__("a", s["ctx"].alloc(256))),
        ("alloc-big", lambda s: s.__setitem__("b", s["ctx"].alloc(1 << 16))),
        ("alloc-host", lambda s: s.__setitem__("h", s["ctx"].alloc(4096, AllocKind.HOST))),
        ("alloc-managed", lambda s: s.__setitem__("m", s["ctx"].alloc(4096, AllocKind.MANAGED))),
        ("memcpy-in", lambda s: pyoffload.memcpy(s["b"], s["src"], 4096)),
        ("memcpy-out", lambda s: pyoffload.memcpy(s["dst"], s["b"], 4096)),
        ("memfill", lambda s: pyoffload.memfill(s["b"], np.uint32(7), 4096)),
        ("queue", lambda s: s.__setitem__("q", dev(s).create_queue(profiling=True, context=s["ctx"]))),
        ("q-memcpy-in", lambda s: s.__setitem__("e1", s["q"].memcpy(s["b"], s["src"], 4096))),
        ("q-memcpy-exchange", lambda s: s["q"].memcpy(s["a"], s["b"], 256)),
        ("q-memfill", lambda s: s["q"].memfill(s["b"], np.uint16(3), 1024)),
        ("q-memcpy-out", lambda s: s["q"].memcpy(s["dst"], s["b"], 4096)),
        ("lock-outer", lock_outer),
        # a device that cannot lock host memory (PoCL: no fine-grain system SVM) skips the rest
        ("lock-inner", lambda s: s.get("locked") and dev(s).lock(s["pin"][16:32])),
        ("unlock-inner", lambda s: s.get("locked") and dev(s).unlock(s["pin"][16:32])),
        ("unlock-outer", lambda s: s.get("locked") and dev(s).unlock(s["pin"])),
        ("prefetch", lambda s: pyoffload.prefetch(s["m"], 4096, to=dev(s), queue=s["q"])),
        ("advise", lambda s: pyoffload.advise(s["m"], 4096, MemAdvice.SET_READ_MOSTLY, dev(s))),
        ("load", lambda s: s.__setitem__("p", dev(s).load_program(s["img"]["kernels"], context=s["ctx"]))),
        ("kernel", lambda s: s.__setitem__("k", s["p"].kernel("iota_i32"))),
        ("signature", lambda s: s["k"].signature),
        ("symbols", lambda s: s["p"].symbols()),
        ("global-read", lambda s: s["p"].global_variable("table").read()),
        ("launch", launch),
        ("prepare", lambda s: s.__setitem__("pl", s["q"].prepare(s["k"], 1, 64, [s["b"], np.int32(64), np.int32(1)]))),
        ("prepared-launch", lambda s: s["pl"]()),
        ("host-function", lambda s: s["q"].launch_host_function(lambda: None)),
        ("event-query", lambda s: s["ev"].is_complete),
        ("event-wait", lambda s: s["ev"].wait()),
        ("elapsed", lambda s: s["ev"].elapsed_ms(s["e1"])),
        ("queue-query", lambda s: s["q"].query()),
        ("queue-wait", lambda s: s["q"].wait()),
        ("alloc-async", lambda s: s.__setitem__("c", s["q"].alloc_async(512))),
        ("free-async", lambda s: s["q"].free_async(s.pop("c"))),
        ("load-ctor-dtor", lambda s: s.__setitem__("pd", dev(s).load_program(s["img"]["ctor_dtor"], context=s["ctx"]))),
        ("unload-ctor-dtor", lambda s: s["pd"].unload()),
        ("unload", lambda s: s["p"].unload()),
        ("destroy-queue", lambda s: s["q"].destroy()),
        ("free-a", lambda s: s["a"].free()),
        ("free-b", lambda s: s["b"].free()),
        ("free-h", lambda s: s["h"].free()),
        ("free-m", lambda s: s["m"].free()),
        ("close-context", lambda s: s["ctx"].close()),
    ]


def _cleanup(s: dict[str, Any]) -> None:
    """Release what the interrupted workload made (no fault fires twice)."""
    q = s.get("q")
    if q is not None and q.live:
        try:
            q.wait()
        except OffloadError:
            pass
    for key in ("p", "pd"):
        p = s.get(key)
        if p is not None and p.loaded:
            p.unload()
    if q is not None and q.live:
        q.destroy()
    for key in ("a", "b", "h", "m", "c"):
        a = s.get(key)
        if a is not None and a.live:
            a.free()
    d = s.get("dev")
    if d is not None:
        for view in (s["pin"][16:32], s["pin"]):
            try:
                d.unlock(view)
            except OffloadError:
                pass
    ctx = s.get("ctx")
    if ctx is not None:
        ctx.close()


def run_workload(dev: Any, plugin: Any = None) -> dict[str, Any]:
    """Run the workload; stop at the step where ``plugin`` fires and return what happened."""
    rt = dev.rt
    s: dict[str, Any] = {
        "dev": dev,
        "src": np.arange(4096, dtype=np.uint8),
        "dst": np.zeros(4096, np.uint8),
        "pin": np.zeros(256, np.uint8),
    }
    result: dict[str, Any] = {"step": None}
    for name, step in workload(dev.backend):
        before = snapshot(rt)
        fired = plugin.fired if plugin is not None else 0
        error: BaseException | None = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                step(s)
            except OffloadError as exc:
                error = exc
        now_fired = plugin is not None and plugin.fired > fired
        if not now_fired:
            if error is not None and not (name in OPTIONAL and isinstance(error, pyoffload.UnsupportedError)):
                raise AssertionError(f"step {name} failed without a fault: {error!r}") from error
            continue
        teardown_warned = any(issubclass(w.category, TeardownWarning) for w in caught)
        assert error is not None or teardown_warned, f"fault in step {name} vanished: no error, no warning"
        after = snapshot(rt)
        if error is not None and name not in RELEASES:
            assert after == before, f"failed step {name} left something behind: {before} -> {after}"
        elif name in RELEASES:
            for key in ("registry", "programs", "queues", "contexts", "live_allocs"):
                assert after[key] <= before[key], f"release step {name} created {key}: {before} -> {after}"
        # else the step itself succeeded: the fault hit a release inside it (an event), a warning
        result.update(step=name, error=error, warned=teardown_warned)
        break
    _cleanup(s)
    return result


def exercise(dev: Any) -> None:
    """A device works: allocate, copy, launch, read back, free."""
    img = dev.disp.conformance_images_impl(dev.handle)
    buf = dev.alloc(1024)
    with dev.load_program(img["kernels"]) as prog, dev.create_queue() as q:
        q.launch(prog.kernel("iota_i32"), 4, 64, [buf, np.int32(256), np.int32(3)]).wait()
        out = np.zeros(256, np.int32)
        pyoffload.memcpy(out, buf, 1024)
        assert (out == np.arange(3, 259)).all(), f"{dev.id} computed garbage after a fault"
    buf.free()


# -------------------------------------------------------------------------------------------
# case generation: a counting run per backend, in a fresh runtime like the faulted runs
# -------------------------------------------------------------------------------------------


def _start(factory: Callable[[str], Any]) -> Any:
    if runtime.active() is not None:
        pyoffload.shutdown()
    runtime.add_wrapper(factory)
    return api.runtime()


def _stop(factory: Callable[[str], Any]) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if runtime.active() is not None:
            pyoffload.shutdown()  # must not raise, whatever failed before
    runtime.remove_wrapper(factory)
    return caught


def _first_device(rt: Any, backend: str) -> Any:
    return next(d for d in rt.devices if d.backend == backend)


def _count_hooks() -> dict[str, collections.Counter[str]]:
    counters: dict[str, Counter] = {}

    def factory(backend: str) -> Counter:
        return counters.setdefault(backend, Counter())

    with pytest.MonkeyPatch.context() as mp:
        add_twin(mp)
        try:
            rt = _start(factory)
            backends = sorted({d.backend for d in rt.devices})
            for b in backends:
                run_workload(_first_device(rt, b))
        finally:
            _stop(factory)
    return {b: counters[b].counts for b in backends}


_COUNTS = None


def _counts() -> dict[str, collections.Counter[str]]:
    global _COUNTS
    if _COUNTS is None:
        _COUNTS = _count_hooks()
    return _COUNTS


# Whether and when these are called depends on when the device finishes: a release comes when
# completion is observed, and a query or an event wait is skipped when another observation (a
# poll, a later wait) already saw the work complete.  Only their first call is faulted, and a run
# in which it does not come is skipped with that reason rather than failed.
TIMING_DEPENDENT = {"event_release_impl", "event_query_impl", "event_wait_impl", "queue_query_impl"}
# The first call of these comes at a fixed step, but how many follow depends on timing too: a wait
# records a marker only if the work it waits for has not finished yet.  Their last-call case is
# skipped, not failed, in a run that makes fewer calls than the counting run did.
VARIABLE_COUNT = {"event_record_impl"}


def _cases() -> list[tuple[str, str, int]]:
    cases = []
    for backend, counts in sorted(_counts().items()):
        for hook, n in sorted(counts.items()):
            cases.append((backend, hook, 1))
            if n > 1 and hook not in TIMING_DEPENDENT:
                cases.append((backend, hook, n))
    return cases


INJECTED: collections.Counter[str] = collections.Counter()
SKIPPED_TIMING: set[tuple[str, str, int]] = set()


def test_workload_exercises_the_hooks():
    counts = _counts()
    assert {"host", twin_backend.NAME} <= set(counts)
    must = {
        "init_impl",
        "data_alloc_impl",
        "data_free_impl",
        "data_submit_impl",
        "data_retrieve_impl",
        "data_fill_impl",
        "data_lock_impl",
        "data_unlock_impl",
        "load_binary_impl",
        "unload_binary_impl",
        "get_kernel_impl",
        "kernel_packer_impl",
        "launch_impl",
        "queue_create_impl",
        "queue_destroy_impl",
        "queue_synchronize_impl",
        "event_record_impl",
        "event_wait_impl",
        "enqueue_host_function_impl",
        "deinit_impl",
    }
    # The host device's memory is host memory: the generic layer copies and fills it itself.
    host_memory = {"data_submit_impl", "data_retrieve_impl", "data_fill_impl", "queue_synchronize_impl"}
    for backend, c in counts.items():
        expected = must - (host_memory if backend == "host" else set())
        if "queue_synchronize_impl" in c:  # waits were served by synchronising: no event wait needed
            expected -= TIMING_DEPENDENT
        expected -= {"data_unlock_impl"} if c.get("data_lock_impl") and backend == "opencl" else set()
        assert expected <= set(c), f"{backend}: workload misses {sorted(expected - set(c))}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fault_case" in metafunc.fixturenames:
        cases = _cases()
        metafunc.parametrize("fault_case", cases, ids=[f"{b}-{h}-{n}" for b, h, n in cases])


def test_fault(fault_case):
    backend, hook, nth = fault_case
    plugin = FaultPlugin(hook, nth=nth, backend=backend)

    def factory(name: str) -> Any:
        return plugin if name == backend else object()

    with pytest.MonkeyPatch.context() as mp:
        add_twin(mp)
        try:
            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                rt = _start(factory)
            if hook == "init_impl":
                report = next(r for r in rt.reports if r.name == backend)
                assert report.status == "failed" and "injected fault" in report.reason, report
                assert not any(d.backend == backend for d in rt.devices)
            elif hook != "deinit_impl":
                result = run_workload(_first_device(rt, backend), plugin)
                if plugin.fired == 0 and (hook in TIMING_DEPENDENT or nth > 1 and hook in VARIABLE_COUNT):
                    SKIPPED_TIMING.add((backend, hook, nth))
                    pytest.skip(f"{hook} call {nth} did not come in this run: the device finished first")
                assert plugin.fired == 1, f"{hook} call {nth} never came"
                assert result["step"] is not None
                if isinstance(result["error"], OffloadError):
                    assert hook in str(result["error"]) or "injected fault" in str(result["error"])
                # nothing is left: a failed call made nothing; cleanup released the rest
                check_registry(rt)
                snap = snapshot(rt)
                assert snap["registry"] == 0 and snap["programs"] == 0 and snap["queues"] == 0, snap
                assert not any(snap["pinned"]), snap
            for d in rt.devices:  # every device keeps working, the faulted backend's too
                exercise(d)
        finally:
            caught = _stop(factory)
    if hook == "deinit_impl":
        assert plugin.fired == 1
        assert any(issubclass(w.category, TeardownWarning) and "deinit" in str(w.message) for w in caught)
    assert plugin.fired == 1
    INJECTED[backend] += 1


def test_report_fault_count():
    cases = _cases()
    hooks = {(b, h) for b, h, _ in cases}
    if not INJECTED:
        pytest.skip("the fault cases were deselected")
    print(
        f"\nfaults injected: {sum(INJECTED.values())} ({len(hooks)} hooks x backends: "
        + ", ".join(f"{b} {len({h for bb, h in hooks if bb == b})} hooks" for b in sorted({b for b, _ in hooks}))
        + ")"
    )
    assert sum(INJECTED.values()) + len(SKIPPED_TIMING) == len(cases), "some fault cases did not run or did not fire"
    assert sum(INJECTED.values()) >= 0.9 * len(cases), f"only {sum(INJECTED.values())} of {len(cases)} faults fired"


# -------------------------------------------------------------------------------------------
# teardown after a fault, at interpreter exit, in a subprocess
# -------------------------------------------------------------------------------------------

TEARDOWN_SCRIPT = textwrap.dedent("""
    import sys
    sys.path[:0] = [{here!r}, {tests!r}]
    import numpy as np, pyoffload
    from pyoffload import runtime
    from faults import FaultPlugin, install
    import dtor_program

    dev = pyoffload.host_device()
    progs = [dtor_program.load(dev, {log!r}, f"p{{i}}") for i in range(3)]
    allocs = [dev.alloc(1 << 16) for _ in range(3)]
    q = dev.create_queue()
    q.launch(progs[0].kernel("spin"), 1, 1, [allocs[0], np.int64(2_000_000)])
    dev.lock(np.zeros(64, np.uint8))
    install(FaultPlugin({hook!r}, nth=1))
    print("exiting")
    {ending}
""")


# At interpreter exit the runtime unloads programs and drains queues, and leaves memory, pinned
# ranges, contexts and drivers to the process's end; an explicit shutdown() releases them too.
# (Queues are waited for through markers: draining polls event_query_impl, a wait event_wait_impl.)
AT_EXIT = ["event_query_impl", "queue_destroy_impl", "unload_binary_impl"]
AT_SHUTDOWN = ["data_free_impl", "data_unlock_impl", "context_destroy_impl", "deinit_impl", "event_wait_impl"]


@pytest.mark.parametrize("hook", AT_EXIT + AT_SHUTDOWN)
def test_teardown_after_fault_at_exit(tmp_path, hook):
    log = tmp_path / "dtors.log"
    ending = "pyoffload.shutdown()" if hook in AT_SHUTDOWN else ""
    script = TEARDOWN_SCRIPT.format(here=HERE, tests=os.path.dirname(HERE), log=str(log), hook=hook, ending=ending)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "exiting"
    lines = log.read_text().splitlines()
    # every destructor runs exactly once (a failed unload leaks its image; the loader's own exit
    # processing still runs that one destructor, once), in reverse load order
    assert sorted(lines) == ["dtor p0", "dtor p1", "dtor p2"], lines
    if hook != "unload_binary_impl":
        assert lines == ["dtor p2", "dtor p1", "dtor p0"], lines
    _only_warnings(proc.stderr, expect=True)


def _only_warnings(stderr: str, expect: bool) -> None:
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    heads = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith(" ")]
    for ln in heads:
        assert "Warning:" in ln, f"stderr has more than warnings: {ln!r}\n{stderr}"
    if expect:
        assert any("TeardownWarning" in ln and "injected fault" in ln for ln in heads), stderr
