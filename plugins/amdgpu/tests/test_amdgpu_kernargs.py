"""Kernel arguments are packed at the metadata's offsets into a HIP ``extra`` launch buffer."""

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


@pytest.fixture(scope="module")
def code():
    return codeobject.parse(conformance_images()["kernels"])


def test_scalars_land_at_their_offsets(code):
    args = (0x1234_5678_9ABC, np.int8(-2), np.int16(-3), np.int32(-4), np.int64(-5), np.float32(1.5),
            np.float64(2.25), np.uint8(250), np.uint16(65000), np.uint32(4_000_000_000), np.uint64(2**63 + 1))
    packed = kernargs.pack(code.kernels["scalars"], args, HIP)
    data = packed.data
    assert len(data) == 56
    assert struct.unpack_from("<Q", data, 0)[0] == 0x1234_5678_9ABC
    assert struct.unpack_from("<b", data, 8)[0] == -2
    assert struct.unpack_from("<h", data, 10)[0] == -3
    assert struct.unpack_from("<i", data, 12)[0] == -4
    assert struct.unpack_from("<q", data, 16)[0] == -5
    assert struct.unpack_from("<f", data, 24)[0] == 1.5
    assert struct.unpack_from("<d", data, 32)[0] == 2.25
    assert struct.unpack_from("<BxHIQ", data, 40) == (250, 65000, 4_000_000_000, 2**63 + 1)
    assert packed.shared_mem_bytes == 0


def test_extra_array_points_at_the_buffer(code):
    packed = kernargs.pack(code.kernels["iota_i32"], (0x1000, np.int32(7), np.int32(9)), HIP)
    words = (ctypes.c_void_p * 5).from_address(packed.extra_address)
    assert (words[0], words[2], words[4]) == (HIP.HIP_LAUNCH_PARAM_BUFFER_POINTER,
                                              HIP.HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP.HIP_LAUNCH_PARAM_END)
    assert ctypes.c_size_t.from_address(words[3]).value == 16
    assert ctypes.string_at(words[1], 16) == struct.pack("<Qii", 0x1000, 7, 9)


def test_local_memory_becomes_an_lds_offset_and_shared_bytes(code):
    info = code.kernels["local_reverse"]
    packed = kernargs.pack(info, (1, 2, LocalMemory(256), np.int32(64), np.int32(64)), HIP)
    assert struct.unpack_from("<I", packed.data, 16)[0] == info.group_segment_size  # dynamic LDS starts here
    assert packed.shared_mem_bytes == 256


def test_second_local_argument_follows_the_first():
    info = codeobject.KernelInfo("two", (
        codeobject.KernelArg(0, 4, "dynamic_shared_pointer", "int*", 4),
        codeobject.KernelArg(4, 4, "dynamic_shared_pointer", "float*", 4)), 8, 8, 48, 256)
    packed = kernargs.pack(info, (LocalMemory(100), LocalMemory(64)), HIP)
    first, second = struct.unpack_from("<II", packed.data, 0)
    assert first == 48 and second == 48 + 112  # 100 rounded up to 16-byte alignment
    assert packed.shared_mem_bytes == 112 + 64


@pytest.mark.parametrize(
    ("kernel", "args", "message"),
    [
        ("iota_i32", (1, np.int32(2)), "takes 3 arguments"),
        ("iota_i32", (1, np.int64(2), np.int32(3)), "8 bytes, the kernel expects 4"),
        ("iota_i32", (1, 2.0, np.int32(3)), "cannot pass float"),
        ("local_reverse", (1, 2, 3, np.int32(1), np.int32(1)), "needs LocalMemory"),
        ("iota_i32", (LocalMemory(4), np.int32(2), np.int32(3)), "not a local pointer"),
    ],
)
def test_bad_arguments_are_refused(code, kernel, args, message):
    with pytest.raises(InvalidArgumentError, match=message):
        kernargs.pack(code.kernels[kernel], args, HIP)


def test_without_metadata_arguments_take_natural_alignment():
    info = codeobject.KernelInfo("bare", (), 0, 8, 0, 1024)
    packed = kernargs.pack(info, (np.int8(1), 0xABC, np.int32(5)), HIP)
    assert packed.data == struct.pack("<b7xQi", 1, 0xABC, 5)
