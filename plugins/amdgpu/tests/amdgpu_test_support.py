"""Shared helpers for the AMDGPU plugin's tests (a uniquely named module, not a conftest, so the
plugin's tests can run in one pytest session with every other test directory)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from pyoffload_amdgpu import conformance, plugin
from pyoffload_amdgpu.fake_hip import FakeHip


def toolchain_or_skip() -> tuple[str, str]:
    tools = conformance.toolchain()
    if tools is None:
        pytest.skip("clang/ld.lld for amdgcn not installed (apt-get install clang-15 lld-15)")
    return tools


def conformance_images(arch: str = "gfx90a") -> dict[str, bytes]:
    toolchain_or_skip()
    images = conformance.images(arch)
    assert images is not None
    return images


def build(source: str, arch: str = "gfx90a") -> bytes:
    return conformance.build(source, arch, toolchain_or_skip())


@contextlib.contextmanager
def fake_backend(monkeypatch: pytest.MonkeyPatch, **fake_options: Any) -> Iterator[tuple[FakeHip, list[Any]]]:
    """Initialise the plugin on a fresh fake; yield (fake, device handles); deinit afterwards."""
    fake = FakeHip(**fake_options)
    monkeypatch.setattr("pyoffload_amdgpu.driver.load_binding", lambda: fake)
    platforms = plugin.init_impl()
    devices = [d.handle for d in platforms[0].devices]
    try:
        yield fake, devices
    finally:
        plugin.deinit_impl()
