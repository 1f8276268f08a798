"""pytest plugin: fail the run if the fake HIP driver saw a misuse or a leak.

Registered through the ``pytest11`` entry point, it does nothing unless
``PYOFFLOAD_AMDGPU_DRIVER=fake``.  Most misuse already fails the test that caused it (the fake
returns the error code real HIP would); what only shows at the end — leaked allocations, modules,
streams and events, faults in operations nobody waited for — is checked here, after
``pyoffload.shutdown()`` has released everything the run left behind.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from ..driver import DRIVER_ENV
from .driver import FakeHip

_report: list[str] = []


def _active() -> bool:
    return os.environ.get(DRIVER_ENV, "").strip().lower() == "fake"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _active() or not FakeHip.instances:
        return
    import pyoffload
    from pyoffload import runtime

    if runtime.active() is not None:  # pyoffload.testing may have shut it down already
        pyoffload.shutdown()  # runs the plugin's deinit_impl, which tears the fake down
    for fake in FakeHip.instances:
        if not fake.torn_down:
            fake.teardown()
        _report.extend(fake.violations)
        if fake.unknown_launches:
            _report.append(f"launches of kernels the fake cannot emulate: {sorted(set(fake.unknown_launches))}")
    if _report and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _active() or not FakeHip.instances:
        return
    tr = terminalreporter
    tr.section("fake HIP driver")
    calls = sum(sum(f.calls.values()) for f in FakeHip.instances)
    tr.write_line(f"{len(FakeHip.instances)} fake runtime(s), {calls} driver calls, {len(_report)} violation(s)")
    for line in _report[:50]:
        tr.write_line(f"  {line}")
