"""Rank 0's side of the link: sending requests without waiting, and one progress thread.

Every request goes out with a non-blocking send (an enqueue hook returns as soon as its request
and any bytes it carries are handed to MPI); the progress thread completes those sends, receives
everything the servers say (replies, finished events, retrieved bytes, heartbeats) and declares a
rank gone once it has said nothing for the timeout: every request and event waiting on it then
fails with a clear error instead of hanging.
"""

from __future__ import annotations

import itertools
import threading
import time
from queue import SimpleQueue
from collections.abc import Callable
from typing import Any

from .comm import Backoff, timeout
from .protocol import TAG_REPLY, TAG_REQUEST, ErrorRecord, Tags, chunks, rebuild, remote_failure


class Pending:
    """A reply rank 0 waits for (a request/reply call)."""

    __slots__ = ("rank", "done", "ok", "value")

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.done = threading.Event()
        self.ok = False
        self.value: Any = None


class RemoteQueue:
    """Rank 0's handle of a queue on a server."""

    __slots__ = ("qid", "rank", "device", "error", "probe", "enqueued", "synchronised_failures")

    def __init__(self, qid: int, rank: int, device: Any) -> None:
        self.qid, self.rank, self.device = qid, rank, device
        self.error: ErrorRecord | None = None  # the queue's failure no wait has raised yet: later events carry it
        self.probe: tuple[int, RemoteEvent] | None = None  # for queue_query_impl
        self.enqueued = 0
        # failures a synchronisation raised: later synchronisations do not raise them again (the
        # server's events of the same stretch of work keep reporting them)
        self.synchronised_failures: set[int] = set()


class RemoteEvent:
    """Rank 0's handle of an event recorded on a server queue."""

    __slots__ = ("eid", "rank", "queue", "done", "error", "kept")

    def __init__(self, eid: int, queue: RemoteQueue, kept: bool) -> None:
        self.eid, self.rank, self.queue, self.kept = eid, queue.rank, queue, kept
        self.done = threading.Event()
        self.error: ErrorRecord | None = None


def raise_failure(event: RemoteEvent) -> None:
    """Raise the failure ``event`` carries; once raised by a wait, events that complete later on its
    queue no longer carry it (the hook contract: a failure is reported until a wait raised it)."""
    record = event.error
    assert record is not None
    if event.queue.error is record:
        event.queue.error = None
    raise rebuild(record)


class Link:
    """The connection of rank 0 to every server."""

    def __init__(self, comm: Any) -> None:
        from mpi4py import MPI

        self.comm = comm
        self.MPI = MPI
        self.size: int = comm.Get_size()
        self.limit = timeout()
        self.tags = Tags(int(comm.Get_attr(MPI.TAG_UB)))
        self.ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._inflight: list[Any] = []  # send requests the progress thread completes
        self._replies: dict[int, Pending] = {}
        self.events: dict[int, RemoteEvent] = {}
        self.queues: dict[int, RemoteQueue] = {}
        self._data: dict[int, memoryview] = {}
        self.dead: dict[int, str] = {}
        # Payload bytes rank 0 sent to and received from servers (copies between two servers
        # must leave both at 0): read by tests and by anyone checking where the bytes went.
        self.bytes_sent = 0
        self.bytes_received = 0
        # Events are released from garbage-collection finalisers, on any thread and at any point
        # (also inside this class's own locked sections): a release only goes in this queue,
        # which the progress thread sends on.
        self._releases: SimpleQueue[tuple[int, int]] = SimpleQueue()
        self._heard = {rank: time.monotonic() for rank in range(1, self.size)}
        self._running = True
        self._thread = threading.Thread(target=self._progress, name="pyoffload-mpi-progress", daemon=True)
        self._thread.start()

    # -- sending ------------------------------------------------------------------------------

    def post(self, rank: int, message: tuple[Any, ...], payload: memoryview | None = None) -> None:
        """Send a request (and the bytes it announces) without waiting for it to be received."""
        self.check(rank)
        with self._send_lock:
            self._inflight.append(self.comm.isend(message, rank, TAG_REQUEST))
            if payload is not None:
                self.bytes_sent += len(payload)
                for offset, length in chunks(len(payload)):
                    self._inflight.append(
                        self.comm.Isend([payload[offset:offset + length], self.MPI.BYTE], rank, TAG_REQUEST))

    def poster(self, rank: int, message: tuple[Any, ...]) -> Callable[[], None]:
        """A function that sends the same small request each time it is called (the hot path of a
        prepared launch: the message is pickled once)."""
        import pickle

        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        isend, inflight_lock, byte, comm = self.comm.Isend, self._send_lock, self.MPI.BYTE, self
        dead = self.dead

        def send() -> None:
            if dead:
                self.check(rank)
            with inflight_lock:
                comm._inflight.append(isend([data, byte], rank, TAG_REQUEST))

        return send

    def call(self, rank: int, op: str, *fields: Any) -> Any:
        """A request whose reply rank 0 waits for; the server's failure is raised here."""
        return self.finish(self.start(rank, op, *fields))

    def start(self, rank: int, op: str, *fields: Any) -> tuple[int, Pending]:
        """Send a request whose reply :meth:`finish` waits for (rank 0 may talk to the rank
        meanwhile, as the benchmarks' raw baselines do)."""
        rid = next(self.ids)
        pending = Pending(rank)
        self._replies[rid] = pending
        try:
            self.post(rank, (op, rid, *fields))
        except BaseException:
            self._replies.pop(rid, None)
            raise
        return rid, pending

    def finish(self, started: tuple[int, Pending]) -> Any:
        """The reply of a request :meth:`start` sent; the server's failure is raised here."""
        rid, pending = started
        try:
            while not pending.done.wait(0.25):
                self.check(pending.rank)
        finally:
            self._replies.pop(rid, None)
        if not pending.ok:
            raise rebuild(pending.value)
        return pending.value

    def check(self, rank: int) -> None:
        why = self.dead.get(rank)
        if why is not None:
            raise remote_failure(rank, why)

    # -- events and retrieved bytes ------------------------------------------------------------

    def record(self, queue: RemoteQueue, kept: bool) -> RemoteEvent:
        event = RemoteEvent(next(self.ids), queue, kept)
        self.events[event.eid] = event
        self.post(queue.rank, ("record", queue.qid, event.eid, kept))
        return event

    def wait_event(self, event: RemoteEvent, synchronising: bool = False) -> None:
        """Wait for ``event``; raise the failure it carries (``synchronising``: a queue-wide wait,
        which raises each failure once)."""
        while not event.done.wait(0.25):
            self.check(event.rank)
        if event.error is not None:
            if synchronising:
                seen = event.queue.synchronised_failures
                if event.error[4] in seen:
                    return
                seen.add(event.error[4])
            raise_failure(event)

    def release(self, rank: int, eid: int) -> None:
        """Let the server drop an event (safe from a finaliser: takes no lock)."""
        self._releases.put((rank, eid))

    def expect(self, xfer: int, view: memoryview) -> None:
        """Bytes for ``xfer`` will arrive: the progress thread receives them into ``view``."""
        self._data[xfer] = view

    # -- the progress thread ------------------------------------------------------------------

    def _progress(self) -> None:
        comm, status = self.comm, self.MPI.Status()
        backoff = Backoff()
        last_check = time.monotonic()
        while self._running:
            busy = False
            while not self._releases.empty():
                rank, eid = self._releases.get()
                if rank not in self.dead:
                    self.post(rank, ("event_release", None, eid))
            if self._inflight:
                with self._send_lock:
                    self._inflight = [r for r in self._inflight if not r.Test()]
            message = comm.improbe(self.MPI.ANY_SOURCE, TAG_REPLY, status)
            if message is not None:
                busy = True
                rank = status.Get_source()
                self._heard[rank] = time.monotonic()
                try:
                    self._dispatch(rank, message.recv())
                except Exception as exc:  # a broken message must not stop every other rank's progress
                    self._declare_dead(rank, f"sent a message rank 0 could not take: {exc!r}")
            now = time.monotonic()
            if now - last_check > 0.1:
                last_check = now
                for rank, heard in self._heard.items():
                    if rank not in self.dead and now - heard > self.limit:
                        self._declare_dead(rank, f"said nothing for {self.limit:g} s (PYOFFLOAD_MPI_TIMEOUT): "
                                                 "the rank died or stopped answering")
            if busy:
                backoff.reset()
            else:
                backoff.ceiling = 5e-4 if (self._replies or self._inflight or self._data) else 5e-3
                backoff.pause()

    def _dispatch(self, rank: int, message: tuple[Any, ...]) -> None:
        op = message[0]
        if op == "reply":
            pending = self._replies.get(message[1])
            if pending is not None:
                pending.ok, pending.value = message[2], message[3]
                pending.done.set()
        elif op == "event":
            event = self.events.pop(message[1], None)
            if event is not None:
                queue = event.queue
                if message[2] is not None and queue.error is None:
                    queue.error = message[2]
                event.error = message[2] or queue.error
                event.done.set()
        elif op == "qerror":
            queue = self.queues.get(message[1])
            if queue is not None and queue.error is None:
                queue.error = message[2]
        elif op == "data":
            _, xfer, offset, length = message
            view = self._data[xfer]
            self.bytes_received += length
            request = self.comm.Irecv([view[offset:offset + length], self.MPI.BYTE], rank, TAG_REPLY)
            backoff = Backoff()
            while not request.Test():
                backoff.pause()
            if offset + length >= len(view):
                del self._data[xfer]

    def _declare_dead(self, rank: int, why: str) -> None:
        self.dead[rank] = why
        record: ErrorRecord = ("BackendError", 17, f"MPI rank {rank}: {why}", "", -rank)
        for pending in list(self._replies.values()):
            if pending.rank == rank:
                pending.ok, pending.value = False, record
                pending.done.set()
        for eid, event in list(self.events.items()):
            if event.rank == rank:
                self.events.pop(eid, None)
                event.error = record
                event.done.set()

    def close(self) -> None:
        """Stop the progress thread (after every server has been told to exit)."""
        self._running = False
        self._thread.join()
        for request in self._inflight:
            request.Cancel()
