"""Every part of ``pycuda.driver`` the plugin uses, and how it calls it.

tests/test_cuda_surface.py checks this list against the plugin's source (nothing used is
missing), against the real ``pycuda.driver`` (each name exists and accepts the call as written)
and against the fake driver (likewise), so the fake cannot drift from the binding it stands in for.

Each call is ``(number of positional arguments, keyword names)``; ``instance`` calls are made on
an object of that class (so ``self`` comes first), the others on the module or the class.
"""

from __future__ import annotations

Call = tuple[int, tuple[str, ...]]


def _n(count: int) -> list[Call]:
    return [(count, ())]


MODULE_FUNCTIONS: dict[str, list[Call]] = {
    "init": _n(0),
    "get_driver_version": _n(0),
    "mem_alloc": _n(1),
    "pagelocked_empty": _n(4),
    "managed_empty": _n(4),
    "memcpy_htod_async": _n(3),
    "memcpy_dtoh_async": _n(3),
    "memcpy_dtod_async": _n(4),
    "memcpy_peer_async": _n(6),
    "memset_d8_async": _n(4),
    "memset_d16_async": _n(4),
    "memset_d32_async": _n(4),
    "memset_d2d8_async": _n(6),
    "memset_d2d16_async": _n(6),
    "memset_d2d32_async": _n(6),
    "module_from_buffer": _n(3),
}

CONSTRUCTORS: dict[str, list[Call]] = {
    "Device": _n(1),
    "Stream": _n(0),
    "Event": _n(1),
    "Memcpy2D": _n(0),
    "Memcpy3D": _n(0),
}

_RECT_SETTERS: dict[str, list[Call]] = {
    "set_src_device": _n(1),
    "set_src_host": _n(1),
    "set_dst_device": _n(1),
    "set_dst_host": _n(1),
    "__call__": _n(1),  # with a stream: cuMemcpy2DAsync / cuMemcpy3DAsync
}

# Class-level calls (static methods in pycuda).
CLASS_FUNCTIONS: dict[str, dict[str, list[Call]]] = {
    "Device": {"count": _n(0)},
    "Context": {"get_current": _n(0), "pop": _n(0), "enable_peer_access": _n(1)},
}

INSTANCE_METHODS: dict[str, dict[str, list[Call]]] = {
    "Device": {
        "name": _n(0),
        "total_memory": _n(0),
        "compute_capability": _n(0),
        "pci_bus_id": _n(0),
        "get_attribute": _n(1),
        "can_access_peer": _n(1),
        "retain_primary_context": _n(0),
    },
    "Context": {"push": _n(0), "detach": _n(0)},
    "Stream": {"synchronize": _n(0), "is_done": _n(0), "wait_for_event": _n(1)},
    "Event": {"record": _n(1), "synchronize": _n(0), "query": _n(0), "time_till": _n(1)},
    "DeviceAllocation": {"free": _n(0), "__int__": _n(0)},
    "HostAllocation": {"get_device_pointer": _n(0), "free": _n(0)},
    "ManagedAllocation": {"free": _n(0)},
    "Module": {"get_function": _n(1), "get_global": _n(1)},
    "Memcpy2D": _RECT_SETTERS,
    "Memcpy3D": _RECT_SETTERS,
    # prepared_async_call(grid, block, stream, *params, shared_size=...): one packed buffer or none.
    "Function": {
        "prepare": _n(1),
        "get_attribute": _n(1),
        "prepared_async_call": [(3, ("shared_size",)), (4, ("shared_size",))],
    },
}

_RECT_2D = ("src_pitch", "dst_pitch", "width_in_bytes", "height")
PROPERTIES: dict[str, tuple[str, ...]] = {
    "Context": ("handle",),
    "Stream": ("handle",),
    "Memcpy2D": _RECT_2D,
    "Memcpy3D": (*_RECT_2D, "src_height", "dst_height", "depth"),
}

CONSTANTS: dict[str, tuple[str, ...]] = {
    "host_alloc_flags": ("DEVICEMAP", "PORTABLE"),
    "mem_host_register_flags": ("DEVICEMAP", "PORTABLE"),
    "mem_attach_flags": ("GLOBAL",),
    "event_flags": ("DISABLE_TIMING",),
    "device_attribute": (
        "MULTIPROCESSOR_COUNT",
        "MAX_THREADS_PER_BLOCK",
        "WARP_SIZE",
        "MAX_SHARED_MEMORY_PER_BLOCK",
        "MAX_PITCH",
        "CLOCK_RATE",
        "UNIFIED_ADDRESSING",
        "MANAGED_MEMORY",
        "CONCURRENT_MANAGED_ACCESS",
        "CAN_MAP_HOST_MEMORY",
        "MAX_BLOCK_DIM_X",
        "MAX_BLOCK_DIM_Y",
        "MAX_BLOCK_DIM_Z",
        "MAX_GRID_DIM_X",
        "MAX_GRID_DIM_Y",
        "MAX_GRID_DIM_Z",
    ),
    "function_attribute": ("MAX_THREADS_PER_BLOCK", "SHARED_SIZE_BYTES", "LOCAL_SIZE_BYTES", "NUM_REGS"),
}

EXCEPTIONS: tuple[str, ...] = ("Error", "MemoryError")


def module_level_names() -> set[str]:
    """Every ``cuda.<name>`` the plugin may touch."""
    return set(MODULE_FUNCTIONS) | set(CONSTRUCTORS) | set(CLASS_FUNCTIONS) | set(CONSTANTS) | set(EXCEPTIONS)


def method_names() -> set[str]:
    names = {m for methods in INSTANCE_METHODS.values() for m in methods}
    names |= {m for methods in CLASS_FUNCTIONS.values() for m in methods}
    return names | {p for props in PROPERTIES.values() for p in props}
