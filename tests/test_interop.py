"""Interop on the host backend: the buffer protocol and array interfaces (Python 3.11 included),
numpy 2's ``__array__`` rules, DLPack both ways with numpy and (when installed) PyTorch."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc, OffloadError
from pyoffload.host.compiler import packaged_image

KINDS = [AllocKind.DEVICE, AllocKind.HOST, AllocKind.MANAGED]


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_buffer_protocol_and_array_interface(host, kind):
    a = host.default_context.alloc(64, kind)
    np.frombuffer(a, np.int32)[:] = np.arange(16)
    mv = memoryview(a)
    assert mv.nbytes == 64 and mv.format == "B" and not mv.readonly
    assert a.exports == 1
    assert np.asarray(a).shape == (64,) and np.asarray(a).dtype == np.uint8
    data = a.__array_interface__["data"]  # a holder of one more export, not a bare address
    assert data.ptr == a.ptr and a.exports == 2
    del data
    gc.collect()
    with pytest.raises(OffloadError) as err:
        a.free()
    assert err.value.errc is Errc.INVALID_ARGUMENT and "exported" in str(err.value)
    assert not a.freed, "a refused free changed the allocation"
    mv.release()
    gc.collect()
    assert a.exports == 0
    a.free()
    with pytest.raises(BufferError):
        memoryview(a)


def test_array_follows_numpy_2_copy_rules(host):
    a = host.alloc(16)
    np.frombuffer(a, np.uint8)[:] = 7
    aliased = np.asarray(a)
    aliased[0] = 9
    assert np.frombuffer(a, np.uint8)[0] == 9, "np.asarray must not copy"
    copied = np.array(a, copy=True)
    copied[1] = 1
    assert np.frombuffer(a, np.uint8)[1] == 7 and copied.flags.owndata
    with pytest.raises(ValueError, match="copy"):
        a.__array__(np.int16, copy=False)
    assert a.__array__(np.int16).dtype == np.int16
    del aliased, copied
    gc.collect()
    a.free()


def test_typed_views_cover_exactly_the_bytes_asked_for(host):
    a = host.alloc(100)  # the pool rounds it up; views must not see the rounding
    v = a.view(np.float32, (3, 2), offset=4, owner="framework-array")
    assert v.shape == (3, 2) and v.nbytes == 24
    assert v.ctypes.data == a.ptr + 4
    assert a.view(np.int64).shape == (12,)
    with pytest.raises(OffloadError) as err:
        a.view(np.float64, 13)
    assert err.value.errc is Errc.INVALID_SIZE
    with pytest.raises(TypeError):
        a.view(np.int32, 2.5)
    del v
    gc.collect()
    a.free()


def test_view_keeps_its_owner_alive(host):
    class Owner:
        pass

    a = host.alloc(32)
    owner = Owner()
    ref = weakref.ref(owner)
    v = a.view(np.uint8, owner=owner)
    del owner
    gc.collect()
    assert ref() is not None, "the view let its owner go"
    del v
    gc.collect()
    assert ref() is None
    a.free()


def test_dlpack_export_to_numpy(host):
    a = host.alloc(64)
    np.frombuffer(a, np.float32)[:] = np.arange(16)
    assert a.__dlpack_device__() == (1, 0)  # kDLCPU
    arr = np.from_dlpack(a.typed(np.float32, (4, 4)))
    assert arr.shape == (4, 4) and arr[3, 3] == 15.0 and a.exports == 1
    with pytest.raises(OffloadError):
        a.free()
    del arr
    gc.collect()
    assert a.exports == 0
    a.free()


def test_dlpack_capsule_released_unconsumed(host):
    a = host.alloc(64)
    capsule = a.__dlpack__(max_version=(1, 0))
    assert a.exports == 1
    del capsule
    gc.collect()
    assert a.exports == 0
    a.free()


def test_dlpack_refuses_an_impossible_copy(host):
    a = host.alloc(64)
    with pytest.raises(BufferError):
        a.__dlpack__(dl_device=(2, 0), copy=False)
    copied = np.from_dlpack(a.typed(np.uint8))  # same device: no copy
    assert copied.ctypes.data == a.ptr
    del copied
    gc.collect()
    a.free()


def test_from_dlpack_of_numpy(host):
    src = np.arange(32, dtype=np.int32)
    ref = weakref.ref(src)
    b = pyoffload.from_dlpack(src)
    assert b.ptr == src.ctypes.data and b.size == 128 and not b.owned
    info = pyoffload.mem_info(b.ptr + 12)
    assert info.allocation is b and info.offset == 12
    out = np.zeros(32, np.int32)
    pyoffload.memcpy(out, b)
    assert (out == src).all()
    with pytest.raises(OffloadError) as err:
        pyoffload.free(b)
    assert err.value.errc is Errc.INVALID_ARGUMENT and "not owned" in str(err.value)
    # usable by kernels
    with host.load_program(packaged_image("conformance_kernels")) as prog, host.create_queue() as q:
        q.launch(prog.kernel("iota_i32"), 1, 32, [b, np.int32(32), np.int32(100)]).wait()
    assert src[31] == 131
    del src
    gc.collect()
    assert ref() is not None, "the producer was let go while imported"
    b.release()
    gc.collect()
    assert ref() is None, "release() did not let the producer go"
    with pytest.raises(OffloadError) as err:
        pyoffload.mem_info(b.ptr)
    assert err.value.errc is Errc.NOT_FOUND


def test_from_dlpack_refuses_strided_memory(host):
    with pytest.raises(OffloadError) as err:
        pyoffload.from_dlpack(np.arange(20, dtype=np.int64)[::2])
    assert err.value.errc is Errc.INVALID_ARGUMENT and "contiguous" in str(err.value)


def test_from_dlpack_of_a_readonly_producer(host):
    src = np.arange(8, dtype=np.int64)
    src.flags.writeable = False
    b = pyoffload.from_dlpack(src)
    with pytest.raises(OffloadError):
        pyoffload.memcpy(b, np.zeros(8, np.int64))
    b.release()


def test_dlpack_round_trip_with_torch(host):
    torch = pytest.importorskip("torch")
    a = host.alloc(4 * 6)
    np.frombuffer(a, np.float32)[:] = np.arange(6)
    t = torch.from_dlpack(a.typed(np.float32, (2, 3)))
    assert t.shape == (2, 3) and float(t[1, 2]) == 5.0
    t.mul_(2)  # writes land in the allocation
    assert np.frombuffer(a, np.float32)[5] == 10.0
    del t
    gc.collect()
    assert a.exports == 0
    a.free()
    src = torch.arange(10, dtype=torch.float64)
    b = pyoffload.from_dlpack(src)
    out = np.zeros(10)
    pyoffload.memcpy(out, b)
    assert (out == np.arange(10)).all()
    b.release()


def test_external_memory_overlapping_known_memory_is_refused(host):
    a = host.alloc(64)
    with pytest.raises(OffloadError) as err:
        pyoffload.from_native(a.ptr + 8, 16, host)
    assert err.value.errc is Errc.INVALID_ARGUMENT and "overlaps" in str(err.value)
    a.free()
