"""Image formats are recognised from the bytes, before any driver call."""

from __future__ import annotations

import struct
import sys

import pytest

from pyoffload.backend import InvalidBinaryError
from pyoffload_cuda import images
from pyoffload_cuda.images import ImageFormat

KERNELS = {"noop", "iota_i32", "axpy_f32", "scalars", "local_reverse", "bump", "sleep_spin"}
CTOR_DTOR = {"nvptx$device$init", "nvptx$device$fini", "get_state", "set_dtor_out"}


@pytest.mark.parametrize(
    "fmt,expected", [("ptx", ImageFormat.PTX), ("cubin", ImageFormat.CUBIN), ("fatbin", ImageFormat.FATBIN)]
)
def test_detects_nvcc_output(built, fmt, expected):
    assert images.detect_format(built[fmt]["kernels"]) is expected


def plain(names):
    return {images.demangle(n)[0] if images.demangle(n) else n for n in names}


@pytest.mark.parametrize("fmt", ["ptx", "cubin", "fatbin"])
def test_symbols_of_each_format(built, fmt):
    syms = images.image_symbols(built[fmt]["kernels"], images.detect_format(built[fmt]["kernels"]))
    assert plain(syms.kernels) == KERNELS and "_Z8iota_i32Piii" in syms.kernels
    assert syms.globals == {"counter": 4, "table": 64}
    ctor = images.image_symbols(built[fmt]["ctor_dtor"], images.detect_format(built[fmt]["ctor_dtor"]))
    assert plain(ctor.kernels) == CTOR_DTOR
    assert ctor.globals == {"ctor_value": 4, "ctor_runs": 4, "dtor_out": 8}


def test_arch_and_entry_flag(built):
    assert images.ptx_symbols(built["ptx"]["kernels"]).arch == "sm_80"
    syms = images.cubin_symbols(built["cubin"]["kernels"])
    assert syms.arch == "sm_80"
    # Device functions (global_id, first_thread, local_memory) are not entry points.
    assert len(syms.kernels) == 7


@pytest.mark.parametrize(
    "symbol,expected",
    [
        ("_Z8iota_i32Piii", ("iota_i32", ("ptr", "i32", "i32"))),
        ("_Z8axpy_f32PfPKffi", ("axpy_f32", ("ptr", "ptr", "f32", "i32"))),
        (
            "_Z7scalarsPdasilfdhtjm",
            ("scalars", ("ptr", "i8", "i16", "i32", "i64", "f32", "f64", "u8", "u16", "u32", "u64")),
        ),
        ("_Z13local_reversePiPKiP15pyoffload_localii", ("local_reverse", ("ptr", "ptr", "local", "i32", "i32"))),
        ("_Z1kPiS_PKfS1_", ("k", ("ptr", "ptr", "ptr", "ptr"))),  # substitutions of earlier types
        ("_Z1kDF16_y", ("k", ("f16", "u64"))),
        ("_Z4noopv", ("noop", ())),
        ("noop", None),  # a C name says nothing about its parameters
        ("_ZN2ns1kEPi", None),  # namespaces: not read
        ("_Z1k3Foo", None),  # a class by value has no parameter kind
        ("_Z1kS_", None),  # a substitution with nothing to refer to
    ],
)
def test_signatures_from_mangled_names(symbol, expected):
    assert images.demangle(symbol) == expected


def test_fatbin_entries(built):
    entries = images.fatbin_entries(built["fatbin"]["kernels"])
    assert {(e.kind, e.arch) for e in entries} == {("ptx", 80), ("cubin", 80)}
    assert all(e.payload is not None for e in entries)
    cubin = next(e for e in entries if e.kind == "cubin")
    assert images.detect_format(cubin.payload) is ImageFormat.CUBIN


def test_compressed_fatbin_entries_are_flagged(nvcc, tmp_path):
    import subprocess

    from pyoffload_cuda.nvcc import KERNEL_DIR

    out = tmp_path / "c.fatbin"
    subprocess.run(
        [
            nvcc,
            "-fatbin",
            "-compress-mode=size",
            "-gencode",
            "arch=compute_80,code=compute_80",
            "-o",
            str(out),
            str(KERNEL_DIR / "conformance_kernels.cu"),
        ],
        check=True,
    )
    data = out.read_bytes()
    assert images.detect_format(data) is ImageFormat.FATBIN
    entries = images.fatbin_entries(data)
    assert entries and all(e.payload is None for e in entries)
    with pytest.raises(InvalidBinaryError, match="compressed"):
        images.image_symbols(data, ImageFormat.FATBIN)


@pytest.mark.parametrize(
    "data,match",
    [
        (b"", "not a CUDA image"),
        (b"hello world, not a kernel" * 3, "not a CUDA image"),
        (b"\x00" * 64, "not a CUDA image"),
        (struct.pack("<IIQQ", images.FATBIN_WRAPPER_MAGIC, 1, 0x1000, 0), "wrapper"),
        (b"// a comment\n.target sm_80\n", "not a CUDA image"),  # no .version: not PTX
    ],
)
def test_rejects_non_cuda_bytes(data, match):
    with pytest.raises(InvalidBinaryError, match=match):
        images.detect_format(data)


def test_rejects_host_elf():
    with open(sys.executable, "rb") as f:
        head = f.read(4096)
    with pytest.raises(InvalidBinaryError, match="e_machine"):
        images.detect_format(head)


def test_ptx_with_leading_comments():
    ptx = (
        b"// Generated\n/* block\ncomment */\n  .version 8.0\n.target sm_75\n.address_size 64\n"
        b".visible .entry k(\n.param .u64 k_param_0\n)\n{\nret;\n}\n"
        b".global .align 4 .f32 pi = 0f40490FDB;\n.visible .global .align 8 .u64 arr[3] = {1, 2, 3};\n"
    )
    assert images.detect_format(ptx) is ImageFormat.PTX
    syms = images.ptx_symbols(ptx)
    assert syms.kernels == ("k",)
    assert syms.globals == {"pi": 4, "arr": 24}
    assert syms.arch == "sm_75"
