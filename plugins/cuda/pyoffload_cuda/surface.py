"""Every part of ``pycuda.driver`` the plugin uses, and how it calls it.

tests/test_surface.py checks this list against the plugin's source (nothing used is missing),
against the real ``pycuda.driver`` (each name exists and accepts the call as written) and
against the fake driver (likewise), so the fake cannot drift from the binding it stands in for.

Each call is ``(number of positional arguments, keyword names)``; ``instance`` calls are made on
an object of that class (so ``self`` comes first), the others on the module or the class.
"""

from __future__ import annotations

Call = tuple[int, tuple[str, ...]]

MODULE_FUNCTIONS: dict[str, list[Call]] = {
    "init": [(0, ())],
    "get_driver_version": [(0, ())],
    "mem_alloc": [(1, ())],
    "pagelocked_empty": [(4, ())],
    "managed_empty": [(4, ())],
    "register_host_memory": [(2, ())],
    "memcpy_htod": [(2, ())],
    "memcpy_htod_async": [(3, ())],
    "memcpy_dtoh": [(2, ())],
    "memcpy_dtoh_async": [(3, ())],
    "memcpy_dtod": [(3, ())],
    "memcpy_dtod_async": [(4, ())],
    "memcpy_peer": [(5, ())],
    "memcpy_peer_async": [(6, ())],
    "memset_d8": [(3, ())],
    "memset_d16": [(3, ())],
    "memset_d32": [(3, ())],
    "memset_d8_async": [(4, ())],
    "memset_d16_async": [(4, ())],
    "memset_d32_async": [(4, ())],
    "module_from_buffer": [(3, ())],
}

CONSTRUCTORS: dict[str, list[Call]] = {
    "Device": [(1, ())],
    "Stream": [(0, ())],
    "Event": [(1, ())],
}

# Class-level calls (static methods in pycuda).
CLASS_FUNCTIONS: dict[str, dict[str, list[Call]]] = {
    "Device": {"count": [(0, ())]},
    "Context": {
        "pop": [(0, ())],
        "synchronize": [(0, ())],
        "enable_peer_access": [(1, ())],
        "disable_peer_access": [(1, ())],
    },
}

INSTANCE_METHODS: dict[str, dict[str, list[Call]]] = {
    "Device": {
        "name": [(0, ())],
        "total_memory": [(0, ())],
        "compute_capability": [(0, ())],
        "pci_bus_id": [(0, ())],
        "get_attribute": [(1, ())],
        "can_access_peer": [(1, ())],
        "retain_primary_context": [(0, ())],
    },
    "Context": {"push": [(0, ())], "detach": [(0, ())]},
    "Stream": {"synchronize": [(0, ())], "is_done": [(0, ())]},
    "Event": {"record": [(1, ())], "synchronize": [(0, ())], "query": [(0, ())], "time_till": [(1, ())]},
    "DeviceAllocation": {"free": [(0, ())], "__int__": [(0, ())]},
    "HostAllocation": {"get_device_pointer": [(0, ())], "free": [(0, ())]},
    "ManagedAllocation": {"free": [(0, ())]},
    "RegisteredHostMemory": {"get_device_pointer": [(0, ())], "unregister": [(0, ())]},
    "Module": {"get_function": [(1, ())], "get_global": [(1, ())]},
    # Kernel parameters are passed positionally (*params); the count varies.
    "Function": {"__call__": [(0, ("grid", "block", "stream", "shared")),
                              (3, ("grid", "block", "stream", "shared"))]},
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
        "UNIFIED_ADDRESSING",
        "MANAGED_MEMORY",
        "CONCURRENT_MANAGED_ACCESS",
        "CAN_MAP_HOST_MEMORY",
    ),
}

EXCEPTIONS: tuple[str, ...] = ("Error", "MemoryError")


def module_level_names() -> set[str]:
    """Every ``cuda.<name>`` the plugin may touch."""
    return set(MODULE_FUNCTIONS) | set(CONSTRUCTORS) | set(CLASS_FUNCTIONS) | set(CONSTANTS) | set(EXCEPTIONS)


def method_names() -> set[str]:
    names = {m for methods in INSTANCE_METHODS.values() for m in methods}
    names |= {m for methods in CLASS_FUNCTIONS.values() for m in methods}
    return names
