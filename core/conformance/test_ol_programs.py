"""Programs, symbols and launches, after liboffload's olCreateProgram / olGetSymbol /
olGetSymbolInfo / olGetKernel / olLaunchKernel tests and Unified Runtime's program, device-global
and urEnqueueKernelLaunch tests: image buffers, symbol kinds both ways, globals written at offsets,
launches writing host-visible memory read in place, and the error codes of each."""

from __future__ import annotations

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Context, Errc, LocalMemory, SymbolKind

from ._util import alloc_or_skip, errc_of, in_place, read
from ._util import loaded_once, shared_kernels  # noqa: F401 (fixtures)

KERNELS = ["noop", "iota_i32", "axpy_f32", "scalars", "local_reverse", "bump", "sleep_spin"]
GLOBALS = ["table", "counter"]


@pytest.fixture
def kernels(device, images):
    with device.load_program(images["kernels"]) as prog:
        yield prog


def _globals_or_skip(prog):
    listed = {s.name for s in prog.symbols() if s.kind is SymbolKind.GLOBAL}
    if not set(GLOBALS) <= listed:
        pytest.skip(f"{prog.device.id} lists no globals of its programs")


def _global_or_skip(prog, name):
    try:
        return prog.global_variable(name)
    except pyoffload.UnsupportedError:
        pytest.skip(f"{prog.device.id} cannot expose a global's address")


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview], ids=["bytes", "bytearray", "memoryview"])
def test_load_from_each_kind_of_buffer(device, images, queue, wrap):
    with device.load_program(wrap(images["kernels"])) as prog:
        out = device.alloc(4 * 8)
        queue.launch(prog.kernel("iota_i32"), 1, 8, [out, np.int32(8), np.int32(-4)]).wait()
        assert list(read(out, np.int32, 8)) == list(range(-4, 4))
        out.free()
    assert not prog.loaded


def test_a_zero_length_view_of_a_valid_image_is_an_invalid_binary(device, images):
    """liboffload's olCreateProgram with a size of 0: INVALID_BINARY, and no program."""
    assert errc_of(device.load_program, memoryview(images["kernels"])[:0]) is Errc.INVALID_BINARY


def test_an_image_that_is_not_bytes_is_a_type_error(device):
    for image in (None, "source text", 1.5):
        with pytest.raises(TypeError):
            device.load_program(image)


def test_an_int_image_is_a_type_error(device):
    with pytest.raises(TypeError):
        device.load_program(42)


def test_load_in_a_closed_context_is_invalid_context(device, images):
    ctx = Context([device])
    ctx.close()
    assert errc_of(device.load_program, images["kernels"], context=ctx) is Errc.INVALID_CONTEXT


@pytest.mark.parametrize("name", KERNELS)
def test_each_kernel_is_found_as_a_kernel_only(shared_kernels, name):
    k = shared_kernels.kernel(name)
    assert k.name == name and k.program is shared_kernels and k.device is shared_kernels.device
    assert shared_kernels.kernel(name) is k, "two lookups of one kernel gave two objects"
    assert errc_of(shared_kernels.global_variable, name) is Errc.SYMBOL_KIND


@pytest.mark.parametrize("name", GLOBALS)
def test_each_global_is_found_as_a_global_only(shared_kernels, name):
    _globals_or_skip(shared_kernels)
    assert errc_of(shared_kernels.kernel, name) is Errc.SYMBOL_KIND
    g = _global_or_skip(shared_kernels, name)
    assert g.name == name and g.address != 0 and shared_kernels.global_variable(name) is g


@pytest.mark.parametrize("name", ["", "no_such_symbol", "iota_i32 ", "IOTA_I32"])
def test_names_the_program_lacks_are_not_found(shared_kernels, name):
    assert errc_of(shared_kernels.kernel, name) is Errc.NOT_FOUND
    assert errc_of(shared_kernels.global_variable, name) in (Errc.NOT_FOUND, Errc.UNSUPPORTED)


def test_symbol_table_agrees_with_lookups(shared_kernels):
    symbols = shared_kernels.symbols()
    assert len({s.name for s in symbols}) == len(symbols), "a symbol is listed twice"
    for s in symbols:
        if s.kind is SymbolKind.KERNEL:
            assert shared_kernels.kernel(s.name).name == s.name
        else:
            assert errc_of(shared_kernels.kernel, s.name) is Errc.SYMBOL_KIND
            try:
                assert shared_kernels.global_variable(s.name).size == s.size
            except pyoffload.UnsupportedError:
                pass


def test_global_write_at_an_offset_leaves_the_rest(device, kernels):
    table = _global_or_skip(kernels, "table")
    table.write(np.array([-1, -2], np.int32).tobytes(), offset=8)
    expect = np.arange(16, dtype=np.int32)
    expect[2:4] = [-1, -2]
    assert np.array_equal(table.read(np.int32), expect)
    out = np.zeros(16, np.int32)
    pyoffload.memcpy(out, table.address, 64)  # through the registry, not GlobalVariable.read
    assert np.array_equal(out, expect)


@pytest.mark.parametrize(
    "offset,nbytes", [(-4, 4), (60, 8), (64, 1), (0, 0)], ids=["negative", "overrun", "at-end", "empty"]
)
def test_global_writes_outside_it_are_invalid_sizes(device, kernels, offset, nbytes):
    table = _global_or_skip(kernels, "table")
    assert errc_of(table.write, b"\x07" * nbytes, offset=offset) is Errc.INVALID_SIZE
    assert list(table.read(np.int32)) == list(range(16)), "a refused write changed the global"


def test_a_reload_starts_from_the_initial_globals(device, images, queue):
    out = device.alloc(4)
    with device.load_program(images["kernels"]) as prog:
        for _ in range(3):
            queue.launch(prog.kernel("bump"), 1, 1, [out])
        queue.wait()
    assert read(out, np.int32, 1)[0] == 3
    with device.load_program(images["kernels"]) as again:
        queue.launch(again.kernel("bump"), 1, 1, [out]).wait()
    assert read(out, np.int32, 1)[0] == 1, "a new load kept the old load's counter"
    out.free()


def test_an_unloaded_program_refuses_lookups(device, images):
    prog = device.load_program(images["kernels"])
    k = prog.kernel("noop")
    prog.unload()
    assert not prog.loaded
    assert errc_of(prog.kernel, "noop") is Errc.INVALID_PROGRAM
    assert errc_of(prog.kernel, "iota_i32") is Errc.INVALID_PROGRAM
    assert errc_of(prog.global_variable, "table") is Errc.INVALID_PROGRAM
    assert errc_of(prog.symbols) is Errc.INVALID_PROGRAM
    assert errc_of(lambda: k.attributes) is Errc.INVALID_PROGRAM


@pytest.mark.parametrize("kind", [AllocKind.HOST, AllocKind.MANAGED], ids=["HOST", "MANAGED"])
def test_kernel_writes_host_visible_memory_read_in_place(device, shared_kernels, queue, kind):
    n = 64
    mem = alloc_or_skip(device, 4 * n, kind)
    queue.launch(shared_kernels.kernel("iota_i32"), 1, n, [mem, np.int32(n), np.int32(0)]).wait()
    assert np.array_equal(in_place(mem, np.int32), np.arange(n, dtype=np.int32))
    mem.free()


def test_kernel_reads_host_visible_memory_written_in_place(device, shared_kernels, queue):
    n = 128
    x = alloc_or_skip(device, 4 * n, AllocKind.MANAGED)
    np.frombuffer(x, np.float32)[:] = np.arange(n, dtype=np.float32)
    y = device.alloc(4 * n)
    pyoffload.memfill(y, np.float32(1.0))
    queue.launch(shared_kernels.kernel("axpy_f32"), 4, 32, [y, x, np.float32(-1.0), np.int32(n)]).wait()
    assert np.array_equal(read(y, np.float32, n), 1.0 - np.arange(n, dtype=np.float32))
    x.free()
    y.free()


def test_arguments_are_captured_at_launch(device, shared_kernels, queue):
    """Changing the argument list after a launch does not change the launch (UR: arguments set
    again between enqueues)."""
    n = 32
    bufs = [device.alloc(4 * n) for _ in range(3)]
    args = [None, np.int32(n), np.int32(0)]
    for i, b in enumerate(bufs):
        args[0], args[2] = b, np.int32(100 * i)
        queue.launch(shared_kernels.kernel("iota_i32"), 1, n, args)
    queue.wait()
    for i, b in enumerate(bufs):
        assert np.array_equal(read(b, np.int32, n), np.arange(100 * i, 100 * i + n, dtype=np.int32))
        b.free()


def test_a_tuple_of_arguments_is_accepted(device, shared_kernels, queue):
    out = device.alloc(16)
    queue.launch(shared_kernels.kernel("iota_i32"), 1, 4, (out, np.int32(4), np.int32(9))).wait()
    assert list(read(out, np.int32, 4)) == [9, 10, 11, 12]
    out.free()


def test_local_memory_of_size_zero_is_an_invalid_size():
    for size in (0, -1):
        assert errc_of(LocalMemory, size) is Errc.INVALID_SIZE


def test_kernel_of_another_context_is_an_invalid_argument(device, images, queue):
    ctx = Context([device])
    got = None
    try:
        with device.load_program(images["kernels"], context=ctx) as prog:
            try:
                queue.launch(prog.kernel("noop"), 1, 1, []).wait()
            except pyoffload.OffloadError as exc:
                got = exc.errc
            try:
                queue.wait()  # a failure of the work itself is reported here once more: take it
            except pyoffload.OffloadError:
                pass
    finally:
        ctx.close()
    assert got is Errc.INVALID_ARGUMENT
