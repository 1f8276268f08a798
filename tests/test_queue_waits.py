"""A wait waits for its point only (issue 22, requirement 6; finding 11).

Each scenario makes a later operation of a queue depend on something that itself waits for an
*earlier* operation of that queue.  That is no cycle: the earlier operation completes on its own.
A wait that synchronised the whole queue (or waited on a marker beyond the later dependency) would
wait for the later operation too, and hang.  Each scenario runs in a child process with a timeout,
so that a hang fails the test instead of the session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import pyoffload

TIMEOUT = int(os.environ.get("WAITS_TIMEOUT", "60"))

PRELUDE = """
import threading, sys
import numpy as np
import pyoffload

def device(backend):
    devs = [d for d in pyoffload.devices() if d.backend == backend]
    if not devs:
        print("SKIP no", backend, "device"); sys.exit(0)
    return devs[0]

def gate(queue):
    # holds ``queue`` back until the returned event is set, so that the work after it is still
    # pending while the test sets up its waits
    go = threading.Event()
    queue.launch_host_function(lambda: go.wait(20))
    return go

def blocked_until(box):
    # a host function that waits for an operation enqueued after it (handed over in ``box``)
    def run():
        assert box["ready"].wait(20), "the later operation was never enqueued"
        box["event"].wait()
    return run
"""


def run(script: str, **env: str) -> None:
    code = PRELUDE + textwrap.dedent(script) + "\nprint('OK')\n"
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ, **env}
        )
    except subprocess.TimeoutExpired:
        pytest.fail("hung: a wait waited for work enqueued after its point")
    if out.stdout.startswith("SKIP"):
        pytest.skip(out.stdout.strip())
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stdout + out.stderr


def _backends() -> set[str]:
    return {d.backend for d in pyoffload.devices()}


def test_a_queue_waiting_for_an_earlier_operation_does_not_wait_for_a_later_host_function() -> None:
    """Two host queues: q2 waits for q1's first operation; q1's later host function waits for
    q2's work after that wait."""
    run("""
        dev = device("host")
        q1, q2 = dev.create_queue(), dev.create_queue()
        a, b = dev.alloc(64), dev.alloc(64)
        go = gate(q1)
        first = q1.memcpy(a, b)        # no host buffer: nothing records a marker after it
        box = {"ready": threading.Event()}
        q1.launch_host_function(blocked_until(box))
        q2.wait_events(first)          # for q1's copy only
        box["event"] = q2.memcpy(b, a)
        box["ready"].set()
        go.set()
        q2.wait()
        q1.wait()
        q1.destroy(); q2.destroy(); a.free()
    """)


def test_an_event_wait_after_a_query_does_not_synchronise_the_queue() -> None:
    """``is_complete`` found q1's first copy complete; a host function of q2 then waits on that
    event while q1's later host function waits for q2."""
    run("""
        import time
        dev = device("host")
        q1, q2 = dev.create_queue(), dev.create_queue()
        a, b = dev.alloc(64), dev.alloc(64)
        first = q1.memcpy(a, b)
        while not first.is_complete:
            time.sleep(0.001)
        box = {"ready": threading.Event()}
        q1.launch_host_function(blocked_until(box))
        box["event"] = q2.launch_host_function(first.wait)
        box["ready"].set()
        q2.wait()
        q1.wait()
        q1.destroy(); q2.destroy(); a.free()
    """)


def test_a_cross_backend_wait_waits_for_its_point_only() -> None:
    """An OpenCL queue waits for a host queue's copy (a waiter on the OpenCL queue's helper
    thread); the host queue's later host function waits for the OpenCL queue's next operation."""
    if "opencl" not in _backends():
        pytest.skip("no OpenCL device here")
    run("""
        host, cl = device("host"), device("opencl")
        qh, qc = host.create_queue(), cl.create_queue()
        a, h, b = host.alloc(64), host.alloc(64), cl.alloc(64)
        go = gate(qh)
        first = qh.memcpy(a, h)
        box = {"ready": threading.Event()}
        qh.launch_host_function(blocked_until(box))
        qc.wait_events(first)
        box["event"] = qc.memcpy(b, np.full(64, 2, np.uint8))
        box["ready"].set()
        go.set()
        qc.wait()
        qh.wait()
        out = np.zeros(64, np.uint8)
        pyoffload.memcpy(out, b)
        assert (out == 2).all()
        qh.destroy(); qc.destroy(); a.free(); b.free()
    """)


def test_a_free_ordered_after_another_backend_waits_for_its_users_only() -> None:
    """``free_async`` on the OpenCL queue orders itself after the host queue's use of the memory;
    the host queue's later host function waits for the OpenCL queue's work after the free."""
    if "opencl" not in _backends():
        pytest.skip("no OpenCL device here")
    run("""
        host, cl = device("host"), device("opencl")
        qh, qc = host.create_queue(), cl.create_queue()
        a = cl.alloc(64, pyoffload.AllocKind.HOST)
        b, h = cl.alloc(64), host.alloc(64)
        go = gate(qh)
        qh.memcpy(a, h)                       # a user of a on the host queue
        box = {"ready": threading.Event()}
        qh.launch_host_function(blocked_until(box))
        qc.free_async(a)
        box["event"] = qc.memcpy(b, np.full(64, 2, np.uint8))
        box["ready"].set()
        go.set()
        qc.wait()
        qh.wait()
        qh.destroy(); qc.destroy(); b.free()
    """)
