"""The conformance programs are built with nvcc at run time, in each format, and cached."""

from __future__ import annotations

import io

import pytest

from pyoffload.backend import CompileError, Errc
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


CALLER = """
extern __device__ int twice_plus_one(int x);
extern "C" __global__ void fill(int *out, int n) { for (int i = 0; i < n; i++) out[i] = twice_plus_one(i); }
"""
CALLEE = "__device__ int twice_plus_one(int x) { return 2 * x + 1; }\n"


def test_linked_sources_make_one_cubin_with_the_callee(nvcc):
    from elftools.elf.elffile import ELFFile

    image = conformance.link_sources((CALLER, CALLEE), 80, (), nvcc)
    assert image[:4] == b"\x7fELF"
    symbols = {s.name: s for s in ELFFile(io.BytesIO(image)).get_section_by_name(".symtab").iter_symbols()}
    assert symbols["fill"]["st_shndx"] != "SHN_UNDEF"
    assert symbols["_Z14twice_plus_onei"]["st_shndx"] != "SHN_UNDEF"  # resolved by nvlink, defined here


def test_a_link_with_an_undefined_function_is_a_link_failure_naming_it(nvcc):
    with pytest.raises(CompileError) as err:
        conformance.link_sources((CALLER, "__device__ int unrelated(int x) { return x; }\n"), 80, (), nvcc)
    assert err.value.errc is Errc.LINK_FAILURE
    assert "twice_plus_one" in str(err.value) and "undefined" in str(err.value).lower()
    assert "nvlink" in err.value.build_log and "twice_plus_one" in err.value.build_log


def test_a_compile_error_in_one_source_names_it(nvcc):
    with pytest.raises(CompileError) as err:
        conformance.link_sources((CALLEE, "__device__ int broken( {\n"), 80, (), nvcc)
    assert err.value.errc is Errc.COMPILE_FAILURE
    assert "source 1" in str(err.value) and "source1.cu" in err.value.build_log


def test_build_program_links_on_the_fake_driver(fake_runtime, tmp_path, monkeypatch, nvcc):
    import pyoffload

    monkeypatch.setenv("PYOFFLOAD_CACHE_DIR", str(tmp_path))
    dev = fake_runtime[0]
    with dev.build_program([CALLER, CALLEE]) as prog:
        assert [s.name for s in prog.symbols() if s.kind.name == "KERNEL"] == ["fill"]
    built = pyoffload.build_image([CALLER, CALLEE], target=dev.target)
    assert built.image[:4] == b"\x7fELF"  # a cubin: nvlink links machine code, not PTX
    with pytest.raises(pyoffload.OffloadError) as err:
        pyoffload.build_image([CALLER, CALLEE], target="cuda:sm_10000")
    assert err.value.errc is Errc.UNSUPPORTED and "cannot link" in str(err.value)
