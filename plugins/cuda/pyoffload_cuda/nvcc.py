"""nvcc: CUDA C++ into images, for ``compile_impl`` and the conformance programs (built at run
time from ``pyoffload_cuda/kernels``, cached per process).  ``PYOFFLOAD_CUDA_CONFORMANCE_FORMAT``
picks ``ptx`` (default: the driver JIT-compiles it for any newer GPU), ``cubin`` or ``fatbin``.
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

from pyoffload import settings
from pyoffload.backend import CompileError, Errc, OffloadError

KERNEL_DIR = pathlib.Path(__file__).with_name("kernels")
SOURCES = {"kernels": "conformance_kernels.cu", "ctor_dtor": "conformance_ctor_dtor.cu"}
FORMATS = ("ptx", "cubin", "fatbin")

_cache: dict[tuple[str, str, int], bytes] = {}
_lock = threading.Lock()


def find_nvcc() -> str | None:
    """nvcc from ``CUDA_ROOT``/``CUDA_HOME``/``CUDA_PATH``, ``PATH``, or /usr/local/cuda."""
    for root in (os.environ.get(v) for v in ("CUDA_ROOT", "CUDA_HOME", "CUDA_PATH")):
        if root and os.access(os.path.join(root, "bin", "nvcc"), os.X_OK):
            return os.path.join(root, "bin", "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    return "/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None


@functools.lru_cache(maxsize=4)
def supported_archs(nvcc: str) -> tuple[int, ...]:
    """The real SM architectures this nvcc can target, e.g. (75, 80, 86, ..., 120)."""
    try:
        out = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ()
    return tuple(sorted({int(m) for m in re.findall(r"\bsm_(\d+)\b", out)}))


@functools.lru_cache(maxsize=4)
def version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def pick_arch(nvcc: str, device_sm: int) -> int | None:
    """The device's own SM if nvcc supports it, else the newest older one (its PTX JIT-compiles
    forward); ``None`` if the device is older than anything nvcc can target."""
    older = [a for a in supported_archs(nvcc) if a <= device_sm]
    return older[-1] if older else None


def _flags(fmt: str, sm: int) -> list[str]:
    if fmt == "fatbin":  # uncompressed so that the symbol tables of its entries stay readable
        return ["-fatbin", "-no-compress", "-gencode", f"arch=compute_{sm},code=[sm_{sm},compute_{sm}]"]
    if fmt in ("ptx", "cubin"):
        return [f"-{fmt}", f"-arch=sm_{sm}"]
    raise ValueError(f"unknown CUDA image format {fmt!r}; expected one of {FORMATS}")


def compile_source(source: str, fmt: str, sm: int, options: tuple[str, ...] = (), nvcc: str | None = None) -> bytes:
    """Build CUDA C++ ``source`` into a ``fmt`` image for ``sm_<sm>``; the caller's ``options``
    come after pyoffload's own flags."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise OffloadError("nvcc not found (set CUDA_ROOT or put nvcc on PATH)", errc=Errc.HOST_TOOL_NOT_FOUND)
    with tempfile.TemporaryDirectory(prefix="pyoffload-cuda-") as tmp:
        src, out = pathlib.Path(tmp) / "source.cu", pathlib.Path(tmp) / f"image.{fmt}"
        src.write_text(source)
        cmd = [nvcc, *_flags(fmt, sm), *options, "-o", str(out), str(src)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            # The temporary directory is gone once this returns: name the file as the user knows it.
            log = (proc.stdout + proc.stderr).replace(tmp + "/", "")
            raise CompileError.from_log(f"nvcc failed ({fmt}, sm_{sm})", " ".join(cmd) + "\n" + log)
        return out.read_bytes()


def link_sources(sources: tuple[str, ...], sm: int, options: tuple[str, ...] = (), nvcc: str | None = None) -> bytes:
    """Compile each of ``sources`` as relocatable device code (``nvcc -dc``, one object per
    source) and link the objects with nvlink (``nvcc -dlink -cubin``) into one cubin for
    ``sm_<sm>``: a ``__device__`` function one source declares ``extern`` and another defines is
    resolved by the link.  nvlink links machine code only, so the image is a cubin (loads on
    ``sm_<sm>`` and later minor revisions of its major), not PTX.

    ``options`` go to every compile and to the link.  A compiler error is a ``CompileError``
    naming the source (``source<i>.cu``); a link error (nvlink's ``Undefined reference to
    '<mangled name>'``) a ``CompileError`` with errc ``LINK_FAILURE``, nvlink's output in
    ``build_log``."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise OffloadError("nvcc not found (set CUDA_ROOT or put nvcc on PATH)", errc=Errc.HOST_TOOL_NOT_FOUND)
    with tempfile.TemporaryDirectory(prefix="pyoffload-cuda-") as tmp:
        objects = []
        for i, source in enumerate(sources):
            src, obj = pathlib.Path(tmp) / f"source{i}.cu", pathlib.Path(tmp) / f"source{i}.o"
            src.write_text(source)
            cmd = [nvcc, "-dc", f"-arch=sm_{sm}", *options, "-o", str(obj), str(src)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                log = (" ".join(cmd) + "\n" + proc.stdout + proc.stderr).replace(tmp + "/", "")
                raise CompileError.from_log(f"nvcc -dc failed on source {i} (sm_{sm})", log)
            objects.append(str(obj))
        out = pathlib.Path(tmp) / "image.cubin"
        cmd = [nvcc, "-dlink", "-cubin", f"-arch=sm_{sm}", *options, "-o", str(out), *objects]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            log = (" ".join(cmd) + "\n" + proc.stdout + proc.stderr).replace(tmp + "/", "")
            raise CompileError.from_link_log(f"linking {len(sources)} sources with nvlink failed (sm_{sm})", log)
        return out.read_bytes()


def build(name: str, fmt: str, sm: int, nvcc: str | None = None) -> bytes:
    """Conformance program ``name`` ("kernels" or "ctor_dtor") as a ``fmt`` image for ``sm_<sm>``."""
    key = (name, fmt, sm)
    with _lock:
        if key in _cache:
            return _cache[key]
    data = compile_source((KERNEL_DIR / SOURCES[name]).read_text(), fmt, sm, nvcc=nvcc)
    with _lock:
        return _cache.setdefault(key, data)


def conformance_images(device_sm: int, fmt: str | None = None) -> dict[str, bytes] | None:
    """Both conformance programs for a device of compute capability ``device_sm`` (e.g. 80), or
    ``None`` when no nvcc is available or it cannot target the device."""
    fmt = fmt or settings.choice("PYOFFLOAD_CUDA_CONFORMANCE_FORMAT", FORMATS, "ptx")
    nvcc = find_nvcc()
    sm = pick_arch(nvcc, device_sm) if nvcc else None
    if nvcc is None or sm is None:
        return None
    if sm != device_sm:
        fmt = "ptx"  # machine code for another SM would not load; its PTX JIT-compiles
    return {name: build(name, fmt, sm, nvcc) for name in SOURCES}
