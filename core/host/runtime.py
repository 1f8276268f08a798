"""The host backend's native work-group scheduler (``pyoffload_host_runtime.c``): building it,
loading it, and laying out a launch for it.

The C runtime is compiled once per machine and compiler, with the compiler that builds kernels,
and kept in the build cache (``PYOFFLOAD_CACHE_DIR``, else the user cache directory) like kernel
images; where the cache cannot be written it is built per process.  Without a C compiler there
are no kernels to run either, so nothing is lost; on a machine whose calling convention the
runtime does not know (other than x86-64 System V and AArch64 Linux), data-parallel launches are
refused with ``UNSUPPORTED`` naming the reason.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import struct
import tempfile
import threading
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import UnsupportedError

# The platform's C calling convention, as the runtime's call() uses it (see the C file).
GPR = {"x86_64": 6, "AMD64": 6, "aarch64": 8, "arm64": 8}.get(platform.machine(), 0)
FPR = 8
STACK = 32
MAX_LOCAL = 16
ABI_GROUPS = 1  # PYOFFLOAD_KERNEL: a pyoffload_groups pointer first, called per range of groups
ABI_CONTEXT = 2  # a trailing pyoffload_launch pointer, called per group
OK, TRAPPED, NO_MEMORY = 0, 1, 2


class Launch(ctypes.Structure):
    """``pyo_launch`` of ``pyoffload_host_runtime.c``: what the runtime reads, never writes."""

    _fields_ = [
        ("fn", ctypes.c_void_p),
        ("abi", ctypes.c_uint64),
        ("num_groups", ctypes.c_uint64 * 3),
        ("local_size", ctypes.c_uint64 * 3),
        ("ctx_slot", ctypes.c_int64),
        ("nlocal", ctypes.c_uint64),
        ("local_slot", ctypes.c_int64 * MAX_LOCAL),
        ("local_bytes", ctypes.c_uint64 * MAX_LOCAL),
        ("slots", ctypes.c_uint64 * (max(GPR, 1) + STACK)),
        ("fpr", ctypes.c_uint64 * FPR),
    ]


_MASK = (1 << 64) - 1
_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<Q")


def _int_bits(value: Any) -> int:
    return int(value) & _MASK  # two's complement: a negative integer sign-extended to 64 bits


def _f32_bits(value: Any) -> int:
    return _U32.unpack(_F32.pack(float(value)))[0]  # type: ignore[no-any-return]


def _f64_bits(value: Any) -> int:
    return _U64.unpack(_F64.pack(float(value)))[0]  # type: ignore[no-any-return]


class Layout:
    """Where each parameter of a kernel goes: a register or a stack slot, as the C calling
    convention assigns them (integer-class and floating parameters each fill their registers in
    order, the rest take 8-byte stack slots in parameter order)."""

    __slots__ = ("abi", "ctx_slot", "places", "local_slots")

    def __init__(self, abi: int, kinds: tuple[str, ...], name: str) -> None:
        if not GPR:
            raise UnsupportedError(
                f"host backend: data-parallel kernel {name!r} cannot run on {platform.machine()}: the native "
                "runtime knows the calling conventions of x86-64 (System V) and AArch64 Linux only"
            )
        params = ("ctx", *kinds) if abi == ABI_GROUPS else (*kinds, "ctx")
        gi = fi = si = 0
        places: list[tuple[bool, int, Any]] = []  # (in the vector registers, index, converter)
        ctx_slot = -1
        local_slots: list[int] = []
        for kind in params:
            floating = kind in ("f32", "f64")
            if floating and fi < FPR:
                where, index = True, fi
                fi += 1
            elif not floating and gi < GPR:
                where, index = False, gi
                gi += 1
            else:
                where, index = False, GPR + si
                si += 1
            if si > STACK:
                raise UnsupportedError(
                    f"host backend: kernel {name!r} has {len(kinds)} parameters; the native runtime passes at most "
                    f"{GPR} integer and {FPR} floating-point ones in registers and {STACK} more on the stack"
                )
            if kind == "ctx":
                ctx_slot = index
            elif kind == "local":
                local_slots.append(index)
                places.append((False, index, None))
            else:
                conv = _f32_bits if kind == "f32" else _f64_bits if kind == "f64" else _int_bits
                places.append((where, index, conv))
        if len(local_slots) > MAX_LOCAL:
            raise UnsupportedError(f"host backend: kernel {name!r} has more than {MAX_LOCAL} LocalMemory parameters")
        self.abi = abi
        self.ctx_slot = ctx_slot
        self.places = tuple(places)
        self.local_slots = tuple(local_slots)

    def pack(self, fn: int, values: tuple[Any, ...]) -> Launch:
        """One launch's descriptor for ``values`` (checked by the generic layer); the grid and
        block are filled in when it is launched."""
        desc = Launch()
        desc.fn = fn
        desc.abi = self.abi
        desc.ctx_slot = self.ctx_slot
        slots, fpr = desc.slots, desc.fpr
        nlocal = 0
        for (vector, index, conv), value in zip(self.places, values, strict=True):
            if conv is None:  # LocalMemory: the runtime gives each thread its buffer
                desc.local_slot[nlocal] = index
                desc.local_bytes[nlocal] = value.size
                nlocal += 1
            elif vector:
                fpr[index] = conv(value)
            else:
                slots[index] = conv(value)
        desc.nlocal = nlocal
        return desc


_lock = threading.Lock()
_lib: Any = None
_why: str | None = None


def _source() -> tuple[str, bytes]:
    files = resources.files(__package__)
    source = files.joinpath("pyoffload_host_runtime.c").read_text()
    header = files.joinpath("pyoffload_host.h").read_bytes()
    return source, header


def _build() -> Any:
    from .compiler import INCLUDE_DIR, compile_c, compiler_id

    ident = compiler_id()
    if ident is None:
        raise UnsupportedError("host backend: no C compiler to build the native runtime (set CC or install cc)")
    source, header = _source()
    digest = hashlib.sha256(b"\0".join((source.encode(), header, ident.encode(), platform.machine().encode())))
    name = f"host-runtime-{digest.hexdigest()[:24]}.so"
    from ..build import cache_dir

    directory: Path | None = None
    try:
        directory = cache_dir()
        path = directory / name
        if path.is_file():
            return ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError:
        directory = None
    image = compile_c(source, ("-shared", "-fPIC", "-O2", "-pthread", "-I", INCLUDE_DIR))
    if directory is not None:
        try:  # atomically: a concurrent process finds a complete file or none
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".host-runtime-")
            with os.fdopen(fd, "wb") as f:
                f.write(image)
            os.replace(tmp, directory / name)
            return ctypes.CDLL(str(directory / name), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError:
            pass
    # no writable cache: load it from memory, as kernel images are (the descriptor stays open)
    fd = os.memfd_create("pyoffload-host-runtime", os.MFD_CLOEXEC)
    os.write(fd, image)
    return ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_NOW | os.RTLD_LOCAL)


def library() -> Any:
    """The loaded runtime (built on first use); ``UnsupportedError`` saying why where it cannot be."""
    global _lib, _why
    if _lib is not None:
        return _lib
    with _lock:  # one build per process; the build runs no user code
        if _lib is None:
            if _why is not None:
                raise UnsupportedError(_why)
            try:
                lib = _build()
            except UnsupportedError as exc:
                _why = str(exc)
                raise
            except Exception as exc:  # a compiler error on an unknown platform, an unloadable library
                _why = f"host backend: the native runtime could not be built: {exc}"
                raise UnsupportedError(_why) from None
            run = lib.pyoffload_host_run
            run.argtypes = (ctypes.POINTER(Launch), ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64))
            run.restype = ctypes.c_int
            _lib = lib
    return _lib
