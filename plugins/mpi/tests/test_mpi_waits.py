"""pyoffload-mpi without mpirun: how waits pass their time, and which thread of a server reports an
event (the main loop at once, or the queue's watcher)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pyoffload.backend import Errc, InvalidArgumentError
from pyoffload_mpi import comm, server
from pyoffload_mpi.protocol import TAG_REPLY


class Clock:
    """A fake clock for :class:`comm.Backoff`, and a record of what it did each pause."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 100.0
        self.log: list[tuple[str, float]] = []
        self.slack: list[int | None] = []
        monkeypatch.setattr(comm, "_clock", lambda: self.now)
        monkeypatch.setattr(comm, "_yield", lambda: self.log.append(("yield", 0.0)))
        monkeypatch.setattr(comm, "_sleep", lambda s: self.log.append(("sleep", s)))
        monkeypatch.setattr(comm, "timer_slack", self._slack)
        self.current = 50_000

    def _slack(self, ns: int | None) -> int | None:
        previous = self.current
        if ns is not None:
            self.current = ns
        self.slack.append(ns)
        return previous


def test_a_wait_spins_then_naps_with_a_fine_timer_then_sleeps_longer(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    backoff = comm.Backoff(ceiling=1e-4, spin=1e-3, nap=3e-3)
    for _ in range(5):  # within the spin: the core is given away, nothing sleeps
        backoff.pause()
        clock.now += 1e-4
    assert clock.log == [("yield", 0.0)] * 5 and clock.slack == []
    clock.log.clear()
    clock.now += 1e-3  # past the spin: naps (sleep(0)) with the timer slack lowered once
    backoff.pause()
    backoff.pause()
    assert clock.log == [("sleep", 0)] * 2
    assert clock.slack == [comm.FINE_SLACK_NS] and clock.current == comm.FINE_SLACK_NS
    clock.log.clear()
    clock.now += 3e-3  # past the naps: sleeps growing by 20 µs to the ceiling
    for _ in range(7):
        backoff.pause()
    assert [round(s * 1e6) for _, s in clock.log] == [20, 40, 60, 80, 100, 100, 100]
    backoff.reset()  # activity: spinning again
    clock.log.clear()
    backoff.pause()
    assert clock.log == [("yield", 0.0)]
    backoff.close()  # the thread's own timer slack comes back
    assert clock.current == 50_000


def test_a_wait_may_spin_without_giving_its_core_away_at_first(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    backoff = comm.Backoff(ceiling=1e-4, spin=1e-3, nap=0.0, polite=2e-4)
    for _ in range(4):  # the first 0.2 ms: spinning, nothing given away
        backoff.pause()
        clock.now += 6e-5
    assert clock.log == []
    backoff.pause()  # then as any other: yielding the core each turn
    assert clock.log == [("yield", 0.0)]


def test_a_wait_that_never_naps_leaves_the_timer_slack_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    backoff = comm.Backoff(ceiling=1e-4, spin=0.0, nap=0.0)
    for _ in range(3):
        backoff.pause()
        clock.now += 1e-3
    backoff.close()
    assert [kind for kind, _ in clock.log] == ["sleep"] * 3 and clock.slack == []


def test_the_timer_slack_of_this_thread_can_be_lowered_and_restored() -> None:
    before = comm.timer_slack(None)
    if before is None:
        pytest.skip("no per-thread timer slack on this system")
    try:
        assert comm.timer_slack(comm.FINE_SLACK_NS) == before
        assert comm.timer_slack(None) == comm.FINE_SLACK_NS
    finally:
        comm.timer_slack(before)
    assert comm.timer_slack(None) == before


# -- a server's events, without MPI ------------------------------------------------------------


class Sent:
    """A send that completed at once."""

    def test(self) -> tuple[bool, None]:
        return True, None


class Comm:
    """What the server's reply path uses of an MPI communicator: replies are recorded, with the
    thread that sent them."""

    def __init__(self) -> None:
        self.replies: list[tuple[tuple[Any, ...], str]] = []
        self.sent = threading.Condition()

    def Get_rank(self) -> int:
        return 1

    def isend(self, message: tuple[Any, ...], dest: int, tag: int) -> Sent:
        assert (dest, tag) == (0, TAG_REPLY)
        with self.sent:
            self.replies.append((message, threading.current_thread().name))
            self.sent.notify_all()
        return Sent()

    def reply_for(self, eid: int, timeout: float = 10.0) -> tuple[tuple[Any, ...], str]:
        with self.sent:
            assert self.sent.wait_for(lambda: any(m[0] == "event" and m[1] == eid for m, _ in self.replies), timeout)
            return next((m, who) for m, who in self.replies if m[0] == "event" and m[1] == eid)


class Event:
    def __init__(self, failure: BaseException | None = None) -> None:
        self.failure = failure
        self.release = threading.Event()
        self.release.set()

    def wait(self) -> None:
        assert self.release.wait(10)
        if self.failure is not None:
            raise self.failure


class Queue:
    """The server-side queue: records events; ``query`` says whether its work is done."""

    def __init__(self) -> None:
        self.recorded: list[Event] = []
        self.idle = True
        self.next_failure: BaseException | None = None
        self.hold_next = False  # the next event completes only when its release is set
        self.waited: list[tuple[Any, ...]] = []

    def record(self) -> Event:
        event = Event(self.next_failure)
        if self.hold_next:
            event.release.clear()
        self.next_failure, self.hold_next = None, False
        self.recorded.append(event)
        return event

    def query(self) -> bool:
        raise AssertionError("Queue.query moves the runtime past failed work: a later wait would not raise it")

    @property
    def disp(self) -> Any:
        return self

    dh = handle = None

    def queue_query_impl(self, dh: Any, handle: Any) -> bool:
        return self.idle

    def launch(self, *args: Any) -> None:
        self.idle = False

    def wait_events(self, *events: Any) -> None:
        self.waited.append(events)


@pytest.fixture
def served() -> Any:
    link = Comm()
    srv = server.Server(link)
    queues = []

    def make(profiling: bool = False) -> tuple[server.Server, server.ServedQueue, Comm, Queue]:
        queue = Queue()
        sq = server.ServedQueue(srv, len(queues) + 1, queue, profiling)
        srv.queues[sq.qid] = sq
        queues.append(sq)
        return srv, sq, link, queue

    yield make
    for sq in queues:
        sq.close()


def test_an_event_on_a_queue_without_work_is_reported_at_once_by_the_main_loop(served: Any) -> None:
    srv, sq, link, queue = served()
    me = threading.current_thread().name
    srv.do_record(sq, 7, False)  # a synchronisation
    assert link.replies == [(("event", 7, None, False), me)]  # before do_record returned, from this thread
    srv.do_record(sq, 8, True)  # an event the application keeps: complete already, nothing to keep
    assert link.replies[-1] == (("event", 8, None, False), me)
    assert queue.recorded == [] and srv.events == {} and sq.recorded == 0
    srv.do_wait_events(sq, [8])  # waiting for it is no wait at all
    assert queue.waited == [] and sq.settled()
    assert srv.rpc_stats()["answered_at_once"] == 2


def test_a_profiling_queue_keeps_its_events_even_when_reported_at_once(served: Any) -> None:
    srv, sq, link, queue = served(profiling=True)
    srv.do_record(sq, 3, True)
    assert link.replies == [(("event", 3, None, True), threading.current_thread().name)]
    assert srv.events == {3: queue.recorded[0]}  # to be timed (elapsed)


def test_an_event_after_work_goes_through_the_watcher_which_reports_failures(served: Any) -> None:
    srv, sq, link, queue = served()
    srv.kernels[1] = "kernel"
    srv.do_launch(sq, 1, (1, 1, 1), (1, 1, 1), ())  # work on the queue
    failure = InvalidArgumentError("the kernel read out of bounds")
    queue.next_failure = failure
    srv.do_record(sq, 11, True)
    message, who = link.reply_for(11)
    assert who == sq.watcher.name
    assert message[0:2] == ("event", 11) and message[3] is True
    assert message[2][0] == "InvalidArgumentError" and message[2][1] == int(Errc.INVALID_ARGUMENT)
    assert srv.events == {11: queue.recorded[0]}
    # Once the watcher has reported it, the queue is settled again: the next event is immediate.
    deadline = time.monotonic() + 10
    while not sq.settled():
        assert time.monotonic() < deadline
        time.sleep(0.001)
    srv.do_record(sq, 12, False)
    assert link.replies[-1] == (("event", 12, None, False), threading.current_thread().name)


def test_events_wait_for_the_watcher_to_report_the_earlier_ones(served: Any) -> None:
    srv, sq, link, queue = served()
    sq.touched = True
    queue.hold_next = True  # the watcher will be waiting for the first event
    srv.do_record(sq, 21, False)
    assert not sq.settled()
    srv.do_record(sq, 22, False)  # so this one queues behind it, in order
    assert [m[1] for m, _ in link.replies if m[0] == "event"] == []
    queue.recorded[0].release.set()
    link.reply_for(22)
    assert [m[1] for m, _ in link.replies if m[0] == "event"] == [21, 22]


def test_whether_a_queue_is_busy_is_asked_of_its_backend_not_of_the_runtime(served: Any) -> None:
    srv, sq, link, queue = served()
    assert not srv._queues_busy()
    srv.kernels[1] = "kernel"
    srv.do_launch(sq, 1, (1, 1, 1), (1, 1, 1), ())  # (Queue.query would raise)
    assert srv._queues_busy() and not sq.idle()
    queue.idle = True
    assert not srv._queues_busy() and sq.idle()
    assert not sq.settled()  # idle, but a failure of the kernel has not been reported yet


# -- reading ahead, without MPI ----------------------------------------------------------------


class Message:
    def __init__(self, request: tuple[Any, ...]) -> None:
        self.request = request

    def recv(self) -> tuple[Any, ...]:
        return self.request


class Wire(Comm):
    """A communicator whose request channel holds the given requests, in order."""

    def __init__(self, requests: list[tuple[Any, ...]]) -> None:
        super().__init__()
        self.requests = list(requests)
        self.probes = 0

    def improbe(self, source: int, tag: int) -> Message | None:
        self.probes += 1
        return Message(self.requests.pop(0)) if self.requests else None


def test_a_request_read_ahead_during_a_copy_is_handled_first_and_only_one_is_read() -> None:
    wire = Wire([("stats", 5), ("stats", 6), ("exit", 7)])
    srv = server.Server(wire)
    srv._read_ahead()  # (what a wait for a copy does on each turn)
    srv._read_ahead()  # one at most: the bytes of a submit follow its request on the same tag
    assert srv._next == ("stats", 5) and wire.requests == [("stats", 6), ("exit", 7)]
    srv.serve()
    replies = [m[1] for m, _ in wire.replies if m[0] == "reply"]
    assert replies == [5, 6, 7]  # in the order rank 0 sent them
    assert srv.rpc_stats()["read_ahead"] == 1


# -- who gives a core away when ----------------------------------------------------------------


def test_rank_0_gives_its_core_away_from_the_first_turn_of_a_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that shares rank 0's core must get it the moment the request is out: rank 0's
    waits yield on every turn, the first one included."""
    from pyoffload_mpi import client

    clock = Clock(monkeypatch)
    backoff = comm.Backoff(ceiling=5e-4, polite=client.IMPOLITE)
    backoff.pause()
    assert clock.log == [("yield", 0.0)]


def test_only_a_serving_rank_has_open_mpi_poll_without_yielding_and_an_explicit_setting_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    from pyoffload_mpi import __main__ as launcher

    variable = "OMPI_MCA_mpi_yield_when_idle"
    monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")  # the application's rank: Open MPI's default
    launcher._quiet_mpi_waits()
    assert variable not in os.environ
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")  # a server: its own loops decide when to yield
    launcher._quiet_mpi_waits()
    assert os.environ[variable] == "0"
    monkeypatch.setenv(variable, "1")  # mpirun --mca mpi_yield_when_idle 1
    launcher._quiet_mpi_waits()
    assert os.environ[variable] == "1"
