"""Plugin discovery: allow-list, device selector, and broken plugins installed for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pyoffload

BROKEN = {
    # name: (distribution, module source)
    "importfails": ("pyoffload-importfails", "raise ImportError('vendor library libnothing.so not found')\n"),
    "initraises": (
        "pyoffload-initraises",
        textwrap.dedent("""
        from pyoffload.backend import HOOK_API, hookimpl
        @hookimpl
        def init_impl():
            raise RuntimeError('driver exploded during init')
    """),
    ),
    "badsig": (
        "pyoffload-badsig",
        textwrap.dedent("""
        from pyoffload.backend import HOOK_API, hookimpl
        @hookimpl
        def data_alloc_impl(context, device, size, kind, alignment):
            return 0
    """),
    ),
    "nodevs": (
        "pyoffload-nodevs",
        textwrap.dedent("""
        from pyoffload.backend import HOOK_API, hookimpl, NoDevicesError
        @hookimpl
        def init_impl():
            raise NoDevicesError('cuInit failed: no CUDA-capable device is detected')
    """),
    ),
    "future": ("pyoffload-future", "HOOK_API = (2, 0)\n"),
    "newer": ("pyoffload-newer", "HOOK_API = (1, 99)\n"),
    "undeclared": ("pyoffload-undeclared", "from pyoffload.backend import hookimpl\n"),
}


def _make_dist(root: Path, dist: str, module: str, ep_name: str, source: str) -> Path:
    proj = root / f"src-{dist}-{module}"
    proj.mkdir()
    (proj / f"{module}.py").write_text(source)
    (proj / "pyproject.toml").write_text(
        textwrap.dedent(f"""
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{dist}"
        version = "1.0"
        [tool.setuptools]
        py-modules = ["{module}"]
        [project.entry-points."pyoffload.plugins"]
        {ep_name} = "{module}"
    """)
    )
    return proj


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("broken-plugins")
    target = root / "site"
    projects = [_make_dist(root, dist, f"pyoffload_{name}", name, src) for name, (dist, src) in BROKEN.items()]
    # two distributions claiming the backend name "twin"
    ok_src = "from pyoffload.backend import HOOK_API, hookimpl, NoDevicesError\n"
    projects.append(_make_dist(root, "pyoffload-twin-a", "twin_a", "twin", ok_src))
    projects.append(_make_dist(root, "pyoffload-twin-b", "twin_b", "twin", ok_src))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            *map(str, projects),
        ],
        check=True,
    )
    return target


def _reports(site: Path, **env: str) -> list[dict]:
    code = textwrap.dedent("""
        import json, pyoffload, numpy as np
        dev = pyoffload.host_device()
        a = dev.alloc(64); pyoffload.memcpy(a, np.arange(16, dtype=np.int32)); a.free()
        print(json.dumps([r.as_dict() for r in pyoffload.plugins()]))
    """)
    base = {k: v for k, v in os.environ.items() if k != "PYOFFLOAD_PLUGINS"}
    full_env = dict(base, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]), **env)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_broken_plugins_are_reported_and_skipped(broken_site):
    reports = {(r["name"], r["distribution"]): r for r in _reports(broken_site)}
    imp = reports[("importfails", "pyoffload-importfails")]
    assert imp["status"] == "failed" and "libnothing.so" in imp["reason"]
    init = reports[("initraises", "pyoffload-initraises")]
    assert init["status"] == "failed" and "driver exploded" in init["reason"]
    bad = reports[("badsig", "pyoffload-badsig")]
    assert bad["status"] == "failed" and "alignment" in bad["reason"]
    nodev = reports[("nodevs", "pyoffload-nodevs")]
    assert nodev["status"] == "no devices" and "no CUDA-capable device" in nodev["reason"]
    future = reports[("future", "pyoffload-future")]
    assert future["status"] == "incompatible" and "hook API 2.0" in future["reason"] and "major" in future["reason"]
    assert future["hook_api"] == [2, 0]
    newer = reports[("newer", "pyoffload-newer")]
    assert newer["status"] == "incompatible" and "needs hook API 1.99" in newer["reason"]
    undeclared = reports[("undeclared", "pyoffload-undeclared")]
    assert undeclared["status"] == "incompatible" and "declares no HOOK_API" in undeclared["reason"]
    twins = [r for (name, _), r in reports.items() if name == "twin"]
    assert len(twins) == 2 and all(r["status"] == "conflict" for r in twins)
    assert "pyoffload-twin-a" in twins[0]["reason"] and "pyoffload-twin-b" in twins[0]["reason"]
    assert reports[("host", "pyoffload")]["status"] == "ok"


def test_allow_list_disables_the_rest(broken_site):
    reports = {r["name"]: r for r in _reports(broken_site, PYOFFLOAD_PLUGINS="nodevs")}
    assert reports["nodevs"]["status"] == "no devices"
    assert reports["importfails"]["status"] == "disabled"
    assert reports["host"]["status"] == "ok", "the host backend is always allowed"


def test_empty_allow_list_keeps_only_the_host_backend(broken_site):
    reports = {r["name"]: r for r in _reports(broken_site, PYOFFLOAD_PLUGINS="")}
    assert reports["host"]["status"] == "ok"
    assert all(r["status"] == "disabled" for name, r in reports.items() if name not in ("host", "twin"))


def test_cli_plugins_shows_reasons(broken_site):
    env = {k: v for k, v in os.environ.items() if k != "PYOFFLOAD_PLUGINS"}
    env["PYTHONPATH"] = str(broken_site)
    out = subprocess.run(
        [sys.executable, "-m", "pyoffload", "plugins"], capture_output=True, text=True, env=env, check=True
    ).stdout
    assert "no devices: cuInit failed" in out
    assert "failed: import failed" in out
    assert "incompatible: written for hook API 2.0" in out


def test_device_selector(fresh_runtime, monkeypatch):
    monkeypatch.setenv("PYOFFLOAD_DEVICES", "nosuchbackend:0")
    fresh_runtime()
    assert [d.backend for d in pyoffload.devices()] == ["host"] or all(d.backend == "host" for d in pyoffload.devices())


def test_device_selector_rejects_garbage(fresh_runtime, monkeypatch):
    monkeypatch.setenv("PYOFFLOAD_DEVICES", "opencl:zero")
    fresh_runtime()
    with pytest.raises(pyoffload.OffloadError) as err:
        pyoffload.devices()
    assert err.value.errc is pyoffload.Errc.INVALID_VALUE and "opencl:zero" in str(err.value)
    monkeypatch.delenv("PYOFFLOAD_DEVICES")


def test_an_unknown_name_in_the_allow_list_is_a_warning_naming_the_known_plugins(broken_site):
    from pyoffload.hooks import discovery

    found = [("nodevs", ("pyoffload-nodevs", "0"), object()), ("host", ("pyoffload", "0"), object())]
    with pytest.warns(UserWarning, match=r"PYOFFLOAD_PLUGINS names 'opencll'.*known plugins: host, nodevs"):
        discovery.load_backends(frozenset({"opencll", "host"}), lambda name: [], found=found)
    # what a user sees: the warning on stderr, the rest of the start unchanged
    env = {k: v for k, v in os.environ.items() if k != "PYOFFLOAD_PLUGINS"}
    env.update(PYTHONPATH=str(broken_site), PYOFFLOAD_PLUGINS="nodevs,cudda")
    proc = subprocess.run(
        [sys.executable, "-m", "pyoffload", "plugins"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "UserWarning: PYOFFLOAD_PLUGINS names 'cudda', which no installed plugin provides" in proc.stderr
    assert "nodevs" in proc.stderr.split("known plugins:")[1] and "host" in proc.stderr, proc.stderr
    assert "no devices: cuInit failed" in proc.stdout


def test_known_names_and_the_host_backend_are_no_warning() -> None:
    import warnings

    from pyoffload.hooks import discovery

    found = [("nodevs", ("pyoffload-nodevs", "0"), object())]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        discovery.load_backends(frozenset({"nodevs", "host"}), lambda name: [], found=found)
        discovery.load_backends(frozenset(), lambda name: [], found=found)
        discovery.load_backends(None, lambda name: [], found=found)
