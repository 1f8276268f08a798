"""Data-parallel host kernels (``pyoffload_host.h``): every work-item of every shape runs once
with the right ids, work-groups run in chunks on several threads, local memory is per thread,
a trap names its work-group, and kernels without the marker are still called once per launch."""

from __future__ import annotations

import numpy as np
import pytest

import pyoffload
from pyoffload import Errc, LocalMemory, OffloadError

SOURCE = r"""
#include <pthread.h>
#include <stdint.h>
#include <pyoffload_host.h>

/* out[global linear id] = its ids, packed: group (3 x 8 bits) and local (3 x 8 bits) */
PYOFFLOAD_KERNEL(ids)(PYOFFLOAD_GROUPS, uint64_t *out, uint64_t *sizes) {
    PYOFFLOAD_FOR_EACH_GROUP {
        PYOFFLOAD_FOR_EACH_ITEM {
            uint64_t x = pyoffload_global_id(0), y = pyoffload_global_id(1), z = pyoffload_global_id(2);
            uint64_t i = (z * pyoffload_global_size(1) + y) * pyoffload_global_size(0) + x;
            out[i] += pyoffload_group_id(0) | pyoffload_group_id(1) << 8 | pyoffload_group_id(2) << 16
                | pyoffload_local_id(0) << 24 | pyoffload_local_id(1) << 32 | pyoffload_local_id(2) << 40;
            if (i == 0) {
                for (int d = 0; d < 3; d++) {
                    sizes[d] = pyoffload_num_groups(d);
                    sizes[3 + d] = pyoffload_local_size(d);
                }
            }
        }
    }
}

/* which thread ran each group */
PYOFFLOAD_KERNEL(who)(PYOFFLOAD_GROUPS, uint64_t *out, int64_t spin) {
    PYOFFLOAD_FOR_EACH_GROUP {
        volatile int64_t sink = 0;
        for (int64_t i = 0; i < spin; i++) sink += i;
        out[pyoffload_group_id(0)] = (uint64_t)pthread_self();
    }
}

/* per group: sum of its items through local memory, after a barrier; scratch[block] counts the
   groups this thread's buffer served */
PYOFFLOAD_KERNEL(group_sum)(PYOFFLOAD_GROUPS, int64_t *out, const int64_t *in, int64_t *scratch) {
    PYOFFLOAD_FOR_EACH_GROUP {
        uint64_t block = pyoffload_local_size(0);
        PYOFFLOAD_FOR_EACH_ITEM {
            scratch[pyoffload_local_id(0)] = in[pyoffload_global_id(0)];
        }
        /* barrier */
        PYOFFLOAD_FOR_EACH_ITEM {
            int64_t sum = 0;
            for (uint64_t l = 0; l < block; l++) sum += scratch[l];
            out[pyoffload_global_id(0)] = sum;
        }
    }
}

int32_t calls = 0;
void once(int32_t *out) { out[0] = ++calls; }
"""


@pytest.fixture
def threads(request, monkeypatch, fresh_runtime):
    monkeypatch.setenv("PYOFFLOAD_HOST_THREADS", str(request.param))
    fresh_runtime()
    return request.param


def _program():
    return pyoffload.host_device().build_program(SOURCE, ["-pthread"])


SHAPES = [
    ((1, 1, 1), (1, 1, 1)),
    ((5, 1, 1), (3, 1, 1)),
    ((2, 3, 4), (4, 2, 3)),
    ((7, 2, 1), (1, 5, 2)),
    ((1, 1, 9), (2, 2, 2)),
]


@pytest.mark.parametrize("threads", [1, 2, 3], indirect=True)
@pytest.mark.parametrize("grid,block", SHAPES)
def test_every_item_runs_once_with_its_ids(threads, grid, block):
    with _program() as prog, pyoffload.host_device().create_queue() as q:
        size = [g * b for g, b in zip(grid, block, strict=True)]
        n = size[0] * size[1] * size[2]
        out, sizes = np.zeros(n, np.uint64), np.zeros(6, np.uint64)
        a, s = pyoffload.host_device().alloc(8 * n), pyoffload.host_device().alloc(48)
        pyoffload.memcpy(a, out)
        q.launch(prog.kernel("ids"), grid, block, [a, s]).wait()
        pyoffload.memcpy(out, a)
        pyoffload.memcpy(sizes, s)
        z, y, x = np.meshgrid(*(np.arange(k, dtype=np.uint64) for k in size[::-1]), indexing="ij")
        b = [np.uint64(k) for k in block]
        expect = (
            (x // b[0]) | (y // b[1]) << 8 | (z // b[2]) << 16 | (x % b[0]) << 24 | (y % b[1]) << 32 | (z % b[2]) << 40
        ).ravel()
        assert np.array_equal(out, expect)  # += : an item run twice would show
        assert sizes.tolist() == [*grid, *block]
        a.free()
        s.free()


@pytest.mark.parametrize("threads", [2], indirect=True)
def test_work_groups_run_on_several_threads(threads):
    with _program() as prog, pyoffload.host_device().create_queue() as q:
        a = pyoffload.host_device().alloc(8 * 8)
        q.launch(prog.kernel("who"), 8, 1, [a, np.int64(2_000_000)]).wait()
        out = np.zeros(8, np.uint64)
        pyoffload.memcpy(out, a)
        # contiguous chunks: groups 0-3 on one thread, 4-7 on another
        assert len(set(out[:4])) == 1 and len(set(out[4:])) == 1 and out[0] != out[4]
        a.free()


@pytest.mark.parametrize("threads", [1, 2], indirect=True)
def test_barrier_and_local_memory_per_thread(threads):
    block, groups = 16, 6
    n = block * groups
    data = np.arange(n, dtype=np.int64) ** 2
    with _program() as prog, pyoffload.host_device().create_queue() as q:
        src, dst = pyoffload.host_device().alloc(8 * n), pyoffload.host_device().alloc(8 * n)
        pyoffload.memcpy(src, data)
        q.launch(prog.kernel("group_sum"), groups, block, [dst, src, LocalMemory(8 * block)]).wait()
        out = np.zeros(n, np.int64)
        pyoffload.memcpy(out, dst)
        assert np.array_equal(out, np.repeat(data.reshape(groups, block).sum(axis=1), block))
        src.free()
        dst.free()


def test_the_groups_parameter_is_hidden_and_unmarked_kernels_run_once():
    with _program() as prog, pyoffload.host_device().create_queue() as q:
        assert prog.kernel("ids").signature == ("ptr", "ptr")
        assert prog.kernel("once").signature == ("ptr",)
        a = pyoffload.host_device().alloc(4)
        q.launch(prog.kernel("once"), (4, 2), (8, 2), [a]).wait()
        assert prog.global_variable("calls").read(np.int32)[0] == 1
        a.free()


@pytest.mark.parametrize("threads", [2], indirect=True)
def test_a_trap_names_its_work_group(threads):
    from pyoffload.host.compiler import packaged_image

    dev = pyoffload.host_device()
    with dev.load_program(packaged_image("conformance_kernels")) as prog, dev.create_queue() as q:
        a = dev.alloc(4 * 64)
        ev = q.launch(prog.kernel("trap"), 8, 8, [a, np.int32(64), np.int32(45)])
        with pytest.raises(OffloadError) as err:
            ev.wait()
        assert err.value.errc is Errc.UNKNOWN and "work-group 5 of 8" in str(err.value)
        with pytest.raises(OffloadError):
            q.wait()
        a.free()


def test_host_threads_must_be_positive(monkeypatch, fresh_runtime):
    from pyoffload import api

    monkeypatch.setenv("PYOFFLOAD_HOST_THREADS", "0")
    report = next(r for r in api.runtime().reports if r.name == "host")
    assert report.status == "failed" and "PYOFFLOAD_HOST_THREADS='0'" in report.reason, report
    assert not any(d.backend == "host" for d in pyoffload.devices())
