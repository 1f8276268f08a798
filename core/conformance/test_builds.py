"""Builds from source (``Device.build_program``): compiler errors as users need them, and the
on-disk build cache surviving damaged entries."""

from __future__ import annotations

import re

import pytest

import pyoffload.build as build
from pyoffload import Errc, OffloadError

from ._util import build_or_skip

# One source for every backend's language: C (host), OpenCL C (OpenCL, AMDGPU), CUDA C++.
PROBE = """
#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)
__kernel void cache_probe(__global int *out) { out[0] = 42; }
#elif defined(__CUDACC__)
extern "C" __global__ void cache_probe(int *out) { out[0] = 42; }
#else
void cache_probe(int *out) { out[0] = 42; }
#endif
"""


def _compile_error(device, source):
    """The error of building ``source``; a skip where the backend builds nothing from source."""
    with pytest.raises(OffloadError) as err:
        device.build_program(source, cache=False)
    if err.value.errc is Errc.UNSUPPORTED:
        pytest.skip(f"{device.id} builds no programs from source: {err.value}")
    return err.value


def test_a_build_error_names_the_compilers_first_error(device):
    err = _compile_error(device, "\n\nthis is not C {")
    assert err.errc is Errc.COMPILE_FAILURE
    message = str(err)
    # The compiler's own first error line, at the line it was found (3), not a summary ("cc
    # failed with exit status 1") or a guess from a parse of the source.
    first = next(line.strip() for line in err.build_log.splitlines() if re.search(r"\berror\b", line, re.I))
    assert first in message
    assert re.search(r"[:(]3[:)]", first), first
    assert "program-scope" not in message


def test_a_damaged_cache_entry_is_discarded_and_rebuilt(device, tmp_path, monkeypatch):
    monkeypatch.setenv("PYOFFLOAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PYOFFLOAD_BUILD_CACHE", "1")
    source = PROBE + f"/* {device.id} */\n"
    with build_or_skip(device, source) as prog:
        prog.kernel("cache_probe")
    path = build.entry_path(device, source)
    if path is None:
        pytest.skip(f"{device.id} names no toolchain: its builds are not cached")
    whole = path.read_bytes()

    def damage(data: bytes) -> None:
        path.write_bytes(data)
        discarded = build.stats.discarded
        with device.build_program(source) as again:
            again.kernel("cache_probe")
        assert build.stats.discarded == discarded + 1, "the damaged entry was used"
        hits = build.stats.hits
        with device.build_program(source) as again:  # the rebuilt entry was stored whole
            again.kernel("cache_probe")
        assert build.stats.hits == hits + 1

    damage(whole[: len(whole) // 2])  # cut short, as a full disk leaves it
    middle = len(whole) // 2
    damage(whole[:middle] + bytes([whole[middle] ^ 0xFF]) + whole[middle + 1 :])  # one byte changed
    damage(b"")  # empty
    damage(path.read_bytes() + b"\0")  # extended
