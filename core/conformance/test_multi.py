"""Two devices of one platform, and copies across backends (each backend with the host)."""

from __future__ import annotations

import numpy as np

import pyoffload
from pyoffload import AllocKind

from ._util import read


def test_copy_between_two_devices(device_pair):
    a, b = device_pair
    data = np.arange(4096, dtype=np.int32)
    da, db = a.alloc(data.nbytes), b.alloc(data.nbytes)
    pyoffload.memcpy(da, data)
    pyoffload.memcpy(db, da)
    assert np.array_equal(read(db, np.int32, 4096), data)
    da.free()
    db.free()


def test_queue_copy_between_two_devices(device_pair):
    a, b = device_pair
    data = np.arange(1024, dtype=np.float64)
    da, db = a.alloc(data.nbytes), b.alloc(data.nbytes)
    pyoffload.memcpy(da, data)
    with b.create_queue() as q:
        q.memcpy(db, da).wait()
    assert np.array_equal(read(db, np.float64, 1024), data)
    da.free()
    db.free()


def test_copy_across_backends(cross_pair):
    dev, host = cross_pair
    data = np.random.default_rng(3).integers(0, 2**31, 10_000, dtype=np.int64)
    on_dev, on_host = dev.alloc(data.nbytes), host.alloc(data.nbytes)
    pyoffload.memcpy(on_host, data)
    pyoffload.memcpy(on_dev, on_host)
    pyoffload.memfill(on_host, b"\x00")
    pyoffload.memcpy(on_host, on_dev)
    assert np.array_equal(read(on_host, np.int64, data.size), data)
    on_dev.free()
    on_host.free()


def test_staged_copy_larger_than_staging_chunk(cross_pair, monkeypatch):
    from pyoffload import transfer

    dev, host = cross_pair
    monkeypatch.setattr(transfer, "STAGING_CHUNK", 4096)
    data = np.arange(10_000, dtype=np.int32)
    src, dst = dev.alloc(data.nbytes), dev.alloc(data.nbytes)
    pyoffload.memcpy(src, data)
    ctx2 = pyoffload.Context([dev])
    other = ctx2.alloc(data.nbytes, AllocKind.DEVICE)
    pyoffload.memcpy(other, src)  # another context: connection NONE, staged in chunks
    pyoffload.memcpy(dst, other)
    assert np.array_equal(read(dst, np.int32, data.size), data)
    ctx2.close()
    assert other.freed
    src.free()
    dst.free()
