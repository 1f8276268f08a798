"""Small helpers shared by the conformance tests."""

from __future__ import annotations

from typing import Any

import numpy as np

import pyoffload

BLOCK = 32


def launch_n(queue: Any, kernel: Any, n: int, args: list[Any], block: int = BLOCK) -> Any:
    """Launch ``kernel`` over at least ``n`` work-items (kernels ignore ids >= n) and wait."""
    ev = queue.launch(kernel, (n + block - 1) // block, block, args)
    ev.wait()
    return ev


def read(alloc_or_ptr: Any, dtype: Any, count: int) -> np.ndarray:
    out = np.zeros(count, dtype=dtype)
    pyoffload.memcpy(out, alloc_or_ptr, out.nbytes)
    return out


def upload(device: Any, array: np.ndarray, kind: pyoffload.AllocKind = pyoffload.AllocKind.DEVICE) -> Any:
    alloc = device.alloc(array.nbytes, kind)
    pyoffload.memcpy(alloc, array)
    return alloc
