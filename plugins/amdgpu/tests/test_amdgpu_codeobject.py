"""Image detection and code-object reading, on images built for real by clang/lld."""

from __future__ import annotations

import struct
import sys

import pytest
from amdgpu_test_support import build, conformance_images, fake_backend
from pyoffload.backend import InvalidBinaryError

from pyoffload_amdgpu import codeobject, plugin


def _bundle(entries: list[tuple[str, bytes]]) -> bytes:
    """A clang offload bundle in the uncompressed binary layout clang-offload-bundler writes."""
    header = bytearray(codeobject.BUNDLE_MAGIC + struct.pack("<Q", len(entries)))
    size = len(header) + sum(24 + len(t) for t, _ in entries)
    table, blobs = bytearray(), bytearray()
    for triple, data in entries:
        table += struct.pack("<QQQ", size + len(blobs), len(data), len(triple)) + triple.encode()
        blobs += data
    return bytes(header + table + blobs)


def test_conformance_kernels_are_read_from_the_image():
    code = codeobject.parse(conformance_images()["kernels"])
    assert code.arch == "gfx90a"
    assert set(code.kernels) == {"noop", "iota_i32", "axpy_f32", "scalars", "local_reverse", "bump", "sleep_spin"}
    scalars = code.kernels["scalars"]
    assert [(a.offset, a.size) for a in scalars.args] == [
        (0, 8),
        (8, 1),
        (10, 2),
        (12, 4),
        (16, 8),
        (24, 4),
        (32, 8),
        (40, 1),
        (42, 2),
        (44, 4),
        (48, 8),
    ]
    assert scalars.signature == ("ptr", "i8", "i16", "i32", "i64", "f32", "f64", "u8", "u16", "u32", "u64")
    assert code.kernels["local_reverse"].signature == ("ptr", "ptr", "local", "i32", "i32")
    assert code.kernels["iota_i32"].kernarg_size == 16
    assert code.kernels["noop"].max_flat_workgroup_size == 1024


def test_globals_carry_size_and_initial_bytes():
    code = codeobject.parse(conformance_images()["kernels"])
    assert code.globals["counter"].size == 4 and code.globals["counter"].initial == bytes(4)
    assert code.globals["table"].initial == b"".join(struct.pack("<i", i) for i in range(16))
    assert not any(name.endswith(".kd") for name in code.globals)


def test_ctor_dtor_entry_points_are_llvm_kernels():
    code = codeobject.parse(conformance_images()["ctor_dtor"])
    assert code.kernels[codeobject.INIT_KERNEL].kind == "init"
    assert code.kernels[codeobject.FINI_KERNEL].kind == "fini"
    assert {"get_state", "set_dtor_out"} <= set(code.kernels)
    assert {g: code.globals[g].size for g in ("ctor_value", "ctor_runs", "dtor_out")} == {
        "ctor_value": 4,
        "ctor_runs": 4,
        "dtor_out": 8,
    }


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (b"", "not an AMDGPU code object"),
        (b"//\n.version 8.0\n.target sm_80\n", "not an AMDGPU code object"),
        (b"\x7fELF" + bytes(60), "e_machine 0"),
        (codeobject.COMPRESSED_BUNDLE_MAGIC + bytes(40), "compressed"),
        (codeobject.BUNDLE_MAGIC + struct.pack("<Q", 3), "malformed clang offload bundle"),
    ],
)
def test_unrecognised_bytes_are_invalid_binary(image, message):
    with pytest.raises(InvalidBinaryError, match=message):
        codeobject.parse(image)


def test_host_elf_names_its_machine():
    with open(sys.executable, "rb") as f:
        head = f.read(4096)
    with pytest.raises(InvalidBinaryError, match="e_machine 62"):
        codeobject.parse(head)


def test_truncated_code_object_is_invalid_binary():
    image = conformance_images()["kernels"]
    with pytest.raises(InvalidBinaryError, match="malformed"):
        codeobject.parse(image[:200])


def test_offload_bundle_yields_the_matching_amdgcn_entry():
    gfx90a = conformance_images()["kernels"]
    gfx1030 = build("kernel void k1030(global int *p) { p[0] = 1; }", "gfx1030")
    bundle = _bundle(
        [
            ("host-x86_64-unknown-linux-gnu", b""),
            ("hipv4-amdgcn-amd-amdhsa--gfx1030", gfx1030),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a", gfx90a),
        ]
    )
    assert codeobject.unwrap(bundle, "gfx90a") == gfx90a
    assert codeobject.unwrap(bundle, "gfx1030") == gfx1030
    assert codeobject.parse(bundle, "gfx1030").kernels.keys() == {"k1030"}


def test_bundle_without_amdgcn_entry_lists_what_it_has():
    bundle = _bundle([("host-x86_64-unknown-linux-gnu", b"\x7fELF"), ("nvptx64-nvidia-cuda--sm_80", b"ptx")])
    with pytest.raises(InvalidBinaryError, match="nvptx64-nvidia-cuda--sm_80"):
        codeobject.unwrap(bundle)


def test_invalid_binary_is_raised_before_any_driver_call(monkeypatch):
    with fake_backend(monkeypatch) as (fake, devices):
        before = dict(fake.calls)
        with pytest.raises(InvalidBinaryError):
            plugin.load_binary_impl(tuple(devices), devices[0], b"\x7fELF\x02\x01\x01" + bytes(100))
        assert fake.calls == before
        assert "hipModuleLoadData" not in fake.calls
