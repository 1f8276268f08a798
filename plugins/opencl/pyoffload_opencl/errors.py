"""Translate pyopencl errors into pyoffload's error classes where the code says what went wrong."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from pyoffload.backend import (
    BackendError,
    InvalidArgumentError,
    InvalidValueError,
    OffloadError,
    OutOfResourcesError,
)

# OpenCL status codes (cl.h); numeric so that this module imports without pyopencl.
_OUT_OF_RESOURCES = {-4, -5, -6}  # MEM_OBJECT_ALLOCATION_FAILURE, OUT_OF_RESOURCES, OUT_OF_HOST_MEMORY
_BAD_DIMENSIONS = {-54, -55, -63}  # INVALID_WORK_GROUP_SIZE, INVALID_WORK_ITEM_SIZE, INVALID_GLOBAL_WORK_SIZE
_BAD_ARGUMENTS = {-49, -50, -51, -52}  # INVALID_ARG_INDEX, _VALUE, _SIZE, INVALID_KERNEL_ARGS


def translate(exc: Exception, what: str) -> OffloadError:
    code = getattr(exc, "code", None)
    message = f"{what}: {exc}"
    if code in _OUT_OF_RESOURCES:
        return OutOfResourcesError(message)
    if code in _BAD_DIMENSIONS:
        return InvalidValueError(message)
    if code in _BAD_ARGUMENTS:
        return InvalidArgumentError(message)
    return BackendError(message)


def check_status(event: Any, what: str) -> bool:
    """Whether the command behind ``event`` completed; raise if it failed (negative status)."""
    import pyopencl as cl

    status: int = event.get_info(cl.event_info.COMMAND_EXECUTION_STATUS)
    if status < 0:
        raise BackendError(f"{what}: an earlier command failed with OpenCL status {status}")
    return status == 0  # CL_COMPLETE


@contextlib.contextmanager
def driver_call(what: str) -> Iterator[None]:
    """Re-raise a pyopencl error from the block as the matching pyoffload error."""
    import pyopencl as cl

    try:
        yield
    except cl.Error as exc:
        raise translate(exc, what) from exc
