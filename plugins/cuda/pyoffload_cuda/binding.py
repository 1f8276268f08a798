"""Which ``pycuda.driver`` the plugin talks to, and how its errors become pyoffload errors.

``PYOFFLOAD_CUDA_DRIVER`` selects the binding when the backend initialises:

* unset or ``pycuda``: the real ``pycuda.driver`` (imported here, never at plugin import time, so
  a machine without libcuda can still import the plugin);
* ``fake``: :mod:`pyoffload_cuda.fake`, a driver-level stand-in with the same surface that runs
  the plugin's logic without a GPU (see that module).
"""

from __future__ import annotations

import ctypes
from typing import Any

from pyoffload import settings
from pyoffload.backend import (
    BackendError,
    CompileError,
    InvalidArgumentError,
    InvalidBinaryError,
    NoDevicesError,
    NotFoundError,
    OffloadError,
    OutOfResourcesError,
    UnsupportedError,
)

ENV_DRIVER = "PYOFFLOAD_CUDA_DRIVER"


def driver_mode() -> str:
    try:
        return settings.choice(ENV_DRIVER, ("pycuda", "fake"), "pycuda")
    except OffloadError as exc:  # a bad value: the plugin has no devices, and says why
        raise NoDevicesError(str(exc)) from exc


def load_driver() -> Any:
    """Import the selected binding; raise ``NoDevicesError`` with the loader's reason."""
    if driver_mode() == "fake":
        from . import fake

        return fake.FakeDriver.from_environment()
    try:
        import pycuda.driver as cuda
    except ImportError as exc:
        raise NoDevicesError(f"pycuda.driver cannot be imported: {exc}") from exc
    except Exception as exc:  # a broken install can raise anything at import
        raise NoDevicesError(f"pycuda.driver failed to import: {type(exc).__name__}: {exc}") from exc
    return cuda


def driver_library(cuda: Any) -> Any:
    """``libcuda.so.1`` itself, for what pycuda binds badly: the library pycuda loaded (dlopen by
    soname returns it), or the fake driver's stand-in."""
    fake = getattr(cuda, "libcuda", None)
    return fake if fake is not None else ctypes.CDLL("libcuda.so.1")


# Substrings of cuGetErrorString() texts (pycuda formats errors as "<call> failed: <text>").
_NOT_FOUND = ("not found",)
_INVALID_IMAGE = (
    "device kernel image is invalid",
    "no kernel image is available",
    "unsupported toolchain",
    "invalid source",
)
_PTX_COMPILE = ("ptx jit compilation failed",)
_UNSUPPORTED = ("not supported",)


def translate(cuda: Any, exc: BaseException, what: str) -> OffloadError:
    """Map a pycuda exception to the pyoffload error class that says what went wrong."""
    message = f"{what}: {exc}"
    text = str(exc).lower()
    if isinstance(exc, getattr(cuda, "MemoryError", ())) or "out of memory" in text:
        return OutOfResourcesError(message)
    if any(s in text for s in _PTX_COMPILE):
        return CompileError(message, build_log=str(exc).partition(" - ")[2])
    if any(s in text for s in _INVALID_IMAGE):
        return InvalidBinaryError(message)
    if any(s in text for s in _NOT_FOUND):
        return NotFoundError(message)
    if any(s in text for s in _UNSUPPORTED):
        return UnsupportedError(message)
    if "invalid argument" in text or "invalid value" in text:
        return InvalidArgumentError(message)
    return BackendError(message)
