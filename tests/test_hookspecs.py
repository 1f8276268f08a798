"""Every hook is documented for plugin authors: in its spec and in the plugin guide."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from pyoffload import hookspecs

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "plugin-guide.md"


def _hooks():
    return list(hookspecs.specs())


def test_there_are_hooks():
    assert len(_hooks()) >= 30


def test_every_hook_has_a_docstring():
    for name in _hooks():
        doc = inspect.getdoc(hookspecs.specs()[name]) or ""
        assert len(doc) > 60, f"hook {name} is not documented"


def test_every_hook_is_in_the_plugin_guide():
    text = GUIDE.read_text()
    missing = [n for n in _hooks() if not re.search(rf"`{n}`", text)]
    assert not missing, f"hooks missing from docs/plugin-guide.md: {missing}"


def test_required_hooks_are_listed_as_such():
    text = GUIDE.read_text()
    for name in _hooks():
        optional = hookspecs.is_optional(hookspecs.specs()[name])
        if name.endswith("_impl") and not optional:
            assert re.search(rf"`{name}`[^\n]*required", text), f"{name} must be marked required in the guide"
