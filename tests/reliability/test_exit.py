"""Interpreter exit with programs loaded, allocations live and queues busy.

Each case runs a real interpreter: it loads three programs whose destructors append a line to a
file, leaves allocations, locked buffers and a busy queue behind, and exits normally, by
``sys.exit(n)``, or by an uncaught exception.  Destructors run exactly once, in reverse load
order; the exit status is the program's; stderr holds nothing but what the program itself caused.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

PRELUDE = textwrap.dedent("""
    import sys
    sys.path[:0] = [{here!r}]
    import numpy as np, pyoffload
    import dtor_program

    dev = pyoffload.host_device()
    progs = [dtor_program.load(dev, {log!r}, f"p{{i}}") for i in range(3)]
    allocs = [dev.alloc(s, k) for s in (64, 1 << 16) for k in pyoffload.AllocKind]
    pinned = np.zeros(256, np.uint8)
    dev.lock(pinned)
    q = dev.create_queue()
    out = dev.alloc(8)
    for _ in range(3):
        q.launch(progs[1].kernel("spin"), 1, 1, [out, np.int64(3_000_000)])
    assert not q.query(), "the queue should still be busy at exit"
    print("ready", flush=True)
""")

ENDINGS = {
    "normal": ("pass", 0, ""),
    "sys-exit": ("sys.exit(7)", 7, ""),
    "sys-exit-message": ("sys.exit('bye')", 1, "bye"),
    "uncaught": ("raise KeyError('boom')", 1, "KeyError: 'boom'"),
    "explicit-shutdown": ("pyoffload.shutdown()", 0, ""),
    "unload-one-then-exit": ("progs[0].unload()", 0, ""),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_exit(tmp_path, ending):
    code, status, expect_err = ENDINGS[ending]
    log = tmp_path / "dtors.log"
    script = PRELUDE.format(here=HERE, log=str(log)) + code + "\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.stdout == "ready\n", proc.stdout + proc.stderr
    assert proc.returncode == status, proc.stderr
    lines = log.read_text().splitlines()
    if ending == "unload-one-then-exit":
        assert lines == ["dtor p0", "dtor p2", "dtor p1"], lines
    else:
        assert lines == ["dtor p2", "dtor p1", "dtor p0"], lines
    err = proc.stderr
    if expect_err:
        assert expect_err in err
        if ending == "uncaught":
            # the traceback of the program's own exception and nothing after it
            assert err.rstrip().endswith("KeyError: 'boom'"), err
            assert err.count("Traceback") == 1
        else:
            assert err.strip() == expect_err
    else:
        assert err == "", err


def test_exit_with_tracking_reports_leaks_only_on_request(tmp_path):
    log = tmp_path / "dtors.log"
    script = PRELUDE.format(here=HERE, log=str(log))
    env = dict(os.environ, PYOFFLOAD_TRACK_ALLOCATIONS="1")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == ["dtor p2", "dtor p1", "dtor p0"]
    assert "pyoffload allocation tracker:" in proc.stderr and "leaked: 7 allocations" in proc.stderr, proc.stderr


def test_exit_from_a_thread_with_work_in_flight(tmp_path):
    """os._exit is not covered (nothing runs); a daemon thread still enqueueing at exit is."""
    log = tmp_path / "dtors.log"
    script = PRELUDE.format(here=HERE, log=str(log)) + textwrap.dedent("""
        import threading
        def busy():
            q2 = dev.create_queue()
            while True:
                try:
                    q2.launch(progs[2].kernel("spin"), 1, 1, [out, np.int64(10_000)])
                except pyoffload.OffloadError:
                    return  # the runtime went away under us: a clean error, not a crash
        threading.Thread(target=busy, daemon=True).start()
        import time; time.sleep(0.2)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(log.read_text().splitlines()) == ["dtor p0", "dtor p1", "dtor p2"]
    assert "Traceback" not in proc.stderr and "Fatal" not in proc.stderr, proc.stderr


def _run(script: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=full_env)


def test_exit_while_daemon_threads_allocate_and_free(tmp_path):
    script = textwrap.dedent("""
        import threading, numpy as np, pyoffload
        dev = pyoffload.host_device()
        def churn():
            while True:
                try:
                    a = dev.alloc(4096)
                    pyoffload.memfill(a, np.uint8(1))
                    a.free()
                except pyoffload.OffloadError:
                    pass  # the runtime is going away: a clean error, never a crash
        for _ in range(4):
            threading.Thread(target=churn, daemon=True).start()
        import time; time.sleep(0.3)
        print("exiting", flush=True)
    """)
    for _ in range(3):
        proc = _run(script)
        assert proc.returncode == 0 and proc.stdout == "exiting\n", proc.stderr
        assert "Fatal" not in proc.stderr and "double free" not in proc.stderr, proc.stderr


def test_exit_with_a_host_function_that_never_returns(tmp_path):
    """A pending host function blocked forever: exit waits a bounded time, then leaks what the
    queue uses instead of freeing it under the host function; no hang."""
    log = tmp_path / "dtors.log"
    script = PRELUDE.format(here=HERE, log=str(log)) + textwrap.dedent("""
        import threading
        forever = threading.Event()
        q.launch_host_function(forever.wait)
    """)
    proc = _run(script, timeout=60, PYOFFLOAD_EXIT_TIMEOUT="1")  # a hang fails the run
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "Fatal" not in proc.stderr, proc.stderr


def test_exit_with_a_host_function_that_calls_the_runtime(tmp_path):
    script = textwrap.dedent("""
        import threading, time, numpy as np, pyoffload
        dev = pyoffload.host_device()
        q = dev.create_queue()
        gate = threading.Event()
        def late():
            gate.wait()
            time.sleep(0.1)
            try:
                a = dev.alloc(64)
                a.free()
            except pyoffload.OffloadError:
                pass
        q.launch_host_function(late)
        gate.set()
        print("exiting", flush=True)
    """)
    proc = _run(script, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "exiting\n", proc.stderr


def test_fork_child_gets_a_clear_error(tmp_path):
    script = textwrap.dedent("""
        import os, sys, numpy as np, pyoffload
        dev = pyoffload.host_device()
        a = dev.alloc(64)
        q = dev.create_queue()
        pid = os.fork()
        if pid == 0:
            codes = []
            for call in (lambda: pyoffload.devices(), lambda: a.free(), lambda: q.wait(),
                         lambda: dev.alloc(8), lambda: pyoffload.mem_info(a.ptr)):
                try:
                    call()
                    codes.append("ok")
                except pyoffload.OffloadError as e:
                    codes.append(e.errc.name + (":fork" if "fork" in str(e) else ""))
            pyoffload.shutdown()  # discards the inherited runtime, touching nothing of the parent's
            fresh = pyoffload.host_device().alloc(16)
            fresh.free()
            print(",".join(codes), flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
        a.free()  # the parent's objects are untouched
        q.wait()
        print("parent ok", flush=True)
    """)
    proc = _run(script, timeout=60)
    assert proc.returncode == 0, proc.stderr
    child, parent = proc.stdout.splitlines()
    assert parent == "parent ok"
    assert all(code.endswith(":fork") for code in child.split(",")), child


def test_fork_before_first_use_gives_the_child_a_fresh_runtime():
    script = textwrap.dedent("""
        import os, pyoffload
        pid = os.fork()
        if pid == 0:
            a = pyoffload.host_device().alloc(64)
            a.free()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print(os.WEXITSTATUS(status))
    """)
    proc = _run(script, timeout=60)
    assert proc.stdout.strip() == "0", proc.stderr


def test_exit_with_a_stuck_kernel_takes_one_exit_timeout(tmp_path):
    """A kernel that never finishes, its program still loaded: the program's unload and the
    queue's release share one ``PYOFFLOAD_EXIT_TIMEOUT`` (each used to wait the whole of it, in
    turn); the process ends within the timeout and a second of slack, its work leaked."""
    import time

    timeout = 2
    script = PRELUDE.format(here=HERE, log=str(tmp_path / "dtors.log")) + textwrap.dedent("""
        stuck = dev.create_queue()
        stuck.launch(progs[2].kernel("spin"), 1, 1, [dev.alloc(8), np.int64(1 << 62)])
        print("exiting", flush=True)
    """)
    env = dict(os.environ, PYOFFLOAD_EXIT_TIMEOUT=str(timeout))
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as proc:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        start = time.monotonic()
        try:
            proc.wait(timeout=60)
        finally:
            proc.kill()
        took = time.monotonic() - start
        stderr = proc.stderr.read() if proc.stderr else ""
    assert lines == ["ready\n", "exiting\n"], lines + [stderr]
    assert proc.returncode == 0, stderr
    assert took < timeout + 1, f"exit took {took:.1f} s with PYOFFLOAD_EXIT_TIMEOUT={timeout}"
    assert "still runs work" in stderr and "Fatal" not in stderr, stderr
