"""2D and 3D copies and fills with pitches and offsets (after UR's urEnqueueUSMMemcpy2D and
urEnqueueUSMFill2D tests, OpenCL's clEnqueueCopyBufferRect and CUDA's cuMemcpy2D/3D): every
direction, sub-regions, interleaved layouts, queued and synchronous, and the errors.  Expected
results are computed with numpy on host copies of the memory; device memory is read back with
the 1-D ``memcpy``."""

from __future__ import annotations

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Errc

from ._util import alloc_or_skip, errc_of, read

# A region of H rows of W bytes; pitches differ on the two sides and are not multiples of W.
W, H = 24, 7
SP, DP = 40, 33


def _random(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def _filled(device, data: np.ndarray, kind=AllocKind.DEVICE):
    a = alloc_or_skip(device, data.nbytes, kind)
    pyoffload.memcpy(a, data)
    return a


def _expect_2d(dst: np.ndarray, d_off: int, dp: int, src: np.ndarray, s_off: int, sp: int, w: int, h: int):
    out = dst.copy()
    for y in range(h):
        out[d_off + y * dp : d_off + y * dp + w] = src[s_off + y * sp : s_off + y * sp + w]
    return out


def _expect_3d(dst, d_org, dp, dsp, src, s_org, sp, ssp, region):
    out = dst.copy()
    w, h, dep = region
    for z in range(dep):
        for y in range(h):
            d0 = d_org[0] + (d_org[1] + y) * dp + (d_org[2] + z) * dsp
            s0 = s_org[0] + (s_org[1] + y) * sp + (s_org[2] + z) * ssp
            out[d0 : d0 + w] = src[s0 : s0 + w]
    return out


# -- 2D copies ---------------------------------------------------------------------------------


def test_2d_host_to_device_and_back(device):
    src = _random(SP * H, 1)
    before = _random(DP * H, 2)
    d = _filled(device, before)
    assert pyoffload.memcpy_2d(d, DP, src, SP, W, H) is None
    expected = _expect_2d(before, 0, DP, src, 0, SP, W, H)
    assert np.array_equal(read(d, np.uint8, DP * H), expected)  # bytes between rows untouched
    back = _random(SP * H, 3)
    pyoffload.memcpy_2d(back, SP, d, DP, W, H)
    assert np.array_equal(back, _expect_2d(_random(SP * H, 3), 0, SP, expected, 0, DP, W, H))
    d.free()


def test_2d_device_to_device_with_offsets(device):
    """Sub-regions: both ends are pointers into their allocations."""
    src_bytes, dst_bytes = _random(1024, 4), _random(1024, 5)
    s, d = _filled(device, src_bytes), _filled(device, dst_bytes)
    pyoffload.memcpy_2d(d.ptr + 13, DP, s.ptr + 101, SP, W, H)
    expected = _expect_2d(dst_bytes, 13, DP, src_bytes, 101, SP, W, H)
    assert np.array_equal(read(d, np.uint8, 1024), expected)
    s.free()
    d.free()


def test_2d_host_buffer_sub_region(device):
    """An offset into a host buffer is a slice of it."""
    host = _random(2048, 6)
    d = _filled(device, np.zeros(DP * H, np.uint8))
    pyoffload.memcpy_2d(d, DP, host[300:], SP, W, H)
    assert np.array_equal(read(d, np.uint8, DP * H), _expect_2d(np.zeros(DP * H, np.uint8), 0, DP, host, 300, SP, W, H))
    d.free()


@pytest.mark.parametrize("kind", [AllocKind.HOST, AllocKind.MANAGED], ids=["HOST", "MANAGED"])
def test_2d_into_host_visible_memory(device, kind):
    src = _random(SP * H, 7)
    a = alloc_or_skip(device, DP * H, kind)
    np.frombuffer(a, np.uint8)[:] = 0x5A
    pyoffload.memcpy_2d(a, DP, src, SP, W, H)
    expected = _expect_2d(np.full(DP * H, 0x5A, np.uint8), 0, DP, src, 0, SP, W, H)
    assert np.array_equal(np.frombuffer(a, np.uint8).copy(), expected)
    a.free()


def test_2d_interleaved_rows_in_one_allocation(device):
    """dst rows lie in the gaps between src rows: the regions' spans overlap, their bytes do not."""
    data = _random(64 * 9, 8)
    a = _filled(device, data)
    pyoffload.memcpy_2d(a.ptr + 32, 64, a, 64, 32, 8)  # row y's first half to its second half
    assert np.array_equal(read(a, np.uint8, data.size), _expect_2d(data, 32, 64, data, 0, 64, 32, 8))
    a.free()


def test_2d_regions_sharing_bytes_are_refused(device):
    data = _random(64 * 9, 9)
    a = _filled(device, data)
    with pytest.raises(pyoffload.InvalidArgumentError, match="overlap"):
        pyoffload.memcpy_2d(a.ptr + 16, 64, a, 64, 32, 8)
    assert np.array_equal(read(a, np.uint8, data.size), data)  # nothing written
    a.free()


def test_2d_exact_fit_and_one_byte_past(device):
    """The last byte touched is (height - 1) * pitch + width: exactly the allocation fits."""
    size = (H - 1) * DP + W
    d = _filled(device, np.zeros(size, np.uint8))
    src = _random(SP * H, 10)
    pyoffload.memcpy_2d(d, DP, src, SP, W, H)
    assert np.array_equal(read(d, np.uint8, size), _expect_2d(np.zeros(size, np.uint8), 0, DP, src, 0, SP, W, H))
    with pytest.raises(pyoffload.InvalidSizeError, match="past the end of dst"):
        pyoffload.memcpy_2d(d.ptr + 1, DP, src, SP, W, H)
    with pytest.raises(pyoffload.InvalidSizeError, match="past the end of src"):
        pyoffload.memcpy_2d(src, SP, d.ptr + 1, DP, W, H)
    d.free()


# -- 3D copies ---------------------------------------------------------------------------------


def test_3d_with_origins_host_device_host(device):
    region = (10, 3, 4)
    sp, ssp = 16, 16 * 5  # src: slices of 5 rows of 16 bytes
    dp, dsp = 12, 12 * 4  # dst: slices of 4 rows of 12 bytes
    s_org, d_org = (3, 1, 1), (1, 0, 2)
    src = _random(ssp * 6, 11)
    before = _random(dsp * 6, 12)
    d = _filled(device, before)
    pyoffload.memcpy_3d(
        d, src, region, dst_pitch=dp, dst_slice_pitch=dsp, src_pitch=sp, src_slice_pitch=ssp,
        dst_origin=d_org, src_origin=s_org,
    )  # fmt: skip
    expected = _expect_3d(before, d_org, dp, dsp, src, s_org, sp, ssp, region)
    assert np.array_equal(read(d, np.uint8, before.size), expected)
    out = np.zeros_like(src)
    pyoffload.memcpy_3d(
        out, d, region, dst_pitch=sp, dst_slice_pitch=ssp, src_pitch=dp, src_slice_pitch=dsp,
        dst_origin=s_org, src_origin=d_org,
    )  # fmt: skip
    assert np.array_equal(out, _expect_3d(np.zeros_like(src), s_org, sp, ssp, expected, d_org, dp, dsp, region))
    d.free()


def test_3d_device_to_device_queued(device, queue):
    region = (8, 4, 3)
    src_bytes = _random(32 * 4 * 3, 13)
    s, d = _filled(device, src_bytes), _filled(device, np.zeros(20 * 5 * 4, np.uint8))
    ev = queue.memcpy_3d(
        d, s, region, dst_pitch=20, dst_slice_pitch=100, src_pitch=32, src_slice_pitch=128, dst_origin=(4, 1, 1)
    )
    ev.wait()
    assert ev.is_complete
    expected = _expect_3d(np.zeros(400, np.uint8), (4, 1, 1), 20, 100, src_bytes, (0, 0, 0), 32, 128, region)
    assert np.array_equal(read(d, np.uint8, 400), expected)
    s.free()
    d.free()


def test_2d_is_3d_with_one_slice(device):
    src = _random(SP * H, 14)
    a, b = _filled(device, np.zeros(DP * H, np.uint8)), _filled(device, np.zeros(DP * H, np.uint8))
    pyoffload.memcpy_2d(a, DP, src, SP, W, H)
    pyoffload.memcpy_3d(b, src, (W, H, 1), dst_pitch=DP, dst_slice_pitch=DP * H, src_pitch=SP, src_slice_pitch=SP * H)
    assert np.array_equal(read(a, np.uint8, DP * H), read(b, np.uint8, DP * H))
    a.free()
    b.free()


# -- queued copies -----------------------------------------------------------------------------


def test_queued_2d_completes_as_one_event_in_queue_order(device, queue):
    """Upload, 2D copy, fill over part of it and read back, all on one queue: each sees the one
    before it, and the 2D copy's event says when all its rows are there."""
    src = _random(SP * H, 15)
    d = alloc_or_skip(device, DP * H)
    host_src = src.copy()
    queue.memfill(d, np.uint8(0xEE))
    ev = queue.memcpy_2d(d, DP, host_src, SP, W, H)
    queue.memfill_2d(d.ptr + DP, DP, np.uint8(0x11), 8, 2)  # rows 1 and 2, first 8 bytes
    out = np.zeros(DP * H, np.uint8)
    last = queue.memcpy(out, d)
    ev.wait()
    assert ev.is_complete
    last.wait()
    expected = _expect_2d(np.full(DP * H, 0xEE, np.uint8), 0, DP, src, 0, SP, W, H)
    for y in (1, 2):
        expected[y * DP : y * DP + 8] = 0x11
    assert np.array_equal(out, expected)
    d.free()


def test_queued_2d_device_to_host_keeps_the_host_buffer(device, queue):
    data = _random(DP * H, 16)
    d = _filled(device, data)
    out = np.zeros(SP * H, np.uint8)
    ev = queue.memcpy_2d(out, SP, d, DP, W, H)
    queue.wait()
    assert ev.is_complete
    assert np.array_equal(out, _expect_2d(np.zeros(SP * H, np.uint8), 0, SP, data, 0, DP, W, H))
    d.free()


def test_free_waits_for_a_queued_2d_copy(device, queue):
    d = alloc_or_skip(device, DP * H)
    src = _random(SP * H, 17)
    queue.memcpy_2d(d, DP, src, SP, W, H)
    out = np.zeros(DP * H, np.uint8)
    pyoffload.memcpy_2d(out, DP, d, DP, W, H)  # synchronous: waits for the queued copy first
    assert np.array_equal(out, _expect_2d(np.zeros(DP * H, np.uint8), 0, DP, src, 0, SP, W, H))
    d.free()  # waits for the queue's users; no error


# -- fills ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pattern", [np.uint8(0xA5), np.uint16(0xBEEF), np.uint32(0x01020304)], ids=["1-byte", "2-byte", "4-byte"]
)
@pytest.mark.parametrize("queued", [False, True], ids=["sync", "queued"])
def test_fill_2d(device, queue, pattern, queued):
    pitch, width, height = 36, 16, 5
    before = _random(pitch * height + 8, 18)
    d = _filled(device, before)
    if queued:
        queue.memfill_2d(d.ptr + 4, pitch, pattern, width, height).wait()
    else:
        assert pyoffload.memfill_2d(d.ptr + 4, pitch, pattern, width, height) is None
    expected = before.copy()
    unit = np.frombuffer(pattern.tobytes(), np.uint8)
    for y in range(height):
        row = 4 + y * pitch
        expected[row : row + width] = np.tile(unit, width // unit.size)
    assert np.array_equal(read(d, np.uint8, before.size), expected)
    d.free()


def test_fill_2d_host_buffer_and_host_memory(device):
    host = np.zeros(64 * 4, np.uint8)
    pyoffload.memfill_2d(host, 64, b"\x01\x02\x03", 30, 4)
    expected = np.zeros(64 * 4, np.uint8)
    for y in range(4):
        expected[y * 64 : y * 64 + 30] = np.tile([1, 2, 3], 10)
    assert np.array_equal(host, expected)
    a = alloc_or_skip(device, 64 * 4, AllocKind.HOST)
    np.frombuffer(a, np.uint8)[:] = 0
    pyoffload.memfill_2d(a, 64, b"\x01\x02\x03", 30, 4)
    assert np.array_equal(np.frombuffer(a, np.uint8).copy(), expected)
    a.free()


# -- across devices and backends ----------------------------------------------------------------


def test_2d_between_devices_of_a_platform(device_pair):
    a_dev, b_dev = device_pair
    src = _random(SP * H, 19)
    a, b = _filled(a_dev, src), _filled(b_dev, np.zeros(DP * H, np.uint8))
    pyoffload.memcpy_2d(b, DP, a, SP, W, H)
    assert np.array_equal(read(b, np.uint8, DP * H), _expect_2d(np.zeros(DP * H, np.uint8), 0, DP, src, 0, SP, W, H))
    q = a_dev.create_queue()
    q.memcpy_2d(a, SP, b, DP, W, H).wait()
    assert np.array_equal(read(a, np.uint8, SP * H), _expect_2d(src, 0, SP, read(b, np.uint8, DP * H), 0, DP, W, H))
    q.destroy()
    a.free()
    b.free()


def test_2d_across_backends(cross_pair):
    dev, host = cross_pair
    src = _random(SP * H, 20)
    a, h = _filled(dev, src), _filled(host, np.zeros(DP * H, np.uint8))
    pyoffload.memcpy_2d(h, DP, a, SP, W, H)
    expected = _expect_2d(np.zeros(DP * H, np.uint8), 0, DP, src, 0, SP, W, H)
    assert np.array_equal(read(h, np.uint8, DP * H), expected)
    hq = host.create_queue()
    back = _filled(dev, np.zeros(SP * H, np.uint8))
    hq.memcpy_2d(back, SP, h, DP, W, H).wait()  # another backend's queue: ordered as a host function
    assert np.array_equal(
        read(back, np.uint8, SP * H), _expect_2d(np.zeros(SP * H, np.uint8), 0, SP, expected, 0, DP, W, H)
    )
    hq.destroy()
    for x in (a, h, back):
        x.free()


# -- errors ----------------------------------------------------------------------------------------


def test_rect_errors(device, queue):
    d = _filled(device, np.zeros(256, np.uint8))
    host = np.zeros(256, np.uint8)
    assert errc_of(pyoffload.memcpy_2d, d, 8, host, 16, 16, 2) == Errc.INVALID_SIZE  # dst pitch < width
    assert errc_of(pyoffload.memcpy_2d, d, 16, host, 8, 16, 2) == Errc.INVALID_SIZE  # src pitch < width
    assert errc_of(pyoffload.memcpy_2d, d, 16, host, 16, 0, 2) == Errc.INVALID_SIZE
    assert errc_of(pyoffload.memcpy_2d, d, 16, host, 16, 16, 0) == Errc.INVALID_SIZE
    assert errc_of(pyoffload.memcpy_2d, d, 16, host, 16, -1, 2) == Errc.INVALID_SIZE
    assert errc_of(pyoffload.memcpy_2d, d, 16, host, 16, 16, 17) == Errc.INVALID_SIZE  # 16 rows fit
    assert errc_of(pyoffload.memcpy_2d, 0, 16, host, 16, 16, 2) == Errc.INVALID_NULL_POINTER
    assert errc_of(queue.memcpy_2d, d, 16, 0, 16, 16, 2) == Errc.INVALID_NULL_POINTER
    assert errc_of(pyoffload.memfill_2d, 0, 16, np.uint8(1), 16, 2) == Errc.INVALID_NULL_POINTER
    assert errc_of(pyoffload.memfill_2d, d, 8, np.uint8(1), 16, 2) == Errc.INVALID_SIZE
    assert errc_of(pyoffload.memfill_2d, d, 16, np.uint32(1), 6, 2) == Errc.INVALID_SIZE  # not whole patterns
    assert errc_of(queue.memfill_2d, d, 16, np.uint8(1), 16, 17) == Errc.INVALID_SIZE
    kw = dict(dst_pitch=16, dst_slice_pitch=64, src_pitch=16, src_slice_pitch=64)
    assert errc_of(pyoffload.memcpy_3d, d, host, (16, 4, 5), **kw) == Errc.INVALID_SIZE  # 5 slices of 64 > 256
    assert errc_of(pyoffload.memcpy_3d, d, host, (16, 5, 2), **kw) == Errc.INVALID_SIZE  # 5 rows > 4 per slice
    bad_slice = {**kw, "dst_slice_pitch": 72}
    assert errc_of(pyoffload.memcpy_3d, d, host, (16, 4, 2), **bad_slice) == Errc.INVALID_SIZE  # not a multiple
    assert errc_of(pyoffload.memcpy_3d, d, host, (8, 2, 2), **kw, dst_origin=(9, 0, 0)) == Errc.INVALID_SIZE
    assert errc_of(pyoffload.memcpy_3d, d, host, (8, 2, 2), **kw, src_origin=(0, 0, 3)) == Errc.INVALID_SIZE
    assert errc_of(pyoffload.memcpy_3d, d, host, (8, 2), **kw) == Errc.INVALID_ARGUMENT
    with pytest.raises(TypeError):
        pyoffload.memcpy_2d(d, 16, host, 16, 16.0, 2)
    with pytest.raises(TypeError):
        pyoffload.memfill_2d(d, "16", np.uint8(1), 16, 2)
    with pytest.raises(TypeError):
        pyoffload.memcpy_3d(d, host, 16, **kw)
    with pytest.raises(TypeError):
        pyoffload.memcpy_3d(d, host, (16, 4, 1), **{**kw, "src_slice_pitch": None})
    with pytest.raises(TypeError):
        pyoffload.memcpy_3d(d, host, (16, 4, 1), **kw, dst_origin=0)
    with pytest.raises(TypeError):
        pyoffload.memcpy_2d(d, 16, host, 16, 16, 2, queue="q")
    assert np.array_equal(read(d, np.uint8, 256), np.zeros(256, np.uint8))  # nothing written
    queue.wait()  # nothing was enqueued that could fail
    d.free()
    with pytest.raises(pyoffload.InvalidArgumentError, match="freed"):
        pyoffload.memcpy_2d(d, 16, host, 16, 16, 2)
