"""The backend's own handles: what the generic layer passes back into every hook.

Plain records compared by identity, holding the HIP objects and what the plugin learned when
creating them, so that no hook has to ask the driver twice.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .codeobject import CodeObject, KernelInfo


@dataclasses.dataclass(eq=False)
class HipDevice:
    ordinal: int
    name: str
    arch: str  # e.g. "gfx90a", without target features
    info: dict[str, Any]  # device_info_impl's answer
    memory_pools: bool  # hipMallocAsync is available

    def __repr__(self) -> str:
        return f"<HipDevice {self.ordinal} {self.name} {self.arch}>"


@dataclasses.dataclass(eq=False)
class HipQueue:
    device: HipDevice
    stream: Any  # hipStream_t, or the int address a borrowed queue was made from
    profiling: bool
    borrowed: bool = False  # made by queue_from_native_impl: the owner destroys the stream


@dataclasses.dataclass(eq=False)
class HipProgram:
    device: HipDevice
    module: Any
    code: CodeObject


@dataclasses.dataclass(eq=False)
class HipKernel:
    program: HipProgram
    function: Any
    info: KernelInfo
