"""Taking other libraries' memory: ``from_dlpack`` and ``from_native`` make *external*
allocations — ``mem_info`` resolves them, copies and launches use them, ``free`` refuses them —
that keep their producer alive until ``Allocation.release()`` (or shutdown).  Handing memory out is the
allocation's own business (``Allocation.typed``, ``__dlpack__``, the array interfaces)."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from . import dlpack
from .api import devices, host_device
from .device import GenericDevice
from .enums import AllocKind
from .errors import InvalidArgumentError, InvalidSizeError, NotFoundError, got
from .checks import check_size
from .memory import Allocation, register_external


def _find_device(dl_type: int, dl_id: int) -> tuple[GenericDevice, AllocKind]:
    if dl_type == dlpack.K_DL_CPU:
        return host_device(), AllocKind.DEVICE
    for dev in devices():
        for kind_name, t in (dev.info.get("dlpack_device_types") or {}).items():
            if int(t) == dl_type and dev.index == dl_id:
                return dev, AllocKind[kind_name]
    raise NotFoundError(f"from_dlpack: no pyoffload device holds DLPack device ({dl_type}, {dl_id})")


def from_dlpack(obj: Any) -> Allocation:
    """Import another library's memory (anything implementing ``__dlpack__``) as an external
    allocation.  The memory must be contiguous.  ``allocation.release()`` lets the producer go."""
    if not hasattr(obj, "__dlpack__") or not hasattr(obj, "__dlpack_device__"):
        raise TypeError(f"from_dlpack: {got(obj)} does not implement the DLPack protocol")
    dl_type, dl_id = (int(v) for v in obj.__dlpack_device__())
    device, kind = _find_device(dl_type, dl_id)
    stream = None if dl_type == dlpack.K_DL_CPU else 1  # 1: CUDA's legacy default stream
    try:
        capsule = obj.__dlpack__(max_version=dlpack.VERSION, stream=stream)
    except TypeError:  # a producer older than DLPack 1.0's max_version
        capsule = obj.__dlpack__(stream=stream)
    imported = dlpack.Imported(obj, capsule)
    try:
        if not imported.contiguous:
            raise InvalidArgumentError("from_dlpack: only contiguous (row-major) memory can be imported")
        nbytes = int(np.prod(imported.shape, dtype=np.int64)) * imported.dtype.itemsize
        if not nbytes:
            raise InvalidSizeError("from_dlpack: the tensor is empty")
        ctx = device.default_context  # type: ignore[attr-defined]
        alloc = register_external(
            ctx.rt, imported.data, nbytes, kind, None if kind is AllocKind.HOST else device, ctx, imported
        )
    except BaseException:
        imported.release()
        raise
    alloc.readonly = imported.readonly
    return alloc


def from_native(
    ptr: Any, size: Any, device: GenericDevice, kind: AllocKind = AllocKind.DEVICE, owner: Any = None
) -> Allocation:
    """Wrap ``size`` bytes of ``kind`` memory another library allocated at ``ptr`` on ``device``
    as an external allocation; ``owner`` is kept alive until ``release()``."""
    ptr = operator.index(ptr)
    if not 0 < ptr < 1 << 64:
        raise InvalidArgumentError(f"from_native: {ptr:#x} is not an address")
    if not isinstance(kind, AllocKind):
        raise TypeError(f"from_native: kind must be a pyoffload.AllocKind, got {got(kind)}")
    ctx = device.default_context  # type: ignore[attr-defined]
    return register_external(
        ctx.rt, ptr, check_size(size), kind, None if kind is AllocKind.HOST else device, ctx, owner
    )
