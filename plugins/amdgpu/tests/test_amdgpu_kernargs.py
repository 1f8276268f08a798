"""Kernel arguments are packed at the metadata's offsets into a HIP ``extra`` launch frame, once per
kernel and argument-kind signature."""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest
from amdgpu_test_support import conformance_images
from pyoffload.backend import InvalidArgumentError, LocalMemory

from pyoffload_amdgpu import codeobject, kernargs
from pyoffload_amdgpu.fake_hip import FakeHip

HIP = FakeHip(device_count=1)
SCALARS = ("ptr", "i8", "i16", "i32", "i64", "f32", "f64", "u8", "u16", "u32", "u64")


@pytest.fixture(scope="module")
def code():
    return codeobject.parse(conformance_images()["kernels"])


def _data(frame: ctypes.Structure) -> bytes:
    words = (ctypes.c_void_p * 5).from_address(ctypes.addressof(frame))
    return ctypes.string_at(words[1], ctypes.c_size_t.from_address(words[3]).value)


def test_markers_are_hips():
    assert kernargs.MARKERS == (
        HIP.HIP_LAUNCH_PARAM_BUFFER_POINTER,
        HIP.HIP_LAUNCH_PARAM_BUFFER_SIZE,
        HIP.HIP_LAUNCH_PARAM_END,
    )


def test_scalars_land_at_their_offsets(code):
    args = (
        0x1234_5678_9ABC,
        np.int8(-2),
        np.int16(-3),
        np.int32(-4),
        np.int64(-5),
        np.float32(1.5),
        np.float64(2.25),
        np.uint8(250),
        np.uint16(65000),
        np.uint32(4_000_000_000),
        np.uint64(2**63 + 1),
    )
    frame, shared = kernargs.packer(code.kernels["scalars"], SCALARS)(args)
    data = _data(frame)
    assert len(data) == 56 and shared == 0
    assert struct.unpack_from("<Q", data, 0)[0] == 0x1234_5678_9ABC
    assert struct.unpack_from("<b", data, 8)[0] == -2
    assert struct.unpack_from("<h", data, 10)[0] == -3
    assert struct.unpack_from("<i", data, 12)[0] == -4
    assert struct.unpack_from("<q", data, 16)[0] == -5
    assert struct.unpack_from("<f", data, 24)[0] == 1.5
    assert struct.unpack_from("<d", data, 32)[0] == 2.25
    assert struct.unpack_from("<BxHIQ", data, 40) == (250, 65000, 4_000_000_000, 2**63 + 1)


def test_extra_array_points_at_each_launchs_own_buffer(code):
    pack = kernargs.packer(code.kernels["iota_i32"], ("ptr", "i32", "i32"))
    first, _ = pack((0x1000, np.int32(7), np.int32(9)))
    second, _ = pack((0x2000, np.int32(1), np.int32(2)))
    words = (ctypes.c_void_p * 5).from_address(ctypes.addressof(first))
    assert (words[0], words[2], words[4]) == kernargs.MARKERS
    assert ctypes.c_size_t.from_address(words[3]).value == 16
    assert _data(first) == struct.pack("<Qii", 0x1000, 7, 9)  # not overwritten by the second launch
    assert _data(second) == struct.pack("<Qii", 0x2000, 1, 2)


def test_local_memory_becomes_an_lds_offset_and_shared_bytes(code):
    info = code.kernels["local_reverse"]
    frame, shared = kernargs.packer(info, ("ptr", "ptr", "local", "i32", "i32"))(
        (1, 2, LocalMemory(256), np.int32(64), np.int32(64))
    )
    assert struct.unpack_from("<I", _data(frame), 16)[0] == info.group_segment_size  # dynamic LDS starts here
    assert shared == 256


def test_second_local_argument_follows_the_first():
    info = codeobject.KernelInfo(
        "two",
        (
            codeobject.KernelArg(0, 4, "dynamic_shared_pointer", "int*", 4),
            codeobject.KernelArg(4, 4, "dynamic_shared_pointer", "float*", 4),
        ),
        group_segment_size=48,
    )
    frame, shared = kernargs.packer(info, ("local", "local"))((LocalMemory(100), LocalMemory(64)))
    first, second = struct.unpack_from("<II", _data(frame), 0)
    assert first == 48 and second == 48 + 112  # 100 rounded up to 16-byte alignment
    assert shared == 112 + 64


@pytest.mark.parametrize(("kernel", "kinds"), [("iota_i32", ("ptr", "i32")), ("iota_i32", ("ptr", "i64", "i32"))])
def test_kinds_that_do_not_fit_the_metadata_are_refused(code, kernel, kinds):
    with pytest.raises(InvalidArgumentError, match="iota_i32"):
        kernargs.packer(code.kernels[kernel], kinds)


def test_without_metadata_arguments_take_natural_alignment():
    info = codeobject.KernelInfo("bare", (), described=False)
    frame, _ = kernargs.packer(info, ("i8", "ptr", "i32"))((np.int8(1), 0xABC, np.int32(5)))
    assert _data(frame) == struct.pack("<b7xQi", 1, 0xABC, 5)
    assert info.signature is None
