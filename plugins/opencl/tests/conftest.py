"""Fixtures for the OpenCL backend's own tests: real OpenCL devices (PoCL here), through the
public pyoffload API.  Tests that need a device skip when this machine has none."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import pyoffload


def _opencl_devices() -> list[pyoffload.Device]:
    return [d for d in pyoffload.devices() if d.backend == "opencl"]


@pytest.fixture(scope="session")
def ocl_devices() -> list[pyoffload.Device]:
    devs = _opencl_devices()
    if not devs:
        reports = [r for r in pyoffload.plugins() if r.name == "opencl"]
        pytest.skip(f"no OpenCL device: {reports[0].reason if reports else 'plugin not installed'}")
    return devs


@pytest.fixture(scope="session")
def dev(ocl_devices: list[pyoffload.Device]) -> pyoffload.Device:
    return ocl_devices[0]


@pytest.fixture
def queue(dev: pyoffload.Device):
    q = dev.create_queue()
    yield q
    q.destroy()


@pytest.fixture(scope="session")
def conformance_source(dev: pyoffload.Device) -> dict[str, bytes]:
    from pyoffload_opencl.plugin import conformance_images_impl

    return conformance_images_impl(dev.handle)


@pytest.fixture
def kernels(dev: pyoffload.Device, conformance_source: dict[str, bytes]):
    prog = dev.load_program(conformance_source["kernels"])
    yield prog
    if prog.loaded:
        prog.unload()


@pytest.fixture(scope="session")
def clang(tmp_path_factory: pytest.TempPathFactory):
    """A function compiling OpenCL C to LLVM bitcode for a SPIR triple, or a skip."""
    exe = shutil.which("clang-15") or shutil.which("clang")
    if exe is None:
        pytest.skip("clang is not installed (Debian: clang-15)")
    workdir = tmp_path_factory.mktemp("spir")

    def compile_spir(source: str, triple: str = "spir64-unknown-unknown") -> bytes:
        src = workdir / "k.cl"
        out = workdir / f"k-{triple}.bc"
        src.write_text(source)
        subprocess.run(
            [
                exe,
                "-cc1",
                "-emit-llvm-bc",
                "-triple",
                triple,
                "-cl-std=CL1.2",
                "-finclude-default-header",
                "-cl-kernel-arg-info",
                str(src),
                "-o",
                str(out),
            ],
            check=True,
            capture_output=True,
        )
        return Path(out).read_bytes()

    return compile_spir
