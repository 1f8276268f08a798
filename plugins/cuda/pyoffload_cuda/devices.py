"""Devices and their primary contexts.

pycuda's context model: a context must be *current* on the calling thread for almost every
driver call, and each thread has its own stack of current contexts.  Like the CUDA runtime and
LLVM's CUDA plugin, pyoffload-cuda uses each device's *primary* context (retained once, lazily,
the first time the device is used: retaining initialises the GPU, which is slow and costs
memory) and makes it current only around each call (``with device.current():`` pushes it and
pops it again), so the plugin never leaves a context current on an application's thread and
works from any thread, including its own worker threads.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from .binding import errors


class CudaDevice:
    """A CUDA device: its pycuda ``Device``, its primary context and the handles made on it."""

    def __init__(self, cuda: Any, ordinal: int) -> None:
        self.cuda = cuda
        self.ordinal = ordinal
        with errors(cuda, f"device {ordinal}"):
            self.dev = cuda.Device(ordinal)
            self.name = str(self.dev.name())
            major, minor = self.dev.compute_capability()
        self.sm = major * 10 + minor
        self.arch = f"sm_{major}{minor}"
        self._ctx: Any = None
        self._lock = threading.Lock()
        # Handles holding pycuda objects (modules, streams, events) that must be released
        # before the primary context is, or pycuda would destroy them on a dead context later.
        self.handles: weakref.WeakSet[Any] = weakref.WeakSet()

    def primary_context(self) -> Any:
        with self._lock:
            if self._ctx is None:
                with errors(self.cuda, f"retaining the primary context of CUDA device {self.ordinal}"):
                    self._ctx = self.dev.retain_primary_context()
            return self._ctx

    @contextlib.contextmanager
    def current(self) -> Iterator[Any]:
        """Make this device's primary context current on this thread for the block."""
        ctx = self.primary_context()
        with errors(self.cuda, f"making CUDA device {self.ordinal} current"):
            ctx.push()
        try:
            yield ctx
        finally:
            self.cuda.Context.pop()

    def attribute(self, name: str) -> int | None:
        attr = getattr(self.cuda.device_attribute, name, None)
        if attr is None:
            return None
        try:
            return int(self.dev.get_attribute(attr))
        except self.cuda.Error:
            return None

    def release(self) -> None:
        """Drop every pycuda object made on this device, then release the primary context."""
        for handle in list(self.handles):
            handle.release()
        with self._lock:
            ctx, self._ctx = self._ctx, None
        if ctx is not None:
            with errors(self.cuda, f"releasing the primary context of CUDA device {self.ordinal}"):
                ctx.detach()

    def __repr__(self) -> str:
        return f"<CudaDevice {self.ordinal} {self.name!r} {self.arch}>"


class CudaContext:
    """What ``context_create_impl`` returns: the devices of a pyoffload context.  They share
    their primary contexts; peer access is enabled between every pair that supports it."""

    def __init__(self, devices: tuple[CudaDevice, ...]) -> None:
        self.devices = devices
        self.peers: list[tuple[CudaDevice, CudaDevice]] = []
