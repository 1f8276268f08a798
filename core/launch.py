"""Launch arguments and dimensions: checked and packed once per kernel and argument-type signature.

A launch's arguments are allocations, pointers (``int``; ``None`` for NULL), program globals,
numpy scalars, Python ``int``/``float`` where the kernel's signature declares a scalar,
:class:`~pyoffload.LocalMemory`, and structs passed by value (a numpy structured scalar or 0-d
structured array: its bytes, kind ``"v<N>"``).  The first launch of a kernel with a given tuple of argument
*types* builds a :class:`Binder`: it checks the types against the kernel's signature (count and
kinds, ``INVALID_ARGUMENT`` naming the argument), decides each argument's parameter kind, and gets
the backend's packer for that kind signature (``kernel_packer_impl``).  Every later launch with
the same types reuses it and only does what depends on the values: live and reachable memory
(every pointer must lie in a live allocation the device can use, in host memory pinned for the
device, or be NULL), scalar range conversion, local-memory limits.  The backend receives packed
arguments and never re-validates them.

Rules that hold on every backend: a Python ``int`` is a pointer unless the signature says the
parameter is a scalar; a Python ``float`` needs a signature; booleans are refused (ambiguous).
Dimensions go through ``operator.index``, must be positive and within the device's limits (and
fewer than 2**64 work-items in all); a block must also keep to the kernel's own attributes (a
required work-group size, a lower work-item limit) where the backend reports them.  A launch is
given as a grid of work-groups (CUDA's and liboffload's form) or as a global size in work-items
(OpenCL's and Unified Runtime's), which must then be a multiple of the block; ``block=None``
takes the kernel's suggested block (``suggested_block``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .backend import LocalMemory, struct_kind
from .enums import AllocKind, MemoryConnection
from .errors import InvalidArgumentError, OutOfResourcesError, got
from .checks import triple
from .memory import Allocation
from .pinning import device_pointer
from .program import GlobalVariable, Kernel, suggested_block
from .queue_core import QueueCore

_ALLOC, _PTR, _NULL, _GLOBAL, _SCALAR, _CONVERT, _LOCAL, _STRUCT = range(8)
_SCALAR_PREFIX = {"i": "i", "u": "u", "f": "f"}


def numpy_kind(dtype: np.dtype) -> str | None:
    prefix = _SCALAR_PREFIX.get(dtype.kind)
    return f"{prefix}{dtype.itemsize * 8}" if prefix else None


_KIND_DTYPES: dict[str, np.dtype[Any]] = {
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
}


class Binder:
    """Checks and packs the arguments of launches of one kernel with one tuple of argument types."""

    __slots__ = ("kernel", "codes", "dtypes", "packer", "has_local", "has_pointers", "kinds", "structs", "fixups")

    def __init__(self, kernel: Kernel, types: tuple[type, ...]) -> None:
        sig = kernel.signature
        if sig is not None and len(sig) != len(types):
            raise InvalidArgumentError(
                f"launch: kernel {kernel.name!r} takes {len(sig)} arguments ({', '.join(sig)}), got {len(types)}"
            )
        codes: list[int] = []
        dtypes: list[np.dtype | None] = []
        kinds: list[str] = []
        for i, t in enumerate(types):
            want = sig[i] if sig is not None else None
            code, kind, dtype = _classify(kernel, i, t, want)
            codes.append(code)
            kinds.append(kind)
            dtypes.append(dtype)
        self.kernel = kernel
        self.codes = tuple(codes)
        self.dtypes = tuple(dtypes)
        self.has_local = _LOCAL in codes
        self.has_pointers = any(c in (_ALLOC, _PTR) for c in codes)
        self.kinds = tuple(kinds)
        # Aggregates passed by value: their kinds ("v<N>") depend on each value's size, so their
        # packer is picked per launch (kernel.packer caches it per kind signature).
        self.structs = tuple(i for i, c in enumerate(codes) if c == _STRUCT)
        # The arguments whose value is replaced after the memory checks (conversions, NULL,
        # globals): most launches have none, and then skip that pass.
        self.fixups = tuple(i for i, c in enumerate(codes) if c in (_CONVERT, _NULL, _GLOBAL))
        self.packer = kernel.packer(self.kinds) if not self.structs else None

    def __call__(self, queue: QueueCore, args: Sequence[Any]) -> tuple[Any, list[Allocation]]:
        """The packed arguments and the allocations they use (checked live and reachable)."""
        values = list(args)
        allocs: list[Allocation] = []
        if self.has_pointers or self.has_local:
            ctx, dev = queue.context, queue.device
            codes = self.codes
            for i in range(len(codes)):
                code = codes[i]
                if code == _ALLOC:
                    a = values[i]
                    if not a.live:
                        raise InvalidArgumentError(f"launch argument {i}: {a!r} was freed")
                    if not (a.context is ctx and (a.device is dev or a.kind is not AllocKind.DEVICE)):
                        _check_reachable(queue, i, a)
                    values[i] = a.ptr
                    allocs.append(a)
                elif code == _PTR:
                    p = values[i]
                    if p:
                        hit = dev.rt.registry.find(p)
                        if hit is not None:
                            a = hit[2]
                            if not (a.context is ctx and (a.device is dev or a.kind is not AllocKind.DEVICE)):
                                _check_reachable(queue, i, a)
                            allocs.append(a)
                        elif device_pointer(dev, p) is None:
                            raise InvalidArgumentError(
                                f"launch argument {i}: pointer 0x{p:x} is not in a live allocation or in host memory "
                                f"pinned for {dev.id} (pass scalars as numpy scalars, e.g. numpy.int32(5))"
                            )
            if self.has_local:
                total = sum(v.size for v, c in zip(values, codes, strict=True) if c == _LOCAL)
                limit = dev.limits.local_memory
                if total > limit:
                    # OUT_OF_RESOURCES, as Unified Runtime's adapters report excess local memory
                    raise OutOfResourcesError(
                        f"launch of {self.kernel.name!r}: {total} bytes of LocalMemory exceed the device's "
                        f"local memory ({limit} bytes, info 'local_memory_bytes')"
                    )
        for i in self.fixups:
            code = self.codes[i]
            if code == _CONVERT:
                values[i] = _convert(i, values[i], self.dtypes[i])  # type: ignore[arg-type]
            elif code == _NULL:
                values[i] = 0
            else:
                values[i] = _global_address(queue, i, values[i])
        packer = self.packer
        if self.structs:
            kinds = list(self.kinds)
            sig = self.kernel.signature
            for i in self.structs:
                values[i] = value = _struct_value(self.kernel, i, values[i], sig[i] if sig is not None else None)
                kinds[i] = f"v{value.dtype.itemsize}"
            packer = self.kernel.packer(tuple(kinds))
        packed = packer(tuple(values)) if packer is not None else tuple(values)
        return packed, allocs


def _struct_value(kernel: Kernel, i: int, value: Any, want: str | None) -> np.void:
    """Argument ``i``, a numpy structured scalar or 0-d structured array, as the ``numpy.void``
    passed by value: its bytes, checked against the size the kernel declares where known."""
    if type(value) is np.ndarray:
        if value.ndim != 0 or value.dtype.kind != "V":
            raise InvalidArgumentError(
                f"launch argument {i} of kernel {kernel.name!r}: an array is passed by value only as a 0-d "
                f"structured array (a struct), got shape {value.shape} of {value.dtype}; pass buffers as allocations"
            )
        value = value[()]
    dtype = value.dtype
    if dtype.hasobject or dtype.itemsize == 0:
        raise InvalidArgumentError(
            f"launch argument {i} of kernel {kernel.name!r}: a struct passed by value must be plain data of at "
            f"least one byte, got {dtype}"
        )
    size = struct_kind(want) if want is not None else None
    if size is not None and size != dtype.itemsize:
        raise InvalidArgumentError(
            f"launch argument {i} of kernel {kernel.name!r}: a struct of {dtype.itemsize} bytes ({dtype}), but the "
            f"kernel takes {size} bytes (a C struct pads its members: numpy.dtype(..., align=True) lays them out so)"
        )
    return value  # type: ignore[no-any-return]


def _classify(kernel: Kernel, i: int, t: type, want: str | None) -> tuple[int, str, np.dtype | None]:
    """(code, parameter kind, dtype to convert to) of argument ``i`` of type ``t``."""
    name = kernel.name

    def refuse(got: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"launch argument {i} of kernel {name!r}: expected {want}, got {got}")

    if t is Allocation or t is GlobalVariable or t is type(None):
        if want not in (None, "ptr"):
            raise refuse("a pointer")
        return (_ALLOC if t is Allocation else _GLOBAL if t is GlobalVariable else _NULL), "ptr", None
    if t is bool or issubclass(t, np.bool_):
        raise InvalidArgumentError(
            f"launch argument {i} of kernel {name!r}: booleans are ambiguous; pass numpy.uint8 (or the declared type)"
        )
    if t is LocalMemory:
        if want not in (None, "local", "ptr"):  # a host-style image declares local memory as a pointer
            raise refuse("LocalMemory")
        return _LOCAL, "local", None
    if t is np.void or t is np.ndarray:
        # A struct by value (urKernelSetArgValue with a struct): its size is checked per launch.
        if want is not None and struct_kind(want) is None:
            raise refuse("a struct")
        return _STRUCT, "v", None
    if issubclass(t, np.generic):
        kind = numpy_kind(np.dtype(t))
        if kind is None:
            raise InvalidArgumentError(f"launch argument {i} of kernel {name!r}: unsupported scalar type {np.dtype(t)}")
        if want is not None and want != kind:
            raise refuse(kind)
        return _SCALAR, kind, None
    if issubclass(t, int):
        if want is None or want == "ptr":
            return _PTR, "ptr", None
        if want == "local":
            raise refuse("an int")
        return _CONVERT, want, _KIND_DTYPES[want]
    if issubclass(t, float):
        if want is None:
            raise InvalidArgumentError(
                f"launch argument {i} of kernel {name!r}: a Python float needs a kernel signature to say its "
                "type; pass a numpy scalar, e.g. numpy.float32(2.0)"
            )
        if want[0] != "f":
            raise refuse("a float")
        return _CONVERT, want, _KIND_DTYPES[want]
    raise InvalidArgumentError(
        f"launch argument {i} of kernel {name!r}: {t.__name__} is not an Allocation, pointer, global, "
        "numpy scalar or LocalMemory; pass scalars as numpy scalars, e.g. numpy.float32(2.0)"
    )


def _convert(i: int, value: Any, dtype: np.dtype) -> np.generic:
    try:
        out: np.generic = dtype.type(value)
    except OverflowError:
        raise InvalidArgumentError(f"launch argument {i}: {value!r} does not fit in {dtype}") from None
    if dtype.kind in "iu" and int(out) != value:
        raise InvalidArgumentError(f"launch argument {i}: {value!r} does not fit in {dtype}")
    return out


def _global_address(queue: QueueCore, i: int, g: GlobalVariable) -> int:
    if g.program.device is not queue.device:
        raise InvalidArgumentError(f"launch argument {i}: {g!r} is on {g.program.device.id}, not {queue.device.id}")
    g.program.check_loaded()
    return g.address


def _check_reachable(queue: QueueCore, i: int, alloc: Allocation) -> None:
    ctx = alloc.context
    if ctx.plugin is queue.device.plugin:
        if ctx.connection(alloc.device, queue.context, queue.device) is MemoryConnection.UNIFIED:
            return
    raise InvalidArgumentError(f"launch argument {i}: {alloc!r} is not usable by kernels on {queue.device.id}")


def binder(kernel: Kernel, args: Any) -> Binder:
    """The cached binder for ``args``' types (building it on first use)."""
    if type(args) is not tuple and type(args) is not list:
        raise TypeError(f"launch: args must be a list or tuple, got {got(args)}")
    key = tuple(map(type, args))
    found = kernel.binders.get(key)
    if found is None:
        found = kernel.binders[key] = Binder(kernel, key)
    return found


def dimensions(device: Any, grid: Any, block: Any) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """``(grid, block)`` as 3-tuples, checked against the device's limits (``INVALID_ARGUMENT``
    naming the limit; products that overflow 64 bits are refused too)."""
    g = triple(grid, "grid")
    b = triple(block, "block")
    lim = device.limits
    # The work-group total first: where a device's per-axis limit equals its total (CUDA, HIP),
    # a block one past it breaks both, and the total is the limit users know.
    threads = b[0] * b[1] * b[2]
    if threads > lim.block_threads:
        raise InvalidArgumentError(
            f"block {b}: {threads} work-items exceed the device's limit {lim.block_threads} "
            "(info 'max_work_group_size')"
        )
    for axis in range(3):
        if b[axis] > lim.block[axis]:
            raise InvalidArgumentError(
                f"block {b}: dimension {axis} exceeds the device's limit {lim.block[axis]} (info 'max_work_item_sizes')"
            )
        if g[axis] > lim.grid[axis]:
            raise InvalidArgumentError(
                f"grid {g}: dimension {axis} exceeds the device's limit {lim.grid[axis]} (info 'max_grid_size')"
            )
    # Every work-item needs a distinct 64-bit global linear id (size_t on every device): a launch
    # of 2**64 or more work-items in all cannot be numbered, whatever each axis allows.
    total = g[0] * g[1] * g[2] * threads
    if total >= 1 << 64:
        raise InvalidArgumentError(f"grid {g} x block {b}: the total of {total} work-items overflows 64 bits")
    return g, b


def geometry(
    device: Any, kernel: Kernel, grid: Any, block: Any, global_size: Any
) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """``(grid, block)`` of a launch given as a grid of work-groups or as a global size, with
    ``block=None`` for the kernel's suggested block, checked as ``dimensions`` checks them.

    A global size must be a multiple of the block in every dimension (``INVALID_ARGUMENT``
    naming both): no backend runs partial work-groups (see the guide's launch section)."""
    if global_size is None:
        if grid is None:
            raise TypeError("launch: give grid (work-groups per dimension) or global_size (work-items per dimension)")
        return dimensions(device, grid, suggested_block(kernel) if block is None else block)
    if grid is not None:
        raise InvalidArgumentError(
            f"launch: grid {grid!r} and global_size {global_size!r} both given; a launch takes one of them"
        )
    total = triple(global_size, "global_size")
    b = suggested_block(kernel, total) if block is None else triple(block, "block")
    for axis in range(3):
        if total[axis] % b[axis]:
            raise InvalidArgumentError(
                f"launch of {kernel.name!r}: global_size {total} is not a multiple of block {b} in dimension {axis} "
                f"({total[axis]} / {b[axis]} = {total[axis] / b[axis]:g} work-groups); partial work-groups are "
                "not supported: pass a block that divides it, or block=None"
            )
    return dimensions(device, tuple(t // d for t, d in zip(total, b, strict=True)), b)


def check_block(kernel: Kernel, b: tuple[int, int, int]) -> None:
    """``INVALID_ARGUMENT`` where block ``b`` breaks ``kernel``'s own work-group attributes (a
    required work-group size, a lower work-item limit), before the driver sees the launch."""
    rule = kernel.block_rule  # Kernel.block_rule: the rule read from its attributes once
    if rule is None:
        return
    most, req = rule
    if req is not None and b != req:
        raise InvalidArgumentError(
            f"launch of {kernel.name!r}: block {b} is not the kernel's required work-group size {req} "
            "(attribute 'required_work_group_size')"
        )
    threads = b[0] * b[1] * b[2]
    if threads > most:
        raise InvalidArgumentError(
            f"launch of {kernel.name!r}: block {b} has {threads} work-items, more than the kernel allows on "
            f"{kernel.program.device.id} ({most}, attribute 'max_work_group_size')"
        )
