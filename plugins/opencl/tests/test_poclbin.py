"""PoCL program binaries are checked before the driver sees them: truncated or corrupted length
fields are ``INVALID_BINARY``, never an abort inside PoCL.

The structural check is fuzzed in process (it must raise nothing but ``InvalidBinaryError``);
then mutants that target the binary's lengths and counts, and truncations, are loaded through
pyoffload in a child process, so that an abort shows up as a failed test, not a dead runner.
Corrupted *contents* (bitcode, kernel objects) under a fresh build hash still crash PoCL 3.1 —
see docs/backends/opencl.md.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pyoffload
from pyoffload import Errc, InvalidBinaryError
from pyoffload_opencl import poclbin

SOURCE = (
    "__kernel void k(__global int *o, int n, __local float *s) { o[0] = n; }\n"
    "__kernel void j(__global float *o) { o[0] = 1; }\n"
)


@pytest.fixture(scope="module")
def binary(dev) -> bytes:
    prog = dev.build_program(SOURCE)
    try:
        import pyopencl as cl

        data = bytes(prog.native.get_info(cl.program_info.BINARIES)[0])
    finally:
        prog.unload()
    if not data.startswith(b"poclbin\x00"):
        pytest.skip(f"{dev.id} does not produce PoCL binaries")
    return data


def length_fields(data: bytes) -> list[tuple[int, int]]:
    """(offset, width) of every length and count the check reads in ``data``."""
    found: list[tuple[int, int]] = []
    reader = poclbin._Reader
    orig = reader.unpack

    def record(self, fmt, what):  # type: ignore[no-untyped-def]
        found.append((self.pos, fmt.size))
        return orig(self, fmt, what)

    reader.unpack = record  # type: ignore[method-assign]
    try:
        poclbin.check(data)
    finally:
        reader.unpack = orig  # type: ignore[method-assign]
    return found


def mutant(data: bytes, fields: list[tuple[int, int]], seed: int) -> bytes:
    rng = random.Random(seed)
    if rng.random() < 0.3:
        return data[: rng.randrange(1, len(data))]
    b = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        off, width = rng.choice(fields)
        value = rng.choice([0, 1, 2**31, 2**32 - 1, 2**64 - 1, rng.randrange(2 ** (8 * width))]) % 2 ** (8 * width)
        b[off : off + width] = value.to_bytes(width, "little")
    return bytes(b)


def test_the_check_accepts_what_pocl_writes(binary):
    poclbin.check(binary)
    assert len(length_fields(binary)) > 20


@pytest.mark.parametrize("cut", [1, 8, 52, 76, 77, 85, 200, -1000, -1])
def test_truncated_binaries_are_invalid(dev, binary, cut):
    with pytest.raises(InvalidBinaryError) as err:
        dev.load_program(binary[:cut])
    assert err.value.errc is Errc.INVALID_BINARY


def test_another_format_version_is_refused(binary):
    data = bytearray(binary)
    data[16:20] = (poclbin.VERSION + 1).to_bytes(4, "little")
    with pytest.raises(InvalidBinaryError, match="version"):
        poclbin.check(bytes(data))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.data())
def test_the_check_raises_only_invalid_binary(binary, data):
    fields = length_fields(binary)
    image = mutant(binary, fields, data.draw(st.integers(0, 2**32)))
    try:
        poclbin.check(image)
    except InvalidBinaryError:
        pass


def test_mutated_lengths_never_crash_the_loader(binary, tmp_path):
    """A child process loads 300 mutants through pyoffload; each is loaded or refused."""
    fields = length_fields(binary)
    (tmp_path / "good.bin").write_bytes(binary)
    images = tmp_path / "mutants"
    images.mkdir()
    for seed in range(300):
        (images / f"{seed}.bin").write_bytes(mutant(binary, fields, seed))
    script = textwrap.dedent(f"""
        import pathlib, pyoffload
        dev = next(d for d in pyoffload.devices() if d.backend == "opencl")
        loaded = refused = 0
        for path in sorted(pathlib.Path({str(images)!r}).iterdir(), key=lambda p: int(p.stem)):
            print(path.stem, flush=True)
            try:
                dev.load_program(path.read_bytes()).unload()
                loaded += 1
            except pyoffload.OffloadError:
                refused += 1
        print("done", loaded, refused)
    """)
    env = dict(os.environ, PYOFFLOAD_PLUGINS="opencl")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "(nothing)"
    assert proc.returncode == 0, f"the loader died on mutant {last}: {proc.stderr[-2000:]}"
    _, loaded, refused = last.split()
    assert int(loaded) + int(refused) == 300 and int(refused) > 200, last


def test_pyoffload_is_still_usable_after_refusals(dev, binary):
    for cut in (10, 100, 1000):
        with pytest.raises(InvalidBinaryError):
            dev.load_program(binary[:cut])
    with dev.load_program(binary) as prog:
        assert {s.name for s in prog.symbols()} >= {"k", "j"}
    assert isinstance(pyoffload.devices(), list)
