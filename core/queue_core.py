"""The in-flight ledger: a backend queue on one device, the order of the operations enqueued on it,
and what the generic layer must remember about those still running.

Every operation enqueued on a queue gets the next sequence number.  The ledger records:

* ``done``: every operation up to this number has completed (as far as anyone has observed);
* markers: backend events recorded *only when something needs to observe completion* (the user
  waits on one operation, a host buffer or a deferred free must be released after an operation,
  a profiling queue, ``record()``); a marker recorded after operation ``n`` completes when all of
  ``1..n`` have, because the queue is in order;
* holds and deferred actions: objects an operation uses (host buffers of a copy) and actions to
  run once it has completed (a free that could not wait), released and run when ``done`` passes
  them — by whoever observes it: a wait on any event, a query, or a later operation.

**A wait waits for its point only.**  Waiting for operation ``n`` waits on a marker: the first one
at or after ``n``, or one recorded now after the newest operation.  Operations that depend on
something outside the queue — host functions and waits on other queues' events — get a marker
recorded right before them (a *fence*) whenever earlier work is still running.  So the marker a
wait uses never lies beyond such a dependency: a wait for ``n`` may also wait for kernels and
copies enqueued after ``n`` (they complete on their own), never for a host function or a
cross-queue wait enqueued after ``n``, which could be waiting for the waiter itself (issue 22,
finding 11: the OpenCL queue's helper waited for a whole host queue, whose later host function
waited for that OpenCL queue).  The whole backend queue is synchronised in one place only, the
synchronous operation of :meth:`QueueCore.run_now`, and only while the backend queue can hold
nothing but independent work (``_dependent``, ``_syncs``).

Host functions and host-side dependencies (waits on events of other backends) are native where
the backend offers them; otherwise the queue enters *backlog* mode: later operations get their
sequence numbers at once but are handed to the backend by a helper thread of this queue, in order,
once the host function has run or the dependency has completed.  Enqueueing never blocks.

Locks.  ``QueueCore._lock`` guards the ledger and the order (the fields marked so below, and the
fields of the queue's :class:`Marker` objects); backend enqueue hooks are called under it and must
not block.  It is never held while waiting on the device or running user code.  Some fields are
read without it as hints on fast paths (``done``, ``seq``, ``live``, ``failures``): each only
moves one way, or is re-read under the lock before anything is decided from it.  ``_users_lock``
guards the ``users`` dicts of allocations (which queues use them, up to which operation); which
programs a queue launched is the queue's own record, under its lock.  Every update of the ledger
is made so that an exception at any point (a ``KeyboardInterrupt`` included) leaves it
consistent: locks are taken with ``with``, counters that other threads wait on are restored in
``finally``.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any


from .errors import BackendError, Errc, InvalidArgumentError, InvalidHandleError, OffloadError, UnsupportedError
from .runtime import EXIT_WAIT_SECONDS, dead_runtime_error, exit_wait, warn_teardown

# Poll for completed markers on enqueue once this many holds or deferred actions are pending.
_POLL_AFTER = 8

# Guards the ``users`` dicts of allocations: queue -> the sequence number of the last operation on
# that queue that uses the allocation (see record_user).
_users_lock = threading.Lock()


def users_of(obj: Any) -> list[tuple[QueueCore, int]]:
    """A snapshot of the users of ``obj`` (queue, last operation's sequence number)."""
    if obj.users is None:
        # One read of one field is a snapshot too (what the locked read would have returned at
        # that instant): memory no queued work ever used takes no lock.
        return []
    with _users_lock:
        users = obj.users
        return list(users.items()) if users else []


def clear_users(obj: Any) -> None:
    """Forget the users of ``obj`` (freed or released: nothing waits for them any more)."""
    with _users_lock:
        obj.users = None


def record_user(obj: Any, queue: QueueCore, seq: int) -> None:
    """Record operation ``seq`` of ``queue`` as a user of ``obj`` (an allocation or a program),
    so that its free or unload waits for it.  Threads record in any order: the entry keeps the
    highest number, since waiting for an operation waits for every earlier one of its queue."""
    with _users_lock:
        users = obj.users
        if users is None:
            obj.users = {queue: seq}
        elif seq > users.get(queue, 0):
            users[queue] = seq


class Marker:
    """A backend event recorded after operation ``seq``.

    ``pins`` counts threads waiting on it; ``owned`` means an :class:`Event` keeps it (profiling
    and ``record()``); it is released once it left the ledger and neither is true.
    """

    # all guarded by the owning queue's _lock
    __slots__ = ("seq", "handle", "pins", "owned", "retired", "ready", "failure", "start", "opening")

    def __init__(self, seq: int, handle: Any, owned: bool = False) -> None:
        self.seq = seq
        # On a profiling queue each operation has a marker right before it too (its start, for
        # Event.profiling_info): ``start`` on the marker after it, ``opening`` on that one.
        self.start: Marker | None = None
        self.opening = False
        self.handle = handle
        self.pins = 0
        self.owned = owned
        self.retired = False  # left the ledger
        self.ready = handle is not None  # recorded with the backend (False while in the backlog)
        # What a wait on it raised: later waits raise the same failure, not the backend's next
        # copy of it (a backend may raise a new exception object for one failure at every wait).
        self.failure: OffloadError | None = None


class _HostFunctionScope(threading.local):
    """Which queue's host function (and its sequence number) this thread is running, if any."""

    def __init__(self) -> None:
        self.running: list[tuple[QueueCore, int]] = []  # this thread's only


_host_scope = _HostFunctionScope()


def running_host_function() -> tuple[QueueCore, int] | None:
    """The queue and sequence number of the host function the calling thread runs, or ``None``."""
    running = _host_scope.running
    return running[-1] if running else None


# A backlog entry: (kind, seq, payload, fence).  kind "op": payload (hook function, args, host
# fallback or None); "mark": payload the Marker to record; "host": payload the host function's
# runner; "wait": payload a list of blocking waits.  fence: the marker recorded right before a
# "host" or "wait" entry (pinned for the helper thread), or None when nothing before it was running.
_Entry = tuple[str, int, Any, "Marker | None"]


class QueueCore:
    """A backend queue on one device plus its ledger.  The public ``pyoffload.Queue`` and the
    contexts' internal queues (for the synchronous operations) are both one."""

    __slots__ = (
        # set once by __init__, then read-only
        "device",
        "context",
        "profiling",
        "_name",
        "disp",
        "dh",
        "rt",
        "handle",
        "_native_host_functions",
        "_native_waits",
        "_lock",
        "_moved",
        # guarded by self._lock
        "live",  # not destroyed
        "seq",  # operations enqueued (the last sequence number given out)
        "submitted",  # operations handed to the backend (<= seq)
        "done",  # operations observed complete (<= submitted, except after close)
        "_markers",  # deque[Marker], by seq
        "_holds",  # deque[(seq, object kept alive)]
        "_deferred",  # deque[(seq, action)]
        "failures",  # dict: seq -> error of a host function (or a refused backlogged enqueue)
        "_unreported",  # list: errors no queue-wide wait raised yet
        "failed_work",  # list[(first, last, error)]: failures the backend reported at a wait
        "backlog",  # deque[_Entry] while a helper thread hands work over, else None
        "_drainer",  # the helper thread (a Thread, started or about to be), or None
        "_dependent",  # a host function or cross-queue wait was handed to the backend itself
        "_syncs",  # run_now synchronisations of the whole backend queue in progress
        "_launched",  # dict: program -> sequence number of this queue's last launch of its kernels
        "__weakref__",
    )

    def __init__(self, device: Any, context: Any, profiling: bool, name: str, native: Any = None) -> None:
        self.device = device
        self.context = context
        self.profiling = bool(profiling)
        self._name = name
        self.disp = device.disp
        self.dh = device.handle
        self.rt = device.rt
        self._lock = threading.Lock()
        self._moved = threading.Condition(self._lock)  # notified when the backlog moves
        self.live = False
        self.seq = 0
        self.submitted = 0
        self.done = 0
        self._markers: collections.deque[Marker] = collections.deque()
        self._holds: collections.deque[tuple[int, Any]] = collections.deque()
        self._deferred: collections.deque[tuple[int, Callable[[], None]]] = collections.deque()
        self.failures: dict[int, BaseException] = {}
        self._unreported: list[BaseException] = []
        self.failed_work: list[tuple[int, int, OffloadError]] = []
        self.backlog: collections.deque[_Entry] | None = None
        self._drainer: threading.Thread | None = None
        self._dependent = False
        self._syncs = 0
        self._launched: dict[Any, int] = {}
        self._native_host_functions = self.disp.implements("enqueue_host_function_impl")
        self._native_waits = self.disp.implements("queue_wait_events_impl")
        if native is None:
            self.handle = self.disp.queue_create_impl(context.handle, self.dh, self.profiling)
        else:
            self.handle = self.disp.queue_from_native_impl(context.handle, self.dh, native, self.profiling)
        self.live = True

    @property
    def native(self) -> Any:
        """The vendor's queue: for most backends an int address (``CUstream``,
        ``cl_command_queue``), as ``native_handle_impl`` reports it."""
        return self.disp.native_handle_impl("queue", self.handle)

    # -- state ------------------------------------------------------------------------------

    def abandon(self) -> None:
        with self._lock:
            self.live = False

    def dead(self) -> OffloadError:
        if not self.rt.alive:
            return dead_runtime_error(self.rt)
        return InvalidHandleError(f"{self._name} was destroyed", Errc.INVALID_QUEUE)

    def check_live(self) -> None:
        if not self.live:
            raise self.dead()

    # -- enqueueing -------------------------------------------------------------------------

    def _submit_locked(
        self, hook: str, fn: Callable[..., Any], args: tuple[Any, ...], fallback: Callable[[], None] | None
    ) -> int:
        """Hand one operation to the backend (or to the backlog); its sequence number (lock held).
        Nothing in the ledger changes unless the backend took it."""
        seq = self.seq + 1
        backlog = self.backlog
        if backlog is None:
            try:
                fn(*args)
            except OffloadError:
                raise
            except Exception as exc:
                raise self.disp.failure(hook, exc) from exc
            self.submitted = self.seq = seq
        else:
            backlog.append(("op", seq, (fn, args, fallback), None))
            self.seq = seq
        return seq

    def _submit_opened_locked(
        self,
        start: Marker,
        hook: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        fallback: Callable[[], None] | None,
    ) -> int:
        """:meth:`_submit_locked` on a profiling queue, behind the operation's start marker
        ``start`` (lock held): refused, nothing owns ``start`` any more (the ledger releases it
        like any marker).  A function of its own: on CPython 3.11 an interrupt raised at the line of
        a ``try`` statement nested in the ``with self._lock`` block left the lock held
        (tests/reliability/test_queue_interrupts.py)."""
        try:
            return self._submit_locked(hook, fn, args, fallback)
        except BaseException:
            self._unopen_locked(start)
            raise

    def enqueue(
        self,
        hook: str,
        args: tuple[Any, ...],
        hold: Any = None,
        mark: bool = True,
        fallback: Callable[[], None] | None = None,
    ) -> int:
        """Enqueue one operation whose backend part is the enqueue hook ``hook`` called with
        ``args``; return its sequence number.  ``hold`` is kept alive until the operation completes (a host buffer it
        reads or writes); a marker is recorded after it so that the hold is released as soon as
        anyone observes completion, unless ``mark`` is false: the caller is about to wait for it.
        ``fallback`` does the operation's work on the host if the backend refuses it
        (``UnsupportedError``) once it is handed over from the backlog; outside the backlog the
        refusal reaches the caller, who falls back itself."""
        with self._lock:
            if not self.live:
                raise self.dead()
            start = self._open_locked() if self.profiling else None
            if start is None:
                seq = self._submit_locked(hook, getattr(self.disp.raw, hook), args, fallback)
            else:
                seq = self._submit_opened_locked(start, hook, getattr(self.disp.raw, hook), args, fallback)
            if hold is not None:
                self._holds.append((seq, hold))
            if start is not None:
                self.mark_locked(owned=True).start = start  # the operation's event takes it (claim_marker)
            elif hold is not None and mark:
                self.mark_locked()
            poll = len(self._holds) + len(self._deferred) > _POLL_AFTER
        if poll:
            self._poll()
        return seq

    def enqueue_launch(self, prog: Any, allocs: Sequence[Any], fn: Callable[..., Any], args: tuple[Any, ...]) -> int:
        """The launch hand-over: record the launch as a user of ``prog`` and of each allocation in
        ``allocs`` *before* checking that they are still alive, then hand ``fn(*args)`` to the
        backend in the queue's order; its sequence number.  An unload or free that starts
        concurrently either sees the recorded use and waits for it, or the launch sees the object
        gone and fails: never a launch of freed memory or unloaded code.  The program's use is
        recorded here, under this queue's lock (:meth:`last_launch_of` reads it under the same
        lock, after the unload has marked the program as going)."""
        with self._lock:
            if not self.live:
                raise self.dead()
            seq = self.seq + 1
            self._launched[prog] = seq
            for a in allocs:
                record_user(a, self, seq)
            prog.check_loaded()
            for a in allocs:
                if not a.live:
                    raise InvalidArgumentError(f"launch of a kernel of {prog!r}: {a!r} was freed")
            start = self._open_locked() if self.profiling else None
            if start is None:
                self._submit_locked("launch_impl", fn, args, None)
            else:
                self._submit_opened_locked(start, "launch_impl", fn, args, None)
            if start is not None:
                self.mark_locked(owned=True).start = start  # the launch's event takes it (claim_marker)
        return seq

    def _open_locked(self) -> Marker:
        """On a profiling queue, the marker right before an operation: it completes when the
        operation may start, which an in-order queue's next operation does at once (lock held)."""
        marker = self.mark_locked(owned=True)
        marker.opening = True
        return marker

    def _unopen_locked(self, start: Marker | None) -> None:
        """The operation ``start`` was recorded for was refused: nothing owns ``start``, and the
        ledger releases it like any marker once the queue passes it (lock held)."""
        if start is not None:
            start.owned = False

    def last_launch_of(self, prog: Any, forget: bool = False) -> int:
        """The sequence number of this queue's last launch of a kernel of ``prog`` (0: none);
        ``forget`` drops the record (the program is unloaded: nothing will wait for it again)."""
        with self._lock:
            return self._launched.pop(prog, 0) if forget else self._launched.get(prog, 0)

    def run_now(self, hook: str, args: tuple[Any, ...], hold: Any, uses: tuple[Any, ...]) -> int | None:
        """The synchronous form of one operation: ``enqueue(hook, args, hold, mark=False)``,
        record it as a user of the allocations ``uses`` (``None`` entries skipped), then wait for
        it with one ``queue_synchronize_impl``, no driver event.  Only while the backend queue can
        hold nothing but independent work (no host function or cross-queue wait was ever handed
        to it, and none is while the synchronisation runs: see ``_syncs``), so that the
        synchronisation never waits for something that waits for its caller.  Returns ``None``
        without enqueueing anything where the queue cannot take this path (a backlog, profiling,
        a queue that had dependencies): the caller then does the three steps itself."""
        with self._lock:
            if not self.live:
                raise self.dead()
            if self.backlog is not None or self.profiling or self._dependent:
                return None
            seq = self._submit_locked(hook, getattr(self.disp.raw, hook), args, None)
            if hold is not None:
                self._holds.append((seq, hold))
            self._syncs += 1
        try:
            for alloc in uses:
                if alloc is not None:
                    record_user(alloc, self, seq)
            try:
                self.disp.raw.queue_synchronize_impl(self.dh, self.handle)
            except OffloadError as exc:
                self._work_failed(seq, exc)
            except Exception as exc:
                raise self.disp.failure("queue_synchronize_impl", exc) from exc
        finally:
            with self._lock:
                self._syncs -= 1
        self._advance(seq)
        return seq

    def mark_locked(self, owned: bool = False) -> Marker:
        """Record a marker after everything enqueued so far (lock held)."""
        backlog = self.backlog
        if backlog is None:
            marker = Marker(self.seq, self.disp.event_record_impl(self.dh, self.handle), owned)
        else:
            marker = Marker(self.seq, None, owned)
            backlog.append(("mark", self.seq, marker, None))
        self._markers.append(marker)
        return marker

    def _fence_locked(self) -> Marker | None:
        """Before an operation that depends on something outside the queue: a marker right after
        the work enqueued so far (``None`` if all of it has completed), so that no wait for
        earlier work waits for the dependency (lock held)."""
        if self.seq <= self.done:
            return None
        markers = self._markers
        if markers and markers[-1].seq == self.seq:
            return markers[-1]
        return self.mark_locked()

    def _mark_submitted_locked(self) -> Marker:
        """A marker right after the work handed to the backend so far, pinned for the caller: the
        helper thread's fence before a host fallback it inserts into the backlog (lock held)."""
        marker = Marker(self.submitted, self.disp.event_record_impl(self.dh, self.handle))
        marker.pins = 1
        markers = self._markers
        at = 0
        while at < len(markers) and markers[at].seq <= marker.seq:
            at += 1
        markers.insert(at, marker)
        return marker

    def record_marker(self) -> Marker:
        """A marker after everything enqueued so far, owned by the caller (``Queue.record``)."""
        with self._lock:
            if not self.live:
                raise self.dead()
            return self.mark_locked(owned=True)

    def release_marker(self, marker: Marker) -> None:
        """The owner of ``marker`` no longer needs it (nor the marker before its operation)."""
        with self._lock:
            marker.owned = False
            release = marker.retired and marker.pins == 0 and marker.ready
        if release:
            self._release(marker)
        if marker.start is not None:
            self.release_marker(marker.start)

    def _release(self, marker: Marker) -> None:
        try:
            self.disp.event_release_impl(self.dh, marker.handle)
        except Exception as exc:
            warn_teardown(f"releasing an event of {self._name}", exc)

    def _hand_host_function_locked(self, seq: int, run: Callable[[], None], fence: Any, start: Marker | None) -> None:
        """Hand host function ``seq`` to the backend, or to the backlog (lock held); refused, its
        start marker ``start`` (profiling) is owned by nothing any more."""
        try:
            if self.backlog is None and self._native_host_functions and not self._syncs:
                self.disp.enqueue_host_function_impl(self.dh, self.handle, run)
                self._dependent = True
                self.submitted = self.seq = seq
            else:
                self._to_backlog_locked(("host", seq, run, fence))
        except BaseException:
            self._unopen_locked(start)
            raise

    def host_function(self, fn: Callable[[], Any]) -> int:
        """Enqueue ``fn`` to run once earlier work has completed, holding later work back."""
        with self._lock:
            if not self.live:
                raise self.dead()
            seq = self.seq + 1
            run = self._host_runner(fn, seq)
            start = self._open_locked() if self.profiling else None
            fence = self._fence_locked()
            self._hand_host_function_locked(seq, run, fence, start)
            if start is not None:
                self.mark_locked(owned=True).start = start
            return seq

    def _to_backlog_locked(self, entry: _Entry) -> None:
        """Append a host function or a wait to the backlog, starting the helper thread if needed;
        its fence is pinned for the helper (lock held).  Each step leaves a valid state: a pin
        taken for a helper that never gets the entry leaks one event at most; a backlog without
        a helper gets one from the next enqueue or wait (_ensure_drain_locked)."""
        fence = entry[3]
        if fence is not None:
            fence.pins += 1
        self.seq = entry[1]
        if self.backlog is None:
            self.backlog = collections.deque((entry,))
        else:
            self.backlog.append(entry)
        self._ensure_drain_locked()

    def _ensure_drain_locked(self) -> None:
        """Start the helper thread if there is a backlog and no helper (lock held)."""
        helper = self._drainer
        if self.backlog is not None and (helper is None or helper.ident is None):
            helper = threading.Thread(target=self._drain, name=f"pyoffload-{self._name}", daemon=True)
            self._drainer = helper
            helper.start()

    def claim_marker(self, seq: int) -> Marker | None:
        """The marker recorded right after operation ``seq`` on a profiling queue, for its event."""
        with self._lock:
            for m in reversed(self._markers):
                if m.seq == seq and not m.opening:  # the next operation's start has the same seq
                    return m
                if m.seq < seq:
                    break
        return None

    def _host_runner(self, fn: Callable[[], Any], seq: int) -> Callable[[], None]:
        def run() -> None:
            # Everything before the host function has completed: the queue is in order.
            self._advance(seq - 1)
            _host_scope.running.append((self, seq))
            try:
                fn()
            except BaseException as exc:  # recorded for its event and the queue's next wait
                with self._lock:
                    self.failures[seq] = exc
                    self._unreported.append(exc)
            finally:
                _host_scope.running.pop()
            self._advance(seq)

        return run

    def marker_for(self, seq: int) -> Marker | None:
        """A marker that completes no earlier than operation ``seq`` (and before any later
        dependency of the queue), pinned for the caller (who must ``unpin`` it), or ``None`` if
        ``seq`` has completed (a number beyond the last enqueued operation stands for that one,
        as in :meth:`wait_until`)."""
        with self._lock:
            if seq > self.seq:
                seq = self.seq
            if seq <= self.done:
                return None
            marker = self._first_marker_locked(seq)
            if marker is None:
                marker = self.mark_locked()
            marker.pins += 1
            return marker

    def _first_marker_locked(self, seq: int) -> Marker | None:
        for m in self._markers:
            if m.seq >= seq:
                return m
        return None

    def wait_on(self, events: Sequence[tuple[QueueCore, int, Marker]], foreign: Sequence[Callable[[], None]]) -> int:
        """Make later work wait for ``events`` (``(queue, seq, pinned marker)`` of this backend's
        queues, ordered natively where the backend can) and for ``foreign`` waits (callables that
        block until an event of another backend completes, run on this queue's helper thread)."""
        native = [m.handle for _, _, m in events if m.ready]
        with self._lock:
            if not self.live:
                raise self.dead()
            seq = self.seq + 1
            fence = self._fence_locked()
            ordered = False
            if (
                native
                and len(native) == len(events)
                and self.backlog is None
                and self._native_waits
                and not self._syncs
            ):
                ordered = bool(self.disp.queue_wait_events_impl(self.dh, self.handle, native))
            waits = list(foreign)
            if not ordered:
                waits += [waiter(q, s) for q, s, _ in events]
            if waits:
                self._to_backlog_locked(("wait", seq, waits, fence))
            else:
                self._dependent = True
                self.submitted = self.seq = seq
            return seq

    def hold(self, seq: int, obj: Any) -> None:
        """Keep ``obj`` alive until operation ``seq`` has completed."""
        with self._lock:
            if seq > self.done:
                self._holds.append((seq, obj))
                if self._first_marker_locked(seq) is None:
                    self.mark_locked()

    def after(self, seq: int, action: Callable[[], None]) -> None:
        """Run ``action()`` once operation ``seq`` has completed (now, if it has)."""
        with self._lock:
            if seq > self.done:
                self._deferred.append((seq, action))
                if self._first_marker_locked(seq) is None:
                    self.mark_locked()
                return
        action()

    # -- the backlog --------------------------------------------------------------------------

    def _drain(self) -> None:
        """Hand backlogged operations to the backend in order; run host functions and waits."""
        while True:
            with self._lock:
                backlog = self.backlog
                if not backlog:
                    self.backlog = self._drainer = None
                    self._moved.notify_all()
                    return
                kind, seq, payload, fence = backlog.popleft()
                if kind == "op":
                    self._hand_over_locked(seq, payload)
                    continue
                if kind == "mark":
                    payload.handle = self.disp.event_record_impl(self.dh, self.handle)
                    payload.ready = True
                    self._moved.notify_all()
                    continue
            # A host function or a wait: everything before it must complete first (its fence).
            try:
                if fence is not None:
                    self._wait_marker(fence)
                if kind == "host":
                    payload()
                else:
                    for wait in payload:
                        wait()
            except BaseException as exc:
                with self._lock:
                    self.failures[seq] = exc
                    self._unreported.append(exc)
            finally:
                if fence is not None:
                    self._unpin(fence)
                with self._lock:
                    self.submitted = seq
                    self._moved.notify_all()
            self._advance(seq)

    def _hand_over_locked(self, seq: int, payload: tuple[Any, ...]) -> None:
        """One backlogged operation to the backend (lock held): its refusal is its failure."""
        fn, args, fallback = payload
        try:
            fn(*args)
        except Exception as exc:  # the enqueue was accepted: report it like a failure
            if fallback is not None and isinstance(exc, UnsupportedError):
                # the backend cannot do it: the host does it in the same place, in order
                fence = self._mark_submitted_locked() if self.submitted > self.done else None
                self.backlog.appendleft(("host", seq, self._host_runner(fallback, seq), fence))  # type: ignore[union-attr]
                return
            if not isinstance(exc, OffloadError):
                exc = self.disp.failure(getattr(fn, "__name__", "an enqueue hook"), exc)
            self.failures[seq] = exc
            self._unreported.append(exc)
        self.submitted = seq
        self._moved.notify_all()

    # -- observing completion ---------------------------------------------------------------

    def _advance(self, upto: int) -> None:
        """Everything up to ``upto`` has completed: release what the ledger held for it."""
        release: list[Marker] = []
        actions: list[Callable[[], None]] = []
        with self._lock:
            if upto <= self.done:
                return
            self.done = upto
            markers = self._markers
            while markers and markers[0].seq <= upto:
                m = markers.popleft()
                m.retired = True
                if m.pins == 0 and not m.owned and m.ready:
                    release.append(m)
            holds = self._holds
            while holds and holds[0][0] <= upto:
                holds.popleft()
            deferred = self._deferred
            while deferred and deferred[0][0] <= upto:
                actions.append(deferred.popleft()[1])
        for m in release:
            self._release(m)
        for action in actions:
            action()

    def unpin(self, marker: Marker) -> None:
        """Drop a pin that ``marker_for`` took."""
        self._unpin(marker)

    def _unpin(self, marker: Marker) -> None:
        with self._lock:
            marker.pins -= 1
            release = marker.retired and marker.pins == 0 and not marker.owned and marker.ready
        if release:
            self._release(marker)

    def _wait_marker(self, marker: Marker) -> None:
        self.disp.event_wait_impl(self.dh, marker.handle)
        self._advance(marker.seq)

    def _check_self_wait(self, seq: int) -> None:
        running = running_host_function()
        if running is not None and running[0] is self and seq >= running[1]:
            raise OffloadError(
                f"a host function of {self._name} waits for that queue's own later work, which "
                "cannot start before the host function returns",
                Errc.INVALID_QUEUE,
            )

    def wait_for(self, seq: int) -> None:
        """Block until operation ``seq`` has completed; raise if it (a host function) failed."""
        if seq > self.done:
            self._check_self_wait(seq)
            self.wait_until(seq)
        with self._lock:
            exc = self.failures.get(seq)
            failed = [err for first, last, err in self.failed_work if first <= seq <= last]
        if exc is not None:
            raise BackendError(f"a host function on {self._name} raised {exc!r}") from exc
        if failed:
            raise failed[0]

    def wait_done(self, seq: int) -> None:
        """Block until operation ``seq`` has completed (whether or not it failed)."""
        if seq > self.done:
            self._check_self_wait(seq)
            self.wait_until(seq)

    def settle(self, seq: int) -> None:
        """Block until operation ``seq`` no longer runs, failed or not: what it used may then be
        released.  Raises when that cannot be established (the wait failed while the queue is
        still busy, or waiting would never end): the caller must then leak rather than release."""
        try:
            self.wait_done(seq)
        except OffloadError as exc:
            if exc.errc is Errc.INVALID_QUEUE:
                raise
            try:
                finished = bool(self.disp.queue_query_impl(self.dh, self.handle))
            except OffloadError:
                finished = False
            if not finished:
                raise
            # The failed work has finished: release what it used; its queue reports the failure.
            with self._lock:
                self._unreported.append(exc)
                upto = self.submitted
            self._advance(upto)

    def wait_until(self, seq: int) -> None:
        """Block until operation ``seq`` has completed: on the first marker at or after it (see
        the module's docstring: never beyond a later dependency), recorded now if there is none."""
        with self._lock:
            # A number beyond the last enqueued operation was recorded by an enqueue that then
            # failed (a launch records its uses before it checks them): it stands for everything
            # enqueued before it, which may still be running.
            if seq > self.seq:
                seq = self.seq
            while seq > self.submitted and self.backlog is not None:
                self._ensure_drain_locked()
                self._moved.wait()
            while True:
                if seq <= self.done:
                    return
                marker = self._first_marker_locked(seq)
                if marker is None:
                    marker = self.mark_locked()
                if marker.ready:
                    break
                # Not recorded yet (in the backlog): wait, then look again, since meanwhile it may
                # have completed, left the ledger and been released (the lock is not held here).
                self._moved.wait()
            marker.pins += 1
            failure = marker.failure
        try:
            if failure is not None:  # reported already (by its events, and once queue-wide)
                self._after_failure(marker)
                return
            self._wait_marker(marker)
        except OffloadError as exc:
            with self._lock:
                if marker.failure is None:
                    marker.failure = exc
                exc = marker.failure
            self._work_failed(marker.seq, exc)
        finally:
            self._unpin(marker)

    def _after_failure(self, marker: Marker) -> None:
        """A later wait on a marker whose wait raised: wait until the queue has finished the failed
        work (the backend's query says so: some answer only after a round trip), then move past
        it.  The failure is not raised again here: the failed operations' events raise it, and
        the next queue-wide wait once."""
        delay = 0.0001
        while not self.disp.queue_query_impl(self.dh, self.handle):  # a query that fails raises
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
        self._advance(marker.seq)

    def _work_failed(self, upto: int, exc: OffloadError) -> None:
        """A wait for the operations up to ``upto`` raised ``exc`` (the backend reports a failure
        of the work at waits): record it for those operations, whose events then raise it on every
        wait (which of them failed the backend does not say), and for the next queue-wide wait.
        Once the queue has finished, the ledger moves past them so that the queue keeps working;
        otherwise (the wait itself failed with work still running) nothing is released.  Raises."""
        if exc.errc is Errc.INVALID_QUEUE:
            raise exc
        with self._lock:
            if not any(err is exc for _, _, err in self.failed_work):  # seen through an earlier wait
                self.failed_work.append((self.done + 1, upto, exc))
                self._unreported.append(exc)
        try:
            finished = bool(self.disp.queue_query_impl(self.dh, self.handle))
        except OffloadError:
            finished = False
        if finished:
            self._advance(upto)
        raise exc

    def is_done(self, seq: int) -> bool:
        """Whether operation ``seq`` has completed, without blocking: a query of the first marker
        at or after it (recorded now if there is none), so it may say ``False`` until later
        independent work of the queue has completed too.  A failure of the work may be raised
        here; the next wait raises it as well."""
        if seq <= self.done:
            return True
        with self._lock:
            if seq > self.submitted:
                return False  # not handed to the backend yet
            marker = self._first_marker_locked(seq)
            if marker is None:
                marker = self.mark_locked()
            if not marker.ready:
                return False
            marker.pins += 1
        try:
            if self.disp.event_query_impl(self.dh, marker.handle):
                self._advance(marker.seq)
                return True
            return False
        finally:
            self._unpin(marker)

    def _poll(self) -> None:
        """Release what completed operations held, without blocking (called now and then)."""
        with self._lock:
            marker = next((m for m in self._markers if m.ready), None)
            if marker is None:
                return
            marker.pins += 1
        try:
            if self.disp.event_query_impl(self.dh, marker.handle):
                self._advance(marker.seq)
        except OffloadError:
            pass  # a failed operation: the next wait reports it
        finally:
            self._unpin(marker)

    def synchronize(self) -> None:
        """Block until everything enqueued so far has completed; raise a host function's error
        once (the first not yet reported by a queue-wide wait)."""
        self.check_live()
        upto = self.seq
        if upto > self.done:
            self._check_self_wait(upto)
            try:
                self.wait_until(upto)
            except OffloadError as exc:
                with self._lock:  # reported here, not again by the next wait
                    self._unreported = [e for e in self._unreported if e is not exc]
                raise
        with self._lock:
            errors, self._unreported = self._unreported, []
            failed = bool(errors) and any(errors[0] is err for _, _, err in self.failed_work)
        if errors:
            if failed:
                raise errors[0]
            raise BackendError(f"a host function on {self._name} raised {errors[0]!r}") from errors[0]

    def query(self) -> bool:
        """Whether everything enqueued so far has completed (never blocks)."""
        self.check_live()
        return self.seq <= self.done or self.is_done(self.seq)

    def drain_within(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for everything enqueued so far (polling, so that an
        operation that never completes cannot hang the caller); ``True`` if it completed."""
        deadline = time.monotonic() + exit_wait(timeout)  # at exit, within the budget left
        delay = 0.0005
        while not self.is_done(self.seq):
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return True

    # -- release ------------------------------------------------------------------------------

    def close(self, at_exit: bool = False) -> None:
        """Wait for outstanding work, then release the backend queue; later use is an error.
        Interrupted while waiting, the queue stays usable.  At interpreter exit the wait is
        bounded: work that never completes leaves the queue (and what it uses) leaked.  A failure
        of its work that no queue-wide wait reported is a ``TeardownWarning``."""
        self._check_self_wait(self.seq)
        stopped = False
        try:
            with self._lock:
                if not self.live:
                    return
                stopped = True
                self.live = False  # no new work from here on
            if at_exit:
                if not self.drain_within(EXIT_WAIT_SECONDS):
                    raise OffloadError(f"{self._name} still had work running at exit: leaked", Errc.BACKEND_FAILURE)
            else:
                self.wait_until(self.seq)
        except KeyboardInterrupt:
            if stopped:
                with self._lock:
                    self.live = True  # interrupted: still usable
            raise
        with self._lock:  # the ledger is emptied in one step
            markers, deferred, errors = self._markers, self._deferred, self._unreported
            self._markers, self._holds, self._deferred, self._unreported = (
                collections.deque(),
                collections.deque(),
                collections.deque(),
                [],
            )
            self.done = self.seq
        for m in markers:
            m.retired = True
            if m.pins == 0 and not m.owned and m.ready:
                self._release(m)
        for _, action in deferred:
            action()
        self.disp.queue_destroy_impl(self.dh, self.handle)
        if errors:  # failures no queue-wide wait reported: the last chance to tell
            warn_teardown(f"work on {self._name} before it was destroyed", errors[0])

    def __repr__(self) -> str:
        return f"<{self._name}{'' if self.live else ' destroyed'}>"


def waiter(queue: QueueCore, seq: int) -> Callable[[], None]:
    return lambda: queue.wait_done(seq)
