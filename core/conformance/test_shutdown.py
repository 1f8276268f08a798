"""Shutdown and interpreter exit with live objects, in a fresh process per case."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np, pyoffload
    dev = [d for d in pyoffload.devices() if d.id == {dev_id!r}][0]
    imgs = dev.disp.conformance_images_impl(dev.handle)
    p = dev.load_program(imgs["ctor_dtor"])
    out = dev.alloc(8, pyoffload.AllocKind.DEVICE)
    q = dev.create_queue()
    q.launch(p.kernel("set_dtor_out"), 1, 1, [out]).wait()
    kernels = dev.load_program(imgs["kernels"])
    q.launch(kernels.kernel("sleep_spin"), 1, 1, [dev.alloc(8), np.int64(3_000_000)])  # busy queue
    noop = kernels.kernel("noop")
    mode = {mode!r}
    if mode == "shutdown":
        pyoffload.shutdown()
        print("SHUTDOWN-OK")
        try:
            q.launch(noop, 1, 1, [])
        except pyoffload.OffloadError as e:
            print("AFTER", e.errc.name)
        pyoffload.devices()  # a fresh runtime initialises
        print("REINIT-OK")
    elif mode == "exit":
        sys.exit(3)
    elif mode == "raise":
        raise SystemError("uncaught")
    """
)


def _run(device, mode):
    env = dict(os.environ, PYTHONWARNINGS="default")
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(dev_id=device.id, mode=mode)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_shutdown_with_live_objects(device, images):
    proc = _run(device, "shutdown")
    assert proc.returncode == 0, proc.stderr
    assert "SHUTDOWN-OK" in proc.stdout and "REINIT-OK" in proc.stdout
    assert "AFTER UNINITIALIZED" in proc.stdout
    assert "Warning" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("mode,status", [("exit", 3), ("raise", 1)])
def test_interpreter_exit_with_live_objects(device, images, mode, status):
    proc = _run(device, mode)
    assert proc.returncode == status, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
    if mode == "raise":
        assert "SystemError: uncaught" in proc.stderr
