"""Choosing the HIP binding (hip-python or the fake) and turning HIP error codes into pyoffload errors.

hip-python returns every result as a tuple whose first element is a ``hipError_t``
(``err, ptr = hip.hipMalloc(1024)``); :func:`call` raises the matching ``OffloadError`` subclass
when ``err`` is not ``hipSuccess`` and returns the remaining values.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
from collections.abc import Callable
from typing import Any

from pyoffload.backend import (
    BackendError,
    InvalidArgumentError,
    InvalidBinaryError,
    NoDevicesError,
    NotFoundError,
    OffloadError,
    OutOfResourcesError,
    UnsupportedError,
)

DRIVER_ENV = "PYOFFLOAD_AMDGPU_DRIVER"
"""``hip`` (default): hip-python's ``hip.hip``.  ``fake``: the in-package fake driver."""

_ERROR_CLASSES: dict[str, type[OffloadError]] = {
    **dict.fromkeys(
        ("hipErrorOutOfMemory", "hipErrorMemoryAllocation", "hipErrorLaunchOutOfResources"), OutOfResourcesError
    ),
    **dict.fromkeys(("hipErrorNotFound", "hipErrorInvalidSymbol", "hipErrorSharedObjectSymbolNotFound"), NotFoundError),
    **dict.fromkeys(
        ("hipErrorInvalidImage", "hipErrorInvalidKernelFile", "hipErrorNoBinaryForGpu"), InvalidBinaryError
    ),
    **dict.fromkeys(("hipErrorNotSupported", "hipErrorPeerAccessUnsupported"), UnsupportedError),
    "hipErrorInvalidDevicePointer": InvalidArgumentError,
}


def load_binding() -> Any:
    """Return the module-like object whose ``hip*`` functions the plugin calls.

    Raises ``NoDevicesError`` with the reason when hip-python cannot be imported.
    """
    choice = os.environ.get(DRIVER_ENV, "hip").strip().lower()
    if choice == "fake":
        from .fake_hip import FakeHip

        return FakeHip.from_environment()
    if choice not in ("", "hip", "real"):
        raise NoDevicesError(f"{DRIVER_ENV}={choice!r} is not a driver: use 'hip' or 'fake'")
    try:
        spec = importlib.util.find_spec("hip")
    except (ImportError, ValueError) as exc:
        raise NoDevicesError(f"hip-python is not importable: {exc}") from exc
    if spec is None:
        raise NoDevicesError("hip-python is not importable: no module named 'hip'")
    # Importing hip-python costs ~65 ms and only then finds no ROCm: ask the loader first.
    try:
        ctypes.CDLL("libamdhip64.so")
    except OSError as exc:
        raise NoDevicesError(f"cannot load the HIP runtime: {exc}") from exc
    try:
        from hip import hip
    except ImportError as exc:  # hip-python broken: the plugin stays listed
        raise NoDevicesError(f"hip-python is not importable: {exc}") from exc
    return hip


def release_binding(binding: Any) -> None:
    """Tear down the binding at deinit.  Only the fake has anything to do (its leak report);
    hip-python releases the runtime at process exit."""
    from .fake_hip import FakeHip

    if isinstance(binding, FakeHip):
        binding.teardown()


def error_text(hip: Any, err: Any) -> str:
    """``hipErrorOutOfMemory (out of memory)``, as far as the runtime can tell."""
    try:
        name = hip.hipError_t(int(err)).name
    except (ValueError, TypeError, AttributeError):
        name = f"hipError {int(err)}"
    try:
        result = hip.hipGetErrorString(err)
        text = result[-1] if isinstance(result, tuple) else result
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
    except Exception:  # the string is a courtesy; never mask the real error
        text = ""
    return f"{name} ({text})" if text and text != name else name


def error_for(hip: Any, err: Any, what: str) -> OffloadError:
    """The pyoffload error for a failed HIP call ``what``."""
    try:
        name = hip.hipError_t(int(err)).name
    except (ValueError, TypeError, AttributeError):
        name = ""
    cls = _ERROR_CLASSES.get(name, BackendError)
    return cls(f"{what} failed: {error_text(hip, err)}")


def is_success(err: Any) -> bool:
    return int(err) == 0  # hipSuccess


def call(hip: Any, fn: Callable[..., Any], *args: Any, what: str | None = None) -> Any:
    """Call a hip-python function; raise on error; return ``None``, the value, or a tuple."""
    result = fn(*args)
    err = result[0]
    if err:  # hipSuccess is 0
        raise error_for(hip, err, what if what else getattr(fn, "__name__", "HIP call"))
    values = result[1:]
    if not values:
        return None
    return values[0] if len(values) == 1 else values
