"""In-flight lifetimes: an enqueued operation keeps what it uses, and releasing anything waits for
exactly the operations that use it (or refuses where waiting could never end).

Each case holds a queue back with a host function blocked on a gate, enqueues work behind it, and
then releases something from another thread: the release must not return before the gate opens
and the work ran, and afterwards the data must be the work's result (nothing freed, reused or
unloaded under it).  Runs on the host backend and on the twin backend (whose memory the generic
layer treats as device memory).
"""

from __future__ import annotations

import gc
import mmap
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import pyoffload
from pyoffload import Errc, OffloadError

from dtor_program import SOURCE as DTOR_SOURCE  # noqa: F401  (the module builds images on demand)


@pytest.fixture(params=["host", "twin"])
def dev(request, twin_runtime):
    if request.param == "host":
        return pyoffload.host_device()
    return next(d for d in pyoffload.devices() if d.backend == "twin")


@pytest.fixture
def kernels(dev):
    with dev.load_program(dev.disp.conformance_images_impl(dev.handle)["kernels"]) as prog:
        yield prog


def _in_thread(fn):
    """Run ``fn`` in a thread; return (thread, box) where box gets ('ok', value) or ('err', exc)."""
    box: list = []

    def run():
        try:
            box.append(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            box.append(("err", exc))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def _still_blocked(t: threading.Thread, seconds: float = 0.2) -> bool:
    t.join(seconds)
    return t.is_alive()


def test_free_waits_for_a_queued_launch(dev, kernels):
    q = dev.create_queue()
    gate = threading.Event()
    a = dev.alloc(4 * 64)
    q.launch_host_function(gate.wait)
    q.launch(kernels.kernel("iota_i32"), 1, 64, [a, np.int32(64), np.int32(1)])
    t, box = _in_thread(a.free)
    assert _still_blocked(t), "free returned while a queued launch still used the memory"
    gate.set()
    t.join(10)
    assert box == [("ok", None)] and a.freed
    q.destroy()


def test_free_waits_for_a_queued_fill_and_the_block_is_not_reused_early(dev):
    """A pending memfill is a user of its memory: the next allocation at the same address must
    not be overwritten by a stale fill."""
    q = dev.create_queue()
    gate = threading.Event()
    a = dev.alloc(4096)
    q.launch_host_function(gate.wait)
    q.memfill(a, np.uint32(0xDEADBEEF))
    t, box = _in_thread(a.free)
    assert _still_blocked(t), "free returned while a queued fill still used the memory"
    gate.set()
    t.join(10)
    assert box == [("ok", None)]
    b = dev.alloc(4096)
    pyoffload.memfill(b, np.uint32(7))
    q.wait()
    out = np.zeros(1024, np.uint32)
    pyoffload.memcpy(out, b)
    assert (out == 7).all(), "a stale fill overwrote the new owner's data"
    b.free()
    q.destroy()


def test_unload_waits_for_queued_launches(dev):
    q = dev.create_queue()
    gate = threading.Event()
    prog = dev.load_program(dev.disp.conformance_images_impl(dev.handle)["kernels"])
    out = dev.alloc(8)
    q.launch_host_function(gate.wait)
    q.launch(prog.kernel("sleep_spin"), 1, 1, [out, np.int64(100_000)])
    t, box = _in_thread(prog.unload)
    assert _still_blocked(t), "unload returned while a launch of its code was queued"
    with pytest.raises(OffloadError) as err:
        q.launch(prog.kernel("noop"), 1, 1, [])
    assert err.value.errc is Errc.INVALID_PROGRAM, "a launch started on a program being unloaded"
    gate.set()
    t.join(10)
    assert box == [("ok", None)] and not prog.loaded
    got = np.zeros(1, np.int64)
    pyoffload.memcpy(got, out)
    assert got[0] == 100_000, "the queued launch did not complete before the unload"
    out.free()
    q.destroy()


def test_unload_is_bounded_while_another_thread_keeps_launching(dev):
    """Unload waits for the launches recorded before it, not for a queue that never drains."""
    prog = dev.load_program(dev.disp.conformance_images_impl(dev.handle)["kernels"])
    other = dev.load_program(dev.disp.conformance_images_impl(dev.handle)["kernels"])
    q = dev.create_queue()
    stop = threading.Event()

    def feed():
        while not stop.is_set():
            q.launch(other.kernel("noop"), 1, 1, [])
            time.sleep(0)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    q.launch(prog.kernel("noop"), 1, 1, [])
    # Waiting for the queue as a whole would never end while the feeder keeps launching: the
    # unload returns only if it waits for its own launch alone.
    unloader = threading.Thread(target=prog.unload, daemon=True)
    unloader.start()
    unloader.join(60)
    returned = not unloader.is_alive()
    stop.set()
    feeder.join(10)
    unloader.join(60)
    assert returned, "unload waited for launches enqueued after the program's own"
    assert prog.state == "unloaded"
    q.destroy()
    other.unload()


def test_prepared_launch_after_unload_is_refused(dev):
    prog = dev.load_program(dev.disp.conformance_images_impl(dev.handle)["kernels"])
    q = dev.create_queue()
    launch = q.prepare(prog.kernel("noop"), 1, 1, [])
    launch().wait()
    prog.unload()
    with pytest.raises(OffloadError) as err:
        launch()
    assert err.value.errc is Errc.INVALID_PROGRAM
    q.destroy()


def test_query_does_not_release_a_pending_copy_source(dev):
    q = dev.create_queue()
    gate = threading.Event()
    a = dev.alloc(1 << 16)
    src = np.full(1 << 16, 9, np.uint8)
    q.launch_host_function(gate.wait)
    ev = q.memcpy(a, src)
    del src
    gc.collect()
    assert not q.query() and not ev.is_complete
    gate.set()
    ev.wait()
    out = np.zeros(1 << 16, np.uint8)
    pyoffload.memcpy(out, a)
    assert (out == 9).all(), "the copy's source was released before the copy ran"
    a.free()
    q.destroy()


def test_completed_copies_release_their_host_buffers(dev):
    """600 queued copies of 1 MiB sources, each waited on through its event: the queue does not
    keep the sources (what the operation holds is released by whoever observes completion)."""
    q = dev.create_queue()
    a = dev.alloc(1 << 20)
    for _ in range(600):
        q.memcpy(a, np.ones(1 << 20, np.uint8)).wait()
    assert len(q._holds) <= 1, f"{len(q._holds)} host buffers still held"
    a.free()
    q.destroy()


def test_host_function_may_free_memory_its_queue_used(dev, kernels):
    q = dev.create_queue()
    a = dev.alloc(4 * 64)
    b = dev.alloc(4 * 64)
    done = threading.Event()
    q.launch(kernels.kernel("iota_i32"), 1, 64, [a, np.int32(64), np.int32(0)])

    def free_both():
        a.free()  # used before this host function: free now
        b.free()  # used after it: deferred until that work is done
        done.set()

    q.launch_host_function(free_both)
    q.launch(kernels.kernel("iota_i32"), 1, 64, [b, np.int32(64), np.int32(0)])
    q.wait()
    assert done.is_set() and a.freed and b.freed
    q.destroy()


def test_host_function_waiting_on_its_own_queue_is_an_error(dev):
    q = dev.create_queue()
    ev = q.launch_host_function(q.wait)
    with pytest.raises(OffloadError) as err:
        ev.wait()
    assert "host function" in str(err.value)
    assert isinstance(err.value.__cause__, OffloadError) and err.value.__cause__.errc is Errc.INVALID_QUEUE
    with pytest.raises(OffloadError):
        q.wait()  # and once on the queue
    q.destroy()


def test_host_function_error_is_reported_on_its_event_and_once_on_the_queue(dev):
    q = dev.create_queue()
    first = q.launch_host_function(lambda: None)

    def boom():
        raise RuntimeError("boom in host function")

    failing = q.launch_host_function(boom)
    with pytest.raises(OffloadError, match="boom"):
        failing.wait()
    first.wait()  # an earlier operation's event does not carry the later failure
    with pytest.raises(OffloadError, match="boom"):
        q.wait()
    q.wait()  # reported once per queue
    with pytest.raises(OffloadError, match="boom"):
        failing.wait()  # the failed operation's own event stays failed
    q.destroy()


def test_host_functions_may_call_the_runtime(dev, kernels):
    q = dev.create_queue()
    seen = []

    def uses_runtime():
        b = dev.alloc(64)
        pyoffload.memfill(b, np.uint8(3))
        out = np.zeros(64, np.uint8)
        pyoffload.memcpy(out, b)
        seen.append(int(out.sum()))
        b.free()

    q.launch_host_function(uses_runtime)
    q.wait()
    assert seen == [192]
    q.destroy()


def test_shutdown_while_another_thread_launches(fresh_runtime):
    dev = pyoffload.host_device()
    prog = dev.load_program(dev.disp.conformance_images_impl(dev.handle)["kernels"])
    q = dev.create_queue()
    errors: list[BaseException] = []
    started = threading.Event()

    def launcher():
        try:
            while True:
                q.launch(prog.kernel("noop"), 1, 1, [])
                started.set()
        except OffloadError as exc:
            errors.append(exc)

    t = threading.Thread(target=launcher, daemon=True)
    t.start()
    started.wait(10)
    pyoffload.shutdown()
    t.join(10)
    assert len(errors) == 1
    err = errors[0]
    assert err.errc in (Errc.UNINITIALIZED, Errc.INVALID_PROGRAM, Errc.INVALID_QUEUE), err
    assert not isinstance(err, pyoffload.BackendError), "a raw backend failure escaped"


UNLOAD_UNDER_LAUNCHES = textwrap.dedent("""
    import sys, threading
    import numpy as np
    import pyoffload
    from pyoffload import OffloadError

    sys.setswitchinterval(1e-5)  # switch threads often: between a launch's steps too
    dev = pyoffload.host_device()
    image = dev.disp.conformance_images_impl(dev.handle)["kernels"]
    out = dev.alloc(64)
    q = dev.create_queue()
    for _ in range(int(sys.argv[1])):
        prog = dev.load_program(image)
        spin = prog.kernel("sleep_spin")
        started = threading.Event()
        errors = []

        def launcher():
            try:
                while True:
                    q.launch(spin, 1, 1, [out, np.int64(20_000)])
                    started.set()
            except OffloadError as exc:
                errors.append(exc)

        t = threading.Thread(target=launcher)
        t.start()
        started.wait(10)
        prog.unload()  # waits for the launches that got in; the one after it fails
        t.join(10)
        assert len(errors) == 1 and errors[0].errc is pyoffload.Errc.INVALID_PROGRAM, errors
    q.wait()
    print("ok")
""")


def test_unload_while_another_thread_launches_waits_for_every_launch_that_got_in():
    """A launch that fails because the unload has begun still recorded itself as a user: the unload
    must wait for the launches before it, which are running, and not take the failed one's number
    for "nothing to wait for".  The image is unmapped by the unload: a kernel left running under it
    crashes the process, so the rounds run in a child."""
    env = dict(os.environ, PYOFFLOAD_PLUGINS="")
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", UNLOAD_UNDER_LAUNCHES, "200"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


SPINNING_CONSTRUCTOR = """
kernel void pyoffload_init(void) {
    volatile long sink = 0;
    for (long i = 0; i < 20000000; i++) sink += i;
}
kernel void noop(void) {}
"""


def test_a_program_whose_constructor_wait_failed_is_released_only_once_it_stopped():
    """The wait for a constructor failed (its marker could not be recorded) while the constructor
    still ran: the failed load must not release the image under it (PoCL wrote into the freed
    program state and corrupted the heap).  A spy on unload_binary_impl asks the backend, at the
    moment of the release, whether the context's internal queue has finished."""
    from faults import FaultPlugin, install
    from pyoffload import runtime
    from pyoffload.hooks.wrappers import wrap_every_hook

    dev = next((d for d in pyoffload.devices() if d.backend == "opencl"), None)
    if dev is None:
        pytest.skip("needs an OpenCL device (constructors run as kernels there)")
    ctx = pyoffload.Context([dev])
    internal = ctx.internal_queue(dev)
    finished_at_release: list[bool] = []

    @wrap_every_hook
    class ReleaseSpy:
        def around(self, hook: str, kwargs: dict[str, object]) -> object:
            if hook == "unload_binary_impl":
                finished_at_release.append(bool(internal.disp.raw.queue_query_impl(internal.dh, internal.handle)))
            return (yield)

    spy = ReleaseSpy()
    fault = FaultPlugin("event_record_impl", nth=1, backend="opencl")

    def spy_factory(backend: str) -> object:
        return spy

    runtime.add_wrapper(spy_factory)
    fault_factory = install(fault)
    try:
        with pytest.raises(OffloadError, match="injected fault in event_record_impl"):
            dev.build_program(SPINNING_CONSTRUCTOR, cache=False, context=ctx)
    finally:
        runtime.remove_wrapper(fault_factory)
        runtime.remove_wrapper(spy_factory)
    assert fault.fired == 1
    assert finished_at_release == [True], "the image was released while its constructor ran"
    prog = dev.build_program(SPINNING_CONSTRUCTOR, cache=False, context=ctx)  # the device still works
    q = dev.create_queue(context=ctx)
    q.launch(prog.kernel("noop"), 1, 1).wait()
    q.destroy()
    prog.unload()
    ctx.close()


def test_lock_holds_the_buffer_export(dev):
    if dev.backend != "host":
        pytest.skip("the twin backend does not pin host memory it did not allocate differently")
    buf = bytearray(4096)
    dev.lock(buf)
    with pytest.raises(BufferError):
        buf.extend(b"x" * 4096)  # cannot move while locked
    dev.unlock(buf)
    buf.extend(b"x")  # free to change again
    with mmap.mmap(-1, 4096) as m:
        dev.lock(m)
        with pytest.raises(BufferError):
            m.close()
        dev.unlock(m)


def test_read_only_buffers_lock_only_read_only(dev):
    if dev.backend != "host":
        pytest.skip("host pinning semantics")
    data = bytes(1024)
    with pytest.raises(OffloadError) as err:
        dev.lock(data)
    assert err.value.errc is Errc.INVALID_ARGUMENT and "read-only" in str(err.value)
    ptr = dev.lock(data, read_only=True)
    with pytest.raises(OffloadError) as err:
        pyoffload.memcpy(ptr, np.ones(16, np.uint8), 16)
    assert "read-only" in str(err.value), "a copy wrote into an immutable bytes object"
    out = np.zeros(16, np.uint8)
    pyoffload.memcpy(out, ptr, 16)
    dev.unlock(data)


def test_interrupted_free_leaves_the_allocation_usable_and_a_retry_waits(dev, kernels, monkeypatch):
    q = dev.create_queue()
    gate = threading.Event()
    a = dev.alloc(256)
    q.launch_host_function(gate.wait)
    q.memfill(a, np.uint8(5))

    def interrupted(self, seq):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:  # queues have __slots__: patched on the class
        m.setattr(type(q), "wait_until", interrupted)
        with pytest.raises(KeyboardInterrupt):
            a.free()
    assert not a.freed, "an interrupted free freed the memory anyway"
    t, box = _in_thread(a.free)
    assert _still_blocked(t), "the retried free did not wait"
    gate.set()
    t.join(10)
    assert box == [("ok", None)]
    q.destroy()
