"""The error model: one base class with an ``errc`` code, and subclasses users catch.

The codes mirror liboffload's ``ol_errc_t`` so that a runtime built on top of pyoffload can map
them one to one.  Backends raise these classes too (see :mod:`pyoffload.backend`); anything else a
backend raises is wrapped in :class:`BackendError` by the generic layer, so callers only ever see
``OffloadError``.
"""

from __future__ import annotations

import enum
import re


class Errc(enum.IntEnum):
    """Error codes, after liboffload's ``ol_errc_t``."""

    SUCCESS = 0
    UNKNOWN = 1
    HOST_IO = 2
    INVALID_BINARY = 3
    INVALID_NULL_POINTER = 4
    INVALID_ARGUMENT = 5
    NOT_FOUND = 6
    OUT_OF_RESOURCES = 7
    INVALID_SIZE = 8
    INVALID_ENUMERATION = 9
    HOST_TOOL_NOT_FOUND = 10
    INVALID_VALUE = 11
    UNIMPLEMENTED = 12
    UNSUPPORTED = 13
    ASSEMBLE_FAILURE = 14
    COMPILE_FAILURE = 15
    LINK_FAILURE = 16
    BACKEND_FAILURE = 17
    UNINITIALIZED = 18
    INVALID_NULL_HANDLE = 19
    INVALID_PLATFORM = 20
    INVALID_DEVICE = 21
    INVALID_QUEUE = 22
    INVALID_EVENT = 23
    INVALID_CONTEXT = 24
    INVALID_PROGRAM = 25
    INVALID_KERNEL = 26
    SYMBOL_KIND = 27
    ALREADY_EXISTS = 28


class OffloadError(Exception):
    """Base of every error pyoffload raises.  ``errc`` says which kind of failure it was."""

    default_errc: Errc = Errc.UNKNOWN

    def __init__(self, message: str, errc: Errc | None = None) -> None:
        super().__init__(message)
        self.errc: Errc = errc if errc is not None else self.default_errc

    def __str__(self) -> str:
        return f"{self.errc.name}: {self.args[0]}"


class InvalidArgumentError(OffloadError, ValueError):
    """An argument is of the wrong type, unknown, freed, or belongs elsewhere."""

    default_errc = Errc.INVALID_ARGUMENT


class InvalidValueError(OffloadError, ValueError):
    """An argument has the right type but an impossible value (launch dimensions, patterns)."""

    default_errc = Errc.INVALID_VALUE


class InvalidSizeError(OffloadError, ValueError):
    """A size is zero, negative, or reaches past the end of an allocation or buffer."""

    default_errc = Errc.INVALID_SIZE


class NotFoundError(OffloadError, LookupError):
    """A kernel, global, symbol, device or plugin of that name does not exist."""

    default_errc = Errc.NOT_FOUND


class OutOfResourcesError(OffloadError, MemoryError):
    """The device or host ran out of memory or another resource."""

    default_errc = Errc.OUT_OF_RESOURCES


class InvalidBinaryError(OffloadError, ValueError):
    """The image bytes are not a format the backend can load."""

    default_errc = Errc.INVALID_BINARY


class CompileError(OffloadError):
    """Building a program from source or bitcode failed; ``build_log`` holds the compiler's output."""

    default_errc = Errc.COMPILE_FAILURE

    def __init__(self, message: str, build_log: str = "", errc: Errc | None = None) -> None:
        super().__init__(message, errc)
        self.build_log = build_log

    @classmethod
    def from_log(cls, what: str, build_log: str) -> CompileError:
        """``what`` failed: the message carries the log's first error line (``x.c:3:5: error:
        ...``), what a user needs first; ``build_log`` keeps all of it."""
        return cls(f"{what}: {first_error_line(build_log) or 'no compiler output'}", build_log)

    @classmethod
    def from_link_log(cls, what: str, build_log: str) -> CompileError:
        """A failed link (``LINK_FAILURE``): the message carries the log's first line that names
        an undefined symbol (GNU ld, lld, nvlink and OpenCL drivers all say ``undefined``), else
        its first error line; ``build_log`` keeps all of it."""
        lines = [line.strip() for line in build_log.splitlines() if line.strip()]
        found = next((line for line in lines if re.search(r"\bundefined\b", line, re.IGNORECASE)), None)
        return cls(
            f"{what}: {found or first_error_line(build_log) or 'no linker output'}", build_log, Errc.LINK_FAILURE
        )


def first_error_line(log: str) -> str:
    """The first line of a compiler's log that reports an error (gcc, clang, nvcc, OpenCL
    drivers all say ``error``), else its first non-empty line, else ``""``."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in lines:
        if re.search(r"\b(error|fatal error)\b", line, re.IGNORECASE):
            return line
    return lines[0] if lines else ""


class UnsupportedError(OffloadError, NotImplementedError):
    """The backend or device cannot do this (an allocation kind, profiling, a global's address)."""

    default_errc = Errc.UNSUPPORTED


class InvalidHandleError(OffloadError):
    """An object was used after it was released: unloaded program, destroyed queue, shut-down runtime."""

    default_errc = Errc.INVALID_NULL_HANDLE


class BackendError(OffloadError, RuntimeError):
    """The vendor runtime reported a failure the generic layer could not classify."""

    default_errc = Errc.BACKEND_FAILURE


class NoDevicesError(OffloadError):
    """Raised by a backend's ``init_impl`` when its driver is missing or finds no device.

    The message is the driver's reason; ``pyoffload plugins`` shows it as ``no devices: <reason>``.
    """

    default_errc = Errc.UNINITIALIZED


class TeardownWarning(RuntimeWarning):
    """A failure while releasing something at unload, deinit or interpreter exit."""


class LeakWarning(ResourceWarning):
    """Allocations, programs or queues still alive at shutdown (reported by the allocation tracker)."""


def got(value: object) -> str:
    """How error messages name a value of the wrong type: its repr (shortened) and its type."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})"
