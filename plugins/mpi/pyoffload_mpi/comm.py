"""MPI plumbing shared by rank 0 and the servers: waiting without burning a core, and the settings.

Open MPI's blocking calls poll in a busy loop; with more ranks than cores (the usual case when
ranks share a machine) that would starve the devices' own threads.  Every wait here tests its
request and sleeps a little longer each time nothing happened.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyoffload import settings

TIMEOUT_VARIABLE = "PYOFFLOAD_MPI_TIMEOUT"
SERVE_VARIABLE = "PYOFFLOAD_MPI_SERVE"


def timeout() -> float:
    """Seconds without a word from a rank before rank 0 declares it gone (default 30)."""
    return float(settings.integer(TIMEOUT_VARIABLE, 30, minimum=1) or 30)


def beat_interval(limit: float) -> float:
    """How often a server says it is alive: several times within the timeout."""
    return max(0.05, min(1.0, limit / 4))


class Backoff:
    """Sleeps that start at nothing and grow to ``ceiling`` seconds while nothing happens."""

    __slots__ = ("ceiling", "_idle")

    def __init__(self, ceiling: float = 1e-3) -> None:
        self.ceiling = ceiling
        self._idle = 0

    def reset(self) -> None:
        self._idle = 0

    def pause(self) -> None:
        self._idle += 1
        if self._idle > 64:  # a short spin first: replies to small requests come within microseconds
            time.sleep(min(self.ceiling, 2e-5 * (self._idle - 64)))


def wait(request: Any, check: Callable[[], None] | None = None) -> Any:
    """Complete an MPI request by testing it; ``check`` may raise to give up (a peer is gone)."""
    backoff = Backoff()
    while True:
        done, value = request.test()
        if done:
            return value
        if check is not None:
            check()
        backoff.pause()


def wait_raw(request: Any, check: Callable[[], None] | None = None) -> None:
    """Complete a request of a buffer send or receive (``Isend``/``Irecv``)."""
    backoff = Backoff()
    while not request.Test():
        if check is not None:
            check()
        backoff.pause()


def wait_all(requests: list[Any], check: Callable[[], None] | None = None) -> None:
    """Complete every request of a list of buffer sends or receives."""
    from mpi4py import MPI

    backoff = Backoff()
    while not MPI.Request.Testall(requests):
        if check is not None:
            check()
        backoff.pause()
