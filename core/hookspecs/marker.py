"""The marker of hook specifications (implementations use :data:`pyoffload.backend.hookimpl`)."""

from __future__ import annotations

import pluggy

from ..backend import PROJECT

hookspec = pluggy.HookspecMarker(PROJECT)
