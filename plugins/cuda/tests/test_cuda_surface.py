"""The fake cannot drift from pycuda: everything the plugin uses of pycuda.driver is declared in
pyoffload_cuda.surface, exists in the real pycuda.driver with a compatible call signature, and
in the fake driver likewise.

The real module needs a libcuda to import: the check runs in a subprocess, with the machine's
driver where there is one, else with the link-time stand-in (tools/gen_libcuda_stub.py).
Nothing in it calls the driver.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

from pyoffload_cuda import surface
from pyoffload_cuda.fake import FakeDriver

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE = HERE.parent / "pyoffload_cuda"
TOOLS = HERE.parent / "tools"
# The modules that talk to the binding (the fake and the pure-Python helpers do not).
PLUGIN_MODULES = ["plugin.py", "binding.py"]

sys.path.insert(0, str(HERE))
import cuda_surface_check as surface_check  # noqa: E402


def _binding_uses() -> tuple[set[str], set[tuple[str, str]], set[str]]:
    """(``cuda.X`` names, ``cuda.X.Y`` pairs, every attribute name) in the plugin's source."""
    top: set[str] = set()
    second: set[tuple[str, str]] = set()
    attrs: set[str] = set()

    def is_binding(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "cuda") or (
            isinstance(node, ast.Attribute) and node.attr == "cuda"
        )

    for name in PLUGIN_MODULES:
        tree = ast.parse((PACKAGE / name).read_text(), name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                attrs.add(node.attr)
                if is_binding(node.value):
                    top.add(node.attr)
                elif isinstance(node.value, ast.Attribute) and is_binding(node.value.value):
                    second.add((node.value.attr, node.attr))
    return top, second, attrs


def test_every_binding_access_is_declared():
    top, second, _ = _binding_uses()
    assert top, "the scan found no cuda.X access at all"
    assert top <= surface.module_level_names(), top - surface.module_level_names()
    for group, name in second:
        if group in surface.CONSTANTS:
            assert name in surface.CONSTANTS[group], f"cuda.{group}.{name} is not declared"
        elif group in surface.CLASS_FUNCTIONS:
            assert name in surface.CLASS_FUNCTIONS[group], f"cuda.{group}.{name} is not declared"
        else:
            pytest.fail(f"cuda.{group}.{name}: {group} is neither a constant group nor a class")


def test_fake_driver_matches_the_surface():
    assert surface_check.check(FakeDriver()) == []


def test_checker_refuses_wrong_calls():
    fake = FakeDriver()
    assert surface_check.call_ok(fake.memcpy_htod, 5, (), False, "memcpy_htod")
    assert surface_check.call_ok(fake.Function.prepared_async_call, 3, ("nope",), True, "Function.prepared_async_call")
    assert surface_check.call_ok(fake.Module.get_function, 0, (), True, "Module.get_function")


def _check_real(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HERE / "cuda_surface_check.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=HERE,
        timeout=120,
    )


@pytest.fixture(scope="module")
def real_surface(tmp_path_factory):
    """The real pycuda.driver's surface, whenever pycuda is installed: imported as it is (a
    machine with a driver), else against the link-time stand-in built from the toolkit's cuda.h.
    Skipped only where neither works, and then a failure under PYOFFLOAD_CUDA_REQUIRE_PYCUDA=1."""

    def unavailable(reason: str) -> None:
        if os.environ.get("PYOFFLOAD_CUDA_REQUIRE_PYCUDA") == "1":
            pytest.fail(reason)
        pytest.skip(reason)

    if importlib.util.find_spec("pycuda") is None:
        unavailable("pycuda is not installed (plugins/cuda/tools/build_pycuda.sh builds it)")
    proc = _check_real(dict(os.environ))
    if proc.returncode != 0 and "libcuda.so.1" in proc.stderr:  # no driver here: use the stand-in
        cuda_root = os.environ.get("CUDA_ROOT", "/usr/local/cuda")
        if not (pathlib.Path(cuda_root) / "include" / "cuda.h").exists():
            unavailable(f"pycuda needs libcuda.so.1 and there are no CUDA headers under {cuda_root} for a stand-in")
        out = tmp_path_factory.mktemp("stub")
        subprocess.run(
            [sys.executable, str(TOOLS / "gen_libcuda_stub.py"), cuda_root, str(out / "stub.c")],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                "cc",
                "-shared",
                "-fPIC",
                "-Wl,-soname,libcuda.so.1",
                "-o",
                str(out / "libcuda.so.1"),
                str(out / "stub.c"),
            ],
            check=True,
        )
        proc = _check_real(dict(os.environ, LD_LIBRARY_PATH=str(out)))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_real_pycuda_matches_the_surface(real_surface):
    assert real_surface["problems"] == []
    assert all(real_surface["negative"]), real_surface["negative"]


def test_no_pycuda_method_is_used_undeclared(real_surface):
    """Attribute names in the plugin that are members of the pycuda classes it uses must be
    declared: a method call on a pycuda object that the surface forgot would fail here."""
    _, _, attrs = _binding_uses()
    pycuda_members = {m for members in real_surface["members"].values() for m in members}
    declared = surface.method_names() | surface.module_level_names()
    assert (attrs & pycuda_members) - declared == set()


def test_fake_classes_have_the_declared_members():
    fake = FakeDriver()
    members = surface_check.member_names(fake)
    for cls, methods in surface.INSTANCE_METHODS.items():
        missing = {m for m in methods if not m.startswith("_")} - set(members[cls])
        assert not missing, (cls, missing)
