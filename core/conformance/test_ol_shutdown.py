"""Shutting down, after liboffload's olShutDown / olInit tests: a shut-down runtime answers
``UNINITIALIZED``, and the next call that needs devices starts a fresh one.  Each case runs in a
fresh process on the host backend alone (shutting down this process's runtime would end the run)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent(
    """
    import pyoffload
    dev = pyoffload.host_device()
    a = dev.alloc(64)
    ptr = a.ptr
    pyoffload.shutdown()

    def errc(fn, *args):
        try:
            fn(*args)
        except pyoffload.OffloadError as exc:
            return exc.errc.name
        return "SUCCESS"
    """
)


BODY = textwrap.dedent(
    """
    print(errc(pyoffload.shutdown), errc(dev.alloc, 16), errc(pyoffload.free, a), errc(dev.create_queue))
    print(errc(pyoffload.mem_info, ptr), errc(pyoffload.free, ptr))
    fresh = pyoffload.host_device()
    print(fresh is not dev, errc(lambda: fresh.alloc(16).free()))
    """
)


@pytest.fixture(scope="module")
def lines() -> list[list[str]]:
    """The answers of one process (one interpreter start for every case here)."""
    env = dict(os.environ, PYOFFLOAD_PLUGINS="")
    proc = subprocess.run([sys.executable, "-c", PRELUDE + BODY], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
    return [line.split() for line in proc.stdout.splitlines()]


def test_a_shut_down_runtime_is_uninitialized_until_used_again(lines):
    assert lines[0] == ["UNINITIALIZED"] * 4
    assert lines[2] == ["True", "SUCCESS"], "no fresh runtime started after shutdown"


def test_pointer_calls_after_shutdown_are_uninitialized(lines):
    assert lines[1] == ["UNINITIALIZED"] * 2
