from __future__ import annotations

import pytest

import pyoffload
from pyoffload import runtime


@pytest.fixture
def host():
    return pyoffload.host_device()


@pytest.fixture
def fresh_runtime(monkeypatch):
    """Shut the runtime down around a test that changes how it initialises."""

    def restart():
        if runtime.active() is not None:
            pyoffload.shutdown()

    restart()
    yield restart
    restart()
