"""Deterministic cost budgets: Python frames entered per operation, on every device.

A frame count is repeatable where timings on shared machines are not.  Counted: every Python
function entered in the calling thread during the operation (pyoffload, the backend, pluggy, the
standard library, numpy's Python parts), after a warm-up; not counted: the modules of the GPU
drivers' fakes and whatever they call (on real hardware that is the C driver) and work on other
threads.  The budgets are
the project's targets for the hot paths (issue "Hot paths at raw-binding speed").
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import pyoffload

FAKES = ("/pyoffload_cuda/fake/", "/pyoffload_amdgpu/fake_hip/")
BUDGETS = {"launch": 12, "prepared": 6, "alloc_free": 8, "mem_info": 4, "copy_4k": 15}


def frames(op, repeat: int = 5) -> float:
    for _ in range(3):
        op()
    count = 0
    me = threading.get_ident()
    inside_fake = 0  # depth of calls made by a fake driver: on real hardware that is C code

    def profile(frame, event, arg):
        nonlocal count, inside_fake
        if threading.get_ident() != me or event not in ("call", "return"):
            return
        fake = inside_fake > 0 or any(f in frame.f_code.co_filename for f in FAKES)
        if event == "call":
            if fake:
                inside_fake += 1
            else:
                count += 1
        elif fake:
            inside_fake -= 1

    sys.setprofile(profile)
    try:
        for _ in range(repeat):
            op()
    finally:
        sys.setprofile(None)
    return count / repeat - 1  # the op lambda itself


@pytest.fixture
def kernels(device, images):
    with device.load_program(images["kernels"]) as prog:
        yield prog


def test_launch_with_arguments(device, kernels, queue):
    out = device.alloc(4 * 64)
    k = kernels.kernel("iota_i32")
    args = [out, np.int32(64), np.int32(1)]
    n = frames(lambda: queue.launch(k, 1, 64, args))
    queue.wait()
    out.free()
    assert n <= BUDGETS["launch"], f"a launch with arguments entered {n} Python frames"


def test_prepared_launch(device, kernels, queue):
    out = device.alloc(4 * 64)
    launch = queue.prepare(kernels.kernel("iota_i32"), 1, 64, [out, np.int32(64), np.int32(1)])
    n = frames(lambda: launch())  # a lambda: frames() leaves its own frame out
    queue.wait()
    out.free()
    assert n <= BUDGETS["prepared"], f"a prepared launch entered {n} Python frames"


def test_pooled_alloc_and_free(device):
    if not device.memory_pool().enabled:
        pytest.skip("the pool is off")

    def alloc_free():
        pyoffload.free(device.alloc(64))

    n = frames(alloc_free)
    assert n <= BUDGETS["alloc_free"], f"a pooled alloc+free entered {n} Python frames"


def test_mem_info_of_an_interior_pointer(device):
    live = [device.alloc(64) for _ in range(10_000)]
    ptr = live[5_000].ptr + 10
    n = frames(lambda: pyoffload.mem_info(ptr))
    for a in live:
        a.free()
    assert n <= BUDGETS["mem_info"], f"mem_info entered {n} Python frames"


def test_synchronous_copy_of_4k_to_the_device(device):
    a = device.alloc(4096)
    src = np.zeros(4096, np.uint8)
    n = frames(lambda: pyoffload.memcpy(a, src))
    a.free()
    assert n <= BUDGETS["copy_4k"], f"a synchronous 4 KiB copy entered {n} Python frames"
