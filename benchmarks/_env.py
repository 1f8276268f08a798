"""What the benchmarks run on: pyoffload's devices and, for each backend, its raw baseline.

A raw baseline uses the vendor binding directly, in its own context on the *same* physical device,
with the same kernels built from plain OpenCL C (or, for the host backend, the same ELF image
opened with ``dlopen``), so that the ratio measures pyoffload and nothing else.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import tempfile
from typing import Any

import pyoffload

OPENCL_SOURCE = """
__kernel void noop(void) {}
__kernel void iota_i32(__global int *out, int n, int base) {
    int i = get_global_id(0);
    if (i < n) out[i] = base + i;
}
"""


@dataclasses.dataclass
class Target:
    """One pyoffload device and what is needed to drive it and its baseline."""

    device: Any
    backend: str
    images: dict[str, bytes]
    raw: Any = None  # backend-specific baseline objects

    @property
    def label(self) -> str:
        return self.backend


@dataclasses.dataclass
class RawOpenCL:
    cl: Any
    device: Any
    context: Any
    queue: Any
    program: Any


@dataclasses.dataclass
class RawHost:
    lib: ctypes.CDLL
    path: str
    libc: ctypes.CDLL


def _raw_opencl(device: Any) -> RawOpenCL:
    import pyopencl as cl

    want = device.name
    for platform in cl.get_platforms():
        for d in platform.get_devices():
            if d.name == want:
                ctx = cl.Context([d])
                queue = cl.CommandQueue(ctx)
                program = cl.Program(ctx, OPENCL_SOURCE).build()
                return RawOpenCL(cl, d, ctx, queue, program)
    raise RuntimeError(f"pyopencl does not see the device {want!r}")


def _raw_host(images: dict[str, bytes]) -> RawHost:
    # The same ELF image the host backend loads, opened directly from a file.
    fd, path = tempfile.mkstemp(prefix="pyoffload-bench-", suffix=".so")
    with os.fdopen(fd, "wb") as f:
        f.write(images["kernels"])
    lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = (ctypes.c_size_t,)
    libc.free.restype = None
    libc.free.argtypes = (ctypes.c_void_p,)
    return RawHost(lib, path, libc)


def targets(wanted: set[str] | None = None, skipped: list[str] | None = None) -> list[Target]:
    """One target per backend present (its first device).  A backend whose baseline cannot be
    set up here (no C compiler for the host images, pyopencl missing) is measured without one,
    the reason appended to ``skipped``."""
    seen: set[str] = set()
    out: list[Target] = []
    for dev in pyoffload.devices():
        if dev.backend in seen or (wanted and dev.backend not in wanted):
            continue
        seen.add(dev.backend)
        t = Target(dev, dev.backend, {})
        # Only the backends with a raw baseline here need the conformance images (on CUDA,
        # building them needs nvcc; bench_cuda ships its own PTX).
        if dev.backend in ("opencl", "host"):
            try:
                t.images = dev.disp.conformance_images_impl(dev.handle)
                t.raw = _raw_opencl(dev) if dev.backend == "opencl" else _raw_host(t.images)
            except Exception as exc:  # the baseline is optional; the rest of the run is not
                if skipped is not None:
                    skipped.append(f"all / {dev.backend}: no raw baseline here: {exc!r}")
                t.images, t.raw = {}, None
        out.append(t)
    return out


def cleanup(ts: list[Target]) -> None:
    for t in ts:
        if isinstance(t.raw, RawHost):
            try:
                os.unlink(t.raw.path)
            except OSError:
                pass
