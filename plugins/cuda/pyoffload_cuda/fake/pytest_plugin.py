"""pytest plugin: fail the run if the fake CUDA driver saw a misuse or a leak.

Registered through the ``pytest11`` entry point, it does nothing unless
``PYOFFLOAD_CUDA_DRIVER=fake`` at the end of the session.  Most misuse already fails the test
that caused it (the fake raises what pycuda would); what only shows at the end — objects pycuda
could not release on the thread that dropped them, leaked allocations, modules, streams and
events, faults nobody waited for — is checked here, after ``pyoffload.shutdown()`` has released
everything the run left behind.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyoffload import settings

from ..binding import ENV_DRIVER
from .driver import FakeDriver

_report: list[str] = []


def _active() -> bool:
    return (settings.text(ENV_DRIVER) or "").lower() == "fake"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _active() or not FakeDriver.instances:
        return
    import pyoffload
    from pyoffload import runtime

    if runtime.active() is not None:  # pyoffload.testing may have shut it down already
        pyoffload.shutdown()  # the plugin's deinit_impl releases the contexts: leaks are reported then
    for fake in FakeDriver.instances:
        _report.extend(f"{kind}: {message}" for kind, message in fake.violations)
        _report.extend(f"leak: {message}" for message in fake.leaks)
    if _report and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _active() or not FakeDriver.instances:
        return
    tr = terminalreporter
    tr.section("fake CUDA driver")
    tr.write_line(f"{len(FakeDriver.instances)} fake driver(s), {len(_report)} violation(s) and leak(s)")
    for line in _report[:50]:
        tr.write_line(f"  {line}")
