"""The array-library move of issue 22 (finding 11): arrays moved between the host device and the
OpenCL devices with queue-ordered copies and ``record``/``wait_events`` across queues, in four
processes at once, 20 rounds each: no process may hang.  Four processes make the timing vary;
one alone rarely meets the bad interleaving.  Run it under ``PYOFFLOAD_PLUGINS=opencl
POCL_DEVICES="pthread pthread"`` for the host device and two PoCL devices.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pyoffload

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "move_between_backends.py")
PROCESSES, ROUNDS, TIMEOUT = 4, 20, int(os.environ.get("MOVE_TIMEOUT", "120"))


def test_moves_between_backends_in_four_processes_never_hang() -> None:
    backends = {d.backend for d in pyoffload.devices()}
    if not {"host", "opencl"} <= backends:
        pytest.skip("needs the host device and an OpenCL device")
    procs = [
        subprocess.Popen(
            [sys.executable, SCRIPT, str(ROUNDS), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for seed in range(PROCESSES)
    ]
    hung, failed = [], []
    for seed, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            hung.append(seed)
            continue
        if p.returncode != 0:
            failed.append((seed, p.returncode, out[-2000:]))
    assert not hung, f"processes {hung} of {PROCESSES} hung"
    assert not failed, failed
