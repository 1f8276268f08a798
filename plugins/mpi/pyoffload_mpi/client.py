"""Rank 0's side of the link: sending requests without waiting, and progress made by whoever waits.

Every request goes out with a non-blocking send (an enqueue hook returns as soon as its request
and any bytes it carries are handed to MPI).  Progress (completing those sends, receiving
everything the servers say: replies, finished events, retrieved bytes, heartbeats, and declaring
a rank gone once it has said nothing for the timeout, which fails every request and event waiting
on it instead of hanging) is one step, :meth:`Link.poll`, taken under a lock by whichever thread
gets there:

* a thread that waits (for a reply, an event) takes the steps itself, so that what it waits for
  is handled the moment it arrives, in the thread that needs it: handing it over from another
  thread would cost a wake-up and a GIL switch (up to the interpreter's switch interval, 5 ms,
  while the other thread holds the GIL).  Between steps it spins while bytes of a copy to or
  from rank 0 are moving, naps while the servers copy, and sleeps longer while they run kernels
  (:class:`.comm.Backoff`), leaving them the cores;
* the progress thread takes them when nobody waits, sleeping between steps, so that sends
  complete, bytes of queued copies arrive and dead ranks are noticed even then.

Sends are completed oldest first, a few dozen per step (:data:`_TEST_AT_ONCE`), and an enqueue
that finds many in flight completes some first: MPI returns a small message's buffer to its
sender only when the sender tests it, and a sender that runs out of them slows every later step.
"""

from __future__ import annotations

import itertools
import threading
import time
from queue import SimpleQueue
from collections.abc import Callable
from typing import Any

from . import cma
from .comm import LONG_NAP, NAP, SHORT_SPIN, SPIN, Backoff, timeout
from .protocol import CHUNK, TAG_REPLY, TAG_REQUEST, ErrorRecord, Tags, chunks, rebuild, remote_failure


IMPOLITE = 0.0
"""Seconds a waiting thread spins without giving its core away: none.  A server on the same
core must get it the moment rank 0 has sent its request (a blocking MPI call under
``--oversubscribe`` gives it away on every idle turn too)."""

_TEST_AT_ONCE = 64
"""Send requests a progress step tests; an enqueue that finds more in flight completes some."""


class Pending:
    """A reply rank 0 waits for (a request/reply call)."""

    __slots__ = ("rank", "done", "ok", "value")

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.done = threading.Event()
        self.ok = False
        self.value: Any = None


class Flag:
    """Set once; read by polling (whoever waits for it takes the progress steps that set it), so
    cheaper to make than a ``threading.Event``: one per event and per synchronisation."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = False

    def is_set(self) -> bool:
        return self.value

    def set(self) -> None:
        self.value = True


class RemoteQueue:
    """Rank 0's handle of a queue on a server."""

    __slots__ = (
        "link",
        "qid",
        "rank",
        "device",
        "profiling",
        "error",
        "probe",
        "enqueued",
        "settled",
        "deferred",
        "moving",
        "synchronised_failures",
        "raised_by",
        "computing",
        "copying",
    )

    def __init__(self, link: Link, qid: int, rank: int, device: Any, profiling: bool = False) -> None:
        self.link, self.qid, self.rank, self.device, self.profiling = link, qid, rank, device, profiling
        self.error: ErrorRecord | None = None  # the queue's failure no wait has raised yet: later events carry it
        self.probe: tuple[int, RemoteEvent] | None = None  # for queue_query_impl
        self.enqueued = 0  # operations enqueued so far
        self.settled = 0  # of those, how many rank 0 knows to have completed without a failure
        # A copy deferred to the queue's next synchronisation, unless other work comes first
        # (plugin.py, "copies rank 0 makes itself"): (its request, (write, server address, local
        # address, size) where rank 0 may make it itself, its number among the enqueued operations).
        self.deferred: tuple[tuple[Any, ...], tuple[bool, int, int, int] | None, int] | None = None
        self.moving = threading.Lock()  # held while rank 0 makes a deferred copy
        self.computing = False  # a kernel was launched since the last event recorded
        self.copying = False  # a copy that moves bytes was enqueued since then
        # failures a synchronisation raised: later synchronisations do not raise them again (the
        # server's events of the same stretch of work keep reporting them)
        self.synchronised_failures: set[int] = set()
        # failure id -> the event whose wait raised it first: a failure that a wait has raised is
        # not raised again by the waits of other events (the hook contract), however late the
        # server's report of it reached this rank
        self.raised_by: dict[int, int] = {}


class RemoteEvent:
    """Rank 0's handle of an event recorded on a server queue."""

    __slots__ = ("eid", "rank", "queue", "done", "error", "kept", "stored", "computing", "copying")

    def __init__(self, eid: int, queue: RemoteQueue, kept: bool) -> None:
        self.eid, self.rank, self.queue, self.kept = eid, queue.rank, queue, kept
        # Whether the server holds an event for it (to wait for, to time): not when the event
        # was complete when recorded (its reply says so), and the queue does no profiling.
        self.stored = kept
        self.done = Flag()
        self.computing, self.copying = queue.computing, queue.copying  # what it waits for
        queue.computing = queue.copying = False
        self.error: ErrorRecord | None = None


def raise_failure(event: RemoteEvent) -> None:
    """Raise the failure ``event`` carries; once raised by a wait, events that complete later on its
    queue no longer carry it (the hook contract: a failure is reported until a wait raised it)."""
    record = event.error
    assert record is not None
    queue = event.queue
    if queue.error is record:
        queue.error = None
    first = queue.raised_by.setdefault(record[4], event.eid)
    if first != event.eid:
        return  # raised already, by the wait of an earlier event
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
        self._inflight: list[Any] = []  # send requests the progress steps complete
        self._inflight_bytes: list[Any] = []  # the same for the payloads of copies to servers
        self._replies: dict[int, Pending] = {}
        self.events: dict[int, RemoteEvent] = {}
        self.queues: dict[int, RemoteQueue] = {}
        # Receives of retrieved bytes, posted before their request went out: (request, queue id).
        # A queue's failure moves its receives to _stray (its server may never send them).
        self._receiving: list[tuple[Any, int]] = []
        self._stray: list[Any] = []
        self.dead: dict[int, str] = {}
        # Payload bytes rank 0 sent to and received from servers (copies between two servers
        # must leave both at 0): read by tests and by anyone checking where the bytes went.
        self.bytes_sent = 0
        self.bytes_received = 0
        # Pairs (rank, other rank) where the first can read and write the memory of the second
        # (cross-memory copies, cma.py): found by meet().
        self.reach: set[tuple[int, int]] = set()
        self._probe = cma.Probe()
        # Events are released from garbage-collection finalisers, on any thread and at any point
        # (also inside this class's own locked sections): a release only goes in this queue,
        # which the progress thread sends on.
        self._releases: SimpleQueue[tuple[int, int]] = SimpleQueue()
        self._heard = {rank: time.monotonic() for rank in range(1, self.size)}
        self._last_check = time.monotonic()
        self._status = MPI.Status()
        self._poll_lock = threading.Lock()  # one thread takes a progress step at a time
        self._drivers = 0  # threads taking progress steps while they wait (the progress thread then rests)
        self._drivers_lock = threading.Lock()
        self._running = True
        self._thread = threading.Thread(target=self._progress, name="pyoffload-mpi-progress", daemon=True)
        self._thread.start()

    # -- sending ------------------------------------------------------------------------------

    def post(self, rank: int, message: tuple[Any, ...], payload: memoryview | None = None) -> None:
        """Send a request (and the bytes it announces) without waiting for it to be received."""
        self.check(rank)
        if len(self._inflight) > _TEST_AT_ONCE:
            self._relieve()
        with self._send_lock:
            request = self.comm.isend(message, rank, TAG_REQUEST)
            # A request small enough for MPI's eager protocol has usually left by now: tested at
            # once, it costs the progress steps nothing (a Testsome of a list kept under a lock,
            # on the path of every synchronous copy).
            if not request.Test():
                self._inflight.append(request)
            if payload is not None:
                self.bytes_sent += len(payload)
                if len(payload) <= CHUNK:
                    self._inflight_bytes.append(self.comm.Isend([payload, self.MPI.BYTE], rank, TAG_REQUEST))
                    return
                for offset, length in chunks(len(payload)):
                    self._inflight_bytes.append(
                        self.comm.Isend([payload[offset : offset + length], self.MPI.BYTE], rank, TAG_REQUEST)
                    )

    def post_together(self, messages: list[tuple[int, tuple[Any, ...]]]) -> None:
        """Send several requests to several ranks as one step: no other request goes out between
        them, so that every rank sees the requests of all threads in one order (the two halves of
        a copy between two servers must not cross those of another copy)."""
        for rank, _ in messages:
            self.check(rank)
        with self._send_lock:
            for rank, message in messages:
                self._inflight.append(self.comm.isend(message, rank, TAG_REQUEST))

    def poster(self, rank: int, message: tuple[Any, ...]) -> Callable[[], None]:
        """A function that sends the same small request each time it is called (the hot path of a
        prepared launch: the message is pickled once)."""
        import pickle

        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        isend, inflight_lock, byte, inflight = self.comm.Isend, self._send_lock, self.MPI.BYTE, self._inflight
        dead, relieve = self.dead, self._relieve

        def send() -> None:
            if dead:
                self.check(rank)
            with inflight_lock:
                inflight.append(isend([data, byte], rank, TAG_REQUEST))
            if len(inflight) > _TEST_AT_ONCE:
                relieve()

        return send

    def _relieve(self) -> None:
        """Many requests in flight: complete the oldest before sending more.  MPI hands a small
        message's buffer back only when its sender tests it; a sender far ahead of its
        receiver runs out of them, and every later step then costs far more."""
        if self._poll_lock.acquire(False):
            try:
                self._complete("_inflight")
            finally:
                self._poll_lock.release()

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

    def finish(self, started: tuple[int, Pending], drive: bool = True) -> Any:
        """The reply of a request :meth:`start` sent; the server's failure is raised here.
        ``drive=False`` sleeps until the progress thread has the reply instead of taking the
        progress steps (and a core) itself."""
        rid, pending = started
        try:
            if drive:
                self.drive(pending.done, pending.rank)
            else:
                while not pending.done.wait(0.25):
                    self.check(pending.rank)
        finally:
            self._replies.pop(rid, None)
        if not pending.ok:
            raise rebuild(pending.value)
        return pending.value

    def meet(self, ranks: list[int]) -> None:
        """Introduce the ranks to each other: which of them (rank 0 included) can read and write
        which other's memory (:mod:`.cma`).  Nothing where cross-memory copies are off."""
        self.reach = set()
        if not cma.enabled():
            return
        described = {0: self._probe.describe()}
        for rank in ranks:
            described[rank] = self.call(rank, "whoami")
        for rank in ranks:
            self.reach.update((rank, other) for other in self.call(rank, "peers", described))
            if cma.reachable(described[rank]):
                self.reach.add((0, rank))

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

    def record_with(self, queue: RemoteQueue, message: tuple[Any, ...]) -> RemoteEvent:
        """Send the request ``message`` on ``queue`` and, in the same message, an event recorded
        right behind it (not kept: for a synchronisation)."""
        event = RemoteEvent(next(self.ids), queue, False)
        self.events[event.eid] = event
        self.post(queue.rank, ("then_record", queue.qid, event.eid, message))
        return event

    def wait_event(self, event: RemoteEvent, synchronising: bool = False) -> None:
        """Wait for ``event``; raise the failure it carries (``synchronising``: a queue-wide wait,
        which raises each failure once)."""
        if not event.done.is_set():
            self.drive(event.done, event.rank, event.computing, event.copying)
        if event.error is not None:
            if synchronising:
                seen = event.queue.synchronised_failures
                if event.error[4] in seen:
                    return
                seen.add(event.error[4])
            raise_failure(event)

    def release(self, event: RemoteEvent) -> None:
        """Let the server drop an event (safe from a finaliser: takes no lock)."""
        if event.stored:
            self._releases.put((event.rank, event.eid))

    def receive(self, queue: RemoteQueue, mpi_tag: int, view: memoryview) -> None:
        """Post the receives of bytes a server will send from ``queue`` on ``mpi_tag`` (one per
        chunk, :func:`.protocol.chunks`), before the request that makes it send them: the bytes
        then move the moment the server sends them, straight into ``view``, with no header to
        announce them.  Whoever takes the progress steps completes the receives.  The server
        reports the events after the copy only once its sends completed (or, for small ones, after
        them on the same path), so that an event seen complete means the bytes are here."""
        byte, rank, qid = self.MPI.BYTE, queue.rank, queue.qid
        self.bytes_received += len(view)
        with self._send_lock:
            if len(view) <= CHUNK:
                self._receiving.append((self.comm.Irecv([view, byte], rank, mpi_tag), qid))
                return
            for offset, length in chunks(len(view)):
                self._receiving.append((self.comm.Irecv([view[offset : offset + length], byte], rank, mpi_tag), qid))

    def _complete_receives(self) -> bool:
        """Complete what has completed of the receives of retrieved bytes; ``True`` if any did."""
        with self._send_lock:
            head = self._receiving[:_TEST_AT_ONCE]
        done = self.MPI.Request.Testsome([request for request, _ in head])
        if not done:
            return False
        finished = set(done)
        with self._send_lock:
            self._receiving[: len(head)] = [r for i, r in enumerate(head) if i not in finished]
        return True

    def _set_aside(self, qid: int | None = None, rank: int | None = None) -> None:
        """A queue (or a rank) failed: its server may never send the bytes of its retrieves.  Their
        receives stop counting as bytes in flight (waits would spin for them); they are still
        completed if the bytes come."""
        with self._send_lock:
            keep = []
            for request, q in self._receiving:
                if q == qid or (rank is not None and self.queues.get(q) is not None and self.queues[q].rank == rank):
                    self._stray.append(request)
                else:
                    keep.append((request, q))
            self._receiving[:] = keep

    # -- progress -------------------------------------------------------------------------------

    def drive(self, done: Flag | threading.Event, rank: int, computing: bool = False, copying: bool = False) -> None:
        """Take progress steps until ``done`` is set (or ``rank`` is declared gone, which sets it):
        spinning while the answer may come any moment, then napping, then sleeping a little
        longer between steps.  ``computing``: the wait is for kernels, which take their time
        and the server's cores: no napping.  ``copying``: for a copy between two servers, whose
        end comes as fast as the bytes move (and copies a server carries out alone, cross-memory):
        spinning."""
        # The waiting thread spins, giving its core away each turn: a server that shares the core
        # must take the request at once, and its copy must not share the core with this loop.
        backoff = Backoff(ceiling=5e-4, polite=IMPOLITE)
        acquire, release, poll, is_set = self._poll_lock.acquire, self._poll_lock.release, self.poll, done.is_set
        with self._drivers_lock:
            self._drivers += 1
        try:
            while not is_set():
                busy = False
                if acquire(True, 0.002):  # another thread's step is short; another waiter's loop lets go each step
                    try:
                        busy = poll()
                    finally:
                        release()
                if is_set():
                    return
                self.check(rank)
                if busy:
                    backoff.reset()
                else:
                    # Bytes of a copy to or from rank 0 need its progress: spin, then nap as long
                    # as they may take.  A copy between two servers ends as fast as its bytes
                    # move: spin, then (a long batch of them) sleep short steps, leaving the
                    # servers the cores.  Kernels take their time: sleep growing steps.
                    if self._receiving or self._inflight_bytes:
                        backoff.spin, backoff.nap, backoff.ceiling = SPIN, LONG_NAP, 5e-4
                    elif copying and not computing:
                        backoff.spin, backoff.nap, backoff.ceiling = SPIN, 0.0, 1e-4
                    else:
                        backoff.spin, backoff.nap, backoff.ceiling = SHORT_SPIN, 0.0 if computing else NAP, 5e-4
                    backoff.pause()
        finally:
            backoff.close()
            with self._drivers_lock:
                self._drivers -= 1

    def poll(self) -> bool:
        """One progress step (the caller holds the poll lock): ``True`` if something arrived."""
        while not self._releases.empty():
            rank, eid = self._releases.get()
            if rank not in self.dead:
                self.post(rank, ("event_release", None, eid))
        busy = False  # something arrived, or bytes of a copy went out
        if self._inflight:
            self._complete("_inflight")
        if self._inflight_bytes:
            busy = self._complete("_inflight_bytes")
        if self._receiving and self._complete_receives():
            busy = True
        if self._stray:
            self._complete("_stray")
        status = self._status
        message = self.comm.improbe(self.MPI.ANY_SOURCE, TAG_REPLY, status)
        if message is not None:
            busy = True
            rank = status.Get_source()
            self._heard[rank] = time.monotonic()
            try:
                self._dispatch(rank, message.recv())
            except Exception as exc:  # a broken message must not stop every other rank's progress
                self._declare_dead(rank, f"sent a message rank 0 could not take: {exc!r}")
        now = time.monotonic()
        if now - self._last_check > 0.1:
            self._last_check = now
            for rank, heard in self._heard.items():
                if rank not in self.dead and now - heard > self.limit:
                    self._declare_dead(
                        rank,
                        f"said nothing for {self.limit:g} s (PYOFFLOAD_MPI_TIMEOUT): "
                        "the rank died or stopped answering",
                    )
        return busy

    def _complete(self, name: str) -> bool:
        """Complete what has completed of the oldest send requests in list ``name`` (sends
        complete about in order; a step must stay short however many are in flight: it is also
        what pushes the next ones out); ``True`` if any did."""
        requests = getattr(self, name)
        with self._send_lock:  # senders only append: the head is this step's alone
            head = requests[:_TEST_AT_ONCE]
        done = self.MPI.Request.Testsome(head)
        if not done:
            return False
        finished = set(done)
        with self._send_lock:
            requests[: len(head)] = [r for i, r in enumerate(head) if i not in finished]
        return True

    def _progress(self) -> None:
        """The progress thread: steps while nobody waits (a waiter's steps make it wait for the lock)."""
        backoff = Backoff(spin=5e-5, nap=0.0)
        lock = self._poll_lock
        while self._running:
            if self._drivers:  # a waiting thread takes the steps: keep out of its way (and off the GIL)
                time.sleep(1e-3)
                continue
            with lock:
                busy = self.poll()
            if busy:
                backoff.reset()
            else:
                backoff.ceiling = (
                    5e-4 if (self._replies or self._inflight or self._inflight_bytes or self._receiving) else 5e-3
                )
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
                if message[2] is not None:
                    if queue.error is None:
                        queue.error = message[2]
                    if self._receiving:
                        self._set_aside(queue.qid)
                event.error = message[2] or queue.error
                event.stored = message[3]
                event.done.set()
        elif op == "qerror":
            failed = self.queues.get(message[1])
            if failed is not None and failed.error is None:
                failed.error = message[2]
            if self._receiving:
                self._set_aside(message[1])

    def _declare_dead(self, rank: int, why: str) -> None:
        self.dead[rank] = why
        if self._receiving:
            self._set_aside(rank=rank)
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
        for request in self._inflight + self._inflight_bytes + self._stray + [r for r, _ in self._receiving]:
            request.Cancel()
