"""Finding backends: entry points, the hook-API check, one plugin manager per backend, a report each.

Every backend gets its own :class:`pluggy.PluginManager` holding the hook specifications, the
generic defaults (``trylast``), the backend itself and any wrapper plugins.  That is what makes
each ``*_impl`` call reach exactly one backend while wrappers still apply to all of them.

A plugin that is not allowed (``PYOFFLOAD_PLUGINS``), fails to import, was written for another
hook-API major version (or a newer minor one), registers a hook with a wrong signature, or claims a
backend name another distribution claims too is reported with the reason and skipped.  The
built-in host backend is always allowed: an allow-list names the *other* backends to load.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable, Iterable
from importlib import metadata
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
        self._dist = dist  # an importlib.metadata.Distribution, or (name, version) for the source tree
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
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "status": self.status, "reason": self.reason, "devices": self.devices,
                "hook_api": list(self.hook_api) if self.hook_api else None}

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


def entry_points() -> list[EntryPoint]:
    """Every plugin entry point, with the built-in host backend even when running from a source
    tree that is not installed."""
    found: list[EntryPoint] = [(ep.name, getattr(ep, "dist", None), ep)
                               for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)]
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
        return version, (f"written for hook API {major}.{minor}; this runtime implements "
                         f"{HOOK_API[0]}.{HOOK_API[1]} (another major version)")
    if minor > HOOK_API[1]:
        return version, (f"needs hook API {major}.{minor}; this runtime implements only "
                         f"{HOOK_API[0]}.{HOOK_API[1]}: upgrade pyoffload")
    return version, ""


def make_plugin_manager(name: str, plugin: Any, wrappers: Iterable[Any]) -> pluggy.PluginManager:
    """A manager with the specs, the generic defaults, ``plugin`` and the wrapper plugins.

    Raises :class:`pluggy.PluginValidationError` if ``plugin`` has a hook with a wrong signature
    or a hook name that is not in the specs.
    """
    pm = pluggy.PluginManager(PROJECT)
    hookspecs.add_to(pm)
    pm.register(defaults, name="pyoffload.defaults")
    pm.register(plugin, name=name)
    pm.check_pending()
    for wrapper in wrappers:
        pm.register(wrapper)
    return pm


def load_backends(allow: frozenset[str] | None, wrappers_for: Callable[[str], list[Any]],
                  found: list[EntryPoint] | None = None) -> tuple[list[Backend], list[PluginReport]]:
    """Load every allowed plugin (``allow`` ``None``: all; the host backend always).
    ``wrappers_for(name)`` gives the wrapper plugins to register in that backend's manager."""
    entries = entry_points() if found is None else found
    by_name: dict[str, list[EntryPoint]] = {}
    for entry in entries:
        by_name.setdefault(entry[0], []).append(entry)

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
            plugin = ep.load() if isinstance(ep, metadata.EntryPoint) else ep
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
