"""The base type of allocations and host views: memory at an address, exported through the
buffer protocol when host-accessible, with a count of live exports that ``free`` reads.

The type is C (core/_buffer.c) wherever it was compiled: Python 3.11 has no Python-level buffer
protocol.  On Python 3.12 and later an install without a C compiler gets the class below, which
exports through ``__buffer__`` (PEP 688) under the same rule: an export counts itself, then checks
``exportable``; a free clears ``exportable``, then reads the count (``pyoffload.memory._claim``).
On 3.11 without a compiler there is no way to export host memory to Python consumers at all:
``memoryview``, ``Allocation.view``, the array interfaces and DLPack of host memory raise; copies
(``pyoffload.memcpy``) still work.  The compiled install (the default) has none of these limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["BufferBase", "COMPILED"]

if TYPE_CHECKING:
    from ._buffer import BufferBase

    COMPILED = True
else:
    try:
        from ._buffer import BufferBase

        COMPILED = True
    except ImportError:  # no compiler at install: the class of _buffer_py
        from ._buffer_py import BufferBase

        COMPILED = False
