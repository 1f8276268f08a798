"""Builds from source (``Device.build_program``): compiler errors as users need them, and the
on-disk build cache surviving damaged entries."""

from __future__ import annotations

import re

import numpy as np

import pytest

import pyoffload
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


def test_an_image_built_without_a_device_loads_later(device, tmp_path, monkeypatch):
    # A framework's compile step: pyoffload.build_image(source, target=...) needs no device (a
    # process pool of compilers); the image loads later on any device of that target.
    monkeypatch.setenv("PYOFFLOAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PYOFFLOAD_BUILD_CACHE", "1")
    target = device.target
    if target is None:
        with pytest.raises(OffloadError) as err:
            pyoffload.build_image(PROBE, target=f"{device.backend}:any")
        assert err.value.errc in (Errc.UNSUPPORTED, Errc.NOT_FOUND)
        pytest.skip(f"{device.id} builds only with its device: {err.value}")
    assert target.partition(":")[0] and ":" in target
    built = pyoffload.build_image(PROBE, target=target, options=[])
    assert isinstance(built.image, bytes) and built.image and built.target == target
    assert re.fullmatch(r"[0-9a-f]{64}", built.key)
    again = pyoffload.build_image(PROBE, target=target)
    assert again.key == built.key and again.image == built.image  # from the cache
    path = build.entry_path(device, PROBE)
    assert path is not None and path.name == f"{built.key}.bin"  # build_program's key is the same
    with device.load_program(built.image) as prog:
        assert prog.kernel("cache_probe") is not None
    with pytest.raises(OffloadError) as err:
        pyoffload.build_image(PROBE, target=target.partition(":")[0] + ":no-such-arch")
    assert err.value.errc is Errc.INVALID_ARGUMENT


def test_building_a_source_twice_in_a_context_loads_it_once(device):
    source = PROBE + f"/* twice {device.id} */\n"
    prog = build_or_skip(device, source)
    try:
        assert device.build_program(source) is prog  # no second build, no second load
        assert device.build_program(source, options=["-DOTHER=1"]) is not prog
    finally:
        for p in {prog, device.build_program(source, options=["-DOTHER=1"])}:
            p.unload()
    fresh = device.build_program(source)  # an unloaded program is never handed out again
    assert fresh is not prog and fresh.loaded
    fresh.unload()


def test_the_compiler_is_chosen_per_build(device):
    # compiler= per build, not only through the environment; a missing one is
    # HOST_TOOL_NOT_FOUND, and a backend whose driver compiles (OpenCL) answers UNSUPPORTED.
    with pytest.raises(OffloadError) as err:
        device.build_program(PROBE, compiler="/nonexistent/cc", cache=False)
    if device.target is None:
        assert err.value.errc is Errc.UNSUPPORTED
        return
    assert err.value.errc is Errc.HOST_TOOL_NOT_FOUND and "/nonexistent/cc" in str(err.value)


# Two translation units: the kernel calls a function only the other defines.
CALLER = """
#if defined(__OPENCL_VERSION__) || defined(__OPENCL_C_VERSION__)
int linked_twice(int x);
__kernel void linked_fill(__global int *out, int n) { for (int i = 0; i < n; i++) out[i] = linked_twice(i); }
#elif defined(__CUDACC__)
extern __device__ int linked_twice(int x);
extern "C" __global__ void linked_fill(int *out, int n) { for (int i = 0; i < n; i++) out[i] = linked_twice(i); }
#else
int linked_twice(int x);
void linked_fill(int *out, int n) { for (int i = 0; i < n; i++) out[i] = linked_twice(i); }
#endif
"""
CALLEE = """
#if defined(__CUDACC__)
__device__
#endif
int linked_twice(int x) { return 2 * x + 1; }
"""
UNRELATED = """
#if defined(__CUDACC__)
__device__
#endif
int linked_other(int x) { return x; }
"""


def _link_error(device, sources):
    """The error of building and linking ``sources``; a skip, with the backend's reason, where it
    cannot link."""
    with pytest.raises(OffloadError) as err:
        device.build_program(sources, cache=False)
    if err.value.errc is Errc.UNSUPPORTED:
        assert "cannot link" in str(err.value)
        pytest.skip(f"{device.id} links no separately compiled sources: {err.value}")
    return err.value


def test_two_sources_linked_into_one_program(device, queue):
    try:
        prog = device.build_program([CALLER, CALLEE], cache=False)
    except OffloadError as exc:
        if exc.errc is not Errc.UNSUPPORTED:
            raise
        assert "cannot link" in str(exc)
        pytest.skip(f"{device.id} links no separately compiled sources: {exc}")
    n = 16
    out = device.alloc(4 * n)
    queue.launch(prog.kernel("linked_fill"), 1, 1, [out, np.int32(n)]).wait()
    got = np.zeros(n, np.int32)
    pyoffload.memcpy(got, out)
    assert np.array_equal(got, 2 * np.arange(n, dtype=np.int32) + 1)
    out.free()
    prog.unload()


def test_a_link_with_an_undefined_symbol_names_it(device):
    err = _link_error(device, [CALLER, UNRELATED])
    assert err.errc is Errc.LINK_FAILURE
    assert "linked_twice" in str(err) and "undefined" in str(err).lower()
    assert "linked_twice" in err.build_log


def test_a_link_of_no_sources_is_refused(device):
    with pytest.raises(OffloadError) as err:
        device.build_program([])
    assert err.value.errc is Errc.INVALID_ARGUMENT
    with pytest.raises(TypeError):
        device.build_program([CALLER, 42])
