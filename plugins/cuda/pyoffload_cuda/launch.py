"""Kernel arguments as pycuda's ``Function.__call__`` takes them.

pycuda packs numpy scalars by their dtype with natural alignment (its ``_pvt_struct`` in native
mode), which is the CUDA kernel parameter layout.  So every argument becomes a numpy scalar:

* a pointer (``int``, or ``None`` for NULL) -> ``numpy.uint64``;
* a scalar stays as it is, except ``float16`` (which pycuda's packer does not know) travels as its
  ``uint16`` bit pattern and ``bool`` as ``uint8``, both of the same size and alignment;
* :class:`~pyoffload.backend.LocalMemory` -> CUDA has no local-pointer parameters: all of a
  launch's LocalMemory arguments share its dynamic shared memory, each at a 16-byte aligned
  offset, and the kernel receives that byte offset as a ``uint64`` (so argument positions stay
  the same as on every other backend).  See docs/backends/cuda.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pyoffload.backend import InvalidArgumentError, LocalMemory

SHARED_ALIGN = 16


def param_bytes(sizes: Sequence[int]) -> int:
    """Bytes of a parameter list laid out with natural alignment (CUDA's layout)."""
    off = 0
    for s in sizes:
        align = min(max(s, 1), 8)
        off = -(-off // align) * align + s
    return off


def check_params(name: str, expected: tuple[int, ...] | None, params: Sequence[np.generic]) -> None:
    """Refuse a launch whose parameter sizes differ from the image's declaration: the driver
    would read a misaligned or short parameter buffer (or a pointer from 4 bytes of an int)."""
    if expected is None:
        return
    got = tuple(p.dtype.itemsize for p in params)
    if got != expected:
        raise InvalidArgumentError(
            f"kernel {name!r} takes {len(expected)} parameters of {list(expected)} bytes, "
            f"got {len(got)} of {list(got)} bytes"
        )


def pack_args(args: Sequence[Any]) -> tuple[tuple[np.generic, ...], int]:
    """Return ``(params, dynamic_shared_bytes)`` for ``Function.__call__``."""
    params: list[np.generic] = []
    shared = 0
    for i, a in enumerate(args):
        if a is None:
            params.append(np.uint64(0))
        elif isinstance(a, bool):
            raise InvalidArgumentError(f"argument {i}: pass booleans as numpy scalars")
        elif isinstance(a, int):
            params.append(np.uint64(a))
        elif isinstance(a, LocalMemory):
            offset = -(-shared // SHARED_ALIGN) * SHARED_ALIGN
            params.append(np.uint64(offset))
            shared = offset + a.size
        elif isinstance(a, np.generic):
            if a.dtype == np.float16:
                params.append(np.array(a).view(np.uint16)[()])
            elif a.dtype == np.bool_:
                params.append(np.uint8(a))
            elif isinstance(a, np.number):
                params.append(a)
            else:
                raise InvalidArgumentError(f"argument {i}: unsupported scalar type {a.dtype}")
        else:
            raise InvalidArgumentError(f"argument {i}: cannot pass {type(a).__name__} to a CUDA kernel")
    return tuple(params), shared
