"""The conformance programs are built for real with clang and lld, per processor, once per process."""

from __future__ import annotations

import io

import pytest
from amdgpu_test_support import build, conformance_images, toolchain_or_skip
from elftools.elf.elffile import ELFFile
from pyoffload.backend import CompileError, Errc

from pyoffload_amdgpu import codeobject, conformance


def _dynamic_symbols(image: bytes) -> dict[str, tuple[str, str]]:
    elf = ELFFile(io.BytesIO(image))
    return {
        s.name: (s["st_info"]["type"], s["st_other"]["visibility"])
        for s in elf.get_section_by_name(".dynsym").iter_symbols()
    }


def test_images_are_amdgpu_code_objects_for_the_device():
    images = conformance_images("gfx90a")
    assert set(images) == {"kernels", "ctor_dtor"}
    for image in images.values():
        assert codeobject.is_amdgpu_elf(image)
        assert ELFFile(io.BytesIO(image))["e_type"] == "ET_DYN"
        assert codeobject.parse(image).target.endswith("gfx90a")


def test_images_are_cached_per_process():
    first, second = conformance_images(), conformance_images()
    assert first["kernels"] is second["kernels"]


def test_arch_selects_the_processor():
    toolchain_or_skip()
    assert codeobject.parse(conformance.images("gfx1030")["kernels"]).arch == "gfx1030"


def test_globals_are_exported_and_entry_points_have_llvm_names():
    kernels = _dynamic_symbols(conformance_images()["kernels"])
    assert kernels["counter"] == ("STT_OBJECT", "STV_DEFAULT")
    assert kernels["table"] == ("STT_OBJECT", "STV_DEFAULT")
    assert kernels["iota_i32"][0] == "STT_FUNC" and kernels["iota_i32.kd"][0] == "STT_OBJECT"
    ctor = _dynamic_symbols(conformance_images()["ctor_dtor"])
    for name in ("amdgcn.device.init", "amdgcn.device.fini"):
        assert ctor[name][0] == "STT_FUNC"
        assert ctor[f"{name}.kd"][0] == "STT_OBJECT"


def test_sources_ship_with_the_package():
    assert "void iota_i32(" in conformance.source("kernels")
    assert "__attribute__((constructor))" in conformance.source("ctor_dtor")


def test_compile_error_carries_the_build_log():
    with pytest.raises(CompileError) as err:
        build("kernel void broken(global int *p) { p[0] = undeclared_thing; }")
    assert "undeclared_thing" in err.value.build_log
    assert "clang" in str(err.value)


def test_missing_toolchain_means_no_images(monkeypatch):
    monkeypatch.setenv(conformance.CLANG_ENV, "/nonexistent/clang")
    assert conformance.toolchain() is None
    assert conformance.images("gfx942") is None
    with pytest.raises(CompileError, match="no clang"):
        conformance.build("kernel void k(void) {}", "gfx90a")


SOURCE = """
kernel __attribute__((amdgpu_flat_work_group_size(1, 1024))) void fill7(global int *out, int n) {
    uint i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() + __builtin_amdgcn_workitem_id_x();
    if (i < (uint)n) out[i] = 7;
}
"""


def test_build_program_compiles_opencl_c_for_the_device_and_caches_it(monkeypatch, tmp_path):
    """Device.build_program on AMDGPU: clang for the device's processor, a cached code object,
    and the compiler's log in CompileError."""
    import pyoffload

    toolchain_or_skip()
    try:
        pyoffload.shutdown()
    except pyoffload.OffloadError:
        pass
    monkeypatch.setenv("PYOFFLOAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PYOFFLOAD_AMDGPU_DRIVER", "fake")
    monkeypatch.setenv("PYOFFLOAD_PLUGINS", "amdgpu")
    try:
        dev = next(d for d in pyoffload.devices() if d.backend == "amdgpu")
        prog = dev.build_program(SOURCE)
        assert [s.name for s in prog.symbols()] == ["fill7"]
        assert prog.kernel("fill7").signature == ("ptr", "i32")
        prog.unload()
        assert any(p.is_file() for p in tmp_path.rglob("*")), "nothing cached"
        dev.build_program(SOURCE).unload()  # from the cache
        with pytest.raises(CompileError) as err:
            dev.build_program("kernel void bad( {}")
        assert "error" in err.value.build_log
    finally:
        pyoffload.shutdown()


CALLER = """
int twice_plus_one(int x);
kernel void fill(global int *out, int n) { for (int i = 0; i < n; i++) out[i] = twice_plus_one(i); }
"""
CALLEE = "int twice_plus_one(int x) { return 2 * x + 1; }\n"


def _symtab(image: bytes) -> dict[str, str]:
    elf = ELFFile(io.BytesIO(image))
    return {s.name: s["st_shndx"] for s in elf.get_section_by_name(".symtab").iter_symbols()}


def test_linked_sources_make_one_code_object_with_the_callee():
    image = conformance.link((CALLER, CALLEE), "gfx90a", toolchain_or_skip())
    assert ELFFile(io.BytesIO(image))["e_type"] == "ET_DYN"
    code = codeobject.parse(image)
    assert set(code.kernels) == {"fill"} and code.kernels["fill"].signature == ("ptr", "i32")
    assert _symtab(image)["twice_plus_one"] != "SHN_UNDEF"  # resolved by ld.lld, defined here


def test_a_link_with_an_undefined_function_is_a_link_failure_naming_it():
    tools = toolchain_or_skip()
    with pytest.raises(CompileError) as err:
        conformance.link((CALLER, "int unrelated(int x) { return x; }\n"), "gfx90a", tools)
    assert err.value.errc is Errc.LINK_FAILURE
    assert "twice_plus_one" in str(err.value) and "undefined" in str(err.value).lower()
    assert "ld.lld" in err.value.build_log and "twice_plus_one" in err.value.build_log


def test_an_undefined_default_visibility_function_fails_the_link_not_the_load():
    # -shared alone leaves an undefined default-visibility symbol to the loader; -z defs
    # refuses it at the link.
    tools = toolchain_or_skip()
    with pytest.raises(CompileError) as err:
        conformance.link((CALLER, "int unrelated(int x) { return x; }\n"), "gfx90a", tools, ("-fvisibility=default",))
    assert err.value.errc is Errc.LINK_FAILURE and "twice_plus_one" in str(err.value)


def test_a_compile_error_in_one_source_names_it():
    tools = toolchain_or_skip()
    with pytest.raises(CompileError) as err:
        conformance.link((CALLEE, "int broken( {\n"), "gfx90a", tools)
    assert err.value.errc is Errc.COMPILE_FAILURE
    assert "source 1" in str(err.value) and "source1.cl" in err.value.build_log


def test_build_image_links_without_a_device():
    import pyoffload

    toolchain_or_skip()
    built = pyoffload.build_image([CALLER, CALLEE], target="amdgpu:gfx90a", cache=False)
    assert set(codeobject.parse(built.image).kernels) == {"fill"}
