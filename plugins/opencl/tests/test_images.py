"""Image formats: detection from the bytes, OpenCL C source, SPIR 1.2 bitcode, device binaries."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyoffload
from pyoffload import Errc
from pyoffload_opencl.images import detect_format
from pyoffload_opencl.plugin import compile_impl

IOTA = (
    "kernel void iota_i32(global int *out, int n, int base) {\n"
    "    int i = get_global_id(0); if (i < n) out[i] = base + i; }\n"
)


@pytest.mark.parametrize(
    "image,expected",
    [
        (IOTA.encode(), "source"),
        (IOTA.encode() + b"\x00", "source"),  # C-string terminator
        (b"__kernel void f(void) {}", "source"),
        (b"BC\xc0\xde\x35\x14\x00\x00", "spir"),
        ((0x0B17C0DE).to_bytes(4, "little") + bytes(16), "spir"),
        ((0x07230203).to_bytes(4, "little") + bytes(16), "spirv"),
        (b"poclbin\x00" + bytes(32), "binary"),
        (b"\x7fELF\x02\x01\x01" + bytes(32), "binary"),
        (b"//\n.version 7.0\n.target sm_50\n.address_size 64\n", "binary"),
    ],
)
def test_detect_format(image: bytes, expected: str) -> None:
    assert detect_format(image) == expected


@pytest.mark.parametrize(
    "image",
    [
        b"\x00\x01\x02\x03garbage",
        b"int main(void) { return 0; }",  # text, but declares no kernel
        "kernel void f() {}".encode("utf-16"),  # text in an encoding OpenCL C is not
        b"kernel void f() {}\x00trailing",
    ],
)
def test_unrecognised_bytes_are_invalid_binary_before_the_driver(dev, monkeypatch, image) -> None:
    import pyopencl as cl

    def driver_called(*args, **kwargs):
        raise AssertionError("the driver saw bytes the backend should have refused")

    monkeypatch.setattr(cl._cl, "_Program", driver_called)
    monkeypatch.setattr(cl._cl, "_create_program_with_il", driver_called)
    with pytest.raises(pyoffload.InvalidBinaryError) as err:
        dev.load_program(image)
    assert err.value.errc is Errc.INVALID_BINARY
    assert "OpenCL C source" in str(err.value)


def test_build_failure_is_compile_error_with_log(dev) -> None:
    bad = b"kernel void broken(global int *out) { out[0] = undeclared_thing; }\n"
    with pytest.raises(pyoffload.CompileError) as err:
        dev.load_program(bad)
    assert err.value.errc is Errc.COMPILE_FAILURE
    assert "undeclared_thing" in err.value.build_log


def test_source_runs(dev, queue) -> None:
    out = dev.alloc(64)
    with dev.load_program(IOTA.encode()) as prog:
        queue.launch(prog.kernel("iota_i32"), 4, 4, [out, np.int32(16), np.int32(3)]).wait()
        host = np.zeros(16, np.int32)
        pyoffload.memcpy(host, out)
    assert host.tolist() == list(range(3, 19))


def test_spir_bitcode_from_clang(dev, queue, clang) -> None:
    bitcode = clang(IOTA)
    assert bitcode[:4] == b"BC\xc0\xde"
    out = dev.alloc(64)
    with dev.load_program(bitcode) as prog:
        assert prog.kernel("iota_i32").signature == ("ptr", "i32", "i32")
        queue.launch(prog.kernel("iota_i32"), 2, 8, [out, np.int32(16), np.int32(-5)]).wait()
        host = np.zeros(16, np.int32)
        pyoffload.memcpy(host, out)
    assert host.tolist() == list(range(-5, 11))


def test_spir_in_bitcode_wrapper(dev, queue, clang) -> None:
    bitcode = clang(IOTA)
    # The LLVM bitcode wrapper: magic, version, offset, size, CPU type; then the bitcode.
    header = b"".join(v.to_bytes(4, "little") for v in (0x0B17C0DE, 0, 20, len(bitcode), 0))
    out = dev.alloc(16)
    with dev.load_program(header + bitcode) as prog:
        queue.launch(prog.kernel("iota_i32"), 1, 4, [out, np.int32(4), np.int32(9)]).wait()
        host = np.zeros(4, np.int32)
        pyoffload.memcpy(host, out)
    assert host.tolist() == [9, 10, 11, 12]


def test_spir_for_the_wrong_address_width_is_refused(dev, clang) -> None:
    # PoCL 3.1 crashes the process on 32-bit SPIR on a 64-bit device: refuse it first.
    other = "spir-unknown-unknown" if dev.info["address_bits"] == 64 else "spir64-unknown-unknown"
    with pytest.raises(pyoffload.InvalidBinaryError) as err:
        dev.load_program(clang(IOTA, triple=other))
    assert "address" in str(err.value)


_FRESH_PROCESS = textwrap.dedent(
    """
    import sys, numpy as np, pyoffload
    dev = [d for d in pyoffload.devices() if d.backend == "opencl"][0]
    image = open(sys.argv[1], "rb").read()
    assert image.startswith(b"poclbin")  # a device binary: the compiler does not run again
    with dev.load_program(image) as prog:
        out = dev.alloc(64)
        q = dev.create_queue()
        q.launch(prog.kernel("iota_i32"), 4, 4, [out, np.int32(16), np.int32(40)])
        q.launch(prog.kernel("bump"), 1, 1, [out])
        q.wait()
        host = np.zeros(16, np.int32)
        pyoffload.memcpy(host, out)
        print("iota", *host.tolist())
        print("table", *prog.global_variable("table").read(np.int32).tolist())
        print("counter", *prog.global_variable("counter").read(np.int32).tolist())
        print("signature", *prog.kernel("bump").signature)
    """
)


def test_compiled_binary_round_trip_in_a_fresh_process(dev, conformance_source, tmp_path) -> None:
    binary = compile_impl(dev.handle, conformance_source["kernels"].decode(), ())
    path = tmp_path / "kernels.bin"
    path.write_bytes(binary)
    env = dict(os.environ, POCL_CACHE_DIR=str(tmp_path / "pocl-cache"))  # nothing cached
    result = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, str(path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    # iota wrote 40..55, then bump overwrote out[0] with the counter.
    assert lines["iota"].split() == ["1"] + [str(40 + i) for i in range(1, 16)]
    assert lines["table"].split() == [str(i) for i in range(16)]
    assert lines["counter"] == "1"
    assert lines["signature"] == "ptr"  # the hidden state parameter is known from the binary


def test_build_program_builds_caches_and_reports_build_logs(dev, queue, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PYOFFLOAD_CACHE_DIR", str(tmp_path))
    out = dev.alloc(16)
    with dev.build_program(IOTA, options=["-DUNUSED=1"]) as prog:
        queue.launch(prog.kernel("iota_i32"), 1, 4, [out, np.int32(4), np.int32(1)]).wait()
    host = np.zeros(4, np.int32)
    pyoffload.memcpy(host, out)
    assert host.tolist() == [1, 2, 3, 4]
    assert any(tmp_path.rglob("*")), "the built binary was not cached"
    with pytest.raises(pyoffload.CompileError) as err:
        dev.build_program("kernel void broken(global int *o) { o[0] = nothing_here; }")
    assert "nothing_here" in err.value.build_log
