"""Finding backends: entry points, the hook-API check, one plugin manager per backend, a report each.

Every backend gets its own :class:`pluggy.PluginManager` holding the hook specifications, the
generic defaults (``trylast``), the backend itself and any wrapper plugins.  That is what makes
each ``*_impl`` call reach exactly one backend while wrappers still apply to all of them.

A plugin that is not allowed (``PYOFFLOAD_PLUGINS``), fails to import, was written for another
hook-API major version (or a newer minor one), registers a hook with a wrong signature, or claims a
backend name another distribution claims too is reported with the reason and skipped.  The
built-in host backend is always allowed: an allow-list names the *other* backends to load.

Entry points are read the way :func:`importlib.metadata.entry_points` reads them, without importing
it (with the ``email`` package behind it, that is a good part of a start): the
``*.dist-info``/``*.egg-info`` directories on ``sys.path``, first distribution of a name wins,
``entry_points.txt`` parsed by the same rules.  Where something on the path is read only by
``importlib.metadata`` (zip archives, eggs, another distribution finder), it is asked instead.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import re
import sys
import traceback
import types
import warnings
from collections.abc import Callable, Iterable
from importlib.machinery import PathFinder
from typing import Any

import pluggy

from .. import defaults, hookspecs
from ..backend import ENTRY_POINT_GROUP, HOOK_API, PROJECT
from .dispatch import Dispatcher

HOST_BACKEND = "host"


class PluginReport:
    """What happened to one plugin.

    ``status`` is ``ok``, ``no devices``, ``failed``, ``incompatible``, ``conflict`` or
    ``disabled``; ``reason`` says why for all but ``ok``; ``hook_api`` is the version the plugin
    declared (``None`` if it declared none or was not imported).  ``distribution`` and ``version``
    are read from the installed metadata when first asked for: parsing it costs more than a start
    that never looks at them should pay.
    """

    def __init__(self, name: str, dist: Any, status: str, reason: str = "") -> None:
        self.name = name
        self._dist = dist  # a Distribution (importlib.metadata's or ours), or (name, version) for the source tree
        self.status = status
        self.reason = reason
        self.devices = 0
        self.hook_api: tuple[int, int] | None = None

    @property
    def distribution(self) -> str:
        d = self._dist
        return d[0] if isinstance(d, tuple) else (d.name if d is not None else "?")

    @property
    def version(self) -> str:
        d = self._dist
        return d[1] if isinstance(d, tuple) else (d.version if d is not None else "?")

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "reason": self.reason,
            "devices": self.devices,
            "hook_api": list(self.hook_api) if self.hook_api else None,
        }

    def __repr__(self) -> str:
        return f"<PluginReport {self.line()}>"

    def line(self) -> str:
        text = f"{self.name:<10} {self.distribution} {self.version}: {self.status}"
        if self.status == "ok":
            text += f" ({self.devices} device{'s' if self.devices != 1 else ''})"
        elif self.reason:
            text += f": {self.reason}"
        return text


@dataclasses.dataclass
class Backend:
    """A loaded backend: its plugin object, its own plugin manager and its dispatcher."""

    name: str
    plugin: Any
    pm: pluggy.PluginManager
    dispatch: Dispatcher
    report: PluginReport


EntryPoint = tuple[str, Any, Any]  # (name, distribution or (name, version), entry point or module)


def _reason(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


class Distribution:
    """An installed distribution found on ``sys.path``: its metadata directory.  ``name`` and
    ``version`` come from :class:`importlib.metadata.Distribution` when first asked for."""

    __slots__ = ("path", "_meta")

    def __init__(self, path: str) -> None:
        self.path = path
        self._meta: Any = None

    def metadata_distribution(self) -> Any:
        if self._meta is None:
            from importlib import metadata

            self._meta = metadata.Distribution.at(self.path)
        return self._meta

    @property
    def name(self) -> str:
        return self.metadata_distribution().name  # type: ignore[no-any-return]

    @property
    def version(self) -> str:
        return self.metadata_distribution().version  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"<Distribution at {self.path!r}>"


class InstalledEntryPoint:
    """One line of a distribution's ``entry_points.txt``; :meth:`load` imports it exactly as
    :meth:`importlib.metadata.EntryPoint.load` does."""

    __slots__ = ("name", "value", "group", "dist")

    # importlib.metadata.EntryPoint.pattern
    pattern = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")

    def __init__(self, name: str, value: str, group: str, dist: Distribution) -> None:
        self.name = name
        self.value = value
        self.group = group
        self.dist = dist

    def load(self) -> Any:
        match: Any = self.pattern.match(self.value)
        module = importlib.import_module(match.group("module"))
        attrs = filter(None, (match.group("attr") or "").split("."))
        return functools.reduce(getattr, attrs, module)

    def __repr__(self) -> str:
        return f"InstalledEntryPoint(name={self.name!r}, value={self.value!r}, group={self.group!r})"


_INFO_SUFFIXES = (".dist-info", ".egg-info")
_UNREAD = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


def _normalize(name: str) -> str:
    """importlib.metadata's distribution-name key (PEP 503, dashes as underscores)."""
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _section_entries(text: str, group: str) -> list[tuple[str, str]] | None:
    """``(name, value)`` of the entries of ``group`` in an ``entry_points.txt``, read by
    importlib.metadata's rules; ``None`` where those rules raise (an entry without ``=``)."""
    entries = []
    section = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
            continue
        if section is None:
            continue
        name, eq, value = line.partition("=")
        if not eq:
            return None
        if section == group:
            entries.append((name.strip(), value.strip()))
    return entries


def installed_entry_points(group: str, path: list[Any] | None = None) -> list[InstalledEntryPoint] | None:
    """The entry points of ``group`` of the distributions on ``path`` (``sys.path``), in the order
    :func:`importlib.metadata.entry_points` gives them; ``None`` where only it can tell."""
    for finder in sys.meta_path:
        if finder is not PathFinder and getattr(finder, "find_distributions", None) is not None:
            return None
    found: list[InstalledEntryPoint] = []
    seen: set[str] = set()
    for root in sys.path if path is None else path:
        if type(root) is not str:
            return None
        where = root or "."
        try:
            children = os.listdir(where)
        except Exception:
            if os.path.isfile(where):
                return None  # a zip archive
            continue
        if os.path.basename(root).lower().endswith(".egg"):
            return None
        for child in children:
            if not child.lower().endswith(_INFO_SUFFIXES):
                continue
            stem, ext = os.path.splitext(child)
            if ext not in _INFO_SUFFIXES or not stem:
                return None  # importlib.metadata would read the name from the metadata
            key = _normalize(stem.partition("-")[0])
            if key in seen:
                continue
            seen.add(key)
            info = os.path.join(root, child)
            try:
                with open(os.path.join(info, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except _UNREAD:
                continue
            except UnicodeDecodeError:
                return None
            entries = _section_entries(text, group)
            if entries is None:
                return None
            if entries:
                dist = Distribution(info)
                found += [InstalledEntryPoint(name, value, group, dist) for name, value in entries]
    return found


def _load(ep: Any) -> Any:
    """The plugin an entry point names, or ``ep`` itself if it is the plugin already."""
    if isinstance(ep, InstalledEntryPoint):
        return ep.load()
    metadata = sys.modules.get("importlib.metadata")
    return ep.load() if metadata is not None and isinstance(ep, metadata.EntryPoint) else ep


def entry_points() -> list[EntryPoint]:
    """Every plugin entry point, with the built-in host backend even when running from a source
    tree that is not installed."""
    installed = installed_entry_points(ENTRY_POINT_GROUP)
    found: list[EntryPoint]
    if installed is not None:
        found = [(ep.name, ep.dist, ep) for ep in installed]
    else:
        from importlib import metadata

        found = [(ep.name, getattr(ep, "dist", None), ep) for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)]
    if not any(name == HOST_BACKEND for name, *_ in found):
        from ..host import plugin as host_plugin

        found.append((HOST_BACKEND, (PROJECT, "source"), host_plugin))
    return found


def check_hook_api(plugin: Any) -> tuple[tuple[int, int] | None, str]:
    """``(declared version, reason it cannot be loaded or "")``."""
    declared = getattr(plugin, "HOOK_API", None)
    if declared is None:
        return None, f"declares no HOOK_API (this runtime implements hook API {HOOK_API[0]}.{HOOK_API[1]})"
    try:
        major, minor = (int(v) for v in declared)
    except (TypeError, ValueError):
        return None, f"HOOK_API must be a (major, minor) pair of ints, got {declared!r}"
    version = (major, minor)
    if major != HOOK_API[0]:
        return version, (
            f"written for hook API {major}.{minor}; this runtime implements "
            f"{HOOK_API[0]}.{HOOK_API[1]} (another major version)"
        )
    if minor > HOOK_API[1]:
        return version, (
            f"needs hook API {major}.{minor}; this runtime implements only "
            f"{HOOK_API[0]}.{HOOK_API[1]}: upgrade pyoffload"
        )
    return version, ""


class PluginManager(pluggy.PluginManager):
    """:class:`pluggy.PluginManager`, reading the hooks of a *module* straight from its namespace.

    pluggy looks every name of a plugin up with :func:`inspect.getattr_static` so that it never
    runs a descriptor; a module's attributes are its ``__dict__`` (no descriptors), so for a plain
    function there the answer is the same and the lookup a dictionary read.  That is most of the
    cost of a manager, and every backend gets one with the specs, the defaults and the backend
    (all modules).  Anything else (wrapper plugin objects, dunder names, classmethods...) takes
    pluggy's own path.
    """

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        fn = _module_attr(plugin, name)
        if fn is _PLUGGY:
            return super().parse_hookimpl_opts(plugin, name)
        opts = getattr(fn, _IMPL_ATTR, None) if fn is not None else None
        return opts if isinstance(opts, dict) else None

    def parse_hookspec_opts(self, module_or_class: Any, name: str) -> Any:
        fn = _module_attr(module_or_class, name)
        if fn is _PLUGGY:
            return super().parse_hookspec_opts(module_or_class, name)
        opts = getattr(fn, _SPEC_ATTR, None) if fn is not None else None
        return opts if isinstance(opts, dict) else None


_IMPL_ATTR = f"{PROJECT}_impl"
_SPEC_ATTR = f"{PROJECT}_spec"
_PLUGGY: Any = object()  # "ask pluggy": not a case the fast path answers
_BOUND = (staticmethod, classmethod, types.MethodType)
# Names the module type itself defines: there a descriptor of the class could win over the
# module's own value, which pluggy's lookup knows how to weigh.
_MODULE_CLASS_NAMES = frozenset(name for cls in types.ModuleType.__mro__ for name in vars(cls))


def _module_attr(obj: Any, name: str) -> Any:
    """The plain function ``obj.name`` could be a hook of, ``None`` if it cannot be a hook, or
    ``_PLUGGY`` unless ``obj`` is a module and ``name`` an ordinary name in its namespace."""
    if type(obj) is not types.ModuleType or name in _MODULE_CLASS_NAMES:
        return _PLUGGY
    value = obj.__dict__.get(name, _PLUGGY)
    if type(value) is types.FunctionType:
        return value
    return _PLUGGY if value is _PLUGGY or isinstance(value, _BOUND) else None


def make_plugin_manager(name: str, plugin: Any, wrappers: Iterable[Any]) -> pluggy.PluginManager:
    """A manager with the specs, the generic defaults, ``plugin`` and the wrapper plugins.

    Raises :class:`pluggy.PluginValidationError` if ``plugin`` has a hook with a wrong signature
    or a hook name that is not in the specs.
    """
    pm = PluginManager(PROJECT)
    hookspecs.add_to(pm)
    pm.register(defaults, name="pyoffload.defaults")
    pm.register(plugin, name=name)
    pm.check_pending()
    for wrapper in wrappers:
        pm.register(wrapper)
    return pm


def load_backends(
    allow: frozenset[str] | None, wrappers_for: Callable[[str], list[Any]], found: list[EntryPoint] | None = None
) -> tuple[list[Backend], list[PluginReport]]:
    """Load every allowed plugin (``allow`` ``None``: all; the host backend always).
    ``wrappers_for(name)`` gives the wrapper plugins to register in that backend's manager."""
    entries = entry_points() if found is None else found
    by_name: dict[str, list[EntryPoint]] = {}
    for entry in entries:
        by_name.setdefault(entry[0], []).append(entry)

    unknown = sorted(allow - by_name.keys() - {HOST_BACKEND}) if allow else []
    if unknown:
        # A misspelt name would otherwise just leave its backend out, with nothing said.
        known = ", ".join(sorted(by_name.keys() | {HOST_BACKEND}))
        warnings.warn(
            f"PYOFFLOAD_PLUGINS names {', '.join(map(repr, unknown))}, which no installed plugin "
            f"provides (known plugins: {known}); ignored",
            UserWarning,
            stacklevel=2,
        )

    backends: list[Backend] = []
    reports: list[PluginReport] = []
    for name, claimants in by_name.items():
        if len(claimants) > 1:
            conflicting = [PluginReport(name, dist, "conflict") for _, dist, _ in claimants]
            dists = ", ".join(sorted(f"{r.distribution} {r.version}" for r in conflicting))
            for r in conflicting:
                r.reason = f"backend name {name!r} is claimed by {dists}"
            reports += conflicting
            continue
        _, dist, ep = claimants[0]
        report = PluginReport(name, dist, "ok")
        reports.append(report)
        if allow is not None and name not in allow and name != HOST_BACKEND:
            report.status, report.reason = "disabled", "not in PYOFFLOAD_PLUGINS"
            continue
        try:
            plugin = _load(ep)
        except BaseException as exc:  # an import can raise anything, SystemExit included
            report.status, report.reason = "failed", f"import failed: {_reason(exc)}"
            continue
        report.hook_api, problem = check_hook_api(plugin)
        if problem:
            report.status, report.reason = "incompatible", problem
            continue
        try:
            pm = make_plugin_manager(name, plugin, wrappers_for(name))
        except pluggy.PluginValidationError as exc:
            report.status, report.reason = "failed", f"invalid hook implementation: {exc}"
            continue
        backends.append(Backend(name, plugin, pm, Dispatcher(name, pm), report))
    backends.sort(key=lambda b: (b.name == HOST_BACKEND, b.name))
    return backends, reports
