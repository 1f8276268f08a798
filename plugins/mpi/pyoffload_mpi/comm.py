"""MPI plumbing shared by rank 0 and the servers: waiting without burning a core, and the settings.

Open MPI's blocking calls poll in a busy loop that cannot be interrupted (a peer that died would
hang them), so every wait here tests its request in a loop of its own.  How that loop waits
decides the latency of every copy, and what is left of the cores for the other ranks and the
devices' own threads:

* **spinning** (testing again at once, giving the core away with ``sched_yield`` each turn)
  answers within a microsecond, but keeps a core busy: right while bytes this rank moves are in
  flight, and for a short while after each sign of activity (the next request of a busy
  application comes within tens of microseconds);
* **napping**: a ``time.sleep`` costs 60-100 µs on Linux with the default timer slack of 50 µs,
  as long as moving a whole MiB; with the thread's slack set to 1 µs (``PR_SET_TIMERSLACK``) a
  nap takes about 15 µs and leaves the core to others: that is how a wait continues for a few
  milliseconds;
* then **sleeping**, in steps growing to a ceiling: an idle rank costs nothing.

A wait for bytes this rank moves (the helpers below; rank 0 while a copy to or from a server is
under way) spins and then naps for as long as a large copy may take, never sleeping longer.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from pyoffload import settings

TIMEOUT_VARIABLE = "PYOFFLOAD_MPI_TIMEOUT"
SERVE_VARIABLE = "PYOFFLOAD_MPI_SERVE"
IN_PLACE_VARIABLE = "PYOFFLOAD_MPI_IN_PLACE"
"""0: a server stages every copy of a device's own memory, even where its backend says the host may
address it (as it must for a GPU's): the staged paths, for tests and comparisons."""

SPIN = 2e-3
"""Seconds a wait for bytes in flight spins before it naps."""
SHORT_SPIN = 5e-5
"""Seconds any other wait spins after the last sign of activity before it naps."""
IDLE_SPIN = 1e-4
"""Seconds a server with nothing to do spins after its last request before it naps."""
IDLE_CEILING = 5e-4
"""The longest sleep of an idle server: what the first request after a pause may wait."""
NAP = 2e-3
"""Seconds after the last activity until which a wait naps before it sleeps longer."""
LONG_NAP = 0.1
"""The same for a wait for bytes in flight (a copy of hundreds of MiB takes tens of
milliseconds, and its end must be seen at once)."""
FINE_SLACK_NS = 1000
"""The timer slack of a napping thread."""

_yield = getattr(os, "sched_yield", None) or (lambda: time.sleep(0))
_clock = time.perf_counter
_sleep = time.sleep


def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.restype = ctypes.c_int
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return prctl


_PRCTL = _prctl()
_PR_SET_TIMERSLACK, _PR_GET_TIMERSLACK = 29, 30


def timer_slack(ns: int | None) -> int | None:
    """Set the calling thread's timer slack (``None``: leave it); the previous value, or ``None``
    where there is no such setting."""
    if _PRCTL is None:
        return None
    previous = _PRCTL(_PR_GET_TIMERSLACK, 0, 0, 0, 0)
    if ns is not None and previous >= 0 and previous != ns:
        _PRCTL(_PR_SET_TIMERSLACK, ns, 0, 0, 0)
    return previous if previous >= 0 else None


def cuda_aware() -> bool:
    """Whether this process's MPI library sends from and receives into CUDA device memory itself
    (Open MPI built with CUDA support: ``MPIX_Query_cuda_support``).  Reported per rank in the
    remote devices' information (``mpi.cuda_aware``); copies stage through host memory either
    way for now (docs/backends/mpi.md)."""
    import ctypes

    from mpi4py import MPI

    try:
        query = getattr(ctypes.CDLL(MPI.__file__), "MPIX_Query_cuda_support", None)
    except OSError:
        return False
    if query is None:
        return False
    query.restype = ctypes.c_int
    query.argtypes = []
    return bool(query())


def device_in_place() -> bool:
    """Whether a server moves the bytes of a device's memory in place where its backend says the
    host may address it (``PYOFFLOAD_MPI_IN_PLACE``, default 1)."""
    return bool(settings.integer(IN_PLACE_VARIABLE, 1, maximum=1))


def timeout() -> float:
    """Seconds without a word from a rank before rank 0 declares it gone (default 30)."""
    return float(settings.integer(TIMEOUT_VARIABLE, 30, minimum=1) or 30)


def beat_interval(limit: float) -> float:
    """How often a server says it is alive: several times within the timeout."""
    return max(0.05, min(1.0, limit / 4))


class Backoff:
    """How a polling loop waits after the last :meth:`reset`: spins for ``spin`` seconds (from
    ``polite`` seconds on, giving the core away each turn), naps until ``nap`` seconds, then
    sleeps in steps growing by 20 µs up to ``ceiling`` seconds.  The first nap lowers the
    thread's timer slack; :meth:`close` puts it back (a thread of the application's must not
    keep it)."""

    __slots__ = ("ceiling", "spin", "nap", "polite", "_since", "_sleep", "_slack")

    def __init__(self, ceiling: float = 1e-3, spin: float = SPIN, nap: float = NAP, polite: float = 0.0) -> None:
        self.ceiling = ceiling
        self.spin = spin
        self.nap = nap
        self.polite = polite
        self._since = 0.0
        self._sleep = 0.0
        self._slack: int | None = None

    def reset(self) -> None:
        self._since = 0.0
        self._sleep = 0.0

    def pause(self) -> None:
        now = _clock()
        if not self._since:
            self._since = now
        idle = now - self._since
        if idle < self.spin:
            if idle >= self.polite:
                _yield()
            return
        if idle < self.nap:
            if self._slack is None:
                self._slack = timer_slack(FINE_SLACK_NS) or -1
            _sleep(0)
            return
        self._sleep = min(self.ceiling, self._sleep + 2e-5)
        _sleep(self._sleep)

    def close(self) -> None:
        if self._slack is not None and self._slack > 0:
            timer_slack(self._slack)
        self._slack = None


def wait(request: Any, check: Callable[[], None] | None = None) -> Any:
    """Complete an MPI request by testing it; ``check`` may raise to give up (a peer is gone)."""
    done, value = request.test()
    if done:
        return value
    backoff = Backoff(nap=LONG_NAP)
    try:
        while True:
            if check is not None:
                check()
            backoff.pause()
            done, value = request.test()
            if done:
                return value
    finally:
        backoff.close()


def wait_raw(request: Any, check: Callable[[], None] | None = None) -> None:
    """Complete a request of a buffer send or receive (``Isend``/``Irecv``)."""
    if request.Test():
        return
    backoff = Backoff(nap=LONG_NAP)
    try:
        while not request.Test():
            if check is not None:
                check()
            backoff.pause()
    finally:
        backoff.close()


def wait_all(requests: list[Any], check: Callable[[], None] | None = None) -> None:
    """Complete every request of a list of buffer sends or receives."""
    from mpi4py import MPI

    testall = MPI.Request.Testall
    if testall(requests):
        return
    backoff = Backoff(nap=LONG_NAP)
    try:
        while not testall(requests):
            if check is not None:
                check()
            backoff.pause()
    finally:
        backoff.close()
