"""Dispatch: direct calls without wrappers, pluggy with them; tracing as a wrapper plugin."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import pyoffload
from pyoffload import Errc, runtime

from faults import FaultPlugin, install


def test_direct_dispatch_without_wrappers(host):
    disp = host.disp
    assert disp.direct
    # a direct binding is the backend function itself, not pluggy's HookCaller
    assert disp.pm.hook.queue_query_impl.get_hookimpls()


def test_wrapper_sees_every_call_and_can_fail_one(host):
    plugin = FaultPlugin("data_alloc_impl", nth=2)
    factory = install(plugin)
    try:
        assert not host.disp.direct
        big = 4 << 20  # each allocation this large is a segment of its own: one hook call each
        a = host.alloc(big)
        with pytest.raises(pyoffload.BackendError) as err:
            host.alloc(big)
        assert err.value.errc is Errc.BACKEND_FAILURE and "injected fault" in str(err.value)
        b = host.alloc(big)
        assert plugin.calls == 3 and plugin.fired == 1
        a.free()
        b.free()
    finally:
        runtime.remove_wrapper(factory)
    assert host.disp.direct


def test_tracing_logs_hook_calls(fresh_runtime, monkeypatch, caplog):
    monkeypatch.setenv("PYOFFLOAD_TRACE", "1")
    fresh_runtime()
    caplog.set_level(logging.DEBUG, logger="pyoffload")
    dev = pyoffload.host_device()
    assert not dev.disp.direct
    a = dev.alloc(1 << 16)
    pyoffload.memcpy(a, np.zeros(1 << 13, np.float64))
    a.free()
    assert dev.memory_pool().trim() > 0  # the cached segment goes back to the backend
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "hook='data_alloc_impl'" in text and "backend='host'" in text
    assert "hook='data_free_impl'" in text
    assert "ms=" in text


def test_library_does_not_configure_logging():
    import subprocess
    import sys

    code = (
        "import logging, pyoffload; pyoffload.devices(); "
        "print(len(logging.getLogger().handlers), logging.getLogger('pyoffload').handlers)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "0 []"


def test_import_is_lazy():
    import subprocess
    import sys

    code = (
        "import sys, pyoffload; "
        "print(sorted(m for m in ('structlog', 'elftools', 'pyoffload.runtime') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
