"""The one check for sizes, counts, dimensions and allocation kinds, before any backend sees them.

Every size goes through ``operator.index`` (numpy integers welcome; floats and bools are a
``TypeError``) and is range-checked against 2**64.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from .enums import AllocKind
from .errors import InvalidArgumentError, InvalidSizeError, InvalidValueError, got

MAX_SIZE = 1 << 64


def as_int(value: Any, what: str) -> int:
    """``value`` through ``operator.index`` (numpy integers welcome); a bool, float or anything
    else is a ``TypeError`` naming ``what``."""
    if type(value) is int:
        return value
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, got {got(value)}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {got(value)}") from None


def pointer_value(obj: Any) -> int | None:
    """``obj`` as an address if it is one: a Python ``int`` or a numpy integer scalar (what
    ``ctypes``, ``array.ctypes.data`` arithmetic and numpy code hand over), never a bool; ``None``
    for anything else, which the caller then takes as a buffer or refuses."""
    if type(obj) is int:
        return obj
    if isinstance(obj, (int, np.integer)) and not isinstance(obj, bool):
        return int(obj)
    return None


def check_size(size: Any, what: str = "size", allow_zero: bool = False) -> int:
    """``size`` as an int in ``[1, 2**64)`` (``[0, ...)`` with ``allow_zero``): numpy integers are
    accepted, floats and other types are a ``TypeError``, out-of-range values ``INVALID_SIZE``."""
    n = as_int(size, what)
    if n <= 0 and not (allow_zero and n == 0):
        raise InvalidSizeError(f"{what} must be {'non-negative' if allow_zero else 'positive'}, got {n}")
    if n >= MAX_SIZE:
        raise InvalidSizeError(f"{what} {n} is not below 2**64")
    return n


def check_alignment(alignment: Any) -> int:
    """An allocation's ``alignment``: an integer power of two below 2**64 (``INVALID_ARGUMENT``
    otherwise, as urUSMDeviceAlloc answers an alignment that is not a power of two); floats and
    other types are a ``TypeError``."""
    n = as_int(alignment, "alignment")
    if n <= 0 or n & (n - 1) or n >= MAX_SIZE:
        raise InvalidArgumentError(f"alignment must be a power of two below 2**64, got {n}")
    return n


def check_kind(kind: Any) -> AllocKind:
    if kind.__class__ is not AllocKind:
        raise TypeError(f"kind must be a pyoffload.AllocKind, got {kind!r}")
    return kind


def dimension(value: Any, what: str) -> int:
    """One dimension of a launch's geometry: a positive integer below 2**64."""
    value = as_int(value, what)
    if value <= 0:
        raise InvalidValueError(f"{what} must be positive, got {value}")
    if value >= 1 << 64:
        raise InvalidSizeError(f"{what} {value} is not below 2**64")
    return value  # type: ignore[no-any-return]


def triple(value: Any, what: str) -> tuple[int, int, int]:
    """A launch's grid, block or global size (an int, or 1 to 3 of them) as a checked 3-tuple."""
    if isinstance(value, (tuple, list)):
        if not 1 <= len(value) <= 3:
            raise InvalidValueError(f"{what} must have 1 to 3 dimensions, got {tuple(value)!r}")
        dims = tuple(dimension(v, what) for v in value)
    else:
        dims = (dimension(value, what),)
    return dims + (1,) * (3 - len(dims))  # type: ignore[return-value]
