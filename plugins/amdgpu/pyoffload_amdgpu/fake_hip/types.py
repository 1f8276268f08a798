"""The enumerations, constants and result records of the fake, spelled and valued as hip-python's.

Only what the plugin uses (and a little around it) is defined; ``tests/test_surface.py`` checks
every name and value here against the installed hip-python so the two cannot drift.
"""

from __future__ import annotations

import enum
from typing import Any


class hipError_t(enum.IntEnum):  # noqa: N801 - hip-python's spelling
    hipSuccess = 0
    hipErrorInvalidValue = 1
    hipErrorOutOfMemory = 2
    hipErrorNotInitialized = 3
    hipErrorInvalidConfiguration = 9
    hipErrorInvalidPitchValue = 12
    hipErrorInvalidDevicePointer = 17
    hipErrorInvalidMemcpyDirection = 21
    hipErrorInvalidDeviceFunction = 98
    hipErrorNoDevice = 100
    hipErrorInvalidDevice = 101
    hipErrorInvalidImage = 200
    hipErrorInvalidContext = 201
    hipErrorNoBinaryForGpu = 209
    hipErrorInvalidKernelFile = 218
    hipErrorInvalidHandle = 400
    hipErrorNotFound = 500
    hipErrorNotReady = 600
    hipErrorIllegalAddress = 700
    hipErrorLaunchOutOfResources = 701
    hipErrorPeerAccessAlreadyEnabled = 704
    hipErrorPeerAccessNotEnabled = 705
    hipErrorHostMemoryAlreadyRegistered = 712
    hipErrorHostMemoryNotRegistered = 713
    hipErrorLaunchFailure = 719
    hipErrorNotSupported = 801
    hipErrorUnknown = 999


class hipMemcpyKind(enum.IntEnum):  # noqa: N801
    hipMemcpyHostToHost = 0
    hipMemcpyHostToDevice = 1
    hipMemcpyDeviceToHost = 2
    hipMemcpyDeviceToDevice = 3
    hipMemcpyDefault = 4


class hipMemoryType(enum.IntEnum):  # noqa: N801
    hipMemoryTypeUnregistered = 0
    hipMemoryTypeHost = 1
    hipMemoryTypeDevice = 2
    hipMemoryTypeManaged = 3


class hipMemoryAdvise(enum.IntEnum):  # noqa: N801
    hipMemAdviseSetReadMostly = 1
    hipMemAdviseUnsetReadMostly = 2
    hipMemAdviseSetPreferredLocation = 3
    hipMemAdviseUnsetPreferredLocation = 4
    hipMemAdviseSetAccessedBy = 5
    hipMemAdviseUnsetAccessedBy = 6


# Module-level integer constants of hip-python.
CONSTANTS: dict[str, int] = {
    "HIP_LAUNCH_PARAM_BUFFER_POINTER": 1,
    "HIP_LAUNCH_PARAM_BUFFER_SIZE": 2,
    "HIP_LAUNCH_PARAM_END": 3,
    "hipCpuDeviceId": -1,
    "hipEventDefault": 0,
    "hipEventBlockingSync": 1,
    "hipEventDisableTiming": 2,
    "hipHostMallocDefault": 0,
    "hipHostMallocPortable": 1,
    "hipHostMallocMapped": 2,
    "hipHostRegisterDefault": 0,
    "hipHostRegisterPortable": 1,
    "hipHostRegisterMapped": 2,
    "hipMemAttachGlobal": 1,
    "hipMemAttachHost": 2,
    "hipStreamDefault": 0,
    "hipStreamNonBlocking": 1,
}

_ERROR_STRINGS = {
    hipError_t.hipSuccess: "no error",
    hipError_t.hipErrorInvalidValue: "invalid argument",
    hipError_t.hipErrorOutOfMemory: "out of memory",
    hipError_t.hipErrorInvalidDevice: "invalid device ordinal",
    hipError_t.hipErrorInvalidImage: "device kernel image is invalid",
    hipError_t.hipErrorNoBinaryForGpu: "no kernel image is available for execution on the device",
    hipError_t.hipErrorInvalidHandle: "invalid resource handle",
    hipError_t.hipErrorNotFound: "named symbol not found",
    hipError_t.hipErrorNotReady: "device not ready",
    hipError_t.hipErrorIllegalAddress: "an illegal memory access was encountered",
    hipError_t.hipErrorNotSupported: "operation not supported",
}


def error_string(err: hipError_t) -> bytes:
    return _ERROR_STRINGS.get(err, err.name).encode()


class FakePointer:
    """What hip-python returns for ``void*`` results: convertible with ``int()`` and nothing more."""

    __slots__ = ("_address",)

    def __init__(self, address: int) -> None:
        self._address = int(address)

    def __int__(self) -> int:
        return self._address

    def __repr__(self) -> str:
        return f"<FakePointer 0x{self._address:x}>"


class hipDeviceProp_t:  # noqa: N801
    """The device properties the fake reports (attribute names as in hip-python's struct)."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)


class hipPointerAttribute_t:  # noqa: N801
    def __init__(
        self,
        type: int,
        device: int,
        devicePointer: Any,
        hostPointer: Any,  # noqa: A002
        isManaged: int,
        allocationFlags: int = 0,
    ) -> None:
        self.type = type
        self.device = device
        self.devicePointer = devicePointer
        self.hostPointer = hostPointer
        self.isManaged = isManaged
        self.allocationFlags = allocationFlags
