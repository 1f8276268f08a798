"""Finding backends: entry points, one plugin manager per backend, and a report for each.

Every backend gets its own :class:`pluggy.PluginManager` holding the hook specs, the generic
defaults (``trylast``), the backend itself and any wrapper plugins.  That is what makes each
``*_impl`` call reach exactly one backend while wrappers still apply to all of them.

A plugin that fails to import, registers a hook with a wrong signature, claims a name another
distribution claims too, or raises in ``init_impl`` is reported with the reason and skipped.
"""

from __future__ import annotations

import dataclasses
import os
import traceback
from collections.abc import Iterable
from importlib import metadata
from typing import Any

import pluggy

from . import defaults, hookspecs
from .backend import ENTRY_POINT_GROUP, PROJECT
from .dispatch import Dispatcher

HOST_BACKEND = "host"


@dataclasses.dataclass
class PluginReport:
    """What happened to one plugin: ``status`` is ``ok``, ``no devices``, ``failed``,
    ``conflict`` or ``disabled``; ``reason`` says why for all but ``ok``."""

    name: str
    distribution: str
    version: str
    status: str
    reason: str = ""
    devices: int = 0

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


def _reason(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _allow_list() -> set[str] | None:
    raw = os.environ.get("PYOFFLOAD_PLUGINS")
    if raw is None:
        return None
    return {n.strip() for n in raw.replace(";", ",").split(",") if n.strip()} | {HOST_BACKEND}


def _entry_points() -> list[tuple[str, str, str, Any]]:
    """(name, distribution, version, entry point) for every entry point in the group."""
    found: list[tuple[str, str, str, Any]] = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        found.append((ep.name, dist.name if dist else "?", dist.version if dist else "?", ep))
    if not any(name == HOST_BACKEND for name, *_ in found):
        # Running from a source tree that is not installed: the built-in backend is still there.
        from .host import plugin as host_plugin

        found.append((HOST_BACKEND, PROJECT, "source", host_plugin))
    return found


def make_plugin_manager(name: str, plugin: Any, wrappers: Iterable[Any]) -> pluggy.PluginManager:
    """A manager with the specs, the generic defaults, ``plugin`` and the wrapper plugins.

    Raises :class:`pluggy.PluginValidationError` if ``plugin`` has a hook with a wrong signature
    or a hook name that is not in the specs.
    """
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(defaults, name="pyoffload.defaults")
    pm.register(plugin, name=name)
    pm.check_pending()
    for wrapper in wrappers:
        pm.register(wrapper)
    return pm


def load_backends(wrappers_for: Any) -> tuple[list[Backend], list[PluginReport]]:
    """Load every allowed plugin.  ``wrappers_for(name)`` gives the wrapper plugins to register."""
    allow = _allow_list()
    entries = _entry_points()
    by_name: dict[str, list[tuple[str, str, str, Any]]] = {}
    for entry in entries:
        by_name.setdefault(entry[0], []).append(entry)

    backends: list[Backend] = []
    reports: list[PluginReport] = []
    for name, claimants in by_name.items():
        if len(claimants) > 1:
            dists = ", ".join(sorted(f"{d} {v}" for _, d, v, _ in claimants))
            for _, dist, version, _ in claimants:
                reports.append(PluginReport(name, dist, version, "conflict",
                                            f"backend name {name!r} is claimed by {dists}"))
            continue
        _, dist, version, ep = claimants[0]
        report = PluginReport(name, dist, version, "ok")
        reports.append(report)
        if allow is not None and name not in allow:
            report.status, report.reason = "disabled", "not in PYOFFLOAD_PLUGINS"
            continue
        try:
            plugin = ep.load() if isinstance(ep, metadata.EntryPoint) else ep
        except BaseException as exc:  # an import can raise anything, SystemExit included
            report.status, report.reason = "failed", f"import failed: {_reason(exc)}"
            continue
        try:
            pm = make_plugin_manager(name, plugin, wrappers_for(name))
        except pluggy.PluginValidationError as exc:
            report.status, report.reason = "failed", f"invalid hook implementation: {exc}"
            continue
        backends.append(Backend(name, plugin, pm, Dispatcher(name, pm), report))
    backends.sort(key=lambda b: (b.name == HOST_BACKEND, b.name))
    return backends, reports
