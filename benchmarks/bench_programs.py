"""5. Program load + unload cycles per second (the ``ctor_dtor`` conformance program, whose
constructor and destructor run on every cycle) and resident memory over many cycles.

Baselines: on the host backend, the same ELF image written to a memfd and ``dlopen``-ed /
``dlclose``-d through ctypes (what the backend does, without pyoffload around it); on OpenCL,
building the same source with pyopencl.  Resident memory is read from ``/proc/self/statm``
after a warm-up, before and after the cycles.
"""

from __future__ import annotations

import ctypes
import gc
import os
from typing import Any

from _env import RawHost, RawOpenCL, Target as Dev
from _stats import Figure, Target, measure

SUITE = "programs"
_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def run(devs: list[Dev], cfg: Any) -> list[Figure]:
    out: list[Figure] = []
    for d in devs:
        if isinstance(d.raw, RawHost):
            out += _host(d, cfg)
        elif isinstance(d.raw, RawOpenCL):
            out += _opencl(d, cfg)
    return out


def _host(d: Dev, cfg: Any) -> list[Figure]:
    dev = d.device
    image = d.images["ctor_dtor"]
    libc = ctypes.CDLL(None)
    dlclose = libc.dlclose
    dlclose.argtypes = (ctypes.c_void_p,)

    def ours(n: int) -> None:
        load = dev.load_program
        for _ in range(n):
            load(image).unload()

    def raw(n: int) -> None:
        for _ in range(n):
            fd = os.memfd_create("bench-image", os.MFD_CLOEXEC)
            os.write(fd, image)
            lib = ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_NOW | os.RTLD_LOCAL)
            dlclose(lib._handle)
            os.close(fd)

    t = measure({"ours": ours, "raw": raw}, cfg.n(300), cfg.repeats)
    per_s = lambda v: [1.0 / x for x in v]  # noqa: E731
    figs = [
        Figure(
            SUITE,
            "load+unload cycles/s (ctor_dtor)",
            "host",
            "",
            "cycles/s",
            per_s(t["ours"]),
            "memfd + dlopen + dlclose via ctypes",
            per_s(t["raw"]),
        )
    ]
    cycles = 1000 if cfg.quick else 10_000
    growth = {}
    for name, fn in (("ours", ours), ("raw", raw)):
        fn(200)  # warm-up: first-use caches, allocator arenas
        gc.collect()
        before = rss_bytes()
        fn(cycles)
        gc.collect()
        growth[name] = (rss_bytes() - before) / (1 << 20)
    figs.append(
        Figure(
            SUITE,
            f"resident memory growth over {cycles:,} cycles",
            "host",
            f"{cycles} cycles",
            "MiB",
            [growth["ours"]],
            "same for memfd + dlopen + dlclose",
            [growth["raw"]],
            Target("value", "<=", 1.0, "no growth (≤ 1 MiB, allocator noise)"),
            note="ratio is not meaningful when the baseline grows by ~0; read the two values",
            extra={"cycles": cycles},
        )
    )
    return figs


def _opencl(d: Dev, cfg: Any) -> list[Figure]:
    dev = d.device
    image = d.images["ctor_dtor"]
    cl, ctx = d.raw.cl, d.raw.context
    source = image.decode() if image.lstrip()[:2] in (b"/*", b"//", b"__", b"#i", b"#d", b"ke") else None

    def ours(n: int) -> None:
        for _ in range(n):
            dev.load_program(image).unload()

    contenders = {"ours": ours}
    if source is not None:

        def raw(n: int) -> None:
            for _ in range(n):
                prg = cl.Program(ctx, source).build()
                prg.all_kernels()
                del prg

        contenders["raw"] = raw
    n = 3 if cfg.quick else 10
    t = measure(contenders, n, cfg.repeats, warmup=1)
    per_s = lambda v: [1.0 / x for x in v]  # noqa: E731
    return [
        Figure(
            SUITE,
            "load+unload cycles/s (ctor_dtor)",
            "opencl",
            "",
            "cycles/s",
            per_s(t["ours"]),
            "pyopencl Program(ctx, src).build() + kernels" if "raw" in t else "",
            per_s(t["raw"]) if "raw" in t else None,
            note="pyoffload also runs the constructor and destructor kernels each cycle",
        )
    ]
