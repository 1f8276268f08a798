"""Program load/unload, global constructors and destructors, kernels, globals and symbols."""

from __future__ import annotations

import numpy as np
import pytest

import pyoffload
from pyoffload import Errc, OffloadError, SymbolKind

from ._util import read


def _state(queue, program):
    out = queue.device.alloc(8)
    queue.launch(program.kernel("get_state"), 1, 1, [out]).wait()
    values = read(out, np.int32, 2)
    out.free()
    return values


def _watch_dtor(queue, program):
    box = queue.device.alloc(8)
    pyoffload.memfill(box, np.int32(0), 8)
    queue.launch(program.kernel("set_dtor_out"), 1, 1, [box]).wait()
    return box


def test_constructor_runs_at_load(device, images, queue):
    with device.load_program(images["ctor_dtor"]) as prog:
        assert list(_state(queue, prog)) == [42, 1]


def test_destructor_runs_once_at_unload(device, images, queue):
    prog = device.load_program(images["ctor_dtor"])
    box = _watch_dtor(queue, prog)
    assert list(read(box, np.int32, 2)) == [0, 0]
    prog.unload()
    assert list(read(box, np.int32, 2)) == [215, 1]
    with pytest.raises(OffloadError) as err:
        prog.unload()
    assert err.value.errc is Errc.INVALID_PROGRAM
    box.free()


@pytest.mark.parametrize("order", ["first-first", "second-first"])
def test_two_programs_unload_in_either_order(device, images, queue, order):
    p1 = device.load_program(images["ctor_dtor"])
    p2 = device.load_program(images["ctor_dtor"])
    b1, b2 = _watch_dtor(queue, p1), _watch_dtor(queue, p2)
    first, second = (p1, p2) if order == "first-first" else (p2, p1)
    bf, bs = (b1, b2) if order == "first-first" else (b2, b1)
    first.unload()
    assert read(bf, np.int32, 1)[0] == 215
    assert read(bs, np.int32, 1)[0] == 0, "unloading one program ran another's destructor"
    assert list(_state(queue, second)) == [42, 1], "each load has its own globals"
    second.unload()
    assert read(bs, np.int32, 1)[0] == 215
    b1.free()
    b2.free()


def test_image_is_copied(device, images, queue):
    buf = bytearray(images["kernels"])
    prog = device.load_program(buf)
    buf[:] = b"\x00" * len(buf)
    out = device.alloc(4 * 8)
    queue.launch(prog.kernel("iota_i32"), 1, 8, [out, np.int32(8), np.int32(3)]).wait()
    assert list(read(out, np.int32, 8)) == list(range(3, 11))
    prog.unload()
    out.free()


def test_garbage_image_is_invalid_binary(device):
    with pytest.raises(OffloadError) as err:
        device.load_program(b"this is not a device image \x00\x01\x02" * 4)
    assert err.value.errc in (Errc.INVALID_BINARY, Errc.COMPILE_FAILURE)
    with pytest.raises(OffloadError) as err:
        device.load_program(b"")
    assert err.value.errc is Errc.INVALID_BINARY


def test_unknown_kernel_and_global_are_not_found(device, images):
    with device.load_program(images["kernels"]) as prog:
        with pytest.raises(OffloadError) as err:
            prog.kernel("no_such_kernel")
        assert err.value.errc is Errc.NOT_FOUND and "no_such_kernel" in str(err.value)
        with pytest.raises(OffloadError) as err:
            prog.global_variable("no_such_global")
        assert err.value.errc in (Errc.NOT_FOUND, Errc.UNSUPPORTED)


def test_symbols_list_kernels(device, images):
    with device.load_program(images["kernels"]) as prog:
        kernels = {s.name for s in prog.symbols() if s.kind is SymbolKind.KERNEL}
        assert {"noop", "iota_i32", "axpy_f32", "scalars", "local_reverse", "bump"} <= kernels


def test_global_variable_read(device, images):
    with device.load_program(images["kernels"]) as prog:
        table = prog.global_variable("table")
        assert table.size == 64
        assert list(table.read(np.int32)) == list(range(16))


def test_global_variable_write(device, images, queue):
    with device.load_program(images["kernels"]) as prog:
        counter = prog.global_variable("counter")
        assert counter.size == 4
        counter.write(np.int32(41).tobytes())
        out = device.alloc(4)
        queue.launch(prog.kernel("bump"), 1, 1, [out]).wait()
        assert read(out, np.int32, 1)[0] == 42
        assert counter.read(np.int32)[0] == 42
        with pytest.raises(OffloadError) as err:
            counter.write(b"\x00" * 8)
        assert err.value.errc is Errc.INVALID_SIZE
        out.free()


def test_kernel_of_unloaded_program(device, images, queue):
    prog = device.load_program(images["kernels"])
    k = prog.kernel("noop")
    prog.unload()
    with pytest.raises(OffloadError) as err:
        queue.launch(k, 1, 1, [])
    assert err.value.errc is Errc.INVALID_PROGRAM
    with pytest.raises(OffloadError):
        prog.kernel("noop")


def test_globals_resolve_from_load(device, images):
    """Every global is recorded at load: its address resolves with ``mem_info`` (interior
    pointers too) and works in copies before anyone asked for the variable by name."""
    with device.load_program(images["kernels"]) as prog:
        try:
            addr, size = device.disp.get_global_impl(device.handle, prog.handle, "table")
        except pyoffload.UnsupportedError:
            pytest.skip(f"{device.id} cannot expose a global's address")
        info = pyoffload.mem_info(addr + 8)
        assert (info.base, info.size, info.offset) == (addr, size, 8)
        assert info.context is prog.context and not info.allocation.owned
        out = np.zeros(16, np.int32)
        pyoffload.memcpy(out, addr, 64)
        assert list(out) == list(range(16))
        with pytest.raises(OffloadError):
            pyoffload.free(addr)
    with pytest.raises(OffloadError) as err:
        pyoffload.mem_info(addr)
    assert err.value.errc is Errc.NOT_FOUND
