"""Shared fixtures: nvcc-built images, and a pyoffload runtime on the fake driver."""

from __future__ import annotations

import pytest

from pyoffload_cuda import nvcc as conformance


@pytest.fixture(scope="session")
def nvcc() -> str:
    path = conformance.find_nvcc()
    if path is None:
        pytest.skip("nvcc not found (set CUDA_ROOT)")
    return path


@pytest.fixture(scope="session")
def built(nvcc):
    """Both conformance programs in every format, for sm_80."""
    return {
        fmt: {name: conformance.build(name, fmt, 80, nvcc) for name in conformance.SOURCES}
        for fmt in conformance.FORMATS
    }


def shutdown_quietly() -> None:
    import pyoffload

    try:
        pyoffload.shutdown()
    except pyoffload.OffloadError:
        pass  # not initialised


@pytest.fixture
def fake_runtime(monkeypatch):
    """pyoffload with only the CUDA backend, on the fake driver (two sm_80 devices)."""
    import pyoffload

    shutdown_quietly()
    monkeypatch.setenv("PYOFFLOAD_CUDA_DRIVER", "fake")
    monkeypatch.setenv("PYOFFLOAD_PLUGINS", "cuda")
    monkeypatch.delenv("PYOFFLOAD_DEVICES", raising=False)
    devices = [d for d in pyoffload.devices() if d.backend == "cuda"]
    assert len(devices) == 2, pyoffload.plugins()
    yield devices
    shutdown_quietly()


@pytest.fixture
def driver(fake_runtime):
    """The fake driver behind ``fake_runtime``."""
    from pyoffload_cuda import plugin

    assert plugin._devices
    return plugin._devices[0].cuda
