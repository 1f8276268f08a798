"""pyoffload-mpi in small ``mpirun -n 3`` jobs: copies between two serving ranks, a server that
stops answering, and the end of the application with live remote objects.

Each job runs the application on rank 0 with ranks 1 and 2 serving their host device, under a
hard time limit: a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    shutil.which("mpirun") is None, reason="mpirun is not installed (apt-get install openmpi-bin)"
)

MPIRUN = [
    "mpirun",
    "--allow-run-as-root",
    "--oversubscribe",
    "--mca",
    "mtl",
    "^ofi,psm,psm2",
    "--mca",
    "btl",
    "tcp,self,vader",
    "--mca",
    "btl_tcp_if_include",
    "lo",
    "-n",
    "3",
]


PRELUDE = """
import os, signal, sys, time
import numpy as np, pyoffload
from pyoffload_mpi import session
link = session.CURRENT.link
by_rank = {d.info["mpi.rank"]: d for d in pyoffload.devices() if d.backend == "mpi"}
assert sorted(by_rank) == [1, 2], by_rank
"""


def _job(
    tmp_path: Path, body: str, timeout_s: str = "20", limit: float = 120, **env_: str
) -> subprocess.CompletedProcess[str]:
    """Run ``PRELUDE`` + ``body`` as the application of a 3-rank job (``env_``: more variables)."""
    script = tmp_path / "app.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = {
        **os.environ,
        "PYOFFLOAD_PLUGINS": "mpi",
        "PYOFFLOAD_MPI_SERVE": "",
        "PYOFFLOAD_MPI_TIMEOUT": timeout_s,
        **env_,
    }
    return subprocess.run(
        [*MPIRUN, sys.executable, "-m", "pyoffload_mpi", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=limit,
        cwd=tmp_path,
    )


@pytest.mark.parametrize("cma", ["1", "0"], ids=["cross-memory", "messages"])
def test_a_copy_between_two_servers_goes_directly_and_delivers_the_bytes(tmp_path: Path, cma: str) -> None:
    done = _job(
        tmp_path,
        """
    assert bool(link.reach) == (os.environ["PYOFFLOAD_MPI_CMA"] == "1"), link.reach
    n = (9 << 20) + 12345  # several chunks, and a ragged last one
    a = by_rank[1].alloc(n)
    b = by_rank[2].alloc(n)
    data = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
    pyoffload.memcpy(a, data)
    sent, received = link.bytes_sent, link.bytes_received
    assert sent >= n and received == 0, (sent, received)

    pyoffload.memcpy(b, a)                                  # synchronous, rank 1 -> rank 2
    q1, q2 = by_rank[1].create_queue(), by_rank[2].create_queue()
    pyoffload.memfill(a, np.uint8(0), queue=q1)
    q1.wait()
    pyoffload.memcpy(a, b, queue=q2).wait()                 # queued on the sending rank's queue, 2 -> 1
    pyoffload.memfill(b, np.uint8(0), queue=q2)
    q2.wait()
    pyoffload.memcpy(b, a, queue=q2)                        # queued on the receiving rank's queue, 1 -> 2
    q2.wait()
    assert (link.bytes_sent, link.bytes_received) == (sent, received), "rank 0 relayed bytes of a copy between servers"

    back = np.zeros(n, np.uint8)
    pyoffload.memcpy(back, b)
    assert (back == data).all(), "rank 2 does not hold what rank 1 had"
    pyoffload.memcpy(back[:4096], a, 4096)  # the first 4 KiB of a (a size: the sides differ)
    assert (back[:4096] == data[:4096]).all()
    assert link.bytes_received == n + 4096
    print("DIRECT-OK")
    """,
        PYOFFLOAD_MPI_CMA=cma,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DIRECT-OK" in done.stdout


@pytest.mark.parametrize("cma", ["1", "0"], ids=["cross-memory", "messages"])
def test_copies_of_host_memory_stay_in_the_servers_main_loops(tmp_path: Path, cma: str) -> None:
    """Copies to, from and between servers' host memory, synchronous or queued, are carried out
    and reported by each server's main loop (where rank 0 does not make them itself): no thread
    per copy, no event kept, no watcher."""
    done = _job(
        tmp_path,
        """
    MiB = 1 << 20
    a, b = by_rank[1].alloc(MiB), by_rank[2].alloc(MiB)
    q1, q2 = by_rank[1].create_queue(), by_rank[2].create_queue()
    host = np.random.default_rng(3).integers(0, 256, MiB, dtype=np.uint8)
    back = np.zeros(MiB, np.uint8)
    pyoffload.memcpy(a, host)
    pyoffload.memcpy(b, a)
    before = {r: link.call(r, "stats") for r in (1, 2)}
    for i in range(10):
        host[:8] = i
        pyoffload.memcpy(a, host)                        # rank 0 -> rank 1
        pyoffload.memcpy(b, a)                           # rank 1 -> rank 2
        pyoffload.memcpy(back, b)                        # rank 2 -> rank 0
        assert (back == host).all(), i
        host[:8] = 100 + i
        events = [pyoffload.memcpy(a, host, queue=q1),   # the same, queued (events the application keeps)
                  pyoffload.memcpy(b, a, queue=q1)]
        q1.wait()
        pyoffload.memcpy(back, b, queue=q2)
        q2.wait()
        assert all(e.is_complete for e in events) and (back == host).all(), i
        pyoffload.memcpy(b, a, queue=q2)                 # queued on the receiving side's queue
        q2.wait()
    after = {r: link.call(r, "stats") for r in (1, 2)}
    for r in (1, 2):
        print("STATS", r, before[r], after[r], flush=True)
        assert after[r]["threads"] == before[r]["threads"], (r, before[r], after[r])
        assert after[r]["events"] == 0 and after[r]["sides"] == 0, (r, after[r])
        assert after[r]["watched"] == before[r]["watched"], (r, before[r], after[r])
    # rank 1 answers the two queued copies its queue orders, and the synchronous ones to and from
    # rank 0 unless rank 0 makes those itself (cross-memory); rank 2 the three its queues order
    ones = 2 if link.reach else 3
    assert after[1]["answered_at_once"] - before[1]["answered_at_once"] >= 10 * ones, (before[1], after[1])
    assert after[2]["answered_at_once"] - before[2]["answered_at_once"] >= 10 * 3, (before[2], after[2])
    print("MAIN-LOOP-OK")
    """,
        PYOFFLOAD_MPI_CMA=cma,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "MAIN-LOOP-OK" in done.stdout


def test_on_one_machine_a_copy_is_one_request_to_the_rank_that_orders_it(tmp_path: Path) -> None:
    """Ranks on one machine read and write each other's memory: rank 0 makes a synchronous copy
    to or from a server's host memory itself, with no request at all; a queued one is one request
    to the server; a copy between two servers is one request to the rank whose queue orders it,
    and the other rank hears nothing.  No byte travels in an MPI message."""
    done = _job(
        tmp_path,
        """
    assert {(0, 1), (0, 2), (1, 0), (2, 0), (1, 2), (2, 1)} <= link.reach, link.reach
    MiB, n = 1 << 20, 10
    a, b = by_rank[1].alloc(MiB), by_rank[2].alloc(MiB)
    q1 = by_rank[1].create_queue()
    host = np.random.default_rng(5).integers(0, 256, MiB, dtype=np.uint8)
    back = np.zeros(MiB, np.uint8)

    def requests():
        return {r: link.call(r, "stats")["requests"] for r in (1, 2)}   # (each call counts itself)

    pyoffload.memcpy(a, host)                                       # (internal queues made once)
    pyoffload.memcpy(back, a)
    pyoffload.memcpy(b, a)
    pyoffload.memcpy(b, a, queue=q1)
    q1.wait()

    before = requests()
    for i in range(n):
        host[:4] = i
        pyoffload.memcpy(a, host)                                   # rank 0 -> rank 1
        pyoffload.memcpy(back, a)                                   # rank 1 -> rank 0
        assert (back == host).all(), i
    assert not link._inflight_bytes and not link._receiving         # no byte went through MPI
    after = requests()
    assert after[1] - before[1] == 1, ("rank 1 took part in copies rank 0 makes", before, after)
    assert after[2] - before[2] == 1, (before, after)

    before = requests()
    for i in range(n):
        host[:4] = 100 + i
        pyoffload.memcpy(a, host, queue=q1)                         # queued: the server reads rank 0's buffer
        pyoffload.memcpy(back, a, queue=q1)                         # and writes it back
        q1.wait()
        assert (back == host).all(), i
    after = requests()
    assert after[1] - before[1] == 2 * n + 2 * n + 1, (before, after)   # copies, the events that hold rank 0's buffers

    before = requests()
    for i in range(n):
        pyoffload.memcpy(b, a)                                      # rank 1 -> rank 2, on rank 2's queue
    after = requests()
    assert after[1] - before[1] == 1, ("rank 1 took part in copies rank 2 orders", before, after)
    assert after[2] - before[2] == 2 * n + 1, (before, after)

    before = requests()
    for i in range(n):
        pyoffload.memcpy(b, a, queue=q1)                            # the same, ordered on rank 1's queue
    q1.wait()
    after = requests()
    assert after[2] - before[2] == 1, ("rank 2 took part in copies rank 1 orders", before, after)
    assert after[1] - before[1] == n + 2, (before, after)          # the copies, one synchronisation
    pyoffload.memcpy(back, b)
    assert (back == host).all()

    # A copy deferred to the synchronisation that other work follows first is sent ahead of that
    # work: the fill after it wins, as queue order says.
    iq = a.context.internal_queue(a.device)
    host[:] = 1
    seq = iq.enqueue("data_submit_impl", (iq.dh, iq.handle, a.ptr, memoryview(host), MiB), memoryview(host), False)
    assert iq.handle.deferred is not None
    iq.enqueue("data_fill_impl", (iq.dh, iq.handle, a.ptr, b"\\x07", MiB), None, False)
    assert iq.handle.deferred is None
    iq.wait_until(iq.seq)
    pyoffload.memcpy(back, a)
    assert (back == 7).all(), "the deferred copy ran after the fill enqueued behind it"
    print("ONE-REQUEST-OK", flush=True)
    """,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ONE-REQUEST-OK" in done.stdout


def test_threads_copying_through_one_internal_queue_keep_every_copy_whole(tmp_path: Path) -> None:
    """Synchronous copies from several threads share each context's internal queue: whichever
    thread synchronises makes a deferred copy, a copy sent ahead of other work still arrives
    before it, and a synchronisation that finds a copy being made waits for it.  Sizes on both
    sides of the split (over 2 MiB: rank 0 writes half, the server reads half), with queued
    copies and fills on a queue of the same device in between."""
    done = _job(
        tmp_path,
        """
    import threading
    dev = by_rank[1]
    q = dev.create_queue()
    failures = []

    def worker(k):
        rng = np.random.default_rng(k)
        try:
            for i in range(25):
                n = int(rng.choice([4096, 1 << 20, (3 << 20) + 4097]))
                a = dev.alloc(n)
                data = rng.integers(0, 256, n, dtype=np.uint8)
                back = np.zeros(n, np.uint8)
                pyoffload.memcpy(a, data)
                pyoffload.memcpy(back, a)
                assert (back == data).all(), ("synchronous", k, i, n)
                if i % 5 == k % 5:                                  # queued work on the same memory
                    pyoffload.memfill(a, np.uint8(k + 1), queue=q)
                    pyoffload.memcpy(back, a, queue=q)
                    q.wait()
                    assert (back == k + 1).all(), ("queued", k, i, n)
                pyoffload.free(a)
        except BaseException as exc:
            failures.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    assert not failures, failures
    print("THREADS-OK", flush=True)
    """,
        limit=150,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "THREADS-OK" in done.stdout


@pytest.mark.parametrize("cma", ["1", "0"], ids=["cross-memory", "messages"])
def test_copies_with_device_memory_are_staged_in_queue_order(tmp_path: Path, cma: str) -> None:
    """Copies whose server side is not host memory (a PoCL device) go through a staging buffer on
    the device's queue, ordered with the queue's other work; copies between a server's device
    memory and another server's host memory too."""
    if subprocess.run([sys.executable, "-c", "import pyoffload_opencl"], capture_output=True).returncode:
        pytest.skip("the OpenCL backend is not installed")
    done = _job(
        tmp_path,
        """
    MiB = 1 << 20
    devices = [d for d in pyoffload.devices() if d.backend == "mpi"]
    pocl = next(d for d in devices if d.info["mpi.rank"] == 1 and d.info["mpi.remote_backend"] == "opencl")
    host2 = next(d for d in devices if d.info["mpi.rank"] == 2 and d.info["mpi.remote_backend"] == "host")
    a, b = pocl.alloc(MiB), host2.alloc(MiB)
    q, q2 = pocl.create_queue(), host2.create_queue()
    data = np.random.default_rng(9).integers(0, 256, MiB, dtype=np.uint8)
    back = np.zeros(MiB, np.uint8)
    for i in range(3):
        data[:4] = i
        pyoffload.memcpy(a, data)                                   # to device memory: staged
        pyoffload.memcpy(back, a)                                   # and back
        assert (back == data).all(), i
        pyoffload.memfill(b, np.uint8(0), queue=q2)
        q2.wait()
        pyoffload.memcpy(b, a, queue=q)                            # device memory -> host memory, on the device's queue
        pyoffload.memfill(a, np.uint8(1), queue=q)                  # ordered after the copy has read it
        q.wait()
        pyoffload.memcpy(back, b)
        assert (back == data).all(), i
        pyoffload.memcpy(a, b)                                      # host memory -> device memory, on the device's rank
        pyoffload.memcpy(back, a)
        assert (back == data).all(), i
    print("STAGED-OK", flush=True)
    """,
        PYOFFLOAD_MPI_SERVE="opencl",
        POCL_DEVICES="pthread",
        PYOFFLOAD_MPI_CMA=cma,
        PYOFFLOAD_MPI_IN_PLACE="0",  # staged, as a GPU's memory must be
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "STAGED-OK" in done.stdout


def test_a_retrieve_the_server_cannot_carry_out_fails_its_queue_and_leaves_no_receive_behind(tmp_path: Path) -> None:
    """Rank 0 posts the receives of a retrieve before its request; when the server cannot send
    the bytes (no memory at that address), its failure reaches the queue's next wait, the
    receives stop counting as bytes in flight, and the server's empty messages complete them."""
    done = _job(
        tmp_path,
        """
    from pyoffload_mpi.protocol import CHUNK
    q = by_rank[1].create_queue()
    rq = q.handle
    size = CHUNK + 4096                                          # two chunks: two receives
    back = np.zeros(size, np.uint8)
    mpi_tag = link.tags.take()
    link.receive(rq, mpi_tag, memoryview(back))
    link.post(1, ("retrieve", rq.qid, 0x10, size, mpi_tag))     # nothing is allocated there
    try:
        link.wait_event(link.record(rq, kept=False), synchronising=True)
    except pyoffload.OffloadError as exc:
        print("FAILED", exc.errc.name, "rank 1" in str(exc), flush=True)
    assert not link._receiving, link._receiving
    deadline = time.monotonic() + 10
    while link._stray and time.monotonic() < deadline:
        with link._poll_lock:
            link.poll()
        time.sleep(0.001)
    assert not link._stray, "the server's empty messages did not complete the receives"
    a = by_rank[1].alloc(4096)                                  # the rank and the queue still work
    pyoffload.memcpy(a, np.full(4096, 7, np.uint8), queue=q)
    pyoffload.memcpy(back[:4096], a, queue=q)
    q.wait()
    assert (back[:4096] == 7).all()
    print("STRAY-OK", flush=True)
    """,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAILED NOT_FOUND True" in done.stdout, done.stdout + done.stderr
    assert "STRAY-OK" in done.stdout


# What a synchronous copy between two servers costs against plain MPI Send/Recv of the same bytes
# is a figure of benchmarks/bench_mpi.py (the r2r rows), not a test: on a loaded machine the
# ratio says more about the load than about the code.


def test_a_server_that_stops_answering_is_a_clear_error_within_the_timeout(tmp_path: Path) -> None:
    done = _job(
        tmp_path,
        """
    dev = by_rank[2]
    buf = dev.alloc(1 << 20)
    pyoffload.memcpy(buf, np.ones(1 << 20, np.uint8))        # the rank works before it stops
    os.kill(dev.info["mpi.pid"], signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        # (a fill: a synchronous copy of its host memory rank 0 would make itself, stopped rank or not)
        pyoffload.memfill(buf, np.uint8(0))
    except pyoffload.OffloadError as exc:
        print(f"ERROR-AFTER {time.monotonic() - t0:.1f} {exc.errc.name}: {exc}", flush=True)
    else:
        print("NO-ERROR", flush=True)
    try:
        dev.create_queue()                                    # later requests fail at once
    except pyoffload.OffloadError as exc:
        print("LATER", exc.errc.name, flush=True)
    """,
        timeout_s="2",
        limit=90,
    )
    # The job ends (rank 0 aborts it rather than wait for the stopped rank in MPI_Finalize).
    lines = {
        line.split(" ", 1)[0]: line
        for line in done.stdout.splitlines()
        if line.split(" ", 1)[0] in ("ERROR-AFTER", "NO-ERROR", "LATER")
    }
    assert "ERROR-AFTER" in lines, done.stdout + done.stderr
    _, seconds, rest = lines["ERROR-AFTER"].split(" ", 2)
    assert 1.5 <= float(seconds) <= 10, lines["ERROR-AFTER"]
    assert rest.startswith("BACKEND_FAILURE") and "MPI rank 2" in rest and "PYOFFLOAD_MPI_TIMEOUT" in rest, rest
    assert lines.get("LATER") == "LATER BACKEND_FAILURE", done.stdout
    assert done.returncode != 0, "the job cannot end cleanly with a stopped rank"


DTOR_SOURCE = r"""
#include <stdio.h>
#include <unistd.h>
char dtor_path[256];
__attribute__((destructor)) static void fini(void) {
    if (dtor_path[0]) {
        FILE *f = fopen(dtor_path, "w");
        if (f) { fprintf(f, "destructor ran in %d\n", (int)getpid()); fclose(f); }
    }
}
void noop(void) {}
"""


def test_the_end_of_the_application_runs_destructors_on_the_servers(tmp_path: Path) -> None:
    done = _job(
        tmp_path,
        f"""
    source = {DTOR_SOURCE!r}
    keep = []
    for rank, dev in by_rank.items():
        program = dev.build_program(source, cache=False)
        path = np.zeros(256, np.uint8)
        name = os.path.join(os.getcwd(), f"dtor-{{rank}}.txt").encode()
        path[:len(name)] = np.frombuffer(name, np.uint8)
        pyoffload.memcpy(program.global_variable("dtor_path"), path)
        q = dev.create_queue()
        q.launch(program.kernel("noop"), 1, 1, [])
        keep += [program, q, dev.alloc(4096)]                   # all still live when the script ends
    print("PIDS", by_rank[1].info["mpi.pid"], by_rank[2].info["mpi.pid"], flush=True)
    """,
    )
    assert done.returncode == 0, done.stdout + done.stderr  # every rank exited 0
    assert "Traceback" not in done.stderr, done.stderr
    pids = next(line.split()[1:] for line in done.stdout.splitlines() if line.startswith("PIDS"))
    for rank, pid in zip((1, 2), pids, strict=True):
        out = tmp_path / f"dtor-{rank}.txt"
        assert out.exists(), f"rank {rank}'s destructor did not run"
        assert out.read_text() == f"destructor ran in {pid}\n"


@pytest.mark.parametrize("cma", ["1", "0"], ids=["cross-memory", "messages"])
def test_a_small_synchronous_copy_to_device_memory_is_one_request(tmp_path: Path, cma: str) -> None:
    """A PoCL device's memory is not host memory: rank 0 cannot make a copy to or from it itself.
    A small synchronous copy is still one request (the copy and the synchronisation's event in
    one message; by messages, its bytes inside it), made at once by the server; a deferred one
    that other work follows first is sent ahead of that work; queued ones stay in queue order."""
    done = _job(
        tmp_path,
        """
    assert bool(link.reach) == (os.environ["PYOFFLOAD_MPI_CMA"] == "1"), link.reach
    dev = next(d for d in pyoffload.devices() if d.backend == "mpi" and d.info["mpi.rank"] == 1
               and d.info["mpi.remote_backend"] == "opencl")
    assert not dev.host_memory
    from pyoffload_mpi.comm import cuda_aware
    assert dev.info["mpi.cuda_aware"] is cuda_aware()                  # (one MPI library for all ranks)
    n, size = 10, 4096 + 3
    a = dev.alloc(size)
    host = np.zeros(size, np.uint8)
    back = np.zeros(size, np.uint8)
    pyoffload.memcpy(a, host)                                       # (the internal queue made once)
    pyoffload.memcpy(back, a)

    def requests():
        return link.call(1, "stats")["requests"]                   # (each call counts itself)

    before = requests()
    for i in range(n):
        host[:] = i
        pyoffload.memcpy(a, host)
        host[:] = 255                                               # the copy has completed: no effect
        pyoffload.memcpy(back, a)
        assert (back == i).all(), (i, back[:8])
    after = requests()
    assert after - before == 2 * n + 1, (before, after)

    # Deferred, then other work on the same queue first: sent ahead of it, so the fill wins.
    iq = a.context.internal_queue(a.device)
    host[:] = 1
    iq.enqueue("data_submit_impl", (iq.dh, iq.handle, a.ptr, memoryview(host), size), memoryview(host), False)
    assert iq.handle.deferred is not None
    iq.enqueue("data_fill_impl", (iq.dh, iq.handle, a.ptr, b"\\x07", size), None, False)
    assert iq.handle.deferred is None
    iq.wait_until(iq.seq)
    pyoffload.memcpy(back, a)
    assert (back == 7).all(), "the deferred copy ran after the fill enqueued behind it"

    # Queued copies behind a fill: each lands in queue order, the last one wins.
    q = dev.create_queue()
    b = dev.alloc(size)
    sources = [np.full(size, 20 + i, np.uint8) for i in range(5)]
    q.memfill(b, b"\\x09", size)
    for src in sources:
        q.memcpy(b, src, size)
    q.memcpy(back, b, size)
    q.wait()
    assert (back == 24).all(), back[:8]
    print("SMALL-DEVICE-COPY-OK", flush=True)
    """,
        PYOFFLOAD_MPI_SERVE="opencl",
        POCL_DEVICES="pthread",
        PYOFFLOAD_MPI_CMA=cma,
        PYOFFLOAD_MPI_IN_PLACE="0",  # staged, as a GPU's memory must be
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SMALL-DEVICE-COPY-OK" in done.stdout


@pytest.mark.parametrize("cma", ["1", "0"], ids=["cross-memory", "messages"])
def test_large_copies_to_and_from_device_memory_arrive_whole(tmp_path: Path, cma: str) -> None:
    """Copies to and from a PoCL device's own memory move in pieces, each piece's device copy
    overlapping the next one's trip: synchronous ones (the queue idle) and queued ones behind other
    work, ragged sizes, every byte where it belongs."""
    done = _job(
        tmp_path,
        """
    dev = next(d for d in pyoffload.devices() if d.backend == "mpi" and d.info["mpi.rank"] == 1
               and d.info["mpi.remote_backend"] == "opencl")
    rng = np.random.default_rng(3)
    q = dev.create_queue()
    for size in ((300 << 10) + 17, (9 << 20) + 12345):
        a, b = dev.alloc(size), dev.alloc(size)
        host = rng.integers(0, 256, size, dtype=np.uint8)
        back = np.zeros(size, np.uint8)
        pyoffload.memcpy(a, host)                                   # synchronous, in pieces
        pyoffload.memcpy(back, a)
        assert (back == host).all(), size
        other = rng.integers(0, 256, size, dtype=np.uint8)
        q.memfill(b, b"\\x05", size)                                 # queued behind other work
        q.memcpy(b, other, size)
        back2 = np.zeros(size, np.uint8)
        q.memcpy(back2, b, size)
        q.wait()
        assert (back2 == other).all(), size
        pyoffload.free(a)
        pyoffload.free(b)
    print("LARGE-DEVICE-COPY-OK", flush=True)
    """,
        PYOFFLOAD_MPI_SERVE="opencl",
        POCL_DEVICES="pthread",
        PYOFFLOAD_MPI_CMA=cma,
        PYOFFLOAD_MPI_IN_PLACE="0",  # staged, as a GPU's memory must be
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "LARGE-DEVICE-COPY-OK" in done.stdout


@pytest.mark.parametrize("cma", ["1", "0"], ids=["cross-memory", "messages"])
def test_copies_between_two_servers_device_memory_arrive_whole(tmp_path: Path, cma: str) -> None:
    """Copies from one server's PoCL memory to another's move chunk by chunk, each chunk's device
    copy on either side overlapping the next chunk's trip: ordered on the sending rank's queue or
    the receiving rank's, the queue idle (pipelined in the server's loop) or behind other work
    (staged in queue order), ragged sizes over several chunks, every byte where it belongs, and
    none through rank 0."""
    done = _job(
        tmp_path,
        """
    def pocl(rank):
        return next(d for d in pyoffload.devices() if d.backend == "mpi" and d.info["mpi.rank"] == rank
                    and d.info["mpi.remote_backend"] == "opencl")

    d1, d2 = pocl(1), pocl(2)
    q1, q2 = d1.create_queue(), d2.create_queue()
    rng = np.random.default_rng(5)
    for size in ((300 << 10) + 17, (9 << 20) + 12345):
        a, b = d1.alloc(size), d2.alloc(size)
        scratch = (d1.alloc(size), d2.alloc(size))
        for src, dst, q in ((a, b, q1), (a, b, q2), (b, a, q1), (b, a, q2)):
            data = rng.integers(0, 256, size, dtype=np.uint8)
            pyoffload.memcpy(src, data)
            sent, received = link.bytes_sent, link.bytes_received
            q.memcpy(dst, src, size)                                # the queue idle: pipelined
            q.wait()
            assert (link.bytes_sent, link.bytes_received) == (sent, received)
            back = np.zeros(size, np.uint8)
            pyoffload.memcpy(back, dst)
            assert (back == data).all(), (size, q is q1)
            pyoffload.memcpy(dst, np.zeros(size, np.uint8))
            q.memfill(scratch[q is q2], b"\\x07", size)              # behind other work: staged
            q.memcpy(dst, src, size)
            q.wait()
            pyoffload.memcpy(back, dst)
            assert (back == data).all(), (size, q is q1, "queued")
        for allocation in (a, b, *scratch):
            pyoffload.free(allocation)
    print("DEVICE-TO-DEVICE-OK", flush=True)
    """,
        PYOFFLOAD_MPI_SERVE="opencl",
        POCL_DEVICES="pthread",
        PYOFFLOAD_MPI_CMA=cma,
        PYOFFLOAD_MPI_IN_PLACE="0",  # staged, as a GPU's memory must be
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DEVICE-TO-DEVICE-OK" in done.stdout


@pytest.mark.parametrize("in_place", ["1", "0"], ids=["in-place", "staged"])
@pytest.mark.parametrize("cma", ["1", "0"], ids=["cross-memory", "messages"])
def test_device_memory_the_host_may_address_is_copied_in_place_in_queue_order(
    tmp_path: Path, cma: str, in_place: str
) -> None:
    """A PoCL CPU device's memory is memory of its serving process (``Device.host_addressable``
    there): its server moves copies' bytes straight into and out of it, as for host memory, and
    on one machine rank 0 makes a synchronous copy itself (no request reaches the server); with
    ``PYOFFLOAD_MPI_IN_PLACE=0`` every copy is staged on the device's queue, as a GPU's must be.
    Either way a copy queued behind kernels that write the same range waits for them, and a
    kernel queued behind a copy sees its bytes."""
    if subprocess.run([sys.executable, "-c", "import pyoffload_opencl"], capture_output=True).returncode:
        pytest.skip("the OpenCL backend is not installed")
    done = _job(
        tmp_path,
        """
    in_place = os.environ["PYOFFLOAD_MPI_IN_PLACE"] == "1"
    dev = next(d for d in pyoffload.devices() if d.backend == "mpi" and d.info["mpi.rank"] == 1
               and d.info["mpi.remote_backend"] == "opencl")
    assert not dev.host_addressable()                                 # (not rank 0's memory)
    assert dev.info["mpi.remote.opencl.svm_capabilities"] & 1

    def stats():
        return link.call(1, "stats")                                  # (each call counts itself)

    rng = np.random.default_rng(11)
    for size in (4096 + 3, (1 << 20) + 5, (9 << 20) + 12345):
        a = dev.alloc(size)
        data = rng.integers(0, 256, size, dtype=np.uint8)
        back = np.zeros(size, np.uint8)
        pyoffload.memcpy(a, data)                                     # (the internal queue made once)
        before = stats()
        for i in range(3):
            data[:4] = i
            pyoffload.memcpy(a, data)
            pyoffload.memcpy(back, a)
            assert (back == data).all(), (size, i)
        after = stats()
        moved = after["in_place"] - before["in_place"]
        requests = after["requests"] - before["requests"] - 1
        if not in_place:
            assert moved == 0, (size, before, after)
        elif link.reach and size <= (2 << 20):
            assert (moved, requests) == (0, 0), (size, before, after)  # rank 0 made them itself
        else:
            # on the server: every copy by messages; by cross-memory attach the half of a large
            # copy to it that rank 0 does not write itself
            assert moved >= (3 if link.reach else 6), (size, before, after)
        pyoffload.free(a)

    # Kernels writing a range, and copies of the same range on the same queue: queue order.
    program = dev.load_program(dev.disp.conformance_images_impl(dev.handle)["kernels"])
    iota = program.kernel("iota_i32")
    n = 1 << 20
    a = dev.alloc(4 * n)
    q = dev.create_queue()
    out = np.zeros(n, np.int32)
    for round in range(3):
        for base in range(20):                                        # work in flight on the range
            q.launch(iota, global_size=n, block=64, args=(a, np.int32(n), np.int32(base * 1000)))
        q.memcpy(out, a, 4 * n)                                       # behind the kernels: sees the last one
        ones = np.full(n, 7 + round, np.int32)
        q.launch(iota, global_size=n, block=64, args=(a, np.int32(n), np.int32(-5)))
        q.memcpy(a, ones, 4 * n)                                      # behind a kernel: lands after it
        q.launch(iota, global_size=n // 2, block=64, args=(a, np.int32(n // 2), np.int32(100)))
        q.wait()
        assert (out == np.arange(n, dtype=np.int32) + 19000).all(), (round, out[:4])
        pyoffload.memcpy(out, a)
        assert (out[: n // 2] == np.arange(n // 2) + 100).all(), (round, out[:4])
        assert (out[n // 2 :] == 7 + round).all(), (round, out[n // 2 : n // 2 + 4])
    print("IN-PLACE-OK", flush=True)
    """,
        PYOFFLOAD_MPI_SERVE="opencl",
        POCL_DEVICES="pthread",
        PYOFFLOAD_MPI_CMA=cma,
        PYOFFLOAD_MPI_IN_PLACE=in_place,
        limit=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "IN-PLACE-OK" in done.stdout
