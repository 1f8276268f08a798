"""Python emulations of the conformance kernels, run by the fake driver on fake memory.

Each emulation receives the launch (grid, block, dynamic shared memory, the module's globals)
and its parameters as raw bytes cut from the parameter buffer at the offsets the image declares,
reads them as the CUDA source's parameter types (so a packing mistake in the plugin shows as a
wrong value or a bad access), and
touches memory only through :class:`Memory`, which enforces the rules a GPU would: the pointer
must be live, in bounds and reachable from the launching context.  Kernels of other names are
recorded but do nothing.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

import numpy as np


class IllegalAddress(Exception):
    """What the GPU reports as CUDA_ERROR_ILLEGAL_ADDRESS (sticky: the context is lost)."""


@dataclasses.dataclass
class Launch:
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    args: tuple[bytes, ...]  # each parameter's bytes
    globals: dict[str, int]  # module variable name -> address


class Memory:
    """Device memory as one kernel launch sees it (provided by the driver)."""

    def read(self, addr: int, size: int) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    def write(self, addr: int, data: bytes) -> None:  # pragma: no cover - interface
        raise NotImplementedError


def _check(name: str, args: tuple[bytes, ...], kinds: str) -> list[Any]:
    """The kernel's parameters from their raw bytes.  ``kinds``: one letter per parameter:
    p pointer (uint64), b/h/i/q signed, B/H/I/Q unsigned, f float32, d float64."""
    if len(args) != len(kinds):
        raise IllegalAddress(f"{name}: expected {len(kinds)} parameters, got {len(args)}")
    dtypes = {
        "p": np.uint64,
        "b": np.int8,
        "h": np.int16,
        "i": np.int32,
        "q": np.int64,
        "B": np.uint8,
        "H": np.uint16,
        "I": np.uint32,
        "Q": np.uint64,
        "f": np.float32,
        "d": np.float64,
    }
    out = []
    for i, (raw, k) in enumerate(zip(args, kinds, strict=True)):
        want = np.dtype(dtypes[k])
        if len(raw) != want.itemsize:
            raise IllegalAddress(f"{name}: parameter {i} has {len(raw)} bytes, the kernel takes {want}")
        out.append(np.frombuffer(raw, want)[0])
    return out


def _threads(launch: Launch) -> int:
    return launch.grid[0] * launch.block[0]


def _i32(mem: Memory, addr: int) -> int:
    value: int = struct.unpack("<i", mem.read(addr, 4))[0]
    return value


def noop(mem: Memory, launch: Launch) -> None:
    _check("noop", launch.args, "")


def iota_i32(mem: Memory, launch: Launch) -> None:
    out, n, base = _check("iota_i32", launch.args, "pii")
    count = max(0, min(int(n), _threads(launch)))
    if count:
        values = (np.arange(count, dtype=np.int64) + int(base)).astype(np.int32)
        mem.write(int(out), values.tobytes())


def axpy_f32(mem: Memory, launch: Launch) -> None:
    y, x, a, n = _check("axpy_f32", launch.args, "ppfi")
    count = max(0, min(int(n), _threads(launch)))
    if count:
        xs = np.frombuffer(mem.read(int(x), 4 * count), np.float32)
        ys = np.frombuffer(mem.read(int(y), 4 * count), np.float32)
        mem.write(int(y), (ys + np.float32(a) * xs).astype(np.float32).tobytes())


def scalars(mem: Memory, launch: Launch) -> None:
    out, *vals = _check("scalars", launch.args, "pbhiqfdBHIQ")
    mem.write(int(out), np.array([float(v) for v in vals], dtype=np.float64).tobytes())


def local_reverse(mem: Memory, launch: Launch) -> None:
    out, src, offset, n, block = _check("local_reverse", launch.args, "ppQii")
    n, block, offset = int(n), int(block), int(offset)
    if offset + 4 * block > launch.shared:
        raise IllegalAddress(
            f"local_reverse: scratch at shared offset {offset} for {block} ints "
            f"overruns the launch's {launch.shared} bytes of dynamic shared memory"
        )
    if block > launch.block[0]:
        raise IllegalAddress("local_reverse: block parameter exceeds the launched block size")
    for group in range(launch.grid[0]):
        g = group * block
        length = min(block, n - g)
        if length <= 0:
            continue
        vals = np.frombuffer(mem.read(int(src) + 4 * g, 4 * length), np.int32)
        scratch = np.zeros(block, np.int32)
        scratch[:length] = vals
        mem.write(int(out) + 4 * g, scratch[::-1][:length].tobytes())


def bump(mem: Memory, launch: Launch) -> None:
    (out,) = _check("bump", launch.args, "p")
    counter = launch.globals["counter"]
    value = _i32(mem, counter) + 1
    mem.write(counter, struct.pack("<i", value))
    mem.write(int(out), struct.pack("<i", value))


def sleep_spin(mem: Memory, launch: Launch) -> None:
    out, iterations = _check("sleep_spin", launch.args, "pq")
    mem.write(int(out), struct.pack("<q", int(iterations)))


def ctor(mem: Memory, launch: Launch) -> None:
    _check("nvptx$device$init", launch.args, "")
    mem.write(launch.globals["ctor_value"], struct.pack("<i", 42))
    runs = launch.globals["ctor_runs"]
    mem.write(runs, struct.pack("<i", _i32(mem, runs) + 1))


def dtor(mem: Memory, launch: Launch) -> None:
    _check("nvptx$device$fini", launch.args, "")
    (ptr,) = struct.unpack("<Q", mem.read(launch.globals["dtor_out"], 8))
    if ptr:
        mem.write(ptr, struct.pack("<ii", 215, _i32(mem, launch.globals["ctor_runs"])))


def get_state(mem: Memory, launch: Launch) -> None:
    (out,) = _check("get_state", launch.args, "p")
    value, runs = _i32(mem, launch.globals["ctor_value"]), _i32(mem, launch.globals["ctor_runs"])
    mem.write(int(out), struct.pack("<ii", value, runs))


def set_dtor_out(mem: Memory, launch: Launch) -> None:
    (p,) = _check("set_dtor_out", launch.args, "p")
    mem.write(launch.globals["dtor_out"], struct.pack("<Q", int(p)))


def take_pair(mem: Memory, launch: Launch) -> None:
    """``take_pair(float *out, char tag, struct pair {int a; float b;} p, int tail)`` of the
    conformance suite's struct-by-value test: the struct arrives as 8 bytes at its offset."""
    if [len(a) for a in launch.args] != [8, 1, 8, 4]:
        raise IllegalAddress(
            f"take_pair: parameters of {[len(a) for a in launch.args]} bytes, the kernel takes [8, 1, 8, 4]"
        )
    out = struct.unpack("<Q", launch.args[0])[0]
    tag = struct.unpack("<b", launch.args[1])[0]
    a, b = struct.unpack("<if", launch.args[2])
    tail = struct.unpack("<i", launch.args[3])[0]
    mem.write(out, np.array([a, b, tail, tag], dtype=np.float32).tobytes())


def linked_fill(mem: Memory, launch: Launch) -> None:
    # The conformance suite's linked program: one thread fills out[i] = linked_twice(i), the
    # callee (2 * i + 1) defined in another source and resolved by nvlink.
    out, n = _check("linked_fill", launch.args, "pi")
    count = max(0, int(n))
    if count:
        mem.write(int(out), (2 * np.arange(count, dtype=np.int64) + 1).astype(np.int32).tobytes())


EMULATIONS: dict[str, Callable[[Memory, Launch], None]] = {
    "linked_fill": linked_fill,
    "take_pair": take_pair,
    "noop": noop,
    "iota_i32": iota_i32,
    "axpy_f32": axpy_f32,
    "scalars": scalars,
    "local_reverse": local_reverse,
    "bump": bump,
    "sleep_spin": sleep_spin,
    "nvptx$device$init": ctor,
    "nvptx$device$fini": dtor,
    "get_state": get_state,
    "set_dtor_out": set_dtor_out,
}


def duration(launch: Launch) -> float:
    """Seconds the kernel runs beyond a launch's fixed cost: sleep_spin spins 1 ns per iteration."""
    if launch.name == "sleep_spin" and len(launch.args) == 2 and len(launch.args[1]) == 8:
        spins: int = struct.unpack("<q", launch.args[1])[0]
        return max(0, spins) * 1e-9
    return 0.0


def emulation_for(name: str, globals_: dict[str, int]) -> Callable[[Memory, Launch], None] | None:
    """The emulation of kernel ``name``, if the module has the globals it uses."""
    fn = EMULATIONS.get(name)
    needs = {
        "bump": ("counter",),
        "nvptx$device$init": ("ctor_value", "ctor_runs"),
        "nvptx$device$fini": ("dtor_out", "ctor_runs"),
        "get_state": ("ctor_value", "ctor_runs"),
        "set_dtor_out": ("dtor_out",),
    }.get(name, ())
    if fn is None or any(g not in globals_ for g in needs):
        return None
    return fn
