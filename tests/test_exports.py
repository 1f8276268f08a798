"""Every path that hands an address to another library counts an export, and nothing unmaps
memory under a live export (issue 22, findings 3 and 4).

A program's globals live in its image: ``unload`` refuses while one is exported, and teardown
(context close, shutdown, interpreter exit) keeps the image loaded rather than unmapping it under
the export.  Before, the view read afterwards was a segmentation fault, so those scenarios run in a
child process each, on the host backend and on PoCL's CPU device where it is installed.

Typed views handed to numpy through the array interface hold an export for as long as the array
lives (before, ``free`` succeeded and the array aliased the next allocation), and so does a typed
view whose CUDA array interface was read.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc, InvalidArgumentError

# -- programs' globals, in a child process ---------------------------------------------------------

BACKENDS = {
    "host": {"PYOFFLOAD_PLUGINS": ""},
    "opencl": {"PYOFFLOAD_PLUGINS": "opencl", "POCL_DEVICES": "pthread"},
}

PRELUDE = textwrap.dedent("""
    import atexit, gc, sys, warnings

    after_teardown = []  # registered before pyoffload's exit handler: runs after its teardown
    atexit.register(lambda: [check() for check in after_teardown])

    import numpy as np
    import pyoffload
    from pyoffload import Errc, TeardownWarning

    warnings.simplefilter("always")
    devices = [d for d in pyoffload.devices() if d.backend == {backend!r}]
    if not devices:
        print("no device")
        sys.exit(0)
    dev = devices[0]
    image = dev.disp.conformance_images_impl(dev.handle)["kernels"]
    TABLE = np.arange(16, dtype=np.int32)

    def exports(alloc):
        '''Ways to export a global's memory: each returns the export and a reader of its data.'''
        if alloc.host_accessible:
            yield "view", alloc.view(np.int32), lambda v: v.copy()
            yield "memoryview", memoryview(alloc), lambda m: np.frombuffer(m, np.int32).copy()
            yield "frombuffer", np.frombuffer(alloc, np.int32), lambda a: a.copy()
            yield "from_dlpack", np.from_dlpack(alloc.typed(np.int32)), lambda a: a.copy()
            yield "asarray-typed", np.asarray(alloc.typed(np.int32, (16,))), lambda a: a.copy()
        # DLPack capsules nobody consumed yet (device memory can be exported only this way)
        yield "capsule", alloc.__dlpack__(), lambda c: TABLE
        yield "capsule-typed", alloc.typed(np.int32, (4, 4)).__dlpack__(max_version=(1, 0)), lambda c: TABLE
""")


def run_scenario(backend: str, *parts: str) -> subprocess.CompletedProcess[str]:
    script = PRELUDE.format(backend=backend) + "".join(textwrap.dedent(part) for part in parts)
    env = dict(os.environ, **BACKENDS[backend])
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    if proc.stdout.startswith("no device"):
        pytest.skip(f"no {backend} device")
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


backends = pytest.mark.parametrize("backend", list(BACKENDS))


@backends
def test_unload_refuses_while_a_global_is_exported(backend):
    proc = run_scenario(
        backend,
        """
        p = dev.load_program(image)
        g = p.global_variable("table")
        n = 0
        for how, export, read in exports(g.allocation):
            try:
                p.unload()
            except pyoffload.InvalidArgumentError as exc:
                assert exc.errc is Errc.INVALID_ARGUMENT, exc
                assert "'table' (1 export)" in str(exc), exc
            else:
                raise AssertionError(f"unload with a live {how} export of a global succeeded")
            assert p.loaded, f"a refused unload ({how}) changed the program"
            assert (read(export) == TABLE).all(), how
            assert (g.read(np.int32) == TABLE).all(), how
            q = dev.create_queue()
            q.launch(p.kernel("noop"), 1, 1)  # still usable
            q.wait()
            q.destroy()
            del export, read
            gc.collect()
            assert g.allocation.exports == 0, how
            n += 1
        p.unload()
        assert not p.loaded
        print("refused", n)
    """,
    )
    assert proc.stdout.split()[-1] == ("7" if backend == "host" else "2"), proc.stdout


TEARDOWNS = {
    "context-close": """
        ctx = pyoffload.Context([dev])
        p = dev.load_program(image, context=ctx)
        g = p.global_variable("table")
        kept = list(exports(g.allocation))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ctx.close()
        assert not p.loaded
        report(caught)
        for how, export, read in kept:
            assert (read(export) == TABLE).all(), how
        print("read after close")
    """,
    "shutdown": """
        p = dev.load_program(image)
        g = p.global_variable("table")
        kept = list(exports(g.allocation))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pyoffload.shutdown()
        report(caught)
        for how, export, read in kept:
            assert (read(export) == TABLE).all(), how
        print("read after shutdown")
    """,
    "exit": """
        kept = []

        def read_after_teardown():
            for how, export, read in kept:
                assert (read(export) == TABLE).all(), how
            print("read after exit teardown", flush=True)

        after_teardown.append(read_after_teardown)
        p = dev.load_program(image)
        kept.extend(exports(p.global_variable("table").allocation))
        print("exiting", flush=True)
    """,
}

REPORT = """
    def report(caught):
        msgs = [str(w.message) for w in caught if issubclass(w.category, TeardownWarning)]
        assert any("'table'" in m and "still exported" in m and "leaked" in m for m in msgs), msgs
"""


@backends
@pytest.mark.parametrize("teardown", list(TEARDOWNS))
def test_teardown_keeps_an_exported_global_mapped(backend, teardown):
    """Teardown cannot refuse: it leaks the image (with a TeardownWarning, except at exit) and the
    exports stay readable."""
    proc = run_scenario(backend, REPORT, TEARDOWNS[teardown])
    assert proc.stdout.strip().splitlines()[-1].startswith("read after"), proc.stdout


@backends
def test_an_export_taken_while_unloading_keeps_the_image(backend):
    """An export that starts after unload's check (here: by an observer of the unload, as another
    thread could while the destructors run) is never unmapped: the image is leaked instead."""
    proc = run_scenario(
        backend,
        REPORT,
        """
        from pyoffload.backend import hookimpl

        p = dev.load_program(image)
        g = p.global_variable("table")
        taken = []

        class Observer:
            @hookimpl
            def program_unloading(self, program):
                taken.extend(exports(g.allocation))

        dev.plugin.pm.register(Observer(), name="exports-observer")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            p.unload()
        assert not p.loaded and taken
        report(caught)
        for how, export, read in taken:
            assert (read(export) == TABLE).all(), how
        print("read after unload")
    """,
    )
    assert proc.stdout.strip().endswith("read after unload"), proc.stdout


@backends
def test_no_export_of_an_unloaded_global(backend):
    run_scenario(
        backend,
        """
        p = dev.load_program(image)
        alloc = p.global_variable("table").allocation
        p.unload()
        for make in (lambda: alloc.view(np.int32), lambda: memoryview(alloc), lambda: alloc.__dlpack__(),
                     lambda: np.asarray(alloc.typed(np.int32))):
            try:
                make()
            except (pyoffload.OffloadError, BufferError):
                pass
            else:
                raise AssertionError("exported the global of an unloaded program")
        assert alloc.exports == 0
    """,
    )


@backends
def test_dlpack_exports_alive_at_exit_end_cleanly(backend):
    """Capsules and consumers' arrays that live until the interpreter's last garbage collection
    (here: the module's globals, kept by an observer registered with the backend) must not call
    back into Python from there (before: a segmentation fault at exit)."""
    proc = run_scenario(
        backend,
        """
        from pyoffload.backend import hookimpl

        class Observer:
            @hookimpl
            def program_loaded(self, program):
                pass

        dev.plugin.pm.register(Observer(), name="exit-observer")
        a = dev.alloc(64)
        kept = [a.__dlpack__(), a.typed(np.int32).__dlpack__(max_version=(1, 0))]
        if a.host_accessible:
            kept.append(np.from_dlpack(a.typed(np.int32)))
        assert a.exports == len(kept)
        print("exiting with", len(kept), "exports", flush=True)
    """,
    )
    assert "exiting with" in proc.stdout, proc.stdout


@backends
def test_device_memory_exported_through_dlpack_cannot_be_freed(backend):
    run_scenario(
        backend,
        """
        a = dev.alloc(256)
        for versioned in (None, (1, 0)):
            capsule = a.typed(np.float32, (64,)).__dlpack__(max_version=versioned)
            assert a.exports == 1, a.exports
            try:
                a.free()
            except pyoffload.InvalidArgumentError as exc:
                assert "exported" in str(exc), exc
            else:
                raise AssertionError("freed memory exported through DLPack")
            del capsule
            gc.collect()
            assert a.exports == 0
        a.free()
        try:
            a.__dlpack__()
        except pyoffload.InvalidArgumentError:
            pass
        else:
            raise AssertionError("exported freed memory")
    """,
    )


# -- typed views: the array interface and the CUDA array interface -----------------------------------


def test_an_array_from_a_typed_view_counts_as_an_export(host):
    a = host.alloc(4096)
    np.frombuffer(a, np.float32)[:] = np.arange(1024)
    owner = object()
    arr = np.asarray(a.typed(np.float32, (32, 32), owner=owner))
    assert a.exports == 1
    assert arr.shape == (32, 32) and arr.dtype == np.float32 and arr[1, 1] == 33.0
    with pytest.raises(InvalidArgumentError) as err:
        a.free()
    assert err.value.errc is Errc.INVALID_ARGUMENT and "exported" in str(err.value)
    assert not a.freed
    arr[0, 0] = -1.0  # writes land in the allocation
    assert np.frombuffer(a, np.float32)[0] == -1.0
    del arr
    gc.collect()
    assert a.exports == 0
    a.free()


def test_a_freed_allocation_is_not_reachable_through_an_earlier_array(host):
    """The finding: the array outlived a free that succeeded, then aliased the next allocation."""
    a = host.alloc(4096)
    arr = np.asarray(a.typed(np.float32, (1024,)))
    with pytest.raises(InvalidArgumentError):
        a.free()
    b = host.alloc(4096)
    assert b.ptr != a.ptr
    b.free()
    del arr
    gc.collect()
    a.free()


def test_the_array_keeps_the_typed_views_owner_alive(host):
    import weakref

    class Owner:
        pass

    a = host.alloc(64)
    owner = Owner()
    ref = weakref.ref(owner)
    arr = np.asarray(a.typed(np.int32, owner=owner))
    del owner
    gc.collect()
    assert ref() is not None, "the array let the typed view's owner go"
    del arr
    gc.collect()
    assert ref() is None
    a.free()


@pytest.mark.parametrize(
    "dtype, shape, offset",
    [
        (np.int16, (2, 3), 6),
        (np.float64, (), 8),
        (np.uint8, (0,), 64),
        (np.complex64, None, 16),
    ],
)
def test_array_interface_covers_exactly_the_typed_bytes(host, dtype, shape, offset):
    a = host.alloc(64)
    raw = np.frombuffer(a, np.uint8)
    raw[:] = np.arange(64)
    dt = np.dtype(dtype)
    arr = np.asarray(a.typed(dt, shape, offset=offset))
    count = (64 - offset) // dt.itemsize if shape is None else int(np.prod(shape))
    expect = raw[offset : offset + count * dt.itemsize].view(dt).reshape((count,) if shape is None else shape)
    assert arr.dtype == dt and arr.shape == expect.shape and arr.tobytes() == expect.tobytes()
    del arr, raw, expect
    gc.collect()
    assert a.exports == 0
    a.free()


def test_array_of_read_only_memory_is_read_only(host):
    src = np.arange(16, dtype=np.int32)
    src.flags.writeable = False
    b = pyoffload.from_dlpack(src)
    assert b.readonly
    arr = np.asarray(b.typed(np.int32))
    assert not arr.flags.writeable and (arr == src).all() and b.exports == 1
    del arr
    gc.collect()
    b.release()


def test_view_of_read_only_memory_is_read_only(host):
    """``Allocation.view`` must not hand out a writable array over memory its producer made
    read-only (the holder's ``readonly`` is left unset)."""
    src = np.arange(16, dtype=np.int32)
    src.flags.writeable = False
    b = pyoffload.from_dlpack(src)
    v = b.view(np.int32)
    writable = v.flags.writeable
    del v
    gc.collect()
    b.release()
    assert not writable


def test_no_array_of_freed_memory(host):
    a = host.alloc(64)
    view = a.typed(np.int32)
    a.free()
    with pytest.raises(InvalidArgumentError, match="freed"):
        np.asarray(view)


def test_allocation_array_interface_counts_an_export(host):
    """A consumer that reads ``Allocation.__array_interface__`` itself (not the buffer protocol)."""

    class Wrapper:
        def __init__(self, interface):
            self.__array_interface__ = interface

    a = host.alloc(64)
    arr = np.asarray(Wrapper(a.__array_interface__))
    assert arr.shape == (64,) and a.exports == 1
    del arr
    gc.collect()
    a.free()


@pytest.fixture
def cuda_like_host(host, monkeypatch):
    """The host device, reporting its DEVICE memory as CUDA memory (kDLCUDA): what the CUDA array
    interface is offered for."""
    host.info  # noqa: B018  (fills the cache)
    monkeypatch.setitem(host._info, "dlpack_device_types", {"DEVICE": pyoffload.dlpack.K_DL_CUDA})
    return host


def test_a_typed_view_read_through_the_cuda_array_interface_counts_as_an_export(cuda_like_host):
    a = cuda_like_host.alloc(256, AllocKind.DEVICE)
    view = a.typed(np.float32, (8, 8))
    cai = view.__cuda_array_interface__
    assert cai["data"] == (a.ptr, False) and cai["shape"] == (8, 8)
    view.__cuda_array_interface__  # noqa: B018  (read again: still one export)
    assert a.exports == 1
    with pytest.raises(InvalidArgumentError, match="exported"):
        a.free()
    del view
    gc.collect()
    assert a.exports == 0
    a.free()
    with pytest.raises(InvalidArgumentError, match="freed"):
        a.typed(np.uint8).__cuda_array_interface__  # noqa: B018
