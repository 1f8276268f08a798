"""Data-parallel host kernels (``pyoffload_host.h``), in both conventions (``PYOFFLOAD_KERNEL``
and plain C with a trailing ``pyoffload_launch`` pointer): every work-item of every shape runs
once with the right ids, work-groups run on several threads at once, arguments of every kind
arrive intact however many there are, local memory is per thread, a trap names its work-group,
and kernels of neither kind are still called once per launch."""

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

/* which thread ran each group; each group waits (at most `spin` rounds) until a group of this
   launch has run on another thread, so the launch ends only once two threads have taken part */
PYOFFLOAD_KERNEL(who)(PYOFFLOAD_GROUPS, uint64_t *out, int64_t spin) {
    PYOFFLOAD_FOR_EACH_GROUP {
        uint64_t self = (uint64_t)pthread_self();
        __atomic_store_n(&out[pyoffload_group_id(0)], self, __ATOMIC_SEQ_CST);
        for (int64_t t = 0; t < spin; t++) {
            int other = 0;
            for (uint64_t k = 0; k < pyoffload_num_groups(0); k++) {
                uint64_t v = __atomic_load_n(&out[k], __ATOMIC_SEQ_CST);
                if (v != 0 && v != self) other = 1;
            }
            if (other) break;
        }
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

/* The launch-context convention: plain C, one call per group. */
void ctx_ids(uint64_t *out, uint64_t *sizes, const pyoffload_launch *ctx) {
    for (uint64_t lz = 0; lz < ctx->local_size[2]; lz++)
        for (uint64_t ly = 0; ly < ctx->local_size[1]; ly++)
            for (uint64_t lx = 0; lx < ctx->local_size[0]; lx++) {
                uint64_t x = ctx->group_id[0] * ctx->local_size[0] + lx;
                uint64_t y = ctx->group_id[1] * ctx->local_size[1] + ly;
                uint64_t z = ctx->group_id[2] * ctx->local_size[2] + lz;
                uint64_t i = (z * ctx->global_size[1] + y) * ctx->global_size[0] + x;
                out[i] += ctx->group_id[0] | ctx->group_id[1] << 8 | ctx->group_id[2] << 16 | lx << 24 | ly << 32
                    | lz << 40;
                if (i == 0) {
                    for (int d = 0; d < 3; d++) {
                        sizes[d] = ctx->num_groups[d];
                        sizes[3 + d] = ctx->local_size[d];
                    }
                    sizes[6] = ctx->group_count;
                }
            }
}

/* Every argument kind, more of them than there are registers: each lands in out[]. */
void ctx_many(double *out, int8_t a, float b, int16_t c, double d, int32_t e, float f, int64_t g, uint8_t h,
              double i, uint16_t j, float k, uint32_t l, double m, uint64_t n, float o, int32_t p, double q,
              int64_t r, float s, int8_t t, double u, uint32_t v, const pyoffload_launch *ctx) {
    if (ctx->group_linear_id != 1) return;
    double all[22] = {a, b, c, d, e, f, (double)g, h, i, j, k, l, m, (double)n, o, p, q, (double)r, s, t, u, v};
    for (int x = 0; x < 22; x++) out[x] = all[x];
}

PYOFFLOAD_KERNEL(macro_many)(PYOFFLOAD_GROUPS, double *out, int8_t a, float b, int16_t c, double d, int32_t e,
                             float f, int64_t g, uint8_t h, double i, uint16_t j, float k, uint32_t l, double m,
                             uint64_t n, float o, int32_t p, double q, int64_t r, float s, int8_t t, double u,
                             uint32_t v) {
    PYOFFLOAD_FOR_EACH_GROUP {
        if (pyoffload_group_id(0) == 1) {
            double all[22] = {a, b, c, d, e, f, (double)g, h, i, j, k, l, m, (double)n, o, p, q, (double)r, s, t, u, v};
            for (int x = 0; x < 22; x++) out[x] = all[x];
        }
    }
}

/* per group: the sum of its block through local memory (the context's local_memory is the
   LocalMemory argument) */
void ctx_group_sum(int64_t *out, const int64_t *in, int64_t *scratch, const pyoffload_launch *ctx) {
    uint64_t block = ctx->local_size[0], base = ctx->group_id[0] * block;
    if ((void *)scratch != ctx->local_memory || ctx->local_memory_bytes < block * sizeof(int64_t)) return;
    for (uint64_t l = 0; l < block; l++) scratch[l] = in[base + l];
    /* barrier */
    for (uint64_t l = 0; l < block; l++) {
        int64_t sum = 0;
        for (uint64_t m = 0; m < block; m++) sum += scratch[m];
        out[base + l] = sum;
    }
}

PYOFFLOAD_KERNEL(add1)(PYOFFLOAD_GROUPS, uint64_t *x) {
    PYOFFLOAD_FOR_EACH_GROUP {
        PYOFFLOAD_FOR_EACH_ITEM { x[pyoffload_global_id(0)] += 1; }
    }
}

void ctx_add1(uint64_t *x, const pyoffload_launch *ctx) {
    for (uint64_t l = 0; l < ctx->local_size[0]; l++) x[ctx->group_linear_id * ctx->local_size[0] + l] += 1;
}

/* group `at` traps */
void ctx_trap(int32_t *out, int32_t at, const pyoffload_launch *ctx) {
    if (ctx->group_linear_id == (uint64_t)at) pyoffload_launch_trap(ctx);
    out[ctx->group_linear_id] = 1;
}
"""

MANY = (
    np.int8(-7),
    np.float32(1.5),
    np.int16(-300),
    np.float64(2.25),
    np.int32(-70000),
    np.float32(-3.5),
    np.int64(-(2**40)),
    np.uint8(200),
    np.float64(1e100),
    np.uint16(60000),
    np.float32(0.25),
    np.uint32(4_000_000_000),
    np.float64(-0.125),
    np.uint64(2**53),
    np.float32(8.0),
    np.int32(123),
    np.float64(3.0),
    np.int64(-5),
    np.float32(-1.0),
    np.int8(127),
    np.float64(6.5),
    np.uint32(7),
)


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
        pyoffload.memcpy(a, np.zeros(8, np.uint64))
        q.launch(prog.kernel("who"), 8, 1, [a, np.int64(100_000_000)]).wait()
        out = np.zeros(8, np.uint64)
        pyoffload.memcpy(out, a)
        assert len(set(out.tolist())) == 2 and 0 not in out
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


@pytest.mark.parametrize("threads", [1, 2, 3], indirect=True)
@pytest.mark.parametrize("grid,block", SHAPES)
def test_launch_context_kernels_run_every_group_with_its_ids(threads, grid, block):
    with _program() as prog, pyoffload.host_device().create_queue() as q:
        k = prog.kernel("ctx_ids")
        assert k.signature == ("ptr", "ptr")  # the context is the backend's
        size = [g * b for g, b in zip(grid, block, strict=True)]
        n = size[0] * size[1] * size[2]
        a, s = pyoffload.host_device().alloc(8 * n), pyoffload.host_device().alloc(56)
        pyoffload.memcpy(a, np.zeros(n, np.uint64))
        q.launch(k, grid, block, [a, s]).wait()
        out, sizes = np.zeros(n, np.uint64), np.zeros(7, np.uint64)
        pyoffload.memcpy(out, a)
        pyoffload.memcpy(sizes, s)
        z, y, x = np.meshgrid(*(np.arange(k, dtype=np.uint64) for k in size[::-1]), indexing="ij")
        b = [np.uint64(k) for k in block]
        expect = (
            (x // b[0]) | (y // b[1]) << 8 | (z // b[2]) << 16 | (x % b[0]) << 24 | (y % b[1]) << 32 | (z % b[2]) << 40
        ).ravel()
        assert np.array_equal(out, expect)  # += : a group run twice would show
        assert sizes.tolist() == [*grid, *block, grid[0] * grid[1] * grid[2]]
        a.free()
        s.free()


@pytest.mark.parametrize("threads", [2], indirect=True)
@pytest.mark.parametrize("name", ["ctx_many", "macro_many"])
def test_arguments_of_every_kind_beyond_the_registers_arrive(threads, name):
    with _program() as prog, pyoffload.host_device().create_queue() as q:
        a = pyoffload.host_device().alloc(8 * 22)
        q.launch(prog.kernel(name), 3, 1, [a, *MANY]).wait()
        out = np.zeros(22, np.float64)
        pyoffload.memcpy(out, a)
        assert out.tolist() == [float(v) for v in MANY]
        a.free()


@pytest.mark.parametrize("threads", [1, 2], indirect=True)
def test_launch_context_local_memory(threads):
    block, groups = 16, 7
    n = block * groups
    data = np.arange(n, dtype=np.int64) ** 2
    with _program() as prog, pyoffload.host_device().create_queue() as q:
        src, dst = pyoffload.host_device().alloc(8 * n), pyoffload.host_device().alloc(8 * n)
        pyoffload.memcpy(src, data)
        q.launch(prog.kernel("ctx_group_sum"), groups, block, [dst, src, LocalMemory(8 * block)]).wait()
        out = np.zeros(n, np.int64)
        pyoffload.memcpy(out, dst)
        assert np.array_equal(out, np.repeat(data.reshape(groups, block).sum(axis=1), block))
        src.free()
        dst.free()


@pytest.mark.parametrize("threads", [1, 2], indirect=True)
def test_a_launch_context_trap_names_its_work_group(threads):
    with _program() as prog, pyoffload.host_device().create_queue() as q:
        a = pyoffload.host_device().alloc(4 * 16)
        ev = q.launch(prog.kernel("ctx_trap"), 16, 1, [a, np.int32(11)])
        with pytest.raises(OffloadError) as err:
            ev.wait()
        assert err.value.errc is Errc.UNKNOWN and "work-group 11 of 16" in str(err.value)
        with pytest.raises(OffloadError):
            q.wait()
        q.launch(prog.kernel("ctx_trap"), 4, 1, [a, np.int32(-1)]).wait()  # the queue keeps working
        a.free()


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


def test_the_thread_pool_survives_fork_and_never_holds_up_exit():
    """A child forked after parallel launches (the pool's threads are the parent's) starts its
    own pool; a process exits with the pool's threads idle or running."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import os, numpy as np, pyoffload
        SRC = '''
        #include <pyoffload_host.h>
        void fill(int *out, int v, const pyoffload_launch *ctx) {
            for (uint64_t l = 0; l < ctx->local_size[0]; l++) out[ctx->group_id[0] * ctx->local_size[0] + l] = v;
        }
        void spin(volatile long *sink, const pyoffload_launch *ctx) { for (;;) sink[ctx->thread] += 1; }
        '''
        def run(v):
            dev = pyoffload.host_device()
            prog = dev.build_program(SRC)
            q = dev.create_queue()
            a = dev.alloc(4 * 64)
            q.launch(prog.kernel("fill"), 16, 4, [a, np.int32(v)]).wait()
            out = np.zeros(64, np.int32)
            pyoffload.memcpy(out, a)
            assert (out == v).all(), out
            return dev, prog, q
        run(1)
        pid = os.fork()
        if pid == 0:
            pyoffload.shutdown()
            run(2)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, status
        dev, prog, q = run(3)
        q.launch(prog.kernel("spin"), 4, 1, [dev.alloc(64)])  # never ends: exit leaks it
        print("exiting", flush=True)
        """
    )
    env = {**__import__("os").environ, "PYOFFLOAD_HOST_THREADS": "2", "PYOFFLOAD_EXIT_TIMEOUT": "1"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and proc.stdout == "exiting\n", proc.stdout + proc.stderr


@pytest.mark.parametrize("threads", [3], indirect=True)
def test_launches_of_several_queues_share_the_pool(threads):
    """Queues on several Python threads launch at once (both conventions, random grids): every
    group of every launch runs exactly once."""
    import threading

    errors: list[str] = []
    with _program() as prog:

        def client(seed: int) -> None:
            rng = np.random.default_rng(seed)
            dev = pyoffload.host_device()
            with dev.create_queue() as q:
                n, block = 2048, 32
                a = dev.alloc(8 * n)
                pyoffload.memcpy(a, np.zeros(n, np.uint64))
                expect = np.zeros(n, np.uint64)
                for i in range(120):
                    groups = int(rng.integers(1, n // block + 1))
                    if i % 2:
                        q.launch(prog.kernel("ctx_add1"), groups, block, [a])
                    else:
                        q.launch(prog.kernel("add1"), groups, block, [a])
                    expect[: groups * block] += 1
                q.wait()
                out = np.zeros(n, np.uint64)
                pyoffload.memcpy(out, a)
                if not np.array_equal(out, expect):
                    errors.append(f"client {seed}: items {np.flatnonzero(out != expect)[:5]} wrong")
                a.free()

        clients = [threading.Thread(target=client, args=(seed,)) for seed in range(3)]
        for t in clients:
            t.start()
        for t in clients:
            t.join()
    assert errors == []
