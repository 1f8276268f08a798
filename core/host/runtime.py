"""The host backend's native work-group scheduler (``pyoffload_host_runtime.c``): building it,
loading it, and laying out a launch for it.

The C runtime is compiled once per machine and compiler, with the compiler that builds kernels,
and kept in the build cache (``PYOFFLOAD_CACHE_DIR``, else the user cache directory) like kernel
images; where the cache is off (``PYOFFLOAD_BUILD_CACHE=0``) or cannot be written it is built
per process and loaded from memory.  Without a C compiler there
are no kernels to run either, so nothing is lost; on a machine whose calling convention the
runtime does not know (other than x86-64 System V and AArch64 Linux), data-parallel launches are
refused with ``UNSUPPORTED`` naming the reason.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys
import threading
from pathlib import Path
from typing import Any

from .. import settings
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


_SLOTS = Launch.slots.offset
_FPR = Launch.fpr.offset
_LOCAL_SLOT = Launch.local_slot.offset
_LOCAL_BYTES = Launch.local_bytes.offset
_GEOMETRY = struct.Struct("=6Q")  # num_groups, local_size: adjacent in Launch
_GEOMETRY_AT = Launch.num_groups.offset
assert Launch.local_size.offset == _GEOMETRY_AT + 24
assert _LOCAL_BYTES < _SLOTS < _FPR  # the per-launch values, after every fixed field
# A value's bytes in its 8-byte register or slot: C scalars, little- or big-endian as the machine
# is (a float's bits in the low half on little-endian machines, where both conventions put it).
_FORMATS = {"i8": "q", "i16": "q", "i32": "q", "i64": "q", "u8": "Q", "u16": "Q", "u32": "Q", "u64": "Q", "ptr": "Q"}
_FORMATS.update({"f32": "f4x", "f64": "d", "local": "Q"})


class Layout:
    """Where each parameter of a kernel goes: a register or a stack slot, as the C calling
    convention assigns them (integer-class and floating parameters each fill their registers in
    order, the rest take 8-byte stack slots in parameter order).  Packing a launch is then one
    copy of a template descriptor and one ``struct.pack_into`` of the values in place."""

    __slots__ = ("template", "start", "fmt", "order", "local", "_copy", "_pack_into")

    def __init__(self, abi: int, kinds: tuple[str, ...], name: str, fn: int) -> None:
        if not GPR:
            raise UnsupportedError(
                f"host backend: data-parallel kernel {name!r} cannot run on {platform.machine()}: the native "
                "runtime knows the calling conventions of x86-64 (System V) and AArch64 Linux only"
            )
        if sys.byteorder != "little":
            raise UnsupportedError(f"host backend: data-parallel kernel {name!r}: a big-endian machine")
        params = ("ctx", *kinds) if abi == ABI_GROUPS else (*kinds, "ctx")
        gi = fi = si = 0
        places: list[tuple[int, int, str]] = []  # (byte offset in Launch, argument index, format)
        template = Launch()
        template.fn = fn  # a kernel's own layout: its address is part of the template
        template.abi = abi
        nlocal = 0
        for kind in params:
            floating = kind in ("f32", "f64")
            if floating and fi < FPR:
                offset = _FPR + 8 * fi
                index = fi
                fi += 1
            elif not floating and gi < GPR:
                offset, index = _SLOTS + 8 * gi, gi
                gi += 1
            else:
                offset, index = _SLOTS + 8 * (GPR + si), GPR + si
                si += 1
            if si > STACK:
                raise UnsupportedError(
                    f"host backend: kernel {name!r} has {len(kinds)} parameters; the native runtime passes at most "
                    f"{GPR} integer and {FPR} floating-point ones in registers and {STACK} more on the stack"
                )
            if kind == "ctx":
                template.ctx_slot = index
                continue
            arg = len(places)
            if kind == "local":  # the runtime gives each thread its buffer: the slot, and the size
                if nlocal == MAX_LOCAL:
                    raise UnsupportedError(
                        f"host backend: kernel {name!r} has more than {MAX_LOCAL} LocalMemory parameters"
                    )
                template.local_slot[nlocal] = index
                offset = _LOCAL_BYTES + 8 * nlocal
                nlocal += 1
            places.append((offset, arg, _FORMATS[kind]))
        template.nlocal = nlocal
        places.sort()
        # From the first value on: pack_into zeroes the gaps, which lie in local_bytes, slots and
        # fpr (per-launch values, zero in the template; the runtime fills in the pointers)
        self.start = at = places[0][0] if places else _LOCAL_BYTES
        fmt = "="
        for offset, _, code in places:
            fmt += f"{offset - at}x{code}" if offset > at else code
            at = offset + 8
        self.template = bytes(template)
        self.fmt = struct.Struct(fmt)
        order = tuple(arg for _, arg, _ in places)
        # None where the values go in parameter order (integers and pointers in registers, the
        # common case): packing then passes them on as they are, with no reordering per launch
        self.order = None if order == tuple(range(len(order))) else order
        self.local = tuple(i for i, kind in enumerate(kinds) if kind == "local")
        self._copy = Launch.from_buffer_copy
        self._pack_into = self.fmt.pack_into

    def pack(self, values: tuple[Any, ...]) -> Launch:
        """One launch's descriptor for ``values`` (checked by the generic layer); the grid and
        block are filled in when it is launched (:func:`geometry`).  Every launch packs one, so
        this runs no more Python than it must (a microsecond here is a fifth of a launch)."""
        if self.local:
            values = tuple(v.size if i in self.local else v for i, v in enumerate(values))
        desc = self._copy(self.template)
        if self.order is None:
            self._pack_into(desc, self.start, *values)
        else:
            self._pack_into(desc, self.start, *[values[i] for i in self.order])
        return desc


def geometry(desc: Launch, grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
    _GEOMETRY.pack_into(desc, _GEOMETRY_AT, *grid, *block)


_lock = threading.Lock()
_lib: Any = None
_why: str | None = None
# pyoffload_host_run, once library() has loaded it: launches call it directly, with no lookup
run: Any = None


def _source() -> tuple[str, bytes]:
    from importlib import resources

    files = resources.files(__package__)
    source = files.joinpath("pyoffload_host_runtime.c").read_text()
    header = files.joinpath("pyoffload_host.h").read_bytes()
    return source, header


def _build() -> Any:
    # Imported here, on the first data-parallel launch: a process that only lists devices pays
    # for none of them (OpenSSL's start-up alone is several ms).
    import hashlib
    import tempfile

    from .compiler import INCLUDE_DIR, compile_c, compiler_id

    ident = compiler_id()
    if ident is None:
        raise UnsupportedError("host backend: no C compiler to build the native runtime (set CC or install cc)")
    source, header = _source()
    digest = hashlib.sha256(b"\0".join((source.encode(), header, ident.encode(), platform.machine().encode())))
    name = f"host-runtime-{digest.hexdigest()[:24]}.so"

    directory: Path | None = None
    try:
        if not settings.flag("PYOFFLOAD_BUILD_CACHE", True):
            raise OSError("the build cache is off")  # built per process, in memory
        directory = settings.cache_dir()
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
    view = memoryview(image)
    while view:
        view = view[os.write(fd, view) :]
    return ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_NOW | os.RTLD_LOCAL)


def library() -> Any:
    """The loaded runtime (built on first use); ``UnsupportedError`` saying why where it cannot be."""
    global _lib, _why, run
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
            host_run = lib.pyoffload_host_run
            host_run.argtypes = (ctypes.POINTER(Launch), ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64))
            host_run.restype = ctypes.c_int
            run = host_run
            _lib = lib
    return _lib
