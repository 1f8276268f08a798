"""The backend's own handles: what the generic layer passes back into every hook.

They are plain records (compared by identity) holding the HIP objects and what the plugin
learned when creating them, so that no hook has to ask the driver twice.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from .codeobject import CodeObject, KernelInfo


@dataclasses.dataclass(eq=False)
class HipDevice:
    ordinal: int
    name: str
    gcn_arch_name: str  # e.g. "gfx90a:sramecc+:xnack-"
    arch: str  # e.g. "gfx90a"
    info: dict[str, Any]
    managed_memory: bool
    memory_pools: bool  # hipMallocAsync is available

    def __repr__(self) -> str:
        return f"<HipDevice {self.ordinal} {self.name} {self.arch}>"


@dataclasses.dataclass(eq=False)
class HostFunctionFailures:
    """Exceptions raised by host functions of one queue, reported at the next wait."""

    errors: list[BaseException] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def add(self, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(exc)

    def take(self) -> list[BaseException]:
        with self.lock:
            errors, self.errors = self.errors, []
            return errors


@dataclasses.dataclass(eq=False)
class HipQueue:
    device: HipDevice
    stream: Any
    profiling: bool
    failures: HostFunctionFailures = dataclasses.field(default_factory=HostFunctionFailures)
    # ctypes callbacks of host functions: kept alive until the stream has run them.
    callbacks: list[Any] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(eq=False)
class HipEvent:
    device: HipDevice
    event: Any
    timing: bool
    failures: HostFunctionFailures | None = None  # set for host-function events


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
