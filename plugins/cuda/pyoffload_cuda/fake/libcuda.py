"""The few ``libcuda.so.1`` entry points the plugin calls through ctypes, on the fake driver.

pycuda's ``register_host_memory`` only takes numpy arrays without a base, which no wrapper of
foreign memory is, so the plugin pins host ranges with ``cuMemHostRegister`` from the driver
library pycuda loaded.  This stand-in takes the same ctypes arguments and returns ``CUresult``
codes; the ranges it pins are the fake driver's registered regions (checked, leak-reported).
"""

from __future__ import annotations

import ctypes
from typing import Any

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712
CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713
_TEXT = {
    CUDA_ERROR_INVALID_VALUE: b"invalid argument",
    CUDA_ERROR_INVALID_CONTEXT: b"invalid device context",
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: b"part or all of the requested memory range is already mapped",
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: b"pointer does not correspond to a registered memory region",
}


def _value(arg: Any) -> int:
    return int(arg.value or 0) if isinstance(arg, ctypes._SimpleCData) else int(arg)


class FakeLibcuda:
    def __init__(self, drv: Any) -> None:
        self._drv = drv

    def _call(self, routine: str, body: Any) -> int:
        drv = self._drv
        with drv.lock:
            drv._use(routine)
            try:
                body(drv.current(routine))
            except drv.Error as exc:
                text = str(exc)
                if "already mapped" in text:
                    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
                return CUDA_ERROR_INVALID_CONTEXT if "device context" in text else CUDA_ERROR_INVALID_VALUE
            return CUDA_SUCCESS

    def cuMemHostRegister_v2(self, ptr: Any, size: Any, flags: Any) -> int:  # noqa: N802 - the C name
        return self._call(
            "cuMemHostRegister",
            lambda ctx: self._drv._register("cuMemHostRegister", ctx, _value(ptr), _value(size), None),
        )

    def cuMemHostGetDevicePointer_v2(self, out: Any, ptr: Any, flags: Any) -> int:  # noqa: N802
        def body(ctx: Any) -> None:
            region, _ = self._drv.resolve("cuMemHostGetDevicePointer", _value(ptr), 1)
            if region.kind != "registered":
                raise self._drv.fail(self._drv.LogicError, "cuMemHostGetDevicePointer", "invalid argument")
            out._obj.value = _value(ptr)  # unified addressing: the host address

        return self._call("cuMemHostGetDevicePointer", body)

    def cuMemHostUnregister(self, ptr: Any) -> int:  # noqa: N802
        drv = self._drv
        region = drv.memory.find_live(_value(ptr))
        if region is None or region.kind != "registered" or region.base != _value(ptr):
            drv.violations.append(
                ("not-registered", f"cuMemHostUnregister: 0x{_value(ptr):x} is not a registered base")
            )
            return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
        return self._call("cuMemHostUnregister", lambda ctx: drv._release_region(region))

    def cuGetErrorString(self, code: Any, out: Any) -> int:  # noqa: N802
        out._obj.value = _TEXT.get(_value(code), b"unknown error")
        return CUDA_SUCCESS
