"""Building the conformance suite's programs as real amdgcn code objects.

The OpenCL C sources live in ``conformance_src/``.  They are compiled at run time with clang and
linked with lld into code objects for the device's processor::

    clang -x cl -cl-std=CL2.0 -target amdgcn-amd-amdhsa -mcpu=<arch> -nogpulib -O2 -c k.cl -o k.o
    ld.lld -shared k.o -o k.hsaco

``-nogpulib`` because no ROCm device library is needed: the kernels use only clang's
``__builtin_amdgcn_*`` work-item builtins.  Results are cached per process and processor.
``PYOFFLOAD_AMDGPU_CLANG`` / ``PYOFFLOAD_AMDGPU_LLD`` name the tools explicitly; otherwise the
newest versioned ``clang-N`` / ``ld.lld-N`` on ``PATH`` is used (ROCm's own clang under
``/opt/rocm/llvm/bin`` also works).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from pyoffload.backend import CompileError

CLANG_ENV = "PYOFFLOAD_AMDGPU_CLANG"
LLD_ENV = "PYOFFLOAD_AMDGPU_LLD"
PROGRAMS = ("kernels", "ctor_dtor")
_VERSIONS = range(25, 13, -1)  # clang 14 is the oldest with the amdgcn.device.init lowering


def _find(env: str, base: str) -> str | None:
    explicit = os.environ.get(env)
    if explicit:
        return shutil.which(explicit) or (explicit if Path(explicit).is_file() else None)
    for name in [f"{base}-{v}" for v in _VERSIONS] + [base, f"/opt/rocm/llvm/bin/{base}"]:
        found = shutil.which(name)
        if found:
            return found
    return None


def toolchain() -> tuple[str, str] | None:
    """``(clang, ld.lld)`` paths, or ``None`` if either is missing."""
    clang, lld = _find(CLANG_ENV, "clang"), _find(LLD_ENV, "ld.lld")
    return (clang, lld) if clang and lld else None


def source(program: str) -> str:
    return resources.files("pyoffload_amdgpu").joinpath(f"conformance_src/{program}.cl").read_text()


def build(cl_source: str, arch: str, tools: tuple[str, str] | None = None) -> bytes:
    """Compile OpenCL C for ``arch`` and link a code object; ``CompileError`` with the log on failure."""
    tools = tools or toolchain()
    if tools is None:
        raise CompileError("no clang/ld.lld with the AMDGPU target found (set PYOFFLOAD_AMDGPU_CLANG)")
    clang, lld = tools
    with tempfile.TemporaryDirectory(prefix="pyoffload-amdgpu-") as tmp:
        src, obj, out = Path(tmp, "k.cl"), Path(tmp, "k.o"), Path(tmp, "k.hsaco")
        src.write_text(cl_source)
        steps = [
            [clang, "-x", "cl", "-cl-std=CL2.0", "-target", "amdgcn-amd-amdhsa", f"-mcpu={arch}",
             "-nogpulib", "-O2", "-c", str(src), "-o", str(obj)],
            [lld, "-shared", str(obj), "-o", str(out)],
        ]
        for argv in steps:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                log = f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}"
                raise CompileError(f"{Path(argv[0]).name} failed for {arch}", build_log=log)
        return out.read_bytes()


@functools.lru_cache(maxsize=None)
def _images(arch: str) -> dict[str, bytes]:
    return {program: build(source(program), arch) for program in PROGRAMS}


def images(arch: str) -> dict[str, bytes] | None:
    """The conformance programs for ``arch``, built once per process; ``None`` without a toolchain."""
    if toolchain() is None:
        return None
    return dict(_images(arch))
