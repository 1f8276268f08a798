"""8. The CUDA backend against the Python CUDA bindings people use: pycuda, cuda.core, CuPy.

Runs only where the CUDA backend has real devices (otherwise the suite is listed as not measured,
with the plugin's reason).  Every baseline is optional: a package that is not installed is
noted and its figures are left out.  pyoffload is driven through its public API only; each
baseline through its own.  All of them use the device's primary context (the one pyoffload-cuda,
CuPy and cuda.core use), made current once for the whole suite, and the same PTX
(``bench_kernels.cu``, see ``benchmarks/_cuda_kernels.py``).

Figures: launch with arguments against pycuda ``prepared_async_call`` and cuda.core ``launch``;
prepared launch against pycuda's prepared call; alloc + free 64 B … 64 MiB against CuPy's default
memory pool and cuda.core's device memory resource; synchronous memcpy H2D/D2H from 1 MiB,
pageable and pinned, against pycuda; ``mem_info`` with 10^5 live allocations.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import Any

import numpy as np

import _cuda_kernels
import pyoffload
from _env import Target as Dev
from _stats import Figure, Target, fmt_size, gbps, measure, us
from bench_alloc import _lookup

SUITE = "cuda"
KiB, MiB = 1 << 10, 1 << 20


def run(devs: list[Dev], cfg: Any) -> list[Figure]:
    cuda = [d for d in devs if d.backend == "cuda"]
    if not cuda:
        cfg.skip(SUITE, "cuda", _why_no_devices())
        return []
    if os.environ.get("PYOFFLOAD_CUDA_DRIVER") == "fake":
        cfg.skip(SUITE, "cuda", "PYOFFLOAD_CUDA_DRIVER=fake: the fake driver's timings say nothing about a GPU")
        return []
    d = cuda[0]
    try:
        ptx, origin = _cuda_kernels.load()
    except (OSError, subprocess.CalledProcessError) as exc:
        cfg.skip(SUITE, "cuda", f"no kernels: {exc} (build them with scripts/build_wheelhouse.sh)")
        return []
    names = _cuda_kernels.mangled(ptx)
    base = _Baselines(d.device, ptx, names, cfg)
    try:
        figs = _launch(d, ptx, base, cfg)
        figs += _alloc(d, base, cfg)
        figs += _memcpy(d, base, cfg)
        figs += _mem_info(d, cfg)
    finally:
        base.close()
    for f in figs:
        f.extra.setdefault("kernels", origin)
    return figs


def _why_no_devices() -> str:
    for rep in pyoffload.plugins():
        if rep.name == "cuda":
            return f"the CUDA backend has no devices here ({rep.status}: {rep.reason})"
    return "pyoffload-cuda is not installed"


class _Baselines:
    """pycuda, cuda.core and CuPy on the same device, each present or a note of why not."""

    def __init__(self, dev: Any, ptx: bytes, names: dict[str, str], cfg: Any) -> None:
        self.pycuda: _PyCuda | None = None
        self.cc: _CudaCore | None = None
        self.cupy: Any = None
        # Each baseline is optional: missing (ImportError) or unusable here (any other error of
        # its own API), it is noted and its figures are left out; the others still run.
        try:
            self.pycuda = _PyCuda(dev, ptx, names)
        except Exception as exc:
            cfg.skip(SUITE, "cuda", f"pycuda baselines: {exc!r}")
        try:
            self.cc = _CudaCore(dev, ptx, names)
        except Exception as exc:
            cfg.skip(SUITE, "cuda", f"cuda.core baselines: {exc!r}")
        try:
            import cupy

            cupy.cuda.Device(int(dev.index)).use()
            self.cupy = cupy
        except Exception as exc:
            cfg.skip(SUITE, "cuda", f"CuPy baseline (alloc+free): {exc!r}")

    def close(self) -> None:
        if self.pycuda is not None:
            self.pycuda.close()


class _PyCuda:
    def __init__(self, dev: Any, ptx: bytes, names: dict[str, str]) -> None:
        import pycuda.driver as drv

        drv.init()
        ordinal = int(dev.index)
        if drv.Device(ordinal).name() != dev.name:
            ordinal = next(i for i in range(drv.Device.count()) if drv.Device(i).name() == dev.name)
        self.drv = drv
        self.ctx = drv.Device(ordinal).retain_primary_context()
        self.ctx.push()
        try:
            self.module = drv.module_from_buffer(ptx)
        except Exception:
            self.ctx.pop()
            raise
        self.noop = self.module.get_function(names["noop"])
        self.noop.prepare("")
        self.iota = self.module.get_function(names["iota_i32"])
        self.iota.prepare("Pii")
        self.stream = drv.Stream()
        self.buf = drv.mem_alloc(64)

    def close(self) -> None:
        self.stream.synchronize()
        self.buf.free()
        del self.module
        self.ctx.pop()


class _CudaCore:
    def __init__(self, dev: Any, ptx: bytes, names: dict[str, str]) -> None:
        try:
            from cuda import core as cc

            cc.Device  # noqa: B018  (newer releases export the API at the top level)
        except (ImportError, AttributeError):
            from cuda.core import experimental as cc
        self.cc = cc
        self.dev = cc.Device(int(dev.index))
        self.dev.set_current()
        self.stream = self.dev.create_stream()
        code = cc.ObjectCode.from_ptx(ptx)
        self.iota = code.get_kernel(names["iota_i32"])
        self.config = cc.LaunchConfig(grid=1, block=1)
        self.buf = self.dev.allocate(64, stream=self.stream)
        self.mr = self.dev.memory_resource


def _add_if_it_runs(contenders: dict[str, Any], name: str, batch: Callable[[int], None], cfg: Any) -> None:
    """Add an optional baseline's batch after one trial call, so that an API mismatch is a note
    and not a failed suite."""
    try:
        batch(1)
    except Exception as exc:
        cfg.skip(SUITE, "cuda", f"{name}: {exc!r}")
    else:
        contenders[name] = batch


def _launch(d: Dev, ptx: bytes, base: _Baselines, cfg: Any) -> list[Figure]:
    dev = d.device
    q = dev.create_queue()
    prog = dev.load_program(ptx)
    noop, iota = prog.kernel("noop"), prog.kernel("iota_i32")
    buf = dev.alloc(64)
    prepared = q.prepare(noop, 1, 1, ())
    n1, zero = np.int32(1), np.int32(0)

    def ours_prepared(n: int) -> None:
        for _ in range(n):
            prepared()
        q.wait()

    def ours_args(n: int) -> None:
        launch = q.launch
        args = (buf, n1, zero)
        for _ in range(n):
            launch(iota, 1, 1, args)
        q.wait()

    c: dict[str, Any] = {"ours_prepared": ours_prepared, "ours_args": ours_args}
    if base.pycuda is not None:
        pc = base.pycuda
        grid, block, stream, ptr = (1, 1), (1, 1, 1), pc.stream, int(pc.buf)

        def pycuda_prepared(n: int) -> None:
            call = pc.noop.prepared_async_call
            for _ in range(n):
                call(grid, block, stream)
            stream.synchronize()

        def pycuda_args(n: int) -> None:
            call = pc.iota.prepared_async_call
            for _ in range(n):
                call(grid, block, stream, ptr, 1, 0)
            stream.synchronize()

        _add_if_it_runs(c, "pycuda_prepared", pycuda_prepared, cfg)
        _add_if_it_runs(c, "pycuda_args", pycuda_args, cfg)
    if base.cc is not None:
        cc = base.cc
        launch_cc, s, cfg_cc, kern, cbuf = cc.cc.launch, cc.stream, cc.config, cc.iota, cc.buf

        def cuda_core_args(n: int) -> None:
            for _ in range(n):
                launch_cc(s, cfg_cc, kern, cbuf, n1, zero)
            s.sync()

        _add_if_it_runs(c, "cuda_core_args", cuda_core_args, cfg)
    t = measure(c, cfg.n(5000), cfg.repeats)
    figs = []
    args_name = "launch with args each time (queue.launch)"
    if "pycuda_args" in t:
        figs.append(
            Figure(
                SUITE,
                args_name,
                "cuda",
                "iota_i32(ptr, i32, i32)",
                "us",
                us(t["ours_args"]),
                "pycuda prepared_async_call(grid, block, stream, *args)",
                us(t["pycuda_args"]),
                Target("ratio", "<=", 1.3, "≤ 1.3× pycuda prepared"),
            )
        )
    if "pycuda_prepared" in t:
        figs.append(
            Figure(
                SUITE,
                "prepared launch (queue.prepare(...)())",
                "cuda",
                "noop",
                "us",
                us(t["ours_prepared"]),
                "pycuda prepared_async_call (noop)",
                us(t["pycuda_prepared"]),
                Target("ratio", "<=", 1.2, "≤ 1.2× pycuda prepared"),
            )
        )
    if "cuda_core_args" in t:
        figs.append(
            Figure(
                SUITE,
                args_name,
                "cuda",
                "iota_i32(ptr, i32, i32)",
                "us",
                us(t["ours_args"]),
                "cuda.core launch(stream, config, kernel, *args)",
                us(t["cuda_core_args"]),
                Target("ratio", "<=", 2.0, "≤ 2× cuda.core launch"),
            )
        )
    prog.unload()
    pyoffload.free(buf)
    q.destroy()
    return figs


def alloc_sizes(quick: bool) -> list[int]:
    if quick:
        return [64, 64 * KiB, 1 * MiB, 64 * MiB]
    return [64, 1 * KiB, 64 * KiB, 1 * MiB, 8 * MiB, 64 * MiB]


def _alloc(d: Dev, base: _Baselines, cfg: Any) -> list[Figure]:
    dev = d.device
    pool = dev.memory_pool()
    alloc, free = dev.alloc, pyoffload.free
    figs = []
    for size in alloc_sizes(cfg.quick):

        def pool_on(n: int, size: int = size) -> None:
            for _ in range(n):
                free(alloc(size))

        def pool_off(n: int, size: int = size) -> None:
            saved, pool.max_request = pool.max_request, 0
            try:
                for _ in range(n):
                    free(alloc(size))
            finally:
                pool.max_request = saved

        c: dict[str, Any] = {"on": pool_on, "off": pool_off}
        if base.cupy is not None:
            malloc = base.cupy.get_default_memory_pool().malloc

            def cupy_pool(n: int, size: int = size) -> None:
                for _ in range(n):
                    malloc(size)  # the MemoryPointer is dropped at once: back to CuPy's pool

            _add_if_it_runs(c, "cupy", cupy_pool, cfg)
        if base.cc is not None:
            mr, s = base.cc.mr, base.cc.stream

            def cuda_core_mr(n: int, size: int = size) -> None:
                for _ in range(n):
                    mr.allocate(size, stream=s).close(s)
                s.sync()

            _add_if_it_runs(c, "cuda_core", cuda_core_mr, cfg)
        t = measure(c, cfg.n(2000 if size <= MiB else 500), cfg.repeats)
        p = fmt_size(size)
        extra = {"size": size}
        if "cupy" in t:
            for key, what in (("on", "pool on"), ("off", "pool off")):
                figs.append(
                    Figure(
                        SUITE,
                        f"alloc+free, {what}",
                        "cuda",
                        p,
                        "us",
                        us(t[key]),
                        "CuPy default memory pool malloc + free",
                        us(t["cupy"]),
                        Target("ratio", "<=", 2.0, "≤ 2× CuPy pool") if key == "on" else None,
                        extra=extra,
                    )
                )
        if "cuda_core" in t:
            figs.append(
                Figure(
                    SUITE,
                    "alloc+free, pool on vs cuda.core",
                    "cuda",
                    p,
                    "us",
                    us(t["on"]),
                    "cuda.core device memory_resource allocate + close",
                    us(t["cuda_core"]),
                    extra=extra,
                )
            )
        figs.append(
            Figure(
                SUITE,
                "alloc+free, pool on vs off",
                "cuda",
                p,
                "us",
                us(t["on"]),
                "same, pool off",
                us(t["off"]),
                Target("ratio", "<=", 1.0, "pool never slower (≤ 1.0)"),
                extra=extra,
            )
        )
    return figs


def memcpy_sizes(quick: bool) -> list[int]:
    return [1 * MiB, 64 * MiB] if quick else [1 * MiB, 16 * MiB, 256 * MiB]


def _memcpy(d: Dev, base: _Baselines, cfg: Any) -> list[Figure]:
    if base.pycuda is None:
        return []
    drv = base.pycuda.drv
    dev = d.device
    memcpy = pyoffload.memcpy
    figs = []
    for size in memcpy_sizes(cfg.quick):
        a = dev.alloc(size)
        pinned = dev.alloc(size, pyoffload.AllocKind.HOST)
        pageable = np.ones(size, np.uint8)
        raw = drv.mem_alloc(size)
        raw_pinned = drv.pagelocked_empty(size, np.uint8)
        raw_pageable = np.ones(size, np.uint8)
        ops = {
            "h2d": lambda: memcpy(a, pageable),
            "d2h": lambda: memcpy(pageable, a),
            "h2d_pinned": lambda: memcpy(a, pinned),
            "d2h_pinned": lambda: memcpy(pinned, a),
            "raw_h2d": lambda: drv.memcpy_htod(raw, raw_pageable),
            "raw_d2h": lambda: drv.memcpy_dtoh(raw_pageable, raw),
            "raw_h2d_pinned": lambda: drv.memcpy_htod(raw, raw_pinned),
            "raw_d2h_pinned": lambda: drv.memcpy_dtoh(raw_pinned, raw),
        }
        n = cfg.n(max(3, min(500, (256 * MiB) // size)))
        t = measure({k: _repeat(op) for k, op in ops.items()}, n, cfg.repeats, warmup=1)
        p = fmt_size(size)
        for key, what in (
            ("h2d", "H2D, pageable"),
            ("d2h", "D2H, pageable"),
            ("h2d_pinned", "H2D, pinned"),
            ("d2h_pinned", "D2H, pinned"),
        ):
            pinned_side = key.endswith("pinned")
            figs.append(
                Figure(
                    SUITE,
                    f"memcpy {what}",
                    "cuda",
                    p,
                    "GB/s",
                    gbps(size, t[key]),
                    "pycuda memcpy_htod/dtoh" + (" (pagelocked_empty)" if pinned_side else " (numpy array)"),
                    gbps(size, t[f"raw_{key}"]),
                    Target("ratio", ">=", 0.95, "≥ 0.95× pycuda"),
                    note="pinned: pyoffload HOST allocation"
                    if pinned_side and size == memcpy_sizes(cfg.quick)[0]
                    else "",
                    extra={"size": size, "direction": key},
                )
            )
        pyoffload.free(a)
        pyoffload.free(pinned)
        raw.free()
    return figs


def _repeat(op: Any) -> Any:
    def batch(k: int) -> None:
        for _ in range(k):
            op()

    return batch


def _mem_info(d: Dev, cfg: Any) -> list[Figure]:
    figs = _lookup(d, cfg)
    for f in figs:
        f.suite = SUITE
        if f.name.startswith("mem_info") and f.extra.get("count", 0) >= 10**5:
            f.target = Target("value", "<=", 1.0, "≤ 1 µs at 10^5")
    return figs
