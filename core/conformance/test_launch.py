"""Kernel launches: pointer, scalar and local-memory arguments, dimensions, prepared launches."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import pyoffload
from pyoffload import Errc, LocalMemory, OffloadError

from ._util import build_or_skip, launch_n, read, upload


@pytest.fixture
def kernels(device, images):
    prog = device.load_program(images["kernels"])
    yield prog
    if prog.loaded:
        prog.unload()


def test_iota(device, kernels, queue):
    n = 1000
    out = device.alloc(4 * n)
    launch_n(queue, kernels.kernel("iota_i32"), n, [out, np.int32(n), np.int32(7)])
    assert np.array_equal(read(out, np.int32, n), np.arange(7, 7 + n, dtype=np.int32))
    out.free()


def test_axpy_with_interior_pointers(device, kernels, queue):
    n = 256
    x = np.linspace(0, 1, n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    dx, dy = upload(device, x), upload(device, y)
    half = n // 2
    launch_n(
        queue, kernels.kernel("axpy_f32"), half, [dy.ptr + 4 * half, dx.ptr + 4 * half, np.float32(2.0), np.int32(half)]
    )
    expect = y.copy()
    expect[half:] += 2.0 * x[half:]
    assert np.allclose(read(dy, np.float32, n), expect)
    dx.free()
    dy.free()


def test_scalar_widths(device, kernels, queue):
    out = device.alloc(8 * 10)
    args = [
        np.int8(-5),
        np.int16(-300),
        np.int32(-70000),
        np.int64(-(2**40)),
        np.float32(1.5),
        np.float64(2.25),
        np.uint8(250),
        np.uint16(65000),
        np.uint32(4_000_000_000),
        np.uint64(2**50),
    ]
    queue.launch(kernels.kernel("scalars"), 1, 1, [out, *args]).wait()
    assert list(read(out, np.float64, 10)) == [float(a) for a in args]
    out.free()


@pytest.mark.parametrize("block", [1, 8, 16, 32])
def test_local_memory(device, kernels, queue, block):
    n = 4 * block
    src = upload(device, np.arange(n, dtype=np.int32))
    out = device.alloc(4 * n)
    queue.launch(
        kernels.kernel("local_reverse"),
        n // block,
        block,
        [out, src, LocalMemory(4 * block), np.int32(n), np.int32(block)],
    ).wait()
    expect = np.arange(n, dtype=np.int32).reshape(-1, block)[:, ::-1].ravel()
    assert np.array_equal(read(out, np.int32, n), expect)
    src.free()
    out.free()


def test_prepared_launch_repeats(device, kernels, queue):
    out = device.alloc(4)
    launch = queue.prepare(kernels.kernel("bump"), 1, 1, [out])
    for _ in range(5):
        launch()
    queue.wait()
    assert read(out, np.int32, 1)[0] == 5
    out.free()
    with pytest.raises(OffloadError) as err:
        launch()
    assert err.value.errc is Errc.INVALID_ARGUMENT and "freed" in str(err.value)


N_NEW = 64  # work-items of the prepared iota launches below (two work-groups of 32)


def _iota(device, kernels, queue, out, base):
    return queue.prepare(kernels.kernel("iota_i32"), 2, 32, [out, np.int32(N_NEW), np.int32(base)])


def test_prepared_launch_takes_new_values(device, kernels, queue):
    a, b = device.alloc(4 * N_NEW), device.alloc(4 * N_NEW)
    pyoffload.memfill(a, b"\x00")
    pyoffload.memfill(b, b"\x00")
    iota = _iota(device, kernels, queue, a, 1)
    iota(b, np.int32(N_NEW), np.int32(40)).wait()
    assert np.array_equal(read(b, np.int32, N_NEW), np.arange(40, 40 + N_NEW, dtype=np.int32))
    assert not read(a, np.int32, N_NEW).any(), "new values wrote through the prepared pointer"
    # A pointer as an int and a shorter count: other types, the same parameter kinds.
    iota.launch(a.ptr, np.int32(N_NEW // 2), np.int32(-3)).wait()
    got = read(a, np.int32, N_NEW)
    assert np.array_equal(got[: N_NEW // 2], np.arange(-3, -3 + N_NEW // 2, dtype=np.int32))
    assert not got[N_NEW // 2 :].any()
    iota().wait()  # the prepared values still hold
    assert np.array_equal(read(a, np.int32, N_NEW), np.arange(1, 1 + N_NEW, dtype=np.int32))
    a.free()
    b.free()


def test_prepared_launch_with_new_values_after_its_own_are_freed(device, kernels, queue):
    a, b = device.alloc(4 * N_NEW), device.alloc(4 * N_NEW)
    iota = _iota(device, kernels, queue, a, 1)
    iota().wait()
    a.free()
    iota(b, np.int32(N_NEW), np.int32(2)).wait()  # the freed allocation is no argument of this launch
    assert np.array_equal(read(b, np.int32, N_NEW), np.arange(2, 2 + N_NEW, dtype=np.int32))
    with pytest.raises(OffloadError) as err:
        iota()  # the prepared values name freed memory
    assert err.value.errc is Errc.INVALID_ARGUMENT and "freed" in str(err.value)
    b.free()
    with pytest.raises(OffloadError) as err:
        iota(b, np.int32(N_NEW), np.int32(2))
    assert err.value.errc is Errc.INVALID_ARGUMENT and "freed" in str(err.value)


def test_prepared_launch_keeps_new_memory_in_flight(device, kernels, queue):
    gate = threading.Event()
    a, b = device.alloc(4 * N_NEW), device.alloc(4 * N_NEW)
    iota = _iota(device, kernels, queue, a, 1)
    queue.launch_host_function(gate.wait)
    out = np.zeros(N_NEW, np.int32)
    reader = threading.Thread(target=pyoffload.memcpy, args=(out, b))
    freer = threading.Thread(target=b.free)
    try:
        iota(b, np.int32(N_NEW), np.int32(5))
        reader.start()
        reader.join(0.2)
        assert reader.is_alive(), "a copy read memory a queued prepared launch was about to write"
        freer.start()
        freer.join(0.2)
        assert freer.is_alive(), "memory a queued prepared launch uses was freed before it ran"
    finally:
        gate.set()
        for t in (reader, freer):
            if t.ident is not None:
                t.join(10)
    assert np.array_equal(out, np.arange(5, 5 + N_NEW, dtype=np.int32))
    assert b.freed
    a.free()


def test_prepared_launch_with_new_values_from_two_threads(device, kernels, queue):
    outs = [device.alloc(4 * N_NEW) for _ in range(2)]
    iota = _iota(device, kernels, queue, outs[0], 0)
    failures: list[BaseException] = []

    def replay(t: int) -> None:
        try:
            for i in range(40):
                iota(outs[t], np.int32(N_NEW), np.int32(1000 * t + i))
        except BaseException as exc:  # reported by the test below
            failures.append(exc)

    threads = [threading.Thread(target=replay, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    queue.wait()
    assert not failures, failures
    for t in range(2):  # the queue is in order: each buffer holds its thread's last launch
        expect = np.arange(1000 * t + 39, 1000 * t + 39 + N_NEW, dtype=np.int32)
        assert np.array_equal(read(outs[t], np.int32, N_NEW), expect)
        outs[t].free()


@pytest.mark.parametrize(
    "args",
    [
        lambda out: (out, np.int32(N_NEW)),
        lambda out: (out, np.int32(N_NEW), np.int32(1), np.int32(2)),
        lambda out: (out, np.float32(1.0), np.int32(1)),
        lambda out: (np.int32(1), np.int32(N_NEW), np.int32(1)),
        lambda out: (out, np.int32(N_NEW), "x"),
        lambda out: (0x1234, np.int32(N_NEW), np.int32(1)),
    ],
    ids=["too-few", "too-many", "float-for-int", "scalar-for-ptr", "str", "unknown-ptr"],
)
def test_prepared_launch_refuses_bad_new_values(device, kernels, queue, args):
    out = device.alloc(4 * N_NEW)
    pyoffload.memfill(out, b"\x00")
    k = kernels.kernel("iota_i32")
    iota = _iota(device, kernels, queue, out, 1)
    with pytest.raises(OffloadError) as err:
        iota(*args(out))
    assert err.value.errc is Errc.INVALID_ARGUMENT
    if k.signature is not None:  # a launch checks the same things only where the kernel says its types
        with pytest.raises(OffloadError) as full:
            queue.launch(k, 2, 32, list(args(out)))
        assert full.value.errc is err.value.errc
    queue.wait()
    assert not read(out, np.int32, N_NEW).any(), "a refused launch ran"
    out.free()


@pytest.mark.parametrize(
    "bad", [np.int32(0), 0x1234, 3.5, "x", object()], ids=["scalar-for-ptr", "unknown-ptr", "float", "str", "object"]
)
def test_bad_pointer_argument(device, kernels, queue, bad):
    with pytest.raises(OffloadError) as err:
        queue.launch(kernels.kernel("bump"), 1, 1, [bad])
    assert err.value.errc is Errc.INVALID_ARGUMENT


def test_freed_pointer_argument(device, kernels, queue):
    out = device.alloc(4)
    out.free()
    with pytest.raises(OffloadError) as err:
        queue.launch(kernels.kernel("bump"), 1, 1, [out])
    assert err.value.errc is Errc.INVALID_ARGUMENT and "freed" in str(err.value)


@pytest.mark.parametrize("grid,block", [(0, 1), (1, 0), ((1, 1, 1, 1), 1), (-2, 1)])
def test_bad_dimensions(device, kernels, queue, grid, block):
    with pytest.raises(OffloadError) as err:
        queue.launch(kernels.kernel("noop"), grid, block, [])
    assert err.value.errc is Errc.INVALID_VALUE


@pytest.mark.parametrize("grid,block", [(1.0, 1), (1, "2"), ((1, 2.5), 1), (True, 1)])
def test_dimensions_of_the_wrong_type(device, kernels, queue, grid, block):
    with pytest.raises(TypeError):
        queue.launch(kernels.kernel("noop"), grid, block, [])


def test_dimensions_beyond_the_device_limits(device, kernels, queue):
    limit = device.info["max_work_group_size"]
    if limit is not None:
        with pytest.raises(OffloadError) as err:
            queue.launch(kernels.kernel("noop"), 1, limit + 1, [])
        assert err.value.errc is Errc.INVALID_ARGUMENT and "max_work_group_size" in str(err.value)
    with pytest.raises(OffloadError) as err:
        queue.launch(kernels.kernel("noop"), (2**32, 2**32, 2**32), (2**32, 1, 1), [])
    assert err.value.errc in (Errc.INVALID_ARGUMENT, Errc.INVALID_SIZE)


def test_block_per_dimension_beyond_the_device_limits(device, kernels, queue):
    sizes = device.info["max_work_item_sizes"]
    for axis in range(3):
        block = [1, 1, 1]
        block[axis] = sizes[axis] + 1
        with pytest.raises(OffloadError) as err:
            queue.launch(kernels.kernel("noop"), 1, tuple(block), [])
        assert err.value.errc is Errc.INVALID_ARGUMENT and "max_work" in str(err.value)


def test_a_block_sized_by_the_device_info_runs(device, kernels, queue):
    """What an array library does: size its blocks by the device's limits, then launch."""
    info = device.info
    k = kernels.kernel("iota_i32")
    block = min(
        int(info["max_work_group_size"]), int(k.attributes["max_work_group_size"]), info["max_work_item_sizes"][0]
    )
    n = 2 * block + 3
    out = device.alloc(4 * n)
    queue.launch(k, -(-n // block), block, [out, np.int32(n), np.int32(1)]).wait()
    assert np.array_equal(read(out, np.int32, n), np.arange(1, n + 1, dtype=np.int32))
    out.free()


def test_kernel_attributes_are_known_and_within_the_device_limits(device, kernels):
    info = device.info
    for name in ("iota_i32", "local_reverse"):
        attrs = kernels.kernel(name).attributes
        for key in ("max_work_group_size", "preferred_work_group_multiple", "local_memory_bytes"):
            assert attrs[key] is not None, f"{device.id}: {name}.attributes[{key!r}] is None"
        assert 1 <= attrs["max_work_group_size"] <= info["max_work_group_size"]
        assert 1 <= attrs["preferred_work_group_multiple"] <= attrs["max_work_group_size"]
        assert 0 <= attrs["local_memory_bytes"] <= info["local_memory_bytes"]
        private = attrs["private_memory_bytes"]
        assert private is None or private >= 0


def test_local_memory_up_to_the_device_limit_runs(device, kernels, queue):
    """The whole of local_memory_bytes is usable by one group (one byte more is refused:
    test_local_memory_beyond_the_device_limit_is_refused)."""
    limit = device.info["local_memory_bytes"]
    n = 8
    src = upload(device, np.arange(n, dtype=np.int32))
    out = device.alloc(4 * n)
    scratch = LocalMemory(limit // 4 * 4)
    queue.launch(kernels.kernel("local_reverse"), 1, n, [out, src, scratch, np.int32(n), np.int32(n)]).wait()
    assert np.array_equal(read(out, np.int32, n), np.arange(n, dtype=np.int32)[::-1])
    out.free()
    src.free()


def test_numpy_integer_dimensions(device, kernels, queue):
    queue.launch(kernels.kernel("noop"), np.int64(1), (np.int32(1), 1), []).wait()


def test_wrong_argument_count_when_signature_known(device, kernels, queue):
    k = kernels.kernel("iota_i32")
    if k.signature is None:
        pytest.skip("the backend reports no kernel signatures")
    assert tuple(k.signature) == ("ptr", "i32", "i32")
    out = device.alloc(4)
    with pytest.raises(OffloadError) as err:
        queue.launch(k, 1, 1, [out, np.int32(1)])
    assert err.value.errc is Errc.INVALID_ARGUMENT and "takes 3" in str(err.value)
    with pytest.raises(OffloadError) as err:
        queue.launch(k, 1, 1, [out, np.int64(1), np.int32(0)])
    assert err.value.errc is Errc.INVALID_ARGUMENT and "expected i32" in str(err.value)
    out.free()


def test_kernel_from_other_device_rejected(device_pair, images):
    a, b = device_pair
    imgs = a.disp.conformance_images_impl(a.handle)
    with a.load_program(imgs["kernels"]) as prog:
        with b.create_queue() as qb:
            with pytest.raises(OffloadError) as err:
                qb.launch(prog.kernel("noop"), 1, 1, [])
            assert err.value.errc is Errc.INVALID_ARGUMENT


def test_grids_of_2_to_the_64_work_items_are_refused(device, kernels, queue):
    # Each axis within the limits, but 2**64 work-items in all: no 64-bit global id numbers them.
    for grid, block in [((2**32, 2**32, 1), 1), ((2**32, 2**16, 1), (2**16, 1, 1)), ((2**63, 2, 1), 1)]:
        with pytest.raises(OffloadError) as err:
            queue.launch(kernels.kernel("noop"), grid, block, [])
        assert err.value.errc is Errc.INVALID_ARGUMENT, (grid, block)
        with pytest.raises(OffloadError) as err:
            queue.prepare(kernels.kernel("noop"), grid, block, [])
        assert err.value.errc is Errc.INVALID_ARGUMENT, (grid, block)
    # Every axis within the device's limits, the total past 2**64: refused for the total.
    lim = device.limits
    grid = tuple(min(n, 2**40) for n in lim.grid)
    block = (min(lim.block[0], lim.block_threads), 1, 1)
    if grid[0] * grid[1] * grid[2] * block[0] >= 2**64:
        with pytest.raises(OffloadError) as err:
            queue.launch(kernels.kernel("noop"), grid, block, [])
        assert err.value.errc is Errc.INVALID_ARGUMENT and "overflows 64 bits" in str(err.value)
    queue.wait()  # nothing was enqueued: the queue is as before


# A kernel whose attributes constrain its block, in every backend's source language: OpenCL C's
# reqd_work_group_size (OpenCL, AMDGPU), CUDA's __launch_bounds__ (a most, not a required size).
FIXED_BLOCK = """
#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)
__kernel __attribute__((reqd_work_group_size(8, 1, 1))) void fixed_block(__global int *out) { out[0] = 1; }
#elif defined(__CUDACC__)
extern "C" __global__ void __launch_bounds__(8) fixed_block(int *out) { out[0] = 1; }
#else
void fixed_block(int *out) { out[0] = 1; }
#endif
"""


def test_a_block_that_breaks_the_kernels_attributes_is_refused(device, queue):
    with build_or_skip(device, FIXED_BLOCK) as prog:
        k = prog.kernel("fixed_block")
        rule = k.block_rule
        if rule is None:
            pytest.skip(f"{device.id} reports no work-group attributes for its kernels")
        most, required = rule
        assert required == (8, 1, 1) or (required is None and most <= 8)
        bad = [16, (8, 2, 1), 1024] + ([4, (4, 2, 1), (1, 8, 1)] if required else [])
        for block in bad:
            with pytest.raises(OffloadError) as err:
                queue.launch(k, 1, block, [None])
            assert err.value.errc is Errc.INVALID_ARGUMENT, block
            assert "work_group_size" in str(err.value) and "fixed_block" in str(err.value)
            with pytest.raises(OffloadError) as err:
                queue.prepare(k, 1, block, [None])
            assert err.value.errc is Errc.INVALID_ARGUMENT, block
        out = device.alloc(4)
        queue.launch(k, 2, 8, [out]).wait()  # the block it was built for runs
        queue.wait()
        out.free()


def test_block_none_takes_the_kernels_suggested_block(device, kernels, queue):
    # urKernelGetSuggestedLocalWorkSize / cuOccupancyMaxPotentialBlockSize: the runtime picks.
    k = kernels.kernel("iota_i32")
    attrs = k.attributes
    b = k.suggest_block()
    assert b[1:] == (1, 1) and 1 <= b[0] <= attrs["max_work_group_size"]
    multiple = attrs["preferred_work_group_multiple"] or 1
    assert b[0] % multiple == 0 or b[0] < multiple
    n = 3 * b[0] + 5
    out = device.alloc(4 * n)
    ev = queue.launch(k, -(-n // b[0]), None, [out, np.int32(n), np.int32(2)])
    ev.wait()
    assert np.array_equal(read(out, np.int32, n), np.arange(2, 2 + n, dtype=np.int32))
    out.free()


@pytest.mark.parametrize("n", [1000, 997, 4096, 6000])
def test_launch_given_as_a_global_size(device, kernels, queue, n):
    # Unified Runtime's and OpenCL's form: work-items per dimension; block=None picks a block
    # that divides it (a prime count included), an explicit block must divide it.
    k = kernels.kernel("iota_i32")
    b = k.suggest_block(n)
    assert n % b[0] == 0 and b[1:] == (1, 1) and b[0] <= k.attributes["max_work_group_size"]
    out = device.alloc(4 * n)
    queue.launch(k, global_size=n, args=[out, np.int32(n), np.int32(1)]).wait()
    assert np.array_equal(read(out, np.int32, n), np.arange(1, 1 + n, dtype=np.int32))
    if n % 8 == 0:
        queue.launch(k, block=8, args=[out, np.int32(n), np.int32(5)], global_size=(n,)).wait()
        assert np.array_equal(read(out, np.int32, n), np.arange(5, 5 + n, dtype=np.int32))
    prepared = queue.prepare(k, global_size=n, args=[out, np.int32(n), np.int32(9)])
    assert prepared.grid[0] * prepared.block[0] == n
    prepared().wait()
    assert np.array_equal(read(out, np.int32, n), np.arange(9, 9 + n, dtype=np.int32))
    out.free()


def test_a_global_size_in_two_dimensions(device, kernels, queue):
    k = kernels.kernel("iota_i32")
    b = k.suggest_block((64, 6))
    assert 64 % b[0] == 0 and 6 % b[1] == 0 and b[2] == 1
    assert b[0] * b[1] <= k.attributes["max_work_group_size"]


def test_a_global_size_that_is_not_a_multiple_of_the_block_is_refused(device, kernels, queue):
    # No backend runs partial work-groups (the guide says why per backend): the launch is refused,
    # naming the values, and nothing runs.
    k = kernels.kernel("iota_i32")
    out = device.alloc(4000)
    for launch in (queue.launch, queue.prepare):
        with pytest.raises(OffloadError) as err:
            launch(k, block=32, args=[out, np.int32(1000), np.int32(0)], global_size=1000)
        assert err.value.errc is Errc.INVALID_ARGUMENT
        assert "1000" in str(err.value) and "31.25" in str(err.value)
    with pytest.raises(OffloadError) as err:
        queue.launch(k, 2, 32, [out, np.int32(1000), np.int32(0)], global_size=64)
    assert err.value.errc is Errc.INVALID_ARGUMENT
    with pytest.raises(TypeError):
        queue.launch(k, block=32, args=[out, np.int32(1000), np.int32(0)])
    queue.wait()
    out.free()


def test_the_suggested_block_keeps_a_required_work_group_size(device, queue):
    with build_or_skip(device, FIXED_BLOCK) as prog:
        k = prog.kernel("fixed_block")
        rule = k.block_rule
        if rule is None:
            pytest.skip(f"{device.id} reports no work-group attributes for its kernels")
        most, required = rule
        for b in (k.suggest_block(), k.suggest_block(64)):
            assert b == required if required else b[0] * b[1] * b[2] <= most
        out = device.alloc(4)
        queue.launch(k, 2, None, [out]).wait()
        queue.launch(k, global_size=16, args=[out]).wait()
        out.free()


# A struct passed by value between a char and an int (urKernelSetArgValue with a struct), in
# every backend's source language; the char before it tests the struct's place in the arguments.
TAKE_PAIR = """
struct pair { int a; float b; };
#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)
__kernel void take_pair(__global float *out, char tag, struct pair p, int tail) {
#elif defined(__CUDACC__)
extern "C" __global__ void take_pair(float *out, char tag, struct pair p, int tail) {
#else
void take_pair(float *out, char tag, struct pair p, int tail) {
#endif
    out[0] = (float)p.a;
    out[1] = p.b;
    out[2] = (float)tail;
    out[3] = (float)tag;
}
"""
PAIR = np.dtype([("a", "<i4"), ("b", "<f4")])


def test_structs_are_passed_by_value(device, queue):
    with build_or_skip(device, TAKE_PAIR) as prog:
        k = prog.kernel("take_pair")
        out = device.alloc(16)
        pair = np.zeros((), PAIR)
        for a, b, value in [(7, 2.5, lambda p: p[()]), (-9, 0.125, lambda p: p)]:  # a scalar, a 0-d array
            pair["a"], pair["b"] = a, b
            queue.launch(k, 1, 1, [out, np.int8(-5), value(pair), np.int32(-3)]).wait()
            assert read(out, np.float32, 4).tolist() == [a, b, -3.0, -5.0]
        prepared = queue.prepare(k, 1, 1, [out, np.int8(4), pair[()], np.int32(11)])
        prepared()
        queue.wait()
        assert read(out, np.float32, 4).tolist() == [-9, 0.125, 11.0, 4.0]
        for bad in [np.zeros(2, PAIR), np.zeros((), np.int64)]:  # an array, a 0-d array of no struct
            with pytest.raises(OffloadError) as err:
                queue.launch(k, 1, 1, [out, np.int8(0), bad, np.int32(0)])
            assert err.value.errc is Errc.INVALID_ARGUMENT and "argument 2" in str(err.value)
        declared = k.signature[2] if k.signature is not None else None
        if declared is not None:  # the backend knows the size: a struct of another size is refused here
            assert declared == "v8"
            with pytest.raises(OffloadError) as err:
                queue.launch(k, 1, 1, [out, np.int8(0), np.zeros((), [("a", "<i4")])[()], np.int32(0)])
            assert err.value.errc is Errc.INVALID_ARGUMENT and "8 bytes" in str(err.value)
            with pytest.raises(OffloadError) as err:
                queue.launch(k, 1, 1, [out, pair[()], pair[()], np.int32(0)])  # a struct for the char
            assert err.value.errc is Errc.INVALID_ARGUMENT and "argument 1" in str(err.value)
        queue.wait()
        out.free()
