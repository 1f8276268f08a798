"""Launches in depth (after liboffload's olLaunchKernel tests and UR's enqueue tests): launch
shapes, argument conversion from the kernel's signature, globals as arguments, prepared launches,
kernel attributes and launch-size suggestions."""

from __future__ import annotations

import numpy as np
import pytest

import pyoffload
from pyoffload import Errc, LocalMemory, OffloadError

from ._util import read


@pytest.fixture
def kernels(device, images):
    with device.load_program(images["kernels"]) as prog:
        yield prog


SHAPES = [
    (1, 1),
    (1, 64),
    (4, 64),
    (64, 1),
    (3, 7),
    ((2,), (32,)),
    ((2, 1), (32, 1)),
    ((2, 1, 1), (32, 1, 1)),
    ((2, 3), (32, 1)),
    ((1, 2, 2), (64, 1, 1)),
]


@pytest.mark.parametrize("grid,block", SHAPES, ids=[f"{g}x{b}" for g, b in SHAPES])
def test_launch_shapes_cover_every_item(device, kernels, queue, grid, block):
    """Kernels take their element count explicitly and ignore ids past it; extra dimensions
    repeat the same items: any shape with at least n items in dimension 0 fills the output."""
    g0 = grid[0] if isinstance(grid, tuple) else grid
    b0 = block[0] if isinstance(block, tuple) else block
    n = g0 * b0
    out = device.alloc(4 * n)
    queue.launch(kernels.kernel("iota_i32"), grid, block, [out, np.int32(n), np.int32(100)]).wait()
    assert np.array_equal(read(out, np.int32, n), np.arange(100, 100 + n, dtype=np.int32))
    out.free()


def test_python_numbers_convert_to_the_declared_types(device, kernels, queue):
    k = kernels.kernel("scalars")
    if k.signature is None:
        pytest.skip(f"{device.id} reports no kernel signatures")
    out = device.alloc(8 * 10)
    args = [-5, -300, -70000, -(2**40), 1.5, 2.25, 250, 65000, 4_000_000_000, 2**50]
    queue.launch(k, 1, 1, [out, *args]).wait()
    assert list(read(out, np.float64, 10)) == [float(a) for a in args]
    out.free()


@pytest.mark.parametrize("index,value", [(1, 128), (2, -40000), (7, 256), (8, -1), (9, 2**32), (10, 2**64)])
def test_python_ints_are_range_checked(device, kernels, queue, index, value):
    k = kernels.kernel("scalars")
    if k.signature is None:
        pytest.skip(f"{device.id} reports no kernel signatures")
    out = device.alloc(80)
    args = [out, 0, 0, 0, 0, 0.0, 0.0, 0, 0, 0, 0]
    args[index] = value
    with pytest.raises(OffloadError) as err:
        queue.launch(k, 1, 1, args)
    assert err.value.errc is Errc.INVALID_ARGUMENT and str(value) in str(err.value)
    out.free()


def test_a_float_for_an_integer_parameter_is_refused(device, kernels, queue):
    k = kernels.kernel("iota_i32")
    if k.signature is None:
        pytest.skip(f"{device.id} reports no kernel signatures")
    out = device.alloc(4)
    with pytest.raises(OffloadError) as err:
        queue.launch(k, 1, 1, [out, 1.0, 0])
    assert err.value.errc is Errc.INVALID_ARGUMENT and "float" in str(err.value)
    out.free()


def test_null_pointer_argument_is_accepted(device, kernels, queue):
    """A NULL pointer with an element count of zero: the kernel touches nothing."""
    queue.launch(kernels.kernel("iota_i32"), 1, 1, [None, np.int32(0), np.int32(0)]).wait()


def test_global_variable_as_an_argument(device, kernels, queue):
    try:
        table = kernels.global_variable("table")
    except pyoffload.UnsupportedError:
        pytest.skip(f"{device.id} cannot expose a global's address")
    queue.launch(kernels.kernel("iota_i32"), 1, 16, [table, np.int32(16), np.int32(50)]).wait()
    assert table.read(np.int32).tolist() == list(range(50, 66))
    info = pyoffload.mem_info(table.address + 8)
    assert info.allocation is table.allocation and info.offset == 8 and not info.allocation.owned


def test_globals_of_two_loads_are_independent(device, images, queue):
    with device.load_program(images["kernels"]) as p1, device.load_program(images["kernels"]) as p2:
        out = device.alloc(4)
        for _ in range(3):
            queue.launch(p1.kernel("bump"), 1, 1, [out]).wait()
        queue.launch(p2.kernel("bump"), 1, 1, [out]).wait()
        assert read(out, np.int32, 1)[0] == 1, "two loads of one image share a global"
        try:
            assert p1.global_variable("counter").read(np.int32)[0] == 3
        except pyoffload.UnsupportedError:
            pass
        out.free()


def test_prepared_launch_repeats(device, kernels, queue):
    out = device.alloc(4)
    bump = queue.prepare(kernels.kernel("bump"), 1, 1, [out])
    for _ in range(10):
        bump()
    bump.launch().wait()
    assert read(out, np.int32, 1)[0] == 11
    out.free()


def test_prepared_launch_with_a_freed_argument_is_refused(device, kernels, queue):
    out = device.alloc(4)
    bump = queue.prepare(kernels.kernel("bump"), 1, 1, [out])
    bump().wait()
    out.free()
    with pytest.raises(OffloadError) as err:
        bump()
    assert err.value.errc is Errc.INVALID_ARGUMENT and "freed" in str(err.value)


def test_prepared_launch_on_a_destroyed_queue_is_refused(device, kernels):
    q = device.create_queue()
    launch = q.prepare(kernels.kernel("noop"), 1, 1, [])
    q.destroy()
    with pytest.raises(OffloadError) as err:
        launch()
    assert err.value.errc is Errc.INVALID_QUEUE


def test_local_memory_beyond_the_device_limit_is_refused(device, kernels, queue):
    limit = device.info["local_memory_bytes"]
    if limit is None:
        pytest.skip(f"{device.id} reports no local memory limit")
    out = device.alloc(64)
    with pytest.raises(OffloadError) as err:
        queue.launch(
            kernels.kernel("local_reverse"), 1, 1, [out, out, LocalMemory(limit + 1), np.int32(1), np.int32(1)]
        )
    assert err.value.errc is Errc.OUT_OF_RESOURCES and "local_memory_bytes" in str(err.value)
    out.free()


def test_kernel_attributes_have_the_standard_keys(device, kernels):
    attrs = kernels.kernel("iota_i32").attributes
    for key in pyoffload.backend.KERNEL_ATTRIBUTE_KEYS:
        assert key in attrs
    mwg = attrs["max_work_group_size"]
    assert mwg is None or mwg >= 1
    limit = device.info["max_work_group_size"]
    if mwg is not None and limit is not None:
        assert mwg <= limit


def test_a_block_as_large_as_the_kernel_allows_launches(device, kernels, queue):
    mwg = kernels.kernel("iota_i32").attributes["max_work_group_size"]
    if mwg is None:
        pytest.skip("no work-group limit reported")
    block = min(mwg, 1024)
    out = device.alloc(4 * block)
    queue.launch(kernels.kernel("iota_i32"), 1, block, [out, np.int32(block), np.int32(0)]).wait()
    assert read(out, np.int32, block)[-1] == block - 1
    out.free()


def test_kernel_lookups_are_cached(kernels):
    assert kernels.kernel("noop") is kernels.kernel("noop")


def test_symbols_list_kernels_and_globals(kernels):
    names = {(s.name, s.kind) for s in kernels.symbols()}
    for k in ("noop", "iota_i32", "axpy_f32", "scalars", "local_reverse", "bump", "sleep_spin"):
        assert (k, pyoffload.SymbolKind.KERNEL) in names
    globals_ = {s.name: s.size for s in kernels.symbols() if s.kind is pyoffload.SymbolKind.GLOBAL}
    if globals_:
        assert globals_.get("table") == 64 and globals_.get("counter") == 4


def test_many_launches_in_flight(device, kernels, queue):
    out = device.alloc(4)
    for _ in range(200):
        queue.launch(kernels.kernel("bump"), 1, 1, [out])
    queue.wait()
    assert read(out, np.int32, 1)[0] == 200
    out.free()


def test_launches_from_several_threads_on_one_queue(device, kernels, queue):
    import threading

    out = device.alloc(4)
    k = kernels.kernel("bump")

    def go():
        for _ in range(50):
            queue.launch(k, 1, 1, [out])

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    queue.wait()
    assert read(out, np.int32, 1)[0] == 200, "launches were lost or ran twice"
    out.free()


@pytest.mark.parametrize("n", [1, 7, 100, 1000, 65537])
def test_launch_size_covers_n_items(device, kernels, queue, n):
    k = kernels.kernel("iota_i32")
    grid, block = k.launch_size(n)
    attrs = k.attributes
    assert grid * block >= n and (grid - 1) * block < n
    assert block <= (attrs["max_work_group_size"] or block) and block <= 256
    multiple = attrs["preferred_work_group_multiple"] or 1
    assert block % min(multiple, block) == 0
    out = device.alloc(4 * n)
    queue.launch(k, grid, block, [out, np.int32(n), np.int32(3)]).wait()
    assert np.array_equal(read(out, np.int32, n), np.arange(3, 3 + n, dtype=np.int32))
    out.free()


def test_launch_size_refuses_bad_counts(device, kernels):
    k = kernels.kernel("iota_i32")
    with pytest.raises(OffloadError) as err:
        k.launch_size(0)
    assert err.value.errc is Errc.INVALID_SIZE
    with pytest.raises(TypeError):
        k.launch_size(1.5)
