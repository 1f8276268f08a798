"""The fake cannot drift from hip-python: everything the plugin touches on ``hip.hip`` is collected
from the plugin's source (an AST scan) and checked against the installed hip-python and the fake:
same names, same parameter names, call sites that bind, equal enum and constant values."""

from __future__ import annotations

import ast
import enum
import inspect
from importlib import resources

import pytest

from pyoffload_amdgpu import plugin
from pyoffload_amdgpu.fake_hip import FakeHip
from pyoffload_amdgpu.fake_hip import types as fake_types

real = pytest.importorskip("hip").hip  # hip-python's ``hip.hip``: imports without ROCm
FAKE = FakeHip(device_count=1)
STRUCT_VARIABLES = {"props": "hipDeviceProp_t", "attributes": "hipPointerAttribute_t"}


def _plugin_sources() -> dict[str, ast.Module]:
    package = resources.files("pyoffload_amdgpu")
    return {
        path.name: ast.parse(path.read_text())
        for path in package.iterdir()
        if path.name.endswith(".py")  # the fake_hip package is the other side of the check
    }


def _scan() -> tuple[set[str], set[tuple[str, str]], set[tuple[str, str]], list[tuple[str, int, str]]]:
    """(hip names, (enum, member) pairs, (struct, field) pairs, (function, positional args, where))."""
    names, members, fields, calls = set(), set(), set(), []
    for filename, tree in _plugin_sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id == "hip":
                    names.add(node.attr)
                elif node.value.id in STRUCT_VARIABLES:
                    fields.add((STRUCT_VARIABLES[node.value.id], node.attr))
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name)
                and node.value.value.id == "hip"
            ):
                members.add((node.value.attr, node.attr))
            if isinstance(node, ast.Call):
                where = f"{filename}:{node.lineno}"
                target, args = node.func, node.args
                if isinstance(target, ast.Name) and target.id == "call" and len(args) >= 2:
                    target, args = args[1], args[2:]  # call(hip, hip.hipX, *args)
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "hip"
                    and target.attr.startswith("hip")
                    and not any(isinstance(a, ast.Starred) for a in args)
                ):
                    calls.append((target.attr, len(args), where))
    members |= {("hipMemoryAdvise", name) for name in plugin._ADVICE.values()}  # getattr(hip.hipMemoryAdvise, ...)
    return names, members, fields, calls


NAMES, MEMBERS, FIELDS, CALLS = _scan()


def test_the_scan_found_the_plugins_surface():
    # Guards the scan itself: these are certainly used, so an empty or broken scan fails here.
    assert {"hipInit", "hipMalloc", "hipModuleLaunchKernel", "hipLaunchHostFunc", "hipMemcpyPeerAsync"} <= NAMES
    assert ("hipMemcpyKind", "hipMemcpyHostToDevice") in MEMBERS
    assert ("hipDeviceProp_t", "gcnArchName") in FIELDS
    assert len(CALLS) > 40


@pytest.mark.parametrize("name", sorted(NAMES))
def test_name_exists_in_hip_python_and_the_fake(name):
    assert hasattr(real, name), f"hip-python has no {name}"
    assert hasattr(FAKE, name), f"the fake has no {name}"
    real_value, fake_value = getattr(real, name), getattr(FAKE, name)
    if isinstance(real_value, int) and not isinstance(real_value, enum.Enum):
        assert fake_value == real_value, f"{name}: fake {fake_value} != hip-python {real_value}"
    elif callable(real_value) and not isinstance(real_value, type):
        real_params = list(inspect.signature(real_value).parameters)
        fake_params = list(inspect.signature(fake_value).parameters)
        assert fake_params == real_params, f"{name}: fake takes {fake_params}, hip-python {real_params}"


@pytest.mark.parametrize(("function", "count", "where"), CALLS, ids=[f"{c[0]}@{c[2]}" for c in CALLS])
def test_call_sites_bind_to_the_real_signature(function, count, where):
    placeholders = [object()] * count
    inspect.signature(getattr(real, function)).bind(*placeholders)  # raises TypeError on mismatch
    inspect.signature(getattr(FAKE, function)).bind(*placeholders)


@pytest.mark.parametrize(("enum_name", "member"), sorted(MEMBERS))
def test_enum_members_have_hip_pythons_values(enum_name, member):
    real_member = getattr(getattr(real, enum_name), member)
    fake_member = getattr(getattr(FAKE, enum_name), member)
    assert int(fake_member) == int(real_member)


@pytest.mark.parametrize(("struct", "field"), sorted(FIELDS))
def test_struct_fields_exist_in_hip_python_and_the_fake(struct, field):
    assert hasattr(getattr(real, struct)(), field), f"hip-python's {struct} has no {field}"
    fake_structs = {
        "hipDeviceProp_t": FAKE.hipGetDeviceProperties(0)[1],
        "hipPointerAttribute_t": FAKE.hipPointerGetAttributes(0)[1],
    }
    assert hasattr(fake_structs[struct], field), f"the fake's {struct} has no {field}"


def test_every_fake_enum_member_and_constant_matches_hip_python():
    for fake_enum in (
        fake_types.hipError_t,
        fake_types.hipMemcpyKind,
        fake_types.hipMemoryType,
        fake_types.hipMemoryAdvise,
    ):
        real_enum = getattr(real, fake_enum.__name__)
        for member in fake_enum:
            assert int(getattr(real_enum, member.name)) == member.value, f"{fake_enum.__name__}.{member.name}"
    for name, value in fake_types.CONSTANTS.items():
        assert getattr(real, name) == value, name


def test_every_fake_driver_function_exists_in_hip_python():
    functions = [n for n, v in inspect.getmembers(FakeHip, inspect.isfunction) if n.startswith("hip")]
    assert len(functions) > 50
    for name in functions:
        assert hasattr(real, name), f"the fake defines {name}, which hip-python does not have"
        assert list(inspect.signature(getattr(FAKE, name)).parameters) == list(
            inspect.signature(getattr(real, name)).parameters
        ), name
