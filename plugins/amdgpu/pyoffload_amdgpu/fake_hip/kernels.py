"""Python emulations of the conformance kernels, run by the fake's ``hipModuleLaunchKernel``.

A launch decodes the kernarg bytes the plugin packed, using the code object's own metadata (offset,
size and type of every explicit argument), and runs the emulation registered under the kernel's
name.  Each emulation does what the OpenCL C source in ``conformance_src/`` does, reading and
writing device memory through the fake's address space, so a wrong pointer, a freed buffer or a
buffer of another device faults here as it would on the GPU.  A kernel with no emulation is
recorded in ``FakeHip.unknown_launches`` and does nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, SupportsInt

import numpy as np

from ..codeobject import KernelArg, KernelInfo
from .memory import AddressSpace, Fault

# OpenCL C type names -> numpy dtypes for by-value arguments.
_DTYPES = {
    "char": np.int8,
    "uchar": np.uint8,
    "short": np.int16,
    "ushort": np.uint16,
    "int": np.int32,
    "uint": np.uint32,
    "long": np.int64,
    "ulong": np.uint64,
    "half": np.float16,
    "float": np.float32,
    "double": np.float64,
    "bool": np.uint8,
}
SLEEP_SPIN_SECONDS_PER_ITERATION = 40e-9  # s_sleep 1 is 64 clocks: ~40 ns at 1.7 GHz
SLEEP_SPIN_CAP_SECONDS = 2.0


class LaunchContext:
    """What one emulated launch sees: its geometry, memory, LDS and module globals.  A plain class:
    a dataclass's generated ``__init__`` would count against the caller's frame budget."""

    def __init__(
        self,
        space: AddressSpace,
        device: int,
        peers: set[tuple[int, int]],
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        lds: bytearray,
        globals_: dict[str, tuple[int, int]],
        kernel: str,
    ) -> None:
        self.space = space
        self.device = device
        self.peers = peers
        self.grid = grid
        self.block = block
        self.lds = lds  # static + dynamic group segment of one work-group
        self.globals = globals_  # name -> (address, size)
        self.kernel = kernel

    @property
    def global_size_x(self) -> int:
        return self.grid[0] * self.block[0]

    def load(self, address: int, dtype: Any, count: int) -> np.ndarray:
        dtype = np.dtype(dtype)
        view = self.space.device_view(address, count * dtype.itemsize, self.device, self.peers, self.kernel)
        return np.frombuffer(bytes(view), dtype=dtype)

    def store(self, address: int, values: np.ndarray) -> None:
        raw = np.ascontiguousarray(values).tobytes()
        view = self.space.device_view(address, len(raw), self.device, self.peers, self.kernel)
        view[:] = raw

    def global_address(self, name: str) -> int:
        if name not in self.globals:
            raise Fault(719, f"{self.kernel}: the module has no global {name!r}")
        return self.globals[name][0]

    def lds_array(self, offset: int, dtype: Any) -> np.ndarray:
        """The LDS from ``offset`` on, as an array (writes go to the LDS)."""
        if offset > len(self.lds):
            raise Fault(700, f"{self.kernel}: LDS offset {offset} beyond {len(self.lds)} bytes")
        usable = (len(self.lds) - offset) // np.dtype(dtype).itemsize
        return np.frombuffer(self.lds, dtype=dtype, count=usable, offset=offset)


def decode(info: KernelInfo, kernarg: bytes) -> list[Any]:
    """The explicit arguments of one launch, from the kernarg bytes and the metadata."""
    values: list[Any] = []
    for arg in info.args:
        raw = kernarg[arg.offset : arg.offset + arg.size]
        values.append(_decode_one(arg, raw))
    return values


def _decode_one(arg: KernelArg, raw: bytes) -> Any:
    if arg.value_kind in ("global_buffer", "dynamic_shared_pointer"):
        return int.from_bytes(raw, "little")
    dtype = _DTYPES.get(arg.type_name.strip())
    if dtype is None or np.dtype(dtype).itemsize != len(raw):
        return raw
    return np.frombuffer(raw, dtype=dtype)[0]


Emulation = Callable[..., None]
EMULATIONS: dict[str, tuple[tuple[str, ...], Emulation]] = {}


def emulates(name: str, signature: tuple[str, ...]) -> Callable[[Emulation], Emulation]:
    """Register an emulation for kernel ``name`` taking arguments of ``signature`` kinds."""

    def register(fn: Emulation) -> Emulation:
        EMULATIONS[name] = (signature, fn)
        return fn

    return register


def _active(ctx: LaunchContext, n: SupportsInt) -> int:
    """How many of the first ``n`` global ids the launch covers (the kernels ignore ids >= n)."""
    return max(0, min(int(n), ctx.global_size_x))


@emulates("noop", ())
def _noop(ctx: LaunchContext) -> None:
    pass


@emulates("iota_i32", ("ptr", "i32", "i32"))
def _iota(ctx: LaunchContext, out: int, n: np.int32, base: np.int32) -> None:
    count = _active(ctx, n)
    if count:
        ctx.store(out, (np.arange(count, dtype=np.int64) + int(base)).astype(np.int32))


@emulates("axpy_f32", ("ptr", "ptr", "f32", "i32"))
def _axpy(ctx: LaunchContext, y: int, x: int, a: np.float32, n: np.int32) -> None:
    count = _active(ctx, n)
    if count:
        ys = ctx.load(y, np.float32, count)
        xs = ctx.load(x, np.float32, count)
        ctx.store(y, ys + np.float32(a) * xs)


@emulates("scalars", ("ptr", "i8", "i16", "i32", "i64", "f32", "f64", "u8", "u16", "u32", "u64"))
def _scalars(ctx: LaunchContext, out: int, *values: np.generic) -> None:
    ctx.store(out, np.array([float(v) for v in values], dtype=np.float64))


@emulates("local_reverse", ("ptr", "ptr", "local", "i32", "i32"))
def _local_reverse(
    ctx: LaunchContext, out: int, src: int, scratch: int, n: np.int32 | int, block: np.int32 | int
) -> None:
    n, block, size = int(n), int(block), ctx.block[0]
    for group in range(ctx.grid[0]):
        lds = ctx.lds_array(scratch, np.int32)
        lds[:] = 0  # each work-group starts with undefined LDS; zero keeps runs reproducible
        first = group * size
        count = max(0, min(size, n - first))
        if count == 0:
            continue
        if count > len(lds):
            raise Fault(700, f"local_reverse: {count} int32 do not fit in {len(lds)}-int LDS scratch")
        lds[:count] = ctx.load(src + 4 * first, np.int32, count)
        mirror = block - 1 - np.arange(count)
        if mirror.size and (mirror.min() < 0 or mirror.max() >= len(lds)):
            raise Fault(700, f"local_reverse: block={block} reads outside the LDS scratch")
        ctx.store(out + 4 * first, lds[mirror].copy())


@emulates("bump", ("ptr",))
def _bump(ctx: LaunchContext, out: int) -> None:
    address = ctx.global_address("counter")
    value = ctx.load(address, np.int32, 1) + np.int32(1)
    ctx.store(address, value)
    ctx.store(out, value)


@emulates("sleep_spin", ("ptr", "i64"))
def _sleep_spin(ctx: LaunchContext, out: int, iterations: np.int64) -> None:
    time.sleep(min(max(int(iterations), 0) * SLEEP_SPIN_SECONDS_PER_ITERATION, SLEEP_SPIN_CAP_SECONDS))
    ctx.store(out, np.array([iterations], dtype=np.int64))


@emulates("amdgcn.device.init", ())
def _ctor(ctx: LaunchContext) -> None:
    ctx.store(ctx.global_address("ctor_value"), np.array([42], dtype=np.int32))
    runs = ctx.global_address("ctor_runs")
    ctx.store(runs, ctx.load(runs, np.int32, 1) + np.int32(1))


@emulates("amdgcn.device.fini", ())
def _dtor(ctx: LaunchContext) -> None:
    target = int(ctx.load(ctx.global_address("dtor_out"), np.uint64, 1)[0])
    if target:
        runs = ctx.load(ctx.global_address("ctor_runs"), np.int32, 1)
        ctx.store(target, np.array([215, runs[0]], dtype=np.int32))


@emulates("get_state", ("ptr",))
def _get_state(ctx: LaunchContext, out: int) -> None:
    value = ctx.load(ctx.global_address("ctor_value"), np.int32, 1)
    runs = ctx.load(ctx.global_address("ctor_runs"), np.int32, 1)
    ctx.store(out, np.concatenate([value, runs]))


@emulates("set_dtor_out", ("ptr",))
def _set_dtor_out(ctx: LaunchContext, target: int) -> None:
    ctx.store(ctx.global_address("dtor_out"), np.array([target], dtype=np.uint64))


@emulates("take_pair", ("ptr", "i8", "v8", "i32"))
def _take_pair(ctx: LaunchContext, out: int, tag: np.int8, pair: bytes, tail: np.int32) -> None:
    # The conformance suite's struct-by-value kernel: struct pair {int a; float b;} as 8 bytes.
    a, b = np.frombuffer(pair, np.int32, 1)[0], np.frombuffer(pair, np.float32, 1, 4)[0]
    ctx.store(out, np.array([a, b, int(tail), int(tag)], dtype=np.float32))


@emulates("fixed_block", ("ptr",))
def _fixed_block(ctx: LaunchContext, out: int) -> None:
    # The conformance suite's kernel with reqd_work_group_size(8, 1, 1): out[0] = 1.
    ctx.store(out, np.array([1], dtype=np.int32))


@emulates("linked_fill", ("ptr", "i32"))
def _linked_fill(ctx: LaunchContext, out: int, n: np.int32) -> None:
    # The conformance suite's linked program: one work-item fills out[i] = linked_twice(i), the
    # callee (2 * i + 1) defined in another source and resolved by ld.lld.
    count = max(0, int(n))
    if count:
        ctx.store(out, (2 * np.arange(count, dtype=np.int64) + 1).astype(np.int32))
