"""Enumerations shared by the public API and the backend hooks."""

from __future__ import annotations

import enum


class AllocKind(enum.Enum):
    """Where an allocation lives.

    DEVICE: on one device, not host-accessible.  HOST: pinned host memory owned by a context,
    accessible from every device in it.  MANAGED: shared memory that migrates between the host and
    the context's devices.
    """

    DEVICE = "device"
    HOST = "host"
    MANAGED = "managed"


class DeviceType(enum.Enum):
    GPU = "gpu"
    CPU = "cpu"
    HOST = "host"
    ACCELERATOR = "accelerator"


class MemoryConnection(enum.IntEnum):
    """How memory of one (context, device) reaches another; larger is better."""

    NONE = 0  # copy through host memory
    MIGRATABLE = 1  # the backend copies or migrates directly
    UNIFIED = 2  # the same pointer is usable on both sides


class SymbolKind(enum.Enum):
    KERNEL = "kernel"
    GLOBAL = "global"


class MemAdvice(enum.Enum):
    """Hints for MANAGED memory (``pyoffload.advise``), after cuMemAdvise / hipMemAdvise."""

    SET_READ_MOSTLY = "set_read_mostly"
    UNSET_READ_MOSTLY = "unset_read_mostly"
    SET_PREFERRED_LOCATION = "set_preferred_location"
    UNSET_PREFERRED_LOCATION = "unset_preferred_location"
    SET_ACCESSED_BY = "set_accessed_by"
    UNSET_ACCESSED_BY = "unset_accessed_by"
