"""Every PYOFFLOAD_* variable goes through pyoffload.settings: typed parsing, one set of rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pyoffload
from pyoffload import settings

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
        ("", False),
    ],
)
def test_flags(monkeypatch, raw, expected):
    monkeypatch.setenv("PYOFFLOAD_TEST_FLAG", raw)
    assert settings.flag("PYOFFLOAD_TEST_FLAG") is expected


def test_unset_flag_takes_its_default(monkeypatch):
    monkeypatch.delenv("PYOFFLOAD_TEST_FLAG", raising=False)
    assert settings.flag("PYOFFLOAD_TEST_FLAG", True) is True


def test_unknown_flag_value_is_an_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv("PYOFFLOAD_TEST_FLAG", "perhaps")
    with pytest.raises(pyoffload.OffloadError) as err:
        settings.flag("PYOFFLOAD_TEST_FLAG")
    assert err.value.errc is pyoffload.Errc.INVALID_VALUE
    assert "PYOFFLOAD_TEST_FLAG='perhaps'" in str(err.value)


def test_integers(monkeypatch):
    monkeypatch.setenv("PYOFFLOAD_TEST_INT", "0x100")
    assert settings.integer("PYOFFLOAD_TEST_INT", None) == 256
    monkeypatch.setenv("PYOFFLOAD_TEST_INT", "-3")
    with pytest.raises(pyoffload.OffloadError, match="PYOFFLOAD_TEST_INT"):
        settings.integer("PYOFFLOAD_TEST_INT", None)
    monkeypatch.setenv("PYOFFLOAD_TEST_INT", "lots")
    with pytest.raises(pyoffload.OffloadError, match="an integer"):
        settings.integer("PYOFFLOAD_TEST_INT", None)


def test_tracking_off_means_off(monkeypatch, fresh_runtime):
    monkeypatch.setenv("PYOFFLOAD_TRACK_ALLOCATIONS", "false")
    fresh_runtime()
    assert not pyoffload.host_device().rt.tracker.on


def test_a_bad_variable_stops_start_up_with_a_clear_error(monkeypatch, fresh_runtime):
    monkeypatch.setenv("PYOFFLOAD_TRACE", "sometimes")
    fresh_runtime()
    with pytest.raises(pyoffload.OffloadError, match="PYOFFLOAD_TRACE"):
        pyoffload.devices()
    monkeypatch.delenv("PYOFFLOAD_TRACE")


def test_every_core_variable_is_declared():
    for var in settings.VARIABLES:
        assert var.name.startswith("PYOFFLOAD_") and len(var.meaning) > 20
        var.read()  # parses in the test environment


def test_no_module_reads_the_environment_itself():
    """Product code reads PYOFFLOAD_* variables only through pyoffload.settings."""
    pattern = re.compile(r"""(environ|getenv|\benv\.get|\benv\[).*["']PYOFFLOAD_""")
    setting = re.compile(r"""environ\[["']PYOFFLOAD_\w+["']\]\s*=[^=]""")  # configuring a child runtime
    offenders = []
    packages = [ROOT / "core"] + sorted(p for p in (ROOT / "plugins").glob("*/pyoffload_*") if p.is_dir())
    for package in packages:
        for path in package.rglob("*.py"):
            if path.name == "settings.py" and path.parent.name == "core":
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line) and not setting.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "read these through pyoffload.settings:\n" + "\n".join(offenders)
