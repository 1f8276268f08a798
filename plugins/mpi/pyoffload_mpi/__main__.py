"""``mpirun -n N python -m pyoffload_mpi app.py [args]`` (or ``-m module [args]``).

Rank 0 runs the application as ``python app.py`` would (``sys.argv``, ``__main__``); ranks
1..N-1 serve their devices until rank 0 is done.  When the application ends, however it ends,
rank 0 shuts pyoffload down (destructors run on the servers), then tells every server to exit.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback

from . import session as _session

USAGE = "usage: mpirun -n N python -m pyoffload_mpi (app.py | -m module) [args...]"


def _run_application(argv: list[str]) -> int:
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        sys.argv = argv[1:]
        target, as_module = argv[1], True
    else:
        sys.argv = list(argv)
        target, as_module = argv[0], False
    try:
        if as_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _finish(link: object) -> bool:
    """Shut pyoffload down on rank 0 and every server; ``False`` if a server did not answer."""
    import pyoffload

    from .client import Link

    assert isinstance(link, Link)
    ok = True
    try:
        pyoffload.shutdown()
    except pyoffload.OffloadError as exc:
        if exc.errc is not pyoffload.Errc.UNINITIALIZED:  # the application never started pyoffload
            traceback.print_exc()
            ok = False
    for rank in range(1, link.size):
        if rank in link.dead:
            ok = False
            continue
        try:
            link.call(rank, "exit")
        except Exception as exc:
            print(f"pyoffload_mpi: rank {rank} did not exit cleanly: {exc}", file=sys.stderr)
            ok = False
    link.close()
    return ok


def _quiet_mpi_waits() -> None:
    """On a serving rank, have Open MPI poll without giving the core away on every idle call
    (``mpi_yield_when_idle``, which it turns on when ranks outnumber cores).  A server only
    makes MPI calls from its own loops, which yield, nap and sleep as they see fit
    (:class:`.comm.Backoff`); with Open MPI's yield on top, each test of a request is a
    ``sched_yield`` (3 µs instead of 0.2 here), and a request waits that much longer to be seen.
    Rank 0 keeps the default: the application may make MPI calls of its own.  An explicit
    setting (``--mca mpi_yield_when_idle 1``) wins."""
    rank = os.environ.get("OMPI_COMM_WORLD_RANK")
    if rank is not None and rank != "0":
        os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "0")


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 0 if argv else 2
    _quiet_mpi_waits()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    current = _session.Session(comm, comm.Get_rank(), comm.Get_size())
    _session.CURRENT = current
    if current.rank != 0:
        from .server import Server

        Server(comm).serve()
        return 0
    from .client import Link

    if current.size > 1:
        current.link = Link(comm)
    code = _run_application(argv)
    if current.link is not None and not _finish(current.link):
        sys.stderr.flush()
        comm.Abort(code or 1)  # a server that stopped answering would keep MPI_Finalize waiting
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
