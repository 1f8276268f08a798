"""pyoffload-mpi: the protocol's pure logic without mpirun, and one small ``mpirun -n 2`` job."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pyoffload.backend import CompileError, Errc, InvalidArgumentError, NotFoundError, OffloadError, OutOfResourcesError
from pyoffload_mpi import protocol


def test_tagged_addresses_round_trip_and_do_not_collide_across_ranks() -> None:
    a, b = protocol.tag(1, 0x7F00_1234_5678), protocol.tag(2, 0x7F00_1234_5678)
    assert a != b
    assert a >> 63 == 1 and a < 1 << 64
    assert protocol.untag(a) == (1, 0x7F00_1234_5678)
    assert protocol.untag(b + 16) == (2, 0x7F00_1234_5678 + 16)  # an interior pointer keeps its offset
    assert protocol.tag(3, 0) == 0 and protocol.untag(0) == (0, 0)


def test_local_address_refuses_memory_of_another_rank_and_host_pointers() -> None:
    p = protocol.tag(1, 0x1000)
    assert protocol.local_address(p + 8, 1) == 0x1008
    assert protocol.local_address(0, 2) == 0
    with pytest.raises(InvalidArgumentError, match="rank 1, not of rank 2"):
        protocol.local_address(p, 2)
    with pytest.raises(InvalidArgumentError):
        protocol.untag(0x7F00_0000_1000)


def test_an_address_too_wide_to_tag_is_out_of_resources() -> None:
    with pytest.raises(OutOfResourcesError):
        protocol.tag(1, 1 << protocol.ADDRESS_BITS)
    with pytest.raises(OutOfResourcesError):
        protocol.tag(protocol.MAX_RANK + 1, 0x1000)


def test_chunks_cover_the_copy_exactly() -> None:
    assert list(protocol.chunks(10, 4)) == [(0, 4), (4, 4), (8, 2)]
    assert list(protocol.chunks(8, 4)) == [(0, 4), (4, 4)]
    assert sum(n for _, n in protocol.chunks(protocol.CHUNK * 3 + 1)) == protocol.CHUNK * 3 + 1


def test_transfer_tags_are_unique_and_wrap_below_the_upper_bound() -> None:
    tags = protocol.Tags(protocol.FIRST_TRANSFER_TAG + 3)
    taken = [tags.take() for _ in range(5)]
    assert taken[:3] == [16, 17, 18] and taken[3:] == [16, 17]
    assert all(protocol.FIRST_TRANSFER_TAG <= t < protocol.FIRST_TRANSFER_TAG + 3 for t in taken)


def test_errors_cross_ranks_as_the_same_class_and_errc() -> None:
    again = protocol.rebuild(protocol.error_record(NotFoundError("no such symbol 'x'"), 2))
    assert type(again) is NotFoundError and again.errc is Errc.NOT_FOUND
    assert "rank 2" in str(again) and "no such symbol" in str(again)
    built = protocol.rebuild(protocol.error_record(CompileError("bad", "line 1: error"), 1))
    assert isinstance(built, CompileError) and built.build_log == "line 1: error"
    odd = protocol.rebuild(protocol.error_record(ZeroDivisionError("boom"), 1))
    assert isinstance(odd, OffloadError) and odd.errc is Errc.BACKEND_FAILURE and "ZeroDivisionError" in str(odd)
    custom = protocol.rebuild(("NoSuchClass", int(Errc.INVALID_VALUE), "m", "", 1))
    assert type(custom) is OffloadError and custom.errc is Errc.INVALID_VALUE
    # one failure reported through two events keeps its identity; two failures differ
    exc = NotFoundError("x")
    assert protocol.error_record(exc, 1)[4] == protocol.error_record(exc, 1)[4]
    assert protocol.error_record(exc, 1)[4] != protocol.error_record(NotFoundError("x"), 1)[4]


def test_without_the_launcher_the_plugin_reports_no_devices() -> None:
    code = textwrap.dedent("""
        import sys, pyoffload
        report = {p.name: p for p in pyoffload.plugins()}["mpi"]
        print(report.status, report.reason)
        assert "mpi4py.MPI" not in sys.modules, "importing the plugin initialised MPI"
    """)
    env = dict(os.environ, PYOFFLOAD_PLUGINS="mpi")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "no devices" in done.stdout and "python -m pyoffload_mpi" in done.stdout


APP = """
import numpy as np, pyoffload
remote = [d for d in pyoffload.devices() if d.backend == "mpi"]
assert remote and all(d.info["mpi.rank"] == 1 for d in remote), remote
dev = remote[0]
out = dev.alloc(4 * 64)
src = np.arange(64, dtype=np.int32)
pyoffload.memcpy(out, src)
back = np.zeros(64, np.int32)
pyoffload.memcpy(back, out)
assert (back == src).all()
prog = dev.load_program(dev.disp.conformance_images_impl(dev.handle)["kernels"])  # the server's host image
q = dev.create_queue()
q.launch(prog.kernel("iota_i32"), 2, 32, [out, np.int32(64), np.int32(5)]).wait()
pyoffload.memcpy(back, out)
assert (back == 5 + np.arange(64)).all(), back
assert pyoffload.mem_info(out.ptr + 8).base == out.ptr
print("remote ok", dev.id)
"""


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed (apt-get install openmpi-bin)")
def test_a_two_rank_job_copies_and_launches_on_the_remote_device(tmp_path: Path) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = dict(os.environ, PYOFFLOAD_PLUGINS="mpi", PYOFFLOAD_MPI_SERVE="", PYOFFLOAD_MPI_TIMEOUT="20")
    cmd = [
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
        "2",
        sys.executable,
        "-m",
        "pyoffload_mpi",
        str(app),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "remote ok mpi-r1-host-cpu-0" in done.stdout
