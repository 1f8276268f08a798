"""The on-disk build cache across machines: an image built for the building CPU alone is never
handed to another CPU that shares the cache directory."""

from __future__ import annotations

import platform
from typing import Any

import pytest

import pyoffload
import pyoffload.build as build

SOURCE = "void cache_native_probe(int *out) { out[0] = 7; }\n"
TARGET = f"host:{platform.machine()}"


@pytest.fixture
def shared_cache(tmp_path: Any, monkeypatch: Any) -> Any:
    monkeypatch.setenv("PYOFFLOAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PYOFFLOAD_BUILD_CACHE", "1")
    return tmp_path


def _key_on(cpu: str, options: list[str], monkeypatch: Any) -> str:
    monkeypatch.setattr(build, "cpu_identity", lambda: cpu)
    return str(pyoffload.build_image(SOURCE, TARGET, options=options).key)


def test_an_image_for_the_native_cpu_is_cached_per_cpu(shared_cache: Any, monkeypatch: Any) -> None:
    native = ["-O2", "-march=native"]
    first = _key_on("cpu A", native, monkeypatch)
    assert _key_on("cpu A", native, monkeypatch) == first  # the same machine finds its entry
    assert _key_on("cpu B", native, monkeypatch) != first  # another CPU builds its own


def test_a_portable_image_is_shared_between_cpus(shared_cache: Any, monkeypatch: Any) -> None:
    portable = ["-O2"]
    assert _key_on("cpu A", portable, monkeypatch) == _key_on("cpu B", portable, monkeypatch)


def test_the_cpu_identity_names_the_instruction_set() -> None:
    identity = build.cpu_identity()
    assert identity and isinstance(identity, str)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), None)
    except OSError:
        flags = None
    if flags is not None:
        assert flags.rstrip("\n") in identity
