"""An in-order queue as the generic layer runs it: the backend's queue and the ledger of its
in-flight operations.

Every operation enqueued on a queue gets the next sequence number.  The ledger records what the
generic layer needs to know about operations still in flight, and nothing more:

* ``done``: every operation up to this number has completed (as far as anyone has observed);
* markers: backend events recorded *only when something needs to observe completion* (the user
  waits on one operation, a host buffer or a deferred free must be released after an operation,
  a profiling queue, ``record()``); a marker recorded after operation ``n`` completes when all of
  ``1..n`` have, because the queue is in order;
* holds and deferred actions: objects an operation uses (host buffers of a copy) and actions to
  run once it has completed (a free that could not wait), released and run when ``done`` passes
  them — by whoever observes it: a wait on any event, a query, or a later operation.

Waiting for operation ``n`` waits on the first marker at or after ``n`` (recording one if there is
none), or synchronises the queue when ``n`` is the newest operation.  Either way a wait is bounded
by what was enqueued before it started, so another thread that keeps feeding the queue cannot make
a waiter wait forever.

Host functions and host-side dependencies (waits on events of other backends) are native where
the backend offers them; otherwise the queue enters *backlog* mode: later operations get their
sequence numbers at once but are handed to the backend by a helper thread of this queue, in order,
once the host function has run or the dependency has completed.  Enqueueing never blocks.

Locks: ``_lock`` serialises enqueues (backend enqueue hooks are called under it and must not
block) and guards the ledger.  It is never held while waiting on the device or running user code.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import settings
from ._launch import QueueBase
from .errors import BackendError, Errc, InvalidHandleError, OffloadError, UnsupportedError
from .runtime import dead_runtime_error, exit_wait, warn_teardown

# Poll for completed markers on enqueue once this many holds or deferred actions are pending.
_POLL_AFTER = 8


class Marker:
    """A backend event recorded after operation ``seq``.

    ``pins`` counts threads waiting on it; ``owned`` means an :class:`Event` keeps it (profiling
    and ``record()``); it is released once it left the ledger and neither is true.
    """

    __slots__ = ("seq", "handle", "pins", "owned", "retired", "ready")

    def __init__(self, seq: int, handle: Any, owned: bool = False) -> None:
        self.seq = seq
        self.handle = handle
        self.pins = 0
        self.owned = owned
        self.retired = False  # left the ledger
        self.ready = handle is not None  # recorded with the backend (False while in the backlog)


class _HostFunctionScope(threading.local):
    """Which queue's host function (and its sequence number) this thread is running, if any."""

    def __init__(self) -> None:
        self.running: list[tuple[QueueCore, int]] = []


_host_scope = _HostFunctionScope()


def running_host_function() -> tuple[QueueCore, int] | None:
    """The queue and sequence number of the host function the calling thread runs, or ``None``."""
    running = _host_scope.running
    return running[-1] if running else None


class QueueCore(QueueBase):
    """A backend queue on one device plus its ledger.  The public ``pyoffload.Queue`` and the
    contexts' internal queues (for the synchronous operations) are both one.  The fields a launch
    touches (``_lock``, ``rt``, ``disp``, ``backlog``, ``seq``, ``submitted``, ``live``,
    ``profiling``) are C members of ``QueueBase``, whose ``enqueue_launch`` hands a launch over in
    one C call (core/_launch.c)."""

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
        self.seq = 0  # operations enqueued
        self.submitted = 0  # operations handed to the backend
        self.done = 0  # operations observed complete
        # Operations the ledger passed on a queue query alone (unchecked_from .. unchecked): they
        # completed, but whether they failed only a synchronisation says (see _check_queried).
        self.unchecked_from = self.unchecked = 0
        self._markers: collections.deque[Marker] = collections.deque()
        self._holds: collections.deque[tuple[int, Any]] = collections.deque()
        self._deferred: collections.deque[tuple[int, Callable[[], None]]] = collections.deque()
        self.failures: dict[int, BaseException] = {}  # host-function errors by operation
        self._unreported: list[BaseException] = []  # ... not yet raised by a queue-wide wait
        # failures of the work the backend reported at a wait: (first, last operation the wait covered, error)
        self.failed_work: list[tuple[int, int, OffloadError]] = []
        self.backlog: collections.deque[tuple[Any, ...]] | None = None
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
        self.live = False

    def dead(self) -> OffloadError:
        if not self.rt.alive:
            return dead_runtime_error(self.rt)
        return InvalidHandleError(f"{self._name} was destroyed", Errc.INVALID_QUEUE)

    def check_live(self) -> None:
        if not self.live:
            raise self.dead()

    # -- enqueueing -------------------------------------------------------------------------

    def enqueue(self, hook: str, args: tuple[Any, ...], hold: Any = None, mark: bool = True,
                fallback: Callable[[], None] | None = None) -> int:
        """Enqueue one operation whose backend part is the enqueue hook ``hook`` called with
        ``args``; return its sequence number.  ``hold`` is kept alive until the operation completes (a host buffer it
        reads or writes); a marker is recorded after it so that the hold is released as soon as
        anyone observes completion, unless ``mark`` is false: the caller is about to wait for it
        (a synchronous copy), and a queue synchronisation then serves without a driver event.
        ``fallback`` does the operation's work on the host if the backend refuses it
        (``UnsupportedError``) once it is handed over from the backlog; outside the backlog the
        refusal reaches the caller, who falls back itself."""
        with self._lock:
            if not self.live:
                raise self.dead()
            seq = self.seq + 1
            if self.backlog is None:
                try:
                    getattr(self.disp.raw, hook)(*args)
                except OffloadError:
                    raise
                except Exception as exc:
                    raise self.disp.failure(hook, exc) from exc
                self.submitted = seq
            else:
                self.backlog.append(("op", seq, (getattr(self.disp.raw, hook), args, fallback)))
            self.seq = seq
            if hold is not None:
                self._holds.append((seq, hold))
            if self.profiling:
                self.mark_locked(owned=True)  # the operation's event takes it (claim_marker)
            elif hold is not None and mark:
                self.mark_locked()
            poll = len(self._holds) + len(self._deferred) > _POLL_AFTER
        if poll:
            self._poll()
        return seq

    def run_now(self, hook: str, args: tuple[Any, ...], hold: Any, uses: tuple[Any, ...]) -> int | None:
        """The synchronous form of one operation, in one frame: ``enqueue(hook, args, hold,
        mark=False)``, record it as a user of the allocations ``uses`` (``None`` entries skipped),
        then ``wait_until`` it — one enqueue hook call and one ``queue_synchronize_impl``, no
        driver event.  Returns ``None`` without enqueueing anything where the queue cannot take
        this path (a backlog, profiling): the caller then does the three steps itself."""
        with self._lock:
            if not self.live:
                raise self.dead()
            if self.backlog is not None or self.profiling:
                return None
            seq = self.seq + 1
            try:
                getattr(self.disp.raw, hook)(*args)
            except OffloadError:
                raise
            except Exception as exc:
                raise self.disp.failure(hook, exc) from exc
            self.submitted = self.seq = seq
            if hold is not None:
                self._holds.append((seq, hold))
        for alloc in uses:
            if alloc is not None:
                if alloc.users is None:
                    alloc.users = {self: seq}
                else:
                    alloc.users[self] = seq
        try:
            self.disp.raw.queue_synchronize_impl(self.dh, self.handle)
        except OffloadError as exc:
            self._work_failed(seq, exc)
        except Exception as exc:
            raise self.disp.failure("queue_synchronize_impl", exc) from exc
        self._advance(seq)
        return seq

    def mark_locked(self, owned: bool = False) -> Marker:
        """Record a marker after everything enqueued so far (lock held)."""
        if self.backlog is None:
            marker = Marker(self.seq, self.disp.event_record_impl(self.dh, self.handle), owned)
        else:
            marker = Marker(self.seq, None, owned)
            self.backlog.append(("mark", self.seq, marker))
        self._markers.append(marker)
        return marker

    def record_marker(self) -> Marker:
        """A marker after everything enqueued so far, owned by the caller (``Queue.record``)."""
        with self._lock:
            if not self.live:
                raise self.dead()
            return self.mark_locked(owned=True)

    def release_marker(self, marker: Marker) -> None:
        """The owner of ``marker`` no longer needs it."""
        with self._lock:
            marker.owned = False
            release = marker.retired and marker.pins == 0 and marker.ready
        if release:
            self._release(marker)

    def _release(self, marker: Marker) -> None:
        try:
            self.disp.event_release_impl(self.dh, marker.handle)
        except Exception as exc:
            warn_teardown(f"releasing an event of {self._name}", exc)

    def host_function(self, fn: Callable[[], Any]) -> int:
        """Enqueue ``fn`` to run once earlier work has completed, holding later work back."""
        with self._lock:
            if not self.live:
                raise self.dead()
            seq = self.seq + 1
            run = self._host_runner(fn, seq)
            if self.backlog is None and self._native_host_functions:
                self.disp.enqueue_host_function_impl(self.dh, self.handle, run)
                self.submitted = seq
            else:
                self._start_backlog_locked()
                assert self.backlog is not None
                self.backlog.append(("host", seq, run))
            self.seq = seq
            if self.profiling:
                self.mark_locked(owned=True)
            return seq

    def claim_marker(self, seq: int) -> Marker | None:
        """The marker recorded right after operation ``seq`` on a profiling queue, for its event."""
        with self._lock:
            for m in reversed(self._markers):
                if m.seq == seq:
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
        """A marker that completes no earlier than operation ``seq``, pinned for the caller (who
        must ``unpin`` it), or ``None`` if ``seq`` has completed."""
        with self._lock:
            if seq <= self.done:
                return None
            marker = next((m for m in self._markers if m.seq >= seq), None)
            if marker is None:
                marker = self.mark_locked()
            marker.pins += 1
            return marker

    def wait_on(self, events: Sequence[tuple[QueueCore, Marker]], foreign: Sequence[Callable[[], None]]) -> int:
        """Make later work wait for ``events`` (``(queue, pinned marker)`` pairs of this backend's
        queues, ordered natively where the backend can) and for ``foreign`` waits (callables that
        block until an event of another backend completes, run on this queue's helper thread)."""
        native = [m.handle for _, m in events if m.ready]
        with self._lock:
            if not self.live:
                raise self.dead()
            seq = self.seq + 1
            ordered = False
            if native and self.backlog is None and self._native_waits:
                ordered = bool(self.disp.queue_wait_events_impl(self.dh, self.handle, native))
            waits = list(foreign)
            if not ordered:
                waits += [waiter(q, m.seq) for q, m in events]
            if waits:
                self._start_backlog_locked()
                assert self.backlog is not None
                self.backlog.append(("wait", seq, waits))
            else:
                self.submitted = seq
            self.seq = seq
            return seq

    def hold(self, seq: int, obj: Any) -> None:
        """Keep ``obj`` alive until operation ``seq`` has completed."""
        with self._lock:
            if seq > self.done:
                self._holds.append((seq, obj))
                if not any(m.seq >= seq for m in self._markers):
                    self.mark_locked()

    def after(self, seq: int, action: Callable[[], None]) -> None:
        """Run ``action()`` once operation ``seq`` has completed (now, if it has)."""
        with self._lock:
            if seq > self.done:
                self._deferred.append((seq, action))
                if not any(m.seq >= seq for m in self._markers):
                    self.mark_locked()
                return
        action()

    # -- the backlog --------------------------------------------------------------------------

    def _start_backlog_locked(self) -> None:
        if self.backlog is None:
            self.backlog = collections.deque()
            threading.Thread(target=self._drain, name=f"pyoffload-{self._name}", daemon=True).start()

    def _drain(self) -> None:
        """Hand backlogged operations to the backend in order; run host functions and waits."""
        while True:
            with self._lock:
                backlog = self.backlog
                if not backlog:
                    self.backlog = None
                    self._moved.notify_all()
                    return
                kind, seq, payload = backlog.popleft()
                if kind == "op":
                    try:
                        payload[0](*payload[1])
                    except Exception as exc:  # the enqueue was accepted: report it like a failure
                        if payload[2] is not None and isinstance(exc, UnsupportedError):
                            # the backend cannot do it: the host does it in the same place in order
                            backlog.appendleft(("host", seq, self._host_runner(payload[2], seq)))
                            continue
                        if not isinstance(exc, OffloadError):
                            exc = self.disp.failure(getattr(payload[0], "__name__", "an enqueue hook"), exc)
                        self.failures[seq] = exc
                        self._unreported.append(exc)
                    self.submitted = seq
                    self._moved.notify_all()
                    continue
                if kind == "mark":
                    payload.handle = self.disp.event_record_impl(self.dh, self.handle)
                    payload.ready = True
                    self._moved.notify_all()
                    continue
                before = self.submitted
                marker = None
                if before > self.done:
                    marker = Marker(before, self.disp.event_record_impl(self.dh, self.handle))
                    marker.pins = 1
                    self._markers.append(marker)
            # A host function or a wait: everything before it must complete first.
            try:
                if marker is not None:
                    self._wait_marker(marker)
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
                if marker is not None:
                    self._unpin(marker)
            self._advance(seq)
            with self._lock:
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
            release = marker.retired and marker.pins == 0 and not marker.owned
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
                "cannot start before the host function returns", Errc.INVALID_QUEUE)

    def wait_for(self, seq: int) -> None:
        """Block until operation ``seq`` has completed; raise if it (a host function) failed."""
        if seq > self.done:
            self._check_self_wait(seq)
            self.wait_until(seq)
        elif self.unchecked and seq >= self.unchecked_from:
            self._check_queried()
        if self.failures and seq in self.failures:
            exc = self.failures[seq]
            raise BackendError(f"a host function on {self._name} raised {exc!r}") from exc
        for first, last, err in self.failed_work:
            if first <= seq <= last:
                raise err

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
            self._advance(self.submitted)

    def wait_until(self, seq: int) -> None:
        with self._lock:
            while seq > self.submitted and self.backlog is not None:
                self._moved.wait()
            if seq > self.done and seq > self.seq:
                return  # never enqueued (its enqueue failed)
            if seq <= self.done:
                return
            marker = None
            for m in self._markers:  # a loop, not next(genexpr): this is a synchronous copy's path
                if m.seq >= seq:
                    marker = m
                    break
            if marker is not None:
                while not marker.ready:
                    self._moved.wait()
                marker.pins += 1
            else:
                upto = self.submitted
        if marker is None:
            try:
                self.disp.raw.queue_synchronize_impl(self.dh, self.handle)
            except OffloadError as exc:
                self._work_failed(upto, exc)
            except Exception as exc:
                raise self.disp.failure("queue_synchronize_impl", exc) from exc
            self._advance(upto)
            return
        try:
            self._wait_marker(marker)
        except OffloadError as exc:
            self._work_failed(marker.seq, exc)
        finally:
            self._unpin(marker)

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
        """Whether operation ``seq`` has completed, without blocking.  Without a marker at it, the
        answer comes from the whole queue, so it may say ``False`` until later work completes."""
        if seq <= self.done:
            return True
        with self._lock:
            if seq > self.submitted:
                return False
            marker = next((m for m in self._markers if m.seq >= seq and m.ready), None)
            if marker is not None:
                marker.pins += 1
            upto = self.submitted
        try:
            if marker is not None:
                if self.disp.event_query_impl(self.dh, marker.handle):
                    self._advance(marker.seq)
                    return True
                return False
            if self.disp.queue_query_impl(self.dh, self.handle):
                with self._lock:
                    if upto > self.done:
                        self.unchecked_from = self.unchecked_from or self.done + 1
                        self.unchecked = max(self.unchecked, upto)
                self._advance(upto)
                return True
            return False
        finally:
            if marker is not None:
                self._unpin(marker)

    def _check_queried(self) -> None:
        """Work the ledger passed on a queue query alone has completed, but a backend reports a
        failure of the work at a wait (the failure rule): synchronise once, so that the failure
        is recorded for those operations, whose waits then raise it as if a wait had found it."""
        with self._lock:
            first, last = self.unchecked_from, self.unchecked
            self.unchecked_from = self.unchecked = 0
        if not last:
            return
        try:
            self.disp.raw.queue_synchronize_impl(self.dh, self.handle)
        except OffloadError as exc:
            if exc.errc is Errc.INVALID_QUEUE:
                raise
            with self._lock:
                if not any(err is exc for _, _, err in self.failed_work):
                    self.failed_work.append((first, max(last, self.submitted), exc))
                    self._unreported.append(exc)
        except Exception as exc:
            raise self.disp.failure("queue_synchronize_impl", exc) from exc

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
        if self.unchecked:
            self._check_queried()
        if self._unreported:
            with self._lock:
                errors, self._unreported = self._unreported, []
            if errors:
                if any(errors[0] is err for _, _, err in self.failed_work):
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
        with self._lock:
            if not self.live:
                return
            self.live = False  # no new work from here on
        try:
            if at_exit:
                if not self.drain_within(EXIT_WAIT_SECONDS):
                    raise OffloadError(f"{self._name} still had work running at exit: leaked", Errc.BACKEND_FAILURE)
            else:
                self.wait_until(self.seq)
        except KeyboardInterrupt:
            with self._lock:
                self.live = True  # interrupted: still usable
            raise
        with self._lock:
            markers = list(self._markers)
            self._markers.clear()
            self._holds.clear()
            deferred = [action for _, action in self._deferred]
            self._deferred.clear()
            self.done = self.seq
        for m in markers:
            m.retired = True
            if m.pins == 0 and not m.owned and m.ready:
                self._release(m)
        for action in deferred:
            action()
        self.disp.queue_destroy_impl(self.dh, self.handle)
        if self._unreported:  # failures no queue-wide wait reported: the last chance to tell
            errors, self._unreported = self._unreported, []
            warn_teardown(f"work on {self._name} before it was destroyed", errors[0])

    def __repr__(self) -> str:
        return f"<{self._name}{'' if self.live else ' destroyed'}>"


def waiter(queue: QueueCore, seq: int) -> Callable[[], None]:
    return lambda: queue.wait_done(seq)


EXIT_WAIT_SECONDS = float(settings.integer("PYOFFLOAD_EXIT_TIMEOUT", 10, minimum=0) or 0)
"""How long interpreter exit waits for a queue's outstanding work before leaking it
(``PYOFFLOAD_EXIT_TIMEOUT``, seconds)."""
