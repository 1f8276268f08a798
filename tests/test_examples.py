"""examples/arraylib on every device found, against numpy: elementwise operations, the reduction,
moves between every pair of devices and zero-copy views.  The unit row runs it on this process's
devices; the ``arraylib-mpi`` row runs it under ``mpirun -n 3`` (scripts/matrix.py), where the
devices of the other two ranks (their host and PoCL devices) are remote devices of rank 0."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import numpy as np
import pytest

import pyoffload

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import arraylib  # noqa: E402

# Parametrised by device id: other tests of the session shut the runtime down and start fresh
# ones, so each test looks its devices up in the runtime of the moment.
DEVICES = [d.id for d in pyoffload.devices() if arraylib.source_backend(d) in arraylib.BACKENDS]
OTHERS = [d.id for d in pyoffload.devices() if arraylib.source_backend(d) not in arraylib.BACKENDS]


def _device(dev_id: str) -> pyoffload.Device:
    return next(d for d in pyoffload.devices() if d.id == dev_id)


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> pyoffload.Device:
    return _device(request.param)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 63, 1000])
def test_elementwise_and_sum(device: pyoffload.Device, dtype: type, n: int) -> None:
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    a, b = arraylib.asarray(x, device), arraylib.asarray(y, device)
    got = (a * b + a * 0.5).numpy()
    np.testing.assert_allclose(got, x * y + x * dtype(0.5), rtol=1e-6)
    total = (a + b).sum().numpy()
    assert total.shape == ()
    np.testing.assert_allclose(total, (x + y).sum(dtype=np.float64), rtol=1e-4, atol=1e-4)


def test_views_are_zero_copy_where_host_accessible(device: pyoffload.Device) -> None:
    # A remote device (another rank's) has only DEVICE memory: host memory must be readable at its
    # address in this process.
    if pyoffload.AllocKind.HOST in device.limits.kinds:
        arr = arraylib.asarray(np.arange(16, dtype=np.float32), device, kind=pyoffload.AllocKind.HOST)
        view = arr.numpy()
        assert view.ctypes.data == arr.alloc.ptr  # the array's own memory, not a copy
        assert (view == np.arange(16)).all()
        with pytest.raises(pyoffload.InvalidArgumentError):
            arr.alloc.free()  # the view still points into it
    else:
        with pytest.raises(pyoffload.UnsupportedError):
            arraylib.asarray(np.arange(16, dtype=np.float32), device, kind=pyoffload.AllocKind.HOST)
    dev_arr = arraylib.asarray(np.arange(4, dtype=np.float32), device)
    out = dev_arr.numpy()
    assert (out == np.arange(4)).all()
    assert (out.ctypes.data == dev_arr.alloc.ptr) == dev_arr.alloc.host_accessible


@pytest.mark.parametrize("target_id", DEVICES)
def test_move_between_devices(device: pyoffload.Device, target_id: str) -> None:
    target = _device(target_id)
    data = np.linspace(0, 1, 257, dtype=np.float32)
    src = arraylib.asarray(data, device) * 2.0
    moved = src.to(target)
    del src  # freed in queue order while the copy may still be queued
    assert moved.device is target
    np.testing.assert_array_equal(moved.numpy(), data * np.float32(2.0))
    np.testing.assert_allclose((moved + moved).sum().numpy(), 4 * data.sum(dtype=np.float64), rtol=1e-5)


def test_mismatched_operands_are_refused(device: pyoffload.Device) -> None:
    a = arraylib.asarray(np.zeros(4, dtype=np.float32), device)
    with pytest.raises(ValueError, match="differ"):
        a + arraylib.asarray(np.zeros(5, dtype=np.float32), device)
    with pytest.raises(TypeError, match="float32 and float64"):
        arraylib.asarray(np.zeros(4, dtype=np.int32), device)
    if len(DEVICES) > 1:
        other = _device(next(i for i in DEVICES if i != device.id))
        with pytest.raises(ValueError, match=r"\.to\(\)"):
            a + arraylib.asarray(np.zeros(4, dtype=np.float32), other)


def test_2d_slices_are_one_device_copy(device: pyoffload.Device) -> None:
    host = np.arange(7 * 9, dtype=np.float32).reshape(7, 9)
    a = arraylib.asarray(host, device)
    for rows, cols in [(slice(1, 5), slice(2, 8)), (slice(None), slice(0, 1)), (slice(6, 7), slice(None))]:
        np.testing.assert_array_equal(a[rows, cols].numpy(), host[rows, cols])
    assert a[3:3, 0:4].shape == (0, 4)
    with pytest.raises(ValueError):
        a[::2, :]


def test_arrays_come_from_arraylibs_own_pool(device: pyoffload.Device) -> None:
    pool = arraylib.memory_pool(device)
    gc.collect()  # arrays of earlier tests: freed now, not during this one
    before = pool.stats().allocations
    a = arraylib.asarray(np.ones(1000, dtype=np.float32), device)
    with_a = pool.stats()
    assert with_a.allocations == before + 1 and pool.created
    assert pyoffload.mem_info(a.alloc.ptr).allocation is a.alloc
    del a  # freed in the queue's order, back to arraylib's pool
    assert pool.stats().in_use_bytes == with_a.in_use_bytes - 4096


def test_every_device_of_the_covered_backends_is_tested() -> None:
    # The unit row runs with PYOFFLOAD_PLUGINS=opencl: every OpenCL device found is tested; the
    # arraylib-mpi row with PYOFFLOAD_PLUGINS=mpi: every remote device (each rank's host and PoCL).
    assert DEVICES[-1] == pyoffload.host_device().id
    for name in ("opencl", "mpi"):
        found = [r for r in pyoffload.plugins() if r.name == name and r.status == "ok"]
        assert len([i for i in DEVICES if _device(i).backend == name]) == sum(r.devices for r in found)


@pytest.mark.skipif(not OTHERS, reason="every device found is of a backend arraylib has kernels for")
def test_other_backends_are_refused_clearly() -> None:
    with pytest.raises(pyoffload.UnsupportedError, match="no kernels for"):
        arraylib.empty(4, device=_device(OTHERS[0]))


@pytest.mark.parametrize("n", [1, 37, 128])
def test_generated_c_runs_parallel_without_a_wrapper(n: int) -> None:
    """examples/generated_c.py: plain generated C functions with a trailing launch context (no
    wrapper, no macros) run on the host device and match numpy (the example checks)."""
    import generated_c

    times = generated_c.run(n)
    assert set(times) == {"matmul", "fused", "mlp_step"}


def test_generated_mlp_step_is_the_same_on_opencl() -> None:
    """The generator's OpenCL C rendering of the MLP step's 19 kernels computes the same step as
    numpy on an OpenCL device (the benchmarks compare the two renderings)."""
    import generated_c

    ocl = [d for d in pyoffload.devices() if d.backend == "opencl"]
    if not ocl:
        pytest.skip("no OpenCL device")
    mlp = generated_c.Mlp(batch=8, in_=12, hidden=6, out=3)
    with ocl[0].create_queue() as q:
        run = generated_c.MlpStep(ocl[0], q, mlp, generated_c.OPENCL)
        run.step()
        generated_c.check_mlp_step(mlp, run)
        run.close()
