"""Small helpers shared by the conformance tests."""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

import numpy as np
import pytest

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


def alloc_or_skip(device: Any, size: int, kind: pyoffload.AllocKind = pyoffload.AllocKind.DEVICE) -> Any:
    """An allocation of ``kind``, or a skip naming the device where the kind is unsupported."""
    try:
        return device.alloc(size, kind)
    except pyoffload.UnsupportedError as exc:
        pytest.skip(f"{device.id} has no {kind.name} memory: {exc}")


def in_place(alloc: Any, dtype: Any) -> np.ndarray:
    """A copy of host-accessible memory read through its buffer, not through ``memcpy``."""
    return np.frombuffer(alloc, dtype=dtype).copy()


def errc_of(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> pyoffload.Errc:
    """The ``errc`` of the ``OffloadError`` that ``fn(*args, **kwargs)`` raises (failing if none)."""
    with pytest.raises(pyoffload.OffloadError) as err:
        fn(*args, **kwargs)
    return err.value.errc


@pytest.fixture(scope="module")
def loaded_once() -> Any:
    """Programs loaded once per device for a module's tests that only look symbols up or launch
    kernels without global state (a load is slow on some backends); unloaded at the module's end."""
    cache: dict[str, Any] = {}
    yield cache
    for prog in cache.values():
        if prog.loaded:
            prog.unload()


@pytest.fixture
def shared_kernels(device: Any, images: dict[str, bytes], loaded_once: dict[str, Any]) -> Any:
    """The ``kernels`` image loaded once per device (see ``loaded_once``); tests must not unload
    it or depend on its globals' values."""
    prog = loaded_once.get(device.id)
    if prog is None:
        prog = loaded_once[device.id] = device.load_program(images["kernels"])
    return prog


# The backends whose source language is C, OpenCL C or CUDA C++ (remote devices build theirs).
C_LIKE_BACKENDS = ("host", "opencl", "cuda", "amdgpu", "mpi")


def build_or_skip(device, source, **kwargs):
    """``device.build_program(source)``; a skip where the backend builds nothing from source, or
    builds a language other than C, OpenCL C and CUDA C++ (a third-party backend's own)."""
    try:
        return device.build_program(source, **kwargs)
    except pyoffload.OffloadError as exc:
        if exc.errc is pyoffload.Errc.UNSUPPORTED:
            pytest.skip(f"{device.id} builds no programs from source: {exc}")
        if exc.errc is pyoffload.Errc.COMPILE_FAILURE and device.backend not in C_LIKE_BACKENDS:
            pytest.skip(f"{device.id} builds another language than C, OpenCL C or CUDA C++: {exc}")
        raise
