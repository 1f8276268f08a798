"""Fuzzing the host backend's image loading: mutants of valid ELF shared objects (bit flips, byte
and field overwrites in the headers and in the tables the dynamic loader reads, huge length
fields, truncations) are loaded one after another.  Each load must either succeed, and then its
symbols resolve and it unloads, or raise an ``OffloadError`` (``InvalidBinaryError`` for a
malformed image); nothing may crash or hang the process.

The loads run in a worker subprocess so that a crash inside ``dlopen`` is a test failure naming
the mutant, not a dead test runner.  ``PYOFFLOAD_FUZZ_EXAMPLES`` sets how many mutants each
image gets (a few hundred by default: seconds).  Run as a script, this file is the worker
(``--worker``) or the offline campaign (``--campaign N``: N mutants per image, every crash
listed; see docs/reliability.md).
"""

from __future__ import annotations

import collections
import io
import os
import struct
import subprocess
import sys
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

EXAMPLES = int(os.environ.get("PYOFFLOAD_FUZZ_EXAMPLES", "300"))
LOAD_TIMEOUT_S = 30.0

# An image that needs libc: DT_NEEDED, symbol versions, PLT relocations, TLS, a constructor and
# a destructor that call into libc.
LIBC_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
__thread int32_t tls_counter = 0;
static int32_t *heap = 0;
__attribute__((constructor)) static void init(void) { heap = calloc(16, sizeof *heap); }
__attribute__((destructor)) static void fini(void) { free(heap); }
void copy_bytes(char *dst, const char *src, int64_t n) { memcpy(dst, src, (size_t)n); tls_counter += 1; }
int32_t table[4] = {1, 2, 3, 4};
"""

HUGE = (
    0,
    1,
    0x7F,
    0x80,
    0xFF,
    0xFFFF,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
    1 << 32,
    1 << 47,
    1 << 63,
    (1 << 64) - 1,
    (1 << 64) - 8,
)


# -------------------------------------------------------------------------------------------
# the worker: loads what it is sent, answers with the outcome
# -------------------------------------------------------------------------------------------


def _worker() -> None:
    import pyoffload

    dev = pyoffload.host_device()
    inp, out = sys.stdin.buffer, sys.stdout
    while True:
        head = inp.read(4)
        if len(head) < 4:
            return
        (n,) = struct.unpack("<I", head)
        image = inp.read(n)
        try:
            prog = dev.load_program(image)
        except pyoffload.InvalidBinaryError as exc:
            outcome = f"invalid {exc}"
        except pyoffload.OffloadError as exc:
            outcome = f"error {type(exc).__name__} {exc.errc.name}: {exc}"
        except BaseException as exc:  # reported, not raised: the parent fails the example
            outcome = f"unexpected {type(exc).__name__}: {exc}"
        else:
            try:
                for sym in prog.symbols():
                    if sym.kind.name == "KERNEL":
                        prog.kernel(sym.name)
                    elif sym.size:  # a listed global's bytes must be readable
                        prog.global_variable(sym.name).read()
                prog.unload()
                outcome = "loaded"
            except BaseException as exc:
                outcome = f"unexpected after load {type(exc).__name__}: {exc}"
        out.write(outcome.replace("\n", " ") + "\n")
        out.flush()


class Worker:
    """One worker process, restarted after it dies."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYOFFLOAD_PLUGINS="")  # the host backend only
        return subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )

    def load(self, image: bytes) -> str:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(struct.pack("<I", len(image)) + image)
            proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = _readline(proc, LOAD_TIMEOUT_S)
        if line is None:
            proc.kill()
            proc.wait()
            self.proc = None
            return f"hung for {LOAD_TIMEOUT_S} s"
        if not line:
            code = proc.wait()
            err = proc.stderr.read().decode(errors="replace")[-600:] if proc.stderr is not None else ""
            self.proc = None
            return f"crashed with exit status {code}: {err}"
        return line.decode(errors="replace").rstrip("\n")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


def _readline(proc: subprocess.Popen[bytes], timeout: float) -> bytes | None:
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline() if ready else None


# -------------------------------------------------------------------------------------------
# the images and where to mutate them
# -------------------------------------------------------------------------------------------

# Sections the dynamic loader (or the symbol listing) reads while loading.
LOADER_SECTIONS = (
    ".dynamic",
    ".dynsym",
    ".dynstr",
    ".gnu.hash",
    ".hash",
    ".rela.dyn",
    ".rela.plt",
    ".gnu.version",
    ".gnu.version_r",
    ".gnu.version_d",
    ".init_array",
    ".fini_array",
    ".symtab",
)


def regions(image: bytes) -> list[tuple[str, int, int]]:
    """(name, start, end) of the ELF header, the program and section header tables and the
    sections the loader reads, from an independent parse of the valid image."""
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(image))
    h = elf.header
    out = [
        ("ehdr", 0, h["e_ehsize"]),
        ("phdrs", h["e_phoff"], h["e_phoff"] + h["e_phnum"] * h["e_phentsize"]),
        ("shdrs", h["e_shoff"], h["e_shoff"] + h["e_shnum"] * h["e_shentsize"]),
    ]
    for sec in elf.iter_sections():
        if sec.name in LOADER_SECTIONS and sec["sh_type"] != "SHT_NOBITS" and sec["sh_size"]:
            out.append((sec.name, sec["sh_offset"], sec["sh_offset"] + sec["sh_size"]))
    return out


def symbol_fields(image: bytes) -> list[tuple[int, int]]:
    """Byte ranges of the symbol index of every relocation: a mutation there that still names a
    symbol of the table leaves a well-formed image that binds a slot to another real symbol (a
    call to ``free`` where ``calloc`` was meant).  No structural check can tell; see
    docs/reliability.md."""
    from elftools.elf.elffile import ELFFile

    out = []
    for sec in ELFFile(io.BytesIO(image)).iter_sections():
        if sec["sh_type"] == "SHT_RELA" and sec["sh_entsize"] == 24:
            for entry in range(sec["sh_offset"], sec["sh_offset"] + sec["sh_size"], 24):
                out.append((entry + 12, entry + 16))  # the high half of r_info
    return out


def retargets_only(muts: list[Mutation], fields: list[tuple[int, int]]) -> bool:
    """Whether every mutation stays inside one relocation's symbol index."""
    return all(
        kind in ("flip", "byte", "field") and any(a <= pos and pos + width <= b for a, b in fields)
        for kind, pos, _, width in muts
    )


@pytest.fixture(scope="module")
def images() -> dict[str, bytes]:
    from pyoffload.host.compiler import compile_c, packaged_image

    return {
        "kernels": packaged_image("conformance_kernels"),
        "ctor_dtor": packaged_image("conformance_ctor_dtor"),
        "libc": compile_c(LIBC_SOURCE),
    }


@pytest.fixture(scope="module")
def worker() -> Any:
    w = Worker()
    yield w
    w.close()


Mutation = tuple[str, int, int, int]  # (kind, position, value, width)


@st.composite
def mutations(draw: Any, size: int, where: list[tuple[str, int, int]]) -> list[Mutation]:
    """One to three mutations of an image of ``size`` bytes, aimed at ``where``."""
    out: list[Mutation] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(("flip", "byte", "field", "field", "truncate")))
        _name, start, end = draw(st.sampled_from(where))
        pos = draw(st.integers(start, end - 1))
        if kind == "flip":
            out.append(("flip", pos, 1 << draw(st.integers(0, 7)), 1))
        elif kind == "byte":
            out.append(("byte", pos, draw(st.integers(0, 255)), 1))
        elif kind == "field":  # a 4- or 8-byte length, offset, count or address field
            width = draw(st.sampled_from((4, 8)))
            value = draw(st.sampled_from(HUGE) | st.integers(0, size * 2) | st.integers(0, (1 << 64) - 1))
            out.append(("field", pos - pos % width, value & ((1 << 8 * width) - 1), width))
        else:
            out.append(("truncate", draw(st.integers(0, size - 1)), 0, 0))
            break
    return out


def mutate(image: bytes, muts: list[Mutation]) -> bytes:
    data = bytearray(image)
    for kind, pos, value, width in muts:
        if kind == "flip":
            data[pos] ^= value
        elif kind == "byte":
            data[pos] = value
        elif kind == "field":
            data[pos : pos + width] = value.to_bytes(width, "little")
        else:
            del data[pos:]
    return bytes(data)


OUTCOMES: collections.Counter[str] = collections.Counter()


@pytest.mark.parametrize("name", ["kernels", "ctor_dtor", "libc"])
def test_mutated_images_load_or_fail_cleanly(images: dict[str, bytes], worker: Worker, name: str) -> None:
    image = images[name]
    assert worker.load(image) == "loaded", "the unmutated image must load"
    where = regions(image)
    fields = symbol_fields(image)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(mutations(len(image), where))
    def one(muts: list[Mutation]) -> None:
        outcome = worker.load(mutate(image, muts))
        kind = outcome.split(" ", 1)[0]
        if kind == "crashed" and retargets_only(muts, fields):
            OUTCOMES[f"{name} retargeted relocation"] += 1  # well-formed, and fatal: documented
            return
        OUTCOMES[f"{name} {kind}"] += 1
        assert kind in ("loaded", "invalid", "error"), outcome
        if kind == "error":  # anything but a malformed image must say so through its own class
            assert "InvalidBinaryError" not in outcome, outcome

    one()
    assert OUTCOMES[f"{name} invalid"] > 0, "no mutant was refused: the mutations do not reach the image"
    if os.environ.get("PYOFFLOAD_FUZZ_REPORT"):
        print(
            f"\n{name}: "
            + ", ".join(f"{k.split(' ', 1)[1]} {v}" for k, v in sorted(OUTCOMES.items()) if k.startswith(name + " "))
        )


def test_worker_reports_a_crash(worker: Worker) -> None:
    """The harness itself: a process that dies while loading is reported, not hidden."""
    w = Worker()
    w.proc = subprocess.Popen(
        [sys.executable, "-c", "import os, sys; sys.stdin.buffer.read(4); os.abort()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert w.load(b"\x7fELF").startswith("crashed with exit status")


def campaign(examples: int) -> None:
    """The offline campaign: ``examples`` mutants of each image, every crash or hang listed with
    its mutations instead of stopping at the first."""
    from pyoffload.host.compiler import compile_c, packaged_image

    found = {
        "kernels": packaged_image("conformance_kernels"),
        "ctor_dtor": packaged_image("conformance_ctor_dtor"),
        "libc": compile_c(LIBC_SOURCE),
    }
    worker = Worker()
    for name, image in found.items():
        counts: collections.Counter[str] = collections.Counter()

        @settings(
            max_examples=examples,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            phases=[hypothesis.Phase.generate],
        )
        @given(mutations(len(image), regions(image)))
        def one(muts: list[Mutation]) -> None:
            outcome = worker.load(mutate(image, muts))
            kind = outcome.split(" ", 1)[0]
            counts[kind] += 1
            if kind not in ("loaded", "invalid", "error"):
                print(f"{name}: {muts}: {outcome[:300]}", flush=True)

        one()
        print(
            f"{name}: {sum(counts.values())} mutants: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
            flush=True,
        )
    worker.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _worker()
    elif sys.argv[1:2] == ["--campaign"]:
        campaign(int(sys.argv[2]))
