"""The conformance programs are built with nvcc at run time, in each format, and cached."""

from __future__ import annotations

import pytest

from pyoffload.backend import CompileError
from pyoffload_cuda import nvcc as conformance


def test_cache_returns_the_same_bytes(nvcc):
    a = conformance.build("kernels", "ptx", 80, nvcc)
    b = conformance.build("kernels", "ptx", 80, nvcc)
    assert a is b
    assert b".target sm_80" in a


def test_formats_differ(built):
    assert built["ptx"]["kernels"].lstrip().startswith(b"//") or b".version" in built["ptx"]["kernels"][:2048]
    assert built["cubin"]["kernels"][:4] == b"\x7fELF"
    assert built["fatbin"]["kernels"][:4] == b"\x50\xed\x55\xba"


def test_pick_arch(nvcc):
    archs = conformance.supported_archs(nvcc)
    assert 80 in archs
    assert conformance.pick_arch(nvcc, 80) == 80
    # A GPU newer than the toolkit gets the newest PTX it can JIT forward; older: nothing.
    assert conformance.pick_arch(nvcc, 10_000) == archs[-1]
    assert conformance.pick_arch(nvcc, 10) is None


def test_conformance_images_default_is_ptx(nvcc, monkeypatch):
    monkeypatch.delenv("PYOFFLOAD_CUDA_CONFORMANCE_FORMAT", raising=False)
    imgs = conformance.conformance_images(80)
    assert set(imgs) == {"kernels", "ctor_dtor"}
    assert b".entry nvptx$device$init" in imgs["ctor_dtor"]


def test_conformance_images_other_format(nvcc, monkeypatch):
    monkeypatch.setenv("PYOFFLOAD_CUDA_CONFORMANCE_FORMAT", "cubin")
    assert conformance.conformance_images(80)["kernels"][:4] == b"\x7fELF"


def test_no_nvcc_means_no_images(monkeypatch):
    monkeypatch.setattr(conformance, "find_nvcc", lambda: None)
    assert conformance.conformance_images(80) is None


def test_compile_error_has_the_log(nvcc, tmp_path, monkeypatch):
    bad = tmp_path / "bad.cu"
    bad.write_text("__global__ void k() { this is not cuda; }\n")
    monkeypatch.setattr(conformance, "KERNEL_DIR", tmp_path)
    monkeypatch.setitem(conformance.SOURCES, "broken", "bad.cu")
    with pytest.raises(CompileError) as err:
        conformance.build("broken", "ptx", 80, nvcc)
    assert "source.cu" in err.value.build_log and "this is not cuda" in err.value.build_log
