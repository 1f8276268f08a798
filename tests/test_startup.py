"""Start-up: what ``import pyoffload`` and discovery import, the entry-point reader that stands in
for ``importlib.metadata``, and the plugin manager's shortcut for module plugins."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
import zipfile
from importlib import metadata
from pathlib import Path

import pluggy
import pytest

from pyoffload import defaults, hookspecs
from pyoffload.backend import ENTRY_POINT_GROUP, PROJECT, hookimpl
from pyoffload.hooks import discovery
from pyoffload.hookspecs import hookspec


def _imported_after(code: str, **env: str) -> set[str]:
    """The modules a fresh interpreter has imported after running ``code``."""
    import os

    full = dict(os.environ, **env)
    proc = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        env=full,
        check=True,
    )
    return set(json.loads(proc.stdout.splitlines()[-1]))


def _plugin_modules() -> set[str]:
    return {ep.value.split(":")[0] for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def test_import_alone_imports_no_numpy_no_plugin_and_no_layer_behind_devices():
    mods = _imported_after("import pyoffload")
    assert "numpy" not in mods
    assert "importlib.metadata" not in mods
    assert not mods & _plugin_modules()
    assert "pluggy" not in mods and "dataclasses" not in mods
    heavy = {
        "pyoffload.api",
        "pyoffload.memory",
        "pyoffload.queue",
        "pyoffload.program",
        "pyoffload.transfer",
        "pyoffload.build",
        "pyoffload.hooks.discovery",
        "pyoffload.runtime",
        "pyoffload.backend",
    }
    assert not mods & heavy, sorted(mods & heavy)


def test_a_build_without_a_device_starts_no_runtime_and_imports_one_plugin():
    # pyoffload.build_image runs in a compile worker: no runtime, no driver, no other plugin.
    code = textwrap.dedent(
        """
        import platform
        import pyoffload
        from pyoffload import runtime
        built = pyoffload.build_image("int answer(void) { return 42; }", target=f"host:{platform.machine()}")
        assert built.image and runtime.active() is None
        """
    )
    imported = _imported_after(code, PYOFFLOAD_CACHE_DIR="/nonexistent-dir/x", PYOFFLOAD_BUILD_CACHE="0")
    others = {m for m in _plugin_modules() if m != "pyoffload.host.plugin"}
    assert not imported & others, imported & others
    assert not {"pyopencl", "pycuda", "mpi4py"} & imported


def test_names_of_the_backend_module_are_there_after_a_bare_import():
    code = textwrap.dedent("""
        import pyoffload
        assert pyoffload.HOOK_API == (1, 2) and pyoffload.LocalMemory(8).size == 8
        assert pyoffload.backend.INFO_KEYS and "HOOK_API" in dir(pyoffload) and "backend" in dir(pyoffload)
        from pyoffload import LocalMemory, HOOK_API
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_discovery_reads_entry_points_without_importlib_metadata():
    mods = _imported_after("from pyoffload.hooks import discovery; assert discovery.entry_points()")
    assert "importlib.metadata" not in mods and "email" not in mods


def test_the_layers_are_there_once_devices_are_found():
    import pyoffload
    from pyoffload import api

    dev = pyoffload.host_device()
    buf = dev.alloc(64)
    q = dev.create_queue()
    try:
        assert isinstance(buf, pyoffload.Allocation) and isinstance(q, pyoffload.Queue)
        from pyoffload.memory import allocate
        from pyoffload.queue import Queue

        assert api.allocate is allocate and api.Queue is Queue, "api calls the layers directly"
    finally:
        q.destroy()
        buf.free()


# -- the entry-point reader -----------------------------------------------------------------


def _ours(group: str) -> list[tuple[str, str, str, str]]:
    found = discovery.installed_entry_points(group)
    assert found is not None
    return [(ep.name, ep.value, ep.group, str(ep.dist.path)) for ep in found]


def _theirs(group: str) -> list[tuple[str, str, str, str]]:
    return [(ep.name, ep.value, ep.group, str(ep.dist._path)) for ep in metadata.entry_points(group=group)]


def test_reader_finds_what_importlib_metadata_finds_for_the_installed_distributions():
    assert _ours(ENTRY_POINT_GROUP) == _theirs(ENTRY_POINT_GROUP)
    assert {name for name, *_ in _ours(ENTRY_POINT_GROUP)} >= {"host"}
    groups = {ep.group for dist in metadata.distributions() for ep in dist.entry_points}
    for group in sorted(groups):
        assert _ours(group) == _theirs(group), group


def test_entry_points_load_the_same_objects_and_report_the_same_distributions():
    ours = {ep.name: ep for ep in discovery.installed_entry_points(ENTRY_POINT_GROUP) or []}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        mine = ours[ep.name]
        assert (mine.dist.name, mine.dist.version) == (ep.dist.name, ep.dist.version)
        try:
            expected = ep.load()
        except Exception as exc:  # a plugin that cannot be imported here fails the same way
            with pytest.raises(type(exc)):
                mine.load()
        else:
            assert mine.load() is expected
    attr = discovery.InstalledEntryPoint("x", "os.path : join [extra]", "g", discovery.Distribution("."))
    assert attr.load() is __import__("os").path.join


def _dist(root: Path, dirname: str, entry_points: str | None, name: str = "", version: str = "1.0") -> None:
    d = root / dirname
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name or dirname.split('-')[0]}\nVersion: {version}\n")
    if entry_points is not None:
        (d / "entry_points.txt").write_text(textwrap.dedent(entry_points))


@pytest.fixture
def odd_path(tmp_path):
    """Two site directories with the cases the reader must weigh as importlib.metadata does."""
    a, b = tmp_path / "a", tmp_path / "b"
    _dist(
        a,
        "Foo_Bar-1.0.dist-info",
        """
        # a comment
        orphan = before.any.section
        [pyoffload.plugins]
        foo = foo_mod
          spaced   =   spaced.mod : attr.sub   [extra1, extra2]
        [console_scripts]
        foo-cli = foo_mod:main
        [pyoffload.plugins]
        again = foo_mod.again
    """,
        name="Foo_Bar",
    )
    _dist(a, "foo.bar-2.0.dist-info", "[pyoffload.plugins]\nshadowed = nope\n", name="foo.bar")  # same key: first wins
    _dist(a, "solo.egg-info", "[pyoffload.plugins]\nsolo = solo_mod\n")
    _dist(a, "noentries-1.0.dist-info", None)
    (a / "flat-1.0.egg-info").write_text("Metadata-Version: 1.0\nName: flat\nVersion: 1.0\n")  # an egg-info file
    (a / "not-metadata").mkdir()
    _dist(b, "foo_bar-3.0.dist-info", "[pyoffload.plugins]\nlater = shadowed.by.a\n", name="foo_bar")
    _dist(b, "other-1.0.dist-info", "[ pyoffload.plugins ]\nspaced-group = x\n[pyoffload.plugins]\nother = other_mod\n")
    return [str(a), str(tmp_path / "missing"), str(b)]


def test_reader_weighs_shadowing_sections_and_odd_files_as_importlib_metadata_does(odd_path, monkeypatch):
    metadata.entry_points(group=ENTRY_POINT_GROUP)  # import whatever it imports before the path changes
    monkeypatch.setattr(sys, "path", odd_path)
    for group in (ENTRY_POINT_GROUP, "console_scripts", " pyoffload.plugins "):
        assert _ours(group) == _theirs(group), group
    names = [name for name, *_ in _ours(ENTRY_POINT_GROUP)]
    assert {"solo", "other"} <= set(names) and "later" not in names  # b's foo_bar is shadowed by a's
    assert ("foo" in names) != ("shadowed" in names)  # one of a's two foo_bar wins (listdir order)
    ours = {ep.name: ep.dist for ep in discovery.installed_entry_points(ENTRY_POINT_GROUP) or []}
    theirs = {ep.name: ep.dist for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert {k: (d.name, d.version) for k, d in ours.items()} == {k: (d.name, d.version) for k, d in theirs.items()}


def test_reader_leaves_to_importlib_metadata_what_only_it_reads(tmp_path, monkeypatch):
    good = tmp_path / "good"
    _dist(good, "fine-1.0.dist-info", "[pyoffload.plugins]\nfine = fine_mod\n")
    archive = tmp_path / "site.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped-1.0.dist-info/entry_points.txt", "[pyoffload.plugins]\nzipped = zipped_mod\n")
        z.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n")
    egg = tmp_path / "thing-1.0.egg"
    (egg / "EGG-INFO").mkdir(parents=True)
    upper = tmp_path / "upper"
    _dist(upper, "Loud-1.0.DIST-INFO", "[pyoffload.plugins]\nloud = loud_mod\n")
    no_eq = tmp_path / "noeq"
    _dist(no_eq, "broken-1.0.dist-info", "[pyoffload.plugins]\njust a line\n")
    for extra in (str(archive), str(egg), str(upper), str(no_eq)):
        assert discovery.installed_entry_points(ENTRY_POINT_GROUP, [str(good), extra]) is None, extra
    assert [ep.name for ep in discovery.installed_entry_points(ENTRY_POINT_GROUP, [str(good)]) or []] == ["fine"]

    class Finder:
        @staticmethod
        def find_distributions(context=None):
            return iter(())

    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder])
    assert discovery.installed_entry_points(ENTRY_POINT_GROUP) is None


def test_entry_points_falls_back_to_importlib_metadata(monkeypatch):
    fast = [
        (name, str(getattr(dist, "path", dist)), getattr(ep, "value", ep))
        for name, dist, ep in discovery.entry_points()
    ]
    monkeypatch.setattr(discovery, "installed_entry_points", lambda group, path=None: None)
    slow = discovery.entry_points()
    assert all(isinstance(ep, metadata.EntryPoint) for _, dist, ep in slow if not isinstance(dist, tuple))
    assert fast == [(name, str(getattr(dist, "_path", dist)), getattr(ep, "value", ep)) for name, dist, ep in slow]


# -- the plugin manager -----------------------------------------------------------------------


def _odd_module() -> types.ModuleType:
    m = types.ModuleType("odd_plugin")

    class Holder:
        def bound(self, device):
            return None

    @hookimpl
    def queue_query_impl(device, queue):
        return True

    @hookimpl
    def __annotations__(device):  # noqa: N807  a hook-shaped value under a name ModuleType defines
        return None

    @hookspec
    def some_spec(device):
        """A spec."""

    m.queue_query_impl = queue_query_impl
    m.some_spec = some_spec
    m.__dict__["__annotations__"] = __annotations__
    m.static = staticmethod(queue_query_impl)
    m.klass = classmethod(queue_query_impl)
    m.bound = Holder().bound
    m.number, m.text, m.cls, m.module = 3, "x", Holder, sys
    return m


def test_plugin_manager_parses_module_plugins_exactly_as_pluggy_does():
    ours, theirs = discovery.PluginManager(PROJECT), pluggy.PluginManager(PROJECT)
    modules = [*hookspecs.MODULES, defaults, _odd_module()]
    for _, _, ep in discovery.entry_points():
        try:
            modules.append(discovery._load(ep))
        except Exception:
            continue
    for m in modules:
        for name in dir(m):
            assert ours.parse_hookimpl_opts(m, name) == theirs.parse_hookimpl_opts(m, name), (m, name)
            assert ours.parse_hookspec_opts(m, name) == theirs.parse_hookspec_opts(m, name), (m, name)
    wrapper = _odd_module().__dict__["bound"].__self__
    assert ours.parse_hookimpl_opts(wrapper, "bound") == theirs.parse_hookimpl_opts(wrapper, "bound")


def _shape(pm: pluggy.PluginManager) -> dict[str, object]:
    return {
        name: (
            tuple(getattr(pm.hook, name).spec.argnames) if getattr(pm.hook, name).spec else None,
            [
                (i.plugin_name, i.function, i.argnames, i.tryfirst, i.trylast, i.wrapper)
                for i in getattr(pm.hook, name).get_hookimpls()
            ],
        )
        for name in dir(pm.hook)
        if not name.startswith("_")
    }


def test_backend_managers_hold_the_same_hooks_as_plain_pluggy_ones():
    for name, _, ep in discovery.entry_points():
        try:
            plugin = discovery._load(ep)
        except Exception:
            continue
        if discovery.check_hook_api(plugin)[1]:
            continue
        ours = discovery.make_plugin_manager(name, plugin, [])
        theirs = pluggy.PluginManager(PROJECT)
        hookspecs.add_to(theirs)
        theirs.register(defaults, name="pyoffload.defaults")
        theirs.register(plugin, name=name)
        assert type(ours) is discovery.PluginManager
        assert _shape(ours) == _shape(theirs), name


def test_a_wrong_signature_is_still_refused():
    m = types.ModuleType("badsig")

    @hookimpl
    def data_alloc_impl(context, device, size, kind, alignment):
        return 0

    m.data_alloc_impl = data_alloc_impl
    with pytest.raises(pluggy.PluginValidationError, match="alignment"):
        discovery.make_plugin_manager("badsig", m, [])
