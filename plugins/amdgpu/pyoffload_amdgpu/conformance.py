"""Building the conformance suite's programs (OpenCL C in ``conformance_src/``) as real amdgcn code
objects for the device's processor, once per process: clang (``-nogpulib``: the kernels use only
``__builtin_amdgcn_*`` builtins, no ROCm device library) then ``ld.lld -shared``.
``PYOFFLOAD_AMDGPU_CLANG`` / ``PYOFFLOAD_AMDGPU_LLD`` name the tools; otherwise the newest
``clang-N`` / ``ld.lld-N`` on ``PATH`` or ROCm's under ``/opt/rocm/llvm/bin``.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from pyoffload import settings
from pyoffload.backend import CompileError, Errc, InvalidArgumentError, OffloadError, UnsupportedError

CLANG_ENV = "PYOFFLOAD_AMDGPU_CLANG"
LLD_ENV = "PYOFFLOAD_AMDGPU_LLD"
PROGRAMS = ("kernels", "ctor_dtor")
_VERSIONS = range(25, 13, -1)  # clang 14 is the oldest with the amdgcn.device.init lowering


def _find(env: str, base: str) -> str | None:
    explicit = settings.text(env)
    if explicit:
        return shutil.which(explicit) or (explicit if Path(explicit).is_file() else None)
    names = [f"{base}-{v}" for v in _VERSIONS] + [base, f"/opt/rocm/llvm/bin/{base}"]
    return next(filter(None, map(shutil.which, names)), None)


def toolchain() -> tuple[str, str] | None:
    """``(clang, ld.lld)`` paths, or ``None`` if either is missing."""
    clang, lld = _find(CLANG_ENV, "clang"), _find(LLD_ENV, "ld.lld")
    return (clang, lld) if clang and lld else None


def source(program: str) -> str:
    return resources.files("pyoffload_amdgpu").joinpath(f"conformance_src/{program}.cl").read_text()


def build(cl_source: str, arch: str, tools: tuple[str, str] | None = None, options: tuple[str, ...] = ()) -> bytes:
    """Compile OpenCL C for ``arch`` (``options`` after the defaults) and link a code object;
    ``CompileError`` with the log on failure."""
    return link((cl_source,), arch, tools, options)


def link(
    cl_sources: tuple[str, ...], arch: str, tools: tuple[str, str] | None = None, options: tuple[str, ...] = ()
) -> bytes:
    """Compile each of ``cl_sources`` for ``arch`` into a relocatable amdgcn object of its own
    and link the objects into one code object (``ld.lld -shared``): a function one source
    declares and another defines is resolved here.  ``-z defs`` (``--no-undefined``): a symbol
    no object defines fails the link (lld already refuses undefined *hidden* symbols, clang's
    default for amdgcn functions, but ``-fvisibility=default`` would otherwise leave it to the
    loader).

    A compiler error is a ``CompileError`` naming the source (``source<i>.cl`` where there are
    several); a link error a ``CompileError`` with errc ``LINK_FAILURE`` naming the undefined
    symbol, lld's output in ``build_log``."""
    tools = tools or toolchain()
    if tools is None:
        raise CompileError("no clang/ld.lld with the AMDGPU target found (set PYOFFLOAD_AMDGPU_CLANG)")
    clang, lld = tools
    several = len(cl_sources) > 1
    with tempfile.TemporaryDirectory(prefix="pyoffload-amdgpu-") as tmp:
        objects = []
        for i, text in enumerate(cl_sources):
            stem = f"source{i}" if several else "k"
            src, obj = Path(tmp, f"{stem}.cl"), Path(tmp, f"{stem}.o")
            src.write_text(text)
            argv = [
                clang,
                "-x",
                "cl",
                "-cl-std=CL2.0",
                "-target",
                "amdgcn-amd-amdhsa",
                f"-mcpu={arch}",
                "-nogpulib",
                "-O2",
                *options,
                "-c",
                str(src),
                "-o",
                str(obj),
            ]
            failed = _run(argv, tmp)
            if failed is not None:
                which = f" on source {i}" if several else ""
                raise CompileError.from_log(f"{Path(clang).name} failed{which} for {arch}", failed)
            objects.append(str(obj))
        out = Path(tmp, "k.hsaco")
        argv = [lld, "-shared", *(["-z", "defs"] if several else []), *objects, "-o", str(out)]
        failed = _run(argv, tmp)
        if failed is not None and several:
            raise CompileError.from_link_log(f"linking {len(cl_sources)} sources with ld.lld failed for {arch}", failed)
        if failed is not None:
            raise CompileError.from_log(f"{Path(lld).name} failed for {arch}", failed)
        return out.read_bytes()


def _run(argv: list[str], tmp: str) -> str | None:
    """Run one tool; ``None`` if it succeeded, else the command line and its output."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return None
    # the directory is gone after: name the files as the log's reader knows them
    return f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}".replace(tmp + "/", "")


@functools.cache
def _images(arch: str) -> dict[str, bytes]:
    return {program: build(source(program), arch) for program in PROGRAMS}


def images(arch: str) -> dict[str, bytes] | None:
    """The conformance programs for ``arch``, built once per process; ``None`` without a toolchain."""
    if toolchain() is None:
        return None
    return dict(_images(arch))


def compiler_id() -> str | None:
    """The clang used by :func:`build`: its path and version line (the build cache's key)."""
    tools = toolchain()
    return None if tools is None else identify(tools[0])


@functools.cache
def identify(clang: str) -> str:
    """``clang``'s path and version line."""
    proc = subprocess.run([clang, "--version"], capture_output=True, text=True, check=False)
    return f"{clang} {proc.stdout.splitlines()[0] if proc.stdout else ''}".strip()


def target_tools(target: str, compiler: str | None) -> tuple[str, tuple[str, str]]:
    """``(processor, (clang, ld.lld))`` of a build for ``target`` (``"amdgpu:gfx90a"``) with
    ``compiler`` (a clang; ``None``: the one :func:`toolchain` finds)."""
    arch = target.removeprefix("amdgpu:")
    if not target.startswith("amdgpu:gfx") or not arch.replace(":", "").replace("-", "").replace("+", "").isalnum():
        raise InvalidArgumentError(
            f"unknown AMDGPU build target {target!r}; expected 'amdgpu:gfx<N>', e.g. 'amdgpu:gfx90a'"
        )
    clang = _find(CLANG_ENV, "clang") if compiler is None else shutil.which(compiler)
    lld = _find(LLD_ENV, "ld.lld")
    if clang is None or lld is None:
        missing = compiler or "clang" if clang is None else "ld.lld"
        raise OffloadError(f"{missing} not found (set {CLANG_ENV} / {LLD_ENV})", Errc.HOST_TOOL_NOT_FOUND)
    if "clang" not in Path(clang).name:
        raise UnsupportedError(f"the AMDGPU backend builds OpenCL C with clang only, not {compiler!r}")
    return arch, (clang, lld)
