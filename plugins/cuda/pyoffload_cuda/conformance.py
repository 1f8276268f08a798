"""Build the conformance suite's CUDA programs with nvcc, at run time, from the sources shipped in
``pyoffload_cuda/kernels``; nothing prebuilt is committed.  Built bytes are cached per process.

``PYOFFLOAD_CUDA_CONFORMANCE_FORMAT`` picks ``ptx`` (default: JIT-compiled by the driver, so one
image serves any newer GPU), ``cubin`` or ``fatbin`` (cubin + PTX, uncompressed).
"""

from __future__ import annotations

import functools
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import threading

from pyoffload.backend import CompileError

KERNEL_DIR = pathlib.Path(__file__).with_name("kernels")
SOURCES = {"kernels": "conformance_kernels.cu", "ctor_dtor": "conformance_ctor_dtor.cu"}
FORMATS = ("ptx", "cubin", "fatbin")

_cache: dict[tuple[str, str, str], bytes] = {}
_lock = threading.Lock()


def find_nvcc() -> str | None:
    """nvcc from ``CUDA_ROOT``/``CUDA_HOME``, ``PATH``, or the default toolkit location."""
    for root_var in ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(root_var)
        if root and os.access(os.path.join(root, "bin", "nvcc"), os.X_OK):
            return os.path.join(root, "bin", "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    default = "/usr/local/cuda/bin/nvcc"
    return default if os.access(default, os.X_OK) else None


@functools.lru_cache(maxsize=4)
def supported_archs(nvcc: str) -> tuple[int, ...]:
    """The real SM architectures this nvcc can target, e.g. (75, 80, 86, ..., 120)."""
    try:
        out = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ()
    return tuple(sorted({int(m) for m in re.findall(r"\bsm_(\d+)\b", out)}))


def pick_arch(nvcc: str, device_sm: int) -> int | None:
    """The device's own SM if nvcc supports it, else the newest older one nvcc knows (its PTX
    JIT-compiles forward).  ``None`` if the device is older than anything nvcc can target."""
    archs = supported_archs(nvcc)
    if device_sm in archs:
        return device_sm
    older = [a for a in archs if a <= device_sm]
    return older[-1] if older else None


def nvcc_command(nvcc: str, source: pathlib.Path, out: pathlib.Path, fmt: str, sm: int) -> list[str]:
    if fmt == "ptx":
        return [nvcc, "-ptx", f"-arch=sm_{sm}", "-o", str(out), str(source)]
    if fmt == "cubin":
        return [nvcc, "-cubin", f"-arch=sm_{sm}", "-o", str(out), str(source)]
    if fmt == "fatbin":
        # Uncompressed so that the symbol tables of its entries stay readable.
        return [nvcc, "-fatbin", "-no-compress",
                "-gencode", f"arch=compute_{sm},code=[sm_{sm},compute_{sm}]",
                "-o", str(out), str(source)]
    raise ValueError(f"unknown CUDA image format {fmt!r}; expected one of {FORMATS}")


def build(name: str, fmt: str, sm: int, nvcc: str | None = None) -> bytes:
    """Compile conformance program ``name`` ("kernels" or "ctor_dtor") to ``fmt`` for ``sm_<sm>``."""
    key = (name, fmt, f"sm_{sm}")
    with _lock:
        if key in _cache:
            return _cache[key]
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise CompileError("nvcc not found (set CUDA_ROOT or put nvcc on PATH)")
    source = KERNEL_DIR / SOURCES[name]
    with tempfile.TemporaryDirectory(prefix="pyoffload-cuda-") as tmp:
        out = pathlib.Path(tmp) / f"{name}.{fmt}"
        cmd = nvcc_command(nvcc, source, out, fmt, sm)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed building {source.name} ({fmt}, sm_{sm})",
                               build_log=" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
        data = out.read_bytes()
    with _lock:
        _cache.setdefault(key, data)
        return _cache[key]


def conformance_images(device_sm: int, fmt: str | None = None) -> dict[str, bytes] | None:
    """Both conformance programs for a device of compute capability ``device_sm`` (e.g. 80), or
    ``None`` when no nvcc is available or it cannot target the device."""
    fmt = fmt or os.environ.get("PYOFFLOAD_CUDA_CONFORMANCE_FORMAT", "ptx")
    nvcc = find_nvcc()
    if nvcc is None:
        return None
    sm = pick_arch(nvcc, device_sm)
    if sm is None:
        return None
    if fmt != "ptx" and sm != device_sm:
        fmt = "ptx"  # machine code for another SM would not load; its PTX JIT-compiles
    return {name: build(name, fmt, sm, nvcc) for name in SOURCES}
