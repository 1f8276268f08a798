"""1. Launch of an empty kernel: prepared, with arguments each time, prepared with new arguments
each time (``prepared(*args)``), against the raw binding; waiting on an idle queue.

Each launch batch enqueues ``n`` launches and then waits for the queue once, on both sides, so
the figure is the enqueue cost plus an equal share of one final wait.  The idle-queue figure is
``queue.wait()`` with nothing in flight against pyopencl's ``finish()`` on its idle queue.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

import pyoffload
from _env import RawHost, RawOpenCL, Target as Dev
from _stats import Figure, Target, measure, us

SUITE = "launch"


def run(devs: list[Dev], cfg: Any) -> list[Figure]:
    out: list[Figure] = []
    for d in devs:
        if isinstance(d.raw, RawOpenCL):
            out += _opencl(d, cfg)
        elif isinstance(d.raw, RawHost):
            out += _host(d, cfg)
    return out


def _opencl(d: Dev, cfg: Any) -> list[Figure]:
    cl, raw = d.raw.cl, d.raw
    dev = d.device
    q = dev.create_queue()
    prog = dev.load_program(d.images["kernels"])
    noop = prog.kernel("noop")
    iota = prog.kernel("iota_i32")
    buf = dev.alloc(64)
    prepared = q.prepare(noop, 1, 1, ())
    raw_noop = raw.program.noop
    raw_iota = raw.program.iota_i32
    raw_buf = cl.SVMAllocation(raw.context, 64, 0, cl.svm_mem_flags.READ_WRITE)
    n1, zero = np.int32(1), np.int32(0)
    rq = raw.queue
    enqueue = cl.enqueue_nd_range_kernel
    replay = q.prepare(iota, 1, 1, (buf, n1, zero))
    set_args = raw_iota.set_args

    def ours_prepared(n: int) -> None:
        for _ in range(n):
            prepared()
        q.wait()

    def raw_prepared(n: int) -> None:
        for _ in range(n):
            enqueue(rq, raw_noop, (1,), (1,))
        rq.finish()

    def ours_args(n: int) -> None:
        launch = q.launch
        args = (buf, n1, zero)
        for _ in range(n):
            launch(iota, 1, 1, args)
        q.wait()

    def raw_args(n: int) -> None:
        for _ in range(n):
            raw_iota(rq, (1,), (1,), raw_buf, n1, zero)
        rq.finish()

    def ours_new_args(n: int) -> None:
        for _ in range(n):
            replay(buf, n1, zero)
        q.wait()

    def raw_new_args(n: int) -> None:
        for _ in range(n):
            set_args(raw_buf, n1, zero)
            enqueue(rq, raw_iota, (1,), (1,))
        rq.finish()

    contenders = {
        "ours_prepared": ours_prepared,
        "raw_prepared": raw_prepared,
        "ours_args": ours_args,
        "raw_args": raw_args,
        "ours_new_args": ours_new_args,
        "raw_new_args": raw_new_args,
    }
    grunnur_note = ""
    try:
        contenders.update(_grunnur(raw.device))
    except Exception as exc:  # optional baseline
        grunnur_note = f"grunnur unavailable: {exc!r}"
    n = cfg.n(2000)
    t = measure(contenders, n, cfg.repeats)
    figs = [
        Figure(
            SUITE,
            "prepared launch (queue.prepare(...)())",
            "opencl",
            "noop",
            "us",
            us(t["ours_prepared"]),
            "pyopencl set_args once + enqueue_nd_range_kernel",
            us(t["raw_prepared"]),
            Target("ratio", "<=", 1.3, "≤ 1.3× raw prepared"),
        ),
        Figure(
            SUITE,
            "launch with args each time (queue.launch)",
            "opencl",
            "iota_i32(ptr, i32, i32)",
            "us",
            us(t["ours_args"]),
            "pyopencl knl(queue, g, l, *args)",
            us(t["raw_args"]),
            Target("ratio", "<=", 1.0, "≤ 1.0× knl(queue, ...)"),
        ),
        Figure(
            SUITE,
            "prepared with new args (prepared(*args))",
            "opencl",
            "iota_i32(ptr, i32, i32)",
            "us",
            us(t["ours_new_args"]),
            "pyopencl set_args(*args) + enqueue_nd_range_kernel",
            us(t["raw_new_args"]),
        ),
        Figure(
            SUITE,
            "prepared with new args vs a full launch",
            "opencl",
            "iota_i32(ptr, i32, i32)",
            "us",
            us(t["ours_new_args"]),
            "pyoffload queue.launch(kernel, 1, 1, args)",
            us(t["ours_args"]),
        ),
    ]
    figs.append(_idle_wait(q, rq, cfg))
    if "grunnur_prepared" in t:
        figs.append(
            Figure(
                SUITE,
                "prepared launch vs grunnur",
                "opencl",
                "noop",
                "us",
                us(t["ours_prepared"]),
                "grunnur PreparedKernel(queue)",
                us(t["grunnur_prepared"]),
                Target("ratio", "<=", 0.2, "≥ 5× faster than grunnur (ratio ≤ 0.2)"),
            )
        )
        figs.append(
            Figure(
                SUITE,
                "launch with args vs grunnur",
                "opencl",
                "iota_i32(ptr, i32, i32)",
                "us",
                us(t["ours_args"]),
                "grunnur Kernel(queue, g, l, *args)",
                us(t["grunnur_args"]),
            )
        )
    else:
        figs.append(
            Figure(
                SUITE, "prepared launch vs grunnur", "opencl", "noop", "us", us(t["ours_prepared"]), note=grunnur_note
            )
        )
    prog.unload()
    pyoffload.free(buf)
    q.destroy()
    raw_buf.release()
    return figs


def _idle_wait(q: Any, rq: Any, cfg: Any) -> Figure:
    """``q.wait()`` on a queue whose work is all done, against ``finish()`` on an idle pyopencl queue."""
    q.wait()
    rq.finish()

    def ours(n: int) -> None:
        wait = q.wait
        for _ in range(n):
            wait()

    def raw(n: int) -> None:
        finish = rq.finish
        for _ in range(n):
            finish()

    t = measure({"ours": ours, "raw": raw}, cfg.n(20000), cfg.repeats)
    return Figure(
        SUITE,
        "queue.wait() on an idle queue",
        "opencl",
        "",
        "us",
        us(t["ours"]),
        "pyopencl queue.finish() on an idle queue",
        us(t["raw"]),
        Target("ratio", "<=", 2.0, "≤ 2× finish()"),
    )


def _grunnur(cl_device: Any) -> dict[str, Any]:
    from grunnur import API, Array, Context, Device, Platform, Program, Queue, opencl_api_id

    api = API.from_api_id(opencl_api_id())
    same = [d for p in Platform.all(api) for d in Device.all(p) if d.name == cl_device.name]
    ctx = Context.from_devices(same[:1])
    gq = Queue(ctx.device)
    prog = Program(
        [ctx.device],
        "KERNEL void noop() {}\n"
        "KERNEL void iota_i32(GLOBAL_MEM int *out, int n, int base) {"
        " int i = get_global_id(0); if (i < n) out[i] = base + i; }",
    )
    prepared = prog.kernel.noop.prepare([1], [1])
    iota = prog.kernel.iota_i32
    arr = Array.empty(ctx.device, (16,), np.int32)
    n1, zero = np.int32(1), np.int32(0)

    keep = (api, ctx, gq, prog, arr)  # grunnur holds its program and context weakly

    def grunnur_prepared(n: int, _keep: tuple = keep) -> None:
        for _ in range(n):
            prepared(gq)
        gq.synchronize()

    def grunnur_args(n: int, _keep: tuple = keep) -> None:
        for _ in range(n):
            iota(gq, [1], [1], arr, n1, zero)
        gq.synchronize()

    grunnur_prepared(1)  # fail here, inside the caller's try, rather than mid-measurement
    grunnur_args(1)
    return {"grunnur_prepared": grunnur_prepared, "grunnur_args": grunnur_args}


def _host(d: Dev, cfg: Any) -> list[Figure]:
    dev = d.device
    q = dev.create_queue()
    prog = dev.load_program(d.images["kernels"])
    noop = prog.kernel("noop")
    iota = prog.kernel("iota_i32")
    buf = dev.alloc(64)
    prepared = q.prepare(noop, 1, 1, ())
    fn_noop = d.raw.lib.noop
    fn_noop.restype = None
    fn_iota = d.raw.lib.iota_i32
    fn_iota.restype = None
    raw_mem = (ctypes.c_int32 * 16)()
    raw_ptr = ctypes.addressof(raw_mem)
    n1, zero = np.int32(1), np.int32(0)
    c_void_p, c_int32 = ctypes.c_void_p, ctypes.c_int32

    # iota_i32 is a data-parallel kernel (PYOFFLOAD_KERNEL): its first parameter is the launch's
    # pyoffload_groups, which the kernel writes (its trap context).  Called without one, it wrote
    # past the end of raw_mem and corrupted the heap.
    class Groups(ctypes.Structure):  # pyoffload_groups of core/host/pyoffload_host.h
        _fields_ = [
            ("num_groups", ctypes.c_uint64 * 3),
            ("local_size", ctypes.c_uint64 * 3),
            ("first", ctypes.c_uint64),
            ("last", ctypes.c_uint64),
            ("trap_env", ctypes.c_void_p),
            ("trapped", ctypes.c_uint64),
        ]

    one = (ctypes.c_uint64 * 3)(1, 1, 1)
    groups = ctypes.byref(Groups(one, one, 0, 1))

    def ours_prepared(n: int) -> None:
        for _ in range(n):
            prepared()
        q.wait()

    def raw_prepared(n: int) -> None:
        for _ in range(n):
            fn_noop()

    def ours_args(n: int) -> None:
        launch = q.launch
        args = (buf, n1, zero)
        for _ in range(n):
            launch(iota, 1, 1, args)
        q.wait()

    def raw_args(n: int) -> None:
        for _ in range(n):
            fn_iota(groups, c_void_p(raw_ptr), c_int32(1), c_int32(0))

    replay = q.prepare(iota, 1, 1, (buf, n1, zero))

    def ours_new_args(n: int) -> None:
        for _ in range(n):
            replay(buf, n1, zero)
        q.wait()

    t = measure(
        {
            "ours_prepared": ours_prepared,
            "raw_prepared": raw_prepared,
            "ours_args": ours_args,
            "raw_args": raw_args,
            "ours_new_args": ours_new_args,
        },
        cfg.n(2000),
        cfg.repeats,
    )
    note = "host launches go to a worker thread (asynchronous); the baseline is a synchronous call"
    figs = [
        Figure(
            SUITE,
            "prepared launch (queue.prepare(...)())",
            "host",
            "noop",
            "us",
            us(t["ours_prepared"]),
            "direct ctypes call of the same function",
            us(t["raw_prepared"]),
            note=note,
        ),
        Figure(
            SUITE,
            "launch with args each time (queue.launch)",
            "host",
            "iota_i32(ptr, i32, i32)",
            "us",
            us(t["ours_args"]),
            "direct ctypes call (with its work-group range), ctypes args built per call",
            us(t["raw_args"]),
            note=note,
        ),
        Figure(
            SUITE,
            "prepared with new args vs a full launch",
            "host",
            "iota_i32(ptr, i32, i32)",
            "us",
            us(t["ours_new_args"]),
            "pyoffload queue.launch(kernel, 1, 1, args)",
            us(t["ours_args"]),
            note=note,
        ),
    ]
    prog.unload()
    pyoffload.free(buf)
    q.destroy()
    return figs
