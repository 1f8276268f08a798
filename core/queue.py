"""The public queue: :class:`Queue` (launches, copies, stream-ordered memory), :class:`Event`
and :class:`PreparedLaunch`, over the in-flight ledger of :mod:`.queue_core`.

A launch is one cheap call: the arguments go through the kernel's cached binder (:mod:`.launch`),
then the queue's launch hand-over (``QueueCore.enqueue_launch``): under the queue's lock the launch
records itself as a user of its program and of every allocation it passes (so that ``unload`` and
``free`` wait for it) *before* it checks that they are still alive, and is handed to the backend.
No driver event is created unless something needs one.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from .context import GenericContext
from .device import GenericDevice
from .enums import AllocKind
from .errors import InvalidArgumentError, InvalidValueError, OffloadError, UnsupportedError, got
from .launch import Binder, binder, check_block, dimensions, geometry
from .memory import Allocation, allocate, claim, release, unclaim
from .program import Kernel
from .memory_pool import check_pool
from .queue_core import Marker, QueueCore, users_of, waiter
from .transfer import memcpy, memcpy_2d, memcpy_3d, memfill, memfill_2d


class Queue(QueueCore):
    """An in-order queue on one device.  Operations return :class:`Event` objects."""

    # _dims: a cache of checked dimensions (see _checked_dims); _base: on a profiling queue, an
    # event recorded at creation and the host's monotonic clock then (Event.profiling_info)
    __slots__ = ("_dims", "_base")

    teardown_rank = 1

    def __init__(
        self, context: GenericContext, device: GenericDevice, profiling: bool = False, native: Any = None
    ) -> None:
        context.check_alive()
        context.check_device(device, "create_queue")
        super().__init__(device, context, profiling, f"pyoffload.Queue on {device.id}", native)
        self._dims: dict[tuple[Any, Any], tuple[tuple[int, int, int], tuple[int, int, int]]] = {}
        self._base: tuple[Marker, int] | None = None
        try:
            if self.profiling:
                self._base = (self.record_marker(), time.monotonic_ns())
            self.rt.track(self.rt.queues, self)
            context.adopt(self)
        except BaseException:
            if self._base is not None:
                self.release_marker(self._base[0])
            self.disp.queue_destroy_impl(self.dh, self.handle)
            raise

    @classmethod
    def from_native(
        cls, native: Any, device: GenericDevice, context: GenericContext | None = None, profiling: bool = False
    ) -> Queue:
        """Wrap a stream or command queue another library created on ``device`` (an int address
        or the library's object, as the backend accepts); destroying the Queue leaves it alone."""
        if native is None:
            raise TypeError("from_native: native must be the other library's queue, got None")
        return cls(context or device.default_context, device, profiling, native)  # type: ignore[attr-defined]

    def __cuda_stream__(self) -> tuple[int, int]:
        """cuda.core's stream protocol: ``(0, CUstream address)``, on CUDA queues."""
        types = self.device.info.get("dlpack_device_types") or {}
        native = self.native
        if types.get("DEVICE") != 2 or not isinstance(native, int):
            raise AttributeError(f"__cuda_stream__: {self!r} is not a CUDA stream")
        return (0, native)

    # -- events -------------------------------------------------------------------------------

    def event_for(self, seq: int, marker: Marker | None = None) -> Event:
        if marker is None and self.profiling and seq:
            marker = self.claim_marker(seq)
        ev = Event(self, seq, marker)
        if marker is not None:
            weakref.finalize(ev, self.release_marker, marker)
        return ev

    def record(self) -> Event:
        """An event that completes when everything enqueued so far has (``olCreateEvent``); it
        has its own timestamp on a profiling queue."""
        marker = self.record_marker()
        return self.event_for(marker.seq, marker)

    def wait_events(self, *events: Event) -> None:
        """Make work enqueued on this queue from now on wait for ``events`` — of other queues,
        devices or backends — without blocking the host (``olWaitEvents``)."""
        self.check_live()
        for ev in events:
            if not isinstance(ev, Event):
                raise TypeError(f"wait_events takes pyoffload.Event objects, got {got(ev)}")
        self._wait_for_operations([(ev.queue, ev.seq) for ev in events])

    def _wait_for_operations(self, operations: list[tuple[QueueCore, int]]) -> None:
        """Make later work on this queue wait for operation ``seq`` of each ``(queue, seq)``:
        through the backend (a marker) for queues of this backend and platform, else through a
        waiter on the queue's helper thread (the backend's wait takes only its own events)."""
        native: list[tuple[QueueCore, int, Marker]] = []
        foreign: list[Callable[[], None]] = []
        try:
            for source, seq in operations:
                if source is self or seq <= source.done:
                    continue  # in order already, or complete
                if source.device.plugin is self.device.plugin and source.device.platform is self.device.platform:
                    marker = source.marker_for(seq)
                    if marker is not None:
                        native.append((source, seq, marker))
                else:
                    foreign.append(waiter(source, seq))
            if native or foreign:
                self.wait_on(native, foreign)
        finally:
            for held, _, marker in native:
                held.unpin(marker)

    # -- synchronisation ----------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> bool:
        """Block until everything enqueued so far has completed; raise a failure (a host
        function's error) once.  Waiting on a queue from one of its own host functions is an
        ``INVALID_QUEUE`` error.  With ``timeout`` (seconds, ``>= 0``), give up once it has
        passed and return ``False``: the work goes on, and a later wait waits for it.  Returns
        ``True`` once everything has completed."""
        if timeout is not None:
            timeout = _check_timeout(timeout)
            seq = self.seq
            if seq > self.done:
                self._check_self_wait(seq)
                if not _completes_within(self, seq, timeout):
                    return False
        if self.seq > self.done or self._unreported or not self.live:
            self.synchronize()
        return True

    def destroy(self) -> None:
        """Wait for outstanding work and release the queue; using it afterwards is an error."""
        self.check_live()
        self.teardown(False)

    def teardown(self, at_exit: bool) -> None:
        base, self._base = self._base, None
        if base is not None:
            self.release_marker(base[0])
        try:
            self.close(at_exit)
        finally:
            if not self.live:
                self.rt.untrack(self.rt.queues, self)
                self.context.disown(self)

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.destroy()

    # -- launches -----------------------------------------------------------------------------

    def launch(
        self, kernel: Kernel, grid: Any = None, block: Any = None, args: Sequence[Any] = (), *, global_size: Any = None
    ) -> Event:
        """Enqueue ``kernel`` on ``grid`` work-groups of ``block`` work-items each — or, given
        ``global_size`` instead of ``grid``, on that many work-items per dimension (OpenCL's and
        Unified Runtime's form: a multiple of the block).  ``block=None`` takes the kernel's
        suggested block (``Kernel.suggest_block``)."""
        if type(kernel) is not Kernel:
            raise TypeError(f"launch: expected a pyoffload.Kernel, got {got(kernel)}")
        key = tuple(map(type, args)) if type(args) is tuple or type(args) is list else None
        bind = kernel.binders.get(key) if key is not None else None
        if bind is None:
            bind = binder(kernel, args)
        packed, allocs = bind(self, args)
        if block is None or grid is None or global_size is not None:
            g, b = geometry(self.device, kernel, grid, block, global_size)  # depends on the kernel: not cached
        else:
            try:
                g, b = self._dims[(grid, block)]
            except (KeyError, TypeError):
                g, b = self._checked_dims(grid, block)
        prog = kernel.program
        if prog.device is not self.device or prog.context is not self.context:
            raise self._foreign_kernel("launch", kernel)
        if kernel._block_rule is not None:  # the kernel's attributes may demand more of the block
            check_block(kernel, b)
        seq = self.enqueue_launch(
            prog, allocs, self.disp.raw.launch_impl, (self.dh, self.handle, kernel.handle, g, b, packed)
        )
        return self.event_for(seq)

    def _foreign_kernel(self, what: str, kernel: Kernel) -> InvalidArgumentError:
        prog = kernel.program
        if prog.device is not self.device:
            return InvalidArgumentError(f"{what}: {kernel!r} is loaded on {prog.device.id}, not {self.device.id}")
        return InvalidArgumentError(
            f"{what}: {kernel!r} is loaded in {prog.context!r}, not in this queue's "
            f"{self.context!r}: load the program in the queue's context"
        )

    def _checked_dims(self, grid: Any, block: Any) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        dims = dimensions(self.device, grid, block)
        try:
            if len(self._dims) < 256:
                self._dims[(grid, block)] = dims
        except TypeError:
            pass  # lists are not hashable: checked every time
        return dims

    def prepare(
        self, kernel: Kernel, grid: Any = None, block: Any = None, args: Sequence[Any] = (), *, global_size: Any = None
    ) -> PreparedLaunch:
        """Check and bind a launch once (its geometry given as for ``launch``); calling the result
        enqueues it again and again: ``prepared()`` with ``args``, ``prepared(*new_args)`` with
        new values for them (see :class:`PreparedLaunch`)."""
        if type(kernel) is not Kernel:
            raise TypeError(f"prepare: expected a pyoffload.Kernel, got {got(kernel)}")
        self.check_live()
        kernel.program.check_loaded()
        if kernel.program.device is not self.device or kernel.program.context is not self.context:
            raise self._foreign_kernel("prepare", kernel)
        bind = binder(kernel, args)
        packed, allocs = bind(self, args)
        g, b = geometry(self.device, kernel, grid, block, global_size)
        check_block(kernel, b)
        fast = self.disp.launch_prepare_impl(self.dh, self.handle, kernel.handle, g, b, packed)
        return PreparedLaunch(self, kernel, g, b, packed, tuple(allocs), fast, bind, tuple(map(type, args)))

    def launch_host_function(self, fn: Callable[[], Any]) -> Event:
        """Run ``fn()`` on a host thread once earlier work is done; later work waits for it.  It may
        call any pyoffload API (waiting on this queue excepted); an exception it raises is raised
        by its event's ``wait()`` and once by the queue's next ``wait()``."""
        if not callable(fn):
            raise TypeError(f"launch_host_function: {fn!r} is not callable")
        return self.event_for(self.host_function(fn))

    # -- memory -------------------------------------------------------------------------------

    def memcpy(self, dst: Any, src: Any, size: int | None = None) -> Event:
        """``pyoffload.memcpy`` ordered on this queue."""
        return memcpy(dst, src, size, self)  # type: ignore[no-any-return]

    def memfill(self, ptr: Any, pattern: Any, size: int | None = None) -> Event:
        """``pyoffload.memfill`` ordered on this queue."""
        return memfill(ptr, pattern, size, self)  # type: ignore[no-any-return]

    def memcpy_2d(self, dst: Any, dst_pitch: int, src: Any, src_pitch: int, width: int, height: int) -> Event:
        """``pyoffload.memcpy_2d`` ordered on this queue, as one operation."""
        return memcpy_2d(dst, dst_pitch, src, src_pitch, width, height, self)  # type: ignore[no-any-return]

    def memcpy_3d(
        self,
        dst: Any,
        src: Any,
        region: tuple[int, int, int],
        *,
        dst_pitch: int,
        dst_slice_pitch: int,
        src_pitch: int,
        src_slice_pitch: int,
        dst_origin: tuple[int, int, int] = (0, 0, 0),
        src_origin: tuple[int, int, int] = (0, 0, 0),
    ) -> Event:
        """``pyoffload.memcpy_3d`` ordered on this queue, as one operation."""
        return memcpy_3d(  # type: ignore[no-any-return]
            dst,
            src,
            region,
            dst_pitch=dst_pitch,
            dst_slice_pitch=dst_slice_pitch,
            src_pitch=src_pitch,
            src_slice_pitch=src_slice_pitch,
            dst_origin=dst_origin,
            src_origin=src_origin,
            queue=self,
        )

    def memfill_2d(self, ptr: Any, pitch: int, pattern: Any, width: int, height: int) -> Event:
        """``pyoffload.memfill_2d`` ordered on this queue, as one operation."""
        return memfill_2d(ptr, pitch, pattern, width, height, self)  # type: ignore[no-any-return]

    def alloc_async(
        self, size: int, kind: AllocKind = AllocKind.DEVICE, alignment: int | None = None, pool: Any = None
    ) -> Allocation:
        """Allocate in this queue's order: the memory may be in use by earlier work on the queue
        (freed with ``free_async``), so use it only from work enqueued on this queue from now on
        (or after waiting for it).  Never blocks on the queue.  ``alignment`` as for ``alloc``;
        ``pool``: from that :class:`pyoffload.MemoryPool` of the queue's context and device."""
        self.check_live()
        if pool is not None:
            return check_pool(pool).alloc_for(self.context, self.device, kind, size, alignment, self)
        return allocate(self.context, self.device, size, kind, self, alignment)

    def free_async(self, ptr: Allocation | int) -> Event:
        """Free in this queue's order: the memory is reused by later work on this queue at once and
        by other queues once the queue has passed this point.  Queued work of other queues that
        uses the memory is waited for on the queue (an event dependency), not by the host."""
        self.check_live()
        alloc = claim(ptr, "free_async")
        try:
            if alloc.context is not self.context:
                raise InvalidArgumentError(f"free_async: {alloc!r} is not in the queue's context {self.context!r}")
            self._wait_for_operations([(q, s) for q, s in users_of(alloc) if q.live])
        except BaseException:
            unclaim(alloc)
            raise
        seq = self.seq
        block = alloc.pool_block
        if block is not None and not block.segment.pooled:
            # Memory of its own (pool off, or above the pool's bound): release it in queue order.
            pool = alloc.source_pool
            assert pool is not None
            alloc.source_pool = None
            release(alloc)
            if not self.disp.data_free_async_impl(
                self.context.handle, alloc.device.handle if alloc.device else None, self.handle, block.ptr, alloc.kind
            ):
                self.after(seq, lambda: pool.give(block))
            return self.event_for(seq)
        release(alloc, self, seq)
        return self.event_for(seq)

    def __repr__(self) -> str:
        return f"<pyoffload.Queue on {self.device.id}{'' if self.live else ' destroyed'}>"


class PreparedLaunch:
    """A launch checked and bound once (``Queue.prepare``); ``launch()`` or ``()`` enqueues it
    with the arguments it was prepared with, ``launch(*args)`` or ``(*args)`` with new values.

    New values (a graph replayed on new buffers) skip what the prepared launch decided once: the
    kernel, its geometry and its attributes.  Arguments of the prepared types go through the
    binder chosen at prepare time (count and kinds checked then), so a call only checks what
    depends on the values (memory live and reachable, scalar ranges) and packs them; other types
    go through the kernel's binder for them, with the checks and errors of a full launch, and must
    keep the prepared parameter kinds.  Either way the launch is the queue's hand-over
    (``enqueue_launch``): the allocations it uses are kept until it has run, as a launch's are.

    With its fixed arguments, the backend's prepared function is called directly when no wrapper
    plugin is registered; otherwise each call goes through ``launch_impl`` so that tracing and
    fault injection see it.  The checks (queue live, program loaded, bound allocations live, wrappers unchanged) are
    repeated only when the runtime's epoch moved: anything that could invalidate them (an unload,
    a queue destroyed, a wrapper added or removed, shutdown) moves it.  A free does not: the
    launch itself is the queue's hand-over (``enqueue_launch``), which records the launch as a user
    of each bound allocation and then checks that it is still live, so a concurrent free either
    waits for the launch or the launch fails.
    """

    __slots__ = (
        # set once by __init__, then read-only
        "queue",
        "kernel",
        "_program",
        "grid",
        "block",
        "args",
        "_allocs",
        "_fast",
        "_fast_args",
        "_binder",
        "_types",
        # (epoch, function one launch calls): replaced as a whole by _revalidate, read without a
        # lock (a tuple is published in one store: readers see an old pair or the new one)
        "_checked",
    )

    def __init__(
        self,
        queue: Queue,
        kernel: Kernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Any,
        allocs: tuple[Allocation, ...],
        fast: Callable[..., None] | None,
        bind: Binder,
        types: tuple[type, ...],
    ) -> None:
        self.queue = queue
        self.kernel = kernel
        self._program = kernel.program
        self.grid = grid
        self.block = block
        self.args = args
        self._allocs = allocs  # checked by every call's hand-over (enqueue_launch)
        self._fast = fast
        # The same function where it also takes new packed arguments (launch_prepare_impl's
        # optional form), read from its signature once; None: new values go through launch_impl.
        self._fast_args = fast if fast is not None and _takes_packed(fast) else None
        self._binder = bind
        self._types = types  # the argument types prepared: new values of these types reuse _binder
        self._checked: tuple[int, Callable[[], None]] = (-1, self._through_hook)

    def __call__(self, *args: Any) -> Event:
        """Enqueue the launch again, with the prepared arguments or, given ``args``, with these
        (as many as the kernel takes); its Event."""
        q = self.queue
        if args:
            return self._with(args)
        epoch, call = self._checked
        if epoch != q.rt.epoch:
            call = self._revalidate()
        return q.event_for(q.enqueue_launch(self._program, self._allocs, call, ()))

    launch = __call__

    def _with(self, args: tuple[Any, ...]) -> Event:
        """The launch with new argument values: packed by the prepared layout, then handed over
        as a full launch is (which keeps the allocations in flight and checks queue and program)."""
        q = self.queue
        kernel = self.kernel
        bind = self._binder
        types = self._types
        same = len(args) == len(types)
        if same:  # compiled, a C loop: cheaper than building the tuple of types to compare
            for i in range(len(types)):
                if type(args[i]) is not types[i]:
                    same = False
                    break
        if not same:
            # Other types (an int pointer for an Allocation, a numpy scalar for a Python int): the
            # kernel's binder for them checks count and kinds as a launch does.
            bind = binder(kernel, args)
            if bind.kinds != self._binder.kinds:
                raise InvalidArgumentError(
                    f"prepared launch of {kernel.name!r}: arguments of kinds ({', '.join(bind.kinds)}), but it was "
                    f"prepared with ({', '.join(self._binder.kinds)}); prepare a launch for these"
                )
        packed, allocs = bind(q, args)
        fast = self._fast_args
        if fast is not None and q.disp.direct:
            # The backend's prepared function takes the new values itself (launch_prepare_impl).
            seq = q.enqueue_launch(self._program, allocs, fast, (packed,))
        else:
            seq = q.enqueue_launch(
                self._program,
                allocs,
                q.disp.raw.launch_impl,
                (q.dh, q.handle, kernel.handle, self.grid, self.block, packed),
            )
        return q.event_for(seq)

    def _through_hook(self) -> None:
        q = self.queue
        q.disp.launch_impl(q.dh, q.handle, self.kernel.handle, self.grid, self.block, self.args)

    def _revalidate(self) -> Callable[[], None]:
        q = self.queue
        epoch = q.rt.epoch
        q.check_live()
        self._program.check_loaded()
        for a in self._allocs:
            if not a.live:
                raise InvalidArgumentError(f"prepared launch of {self.kernel.name!r}: {a!r} was freed")
        call = self._fast if self._fast is not None and q.disp.direct else self._through_hook
        self._checked = (epoch, call)
        return call


def _takes_packed(fn: Callable[..., Any]) -> bool:
    """Whether a backend's prepared function takes new packed arguments: its first parameter is
    named ``new_args`` (see ``launch_prepare_impl``).  By name, not by count: a parameter with a
    default that keeps something alive (``def enqueue(frame=frame)``) is no such argument.  A
    signature that cannot be read counts as the zero-argument form."""
    import inspect  # already loaded by pluggy: no import cost

    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if not params or params[0].name != "new_args":
        return False
    return params[0].kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


PROFILING_INFO = ("queued", "submitted", "started", "ended")
"""What ``Event.profiling_info`` reports, in the order the operation passes them."""


def _check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {got(timeout)}")
    if not timeout >= 0:  # negative, or NaN
        raise InvalidValueError(f"timeout must be >= 0 seconds, got {timeout!r}")
    return float(timeout)


def _completes_within(queue: QueueCore, seq: int, timeout: float) -> bool:
    """Whether operation ``seq`` of ``queue`` completes within ``timeout`` seconds: polled through
    the backend's event queries (every backend has them; no driver offers a wait with a time
    limit), from 50 us apart up to 5 ms apart.  A failure of the work is raised by the wait after."""
    deadline = time.monotonic() + timeout
    delay = 50e-6
    while True:
        try:
            if queue.is_done(seq):
                return True
        except OffloadError:
            return True  # the work failed: it is over, and the wait after raises its failure
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.005)


class Event:
    """The completion of one enqueued operation.

    ``wait()`` blocks until it has completed (and raises if it was a host function that failed);
    ``is_complete`` answers without blocking.  An event of an operation with no timestamp of its
    own (operations of a queue without profiling) completes no earlier than its operation; its
    ``is_complete`` may read ``False`` until later work of the same queue has completed too.
    ``Queue.record()`` events, and every event of a profiling queue, are exact.
    """

    # set once by __init__, then read-only
    __slots__ = ("queue", "seq", "marker", "__weakref__")

    def __init__(self, queue: Queue, seq: int, marker: Marker | None = None) -> None:
        self.queue = queue
        self.seq = seq  # the operation's sequence number in its queue
        self.marker = marker  # the operation's own driver event (a timestamp), or None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the operation has completed; re-raise a host function's error.  With
        ``timeout`` (seconds, ``>= 0``), give up once it has passed and return ``False``: the
        operation goes on, and a later wait waits for it.  Returns ``True`` once it has
        completed."""
        q = self.queue
        if timeout is not None:
            timeout = _check_timeout(timeout)
            if self.seq > q.done:
                q._check_self_wait(self.seq)
                if not _completes_within(q, self.seq, timeout):
                    return False
        if self.seq > q.done or q.failures or q.failed_work:
            q.wait_for(self.seq)
        return True

    @property
    def is_complete(self) -> bool:
        q = self.queue
        return self.seq <= q.done or q.is_done(self.seq)

    def elapsed_ms(self, start: Event) -> float:
        """Milliseconds from ``start`` to this event; both must come from profiling queues of the
        same device (otherwise ``INVALID_ARGUMENT``).  Waits for both."""
        if not isinstance(start, Event):
            raise TypeError(f"elapsed_ms: expected an Event, got {got(start)}")
        a, b = start.queue, self.queue
        if a.device is not b.device:
            raise InvalidArgumentError(
                f"elapsed_ms between events of {a.device.id} and {b.device.id}: timestamps of different "
                "devices cannot be compared"
            )
        if start.marker is None or self.marker is None:
            raise InvalidArgumentError(
                "elapsed_ms needs events with timestamps: from queues created with profiling=True, or Queue.record()"
            )
        start.wait()
        self.wait()
        # The operations are done, but an event's own timestamp may still be pending where
        # completion was observed through another marker: wait on the two events themselves.
        a.disp.event_wait_impl(a.dh, start.marker.handle)
        b.disp.event_wait_impl(b.dh, self.marker.handle)
        return float(b.disp.event_elapsed_impl(b.dh, start.marker.handle, self.marker.handle))

    def profiling_info(self, which: str) -> int:
        """A timestamp of the operation, in nanoseconds (``urEventGetProfilingInfo``,
        ``clGetEventProfilingInfo``): ``which`` is ``"queued"`` (enqueued), ``"submitted"``
        (handed to the device), ``"started"`` or ``"ended"``.  Timestamps of one device share a
        clock (which one depends on the backend: see the guide).  Needs an event of a queue
        created with ``profiling=True`` (``INVALID_ARGUMENT`` otherwise); a timestamp the backend's
        driver cannot give is ``UNSUPPORTED``.  Waits for the operation."""
        if not isinstance(which, str):
            raise TypeError(f"profiling_info: which must be a str, got {got(which)}")
        if which not in PROFILING_INFO:
            raise InvalidArgumentError(f"profiling_info: {which!r} is none of {', '.join(PROFILING_INFO)}")
        q = self.queue
        end = self.marker
        if not q.profiling or end is None or end.start is None:
            raise InvalidArgumentError(
                "profiling_info needs the event of an operation of a queue created with profiling=True"
            )
        self.wait()
        start = end.start
        disp = q.disp
        # Done, but the events' own timestamps may still be pending where completion was observed
        # through another marker: wait on the two events themselves.
        disp.event_wait_impl(q.dh, start.handle)
        disp.event_wait_impl(q.dh, end.handle)
        stamps = disp.event_profiling_impl(q.dh, start.handle, end.handle)
        if stamps is None:
            base = q._base
            if which not in ("started", "ended") or base is None:
                raise UnsupportedError(
                    f"profiling_info: the {q.device.backend} backend's driver times no {which!r} (its events give "
                    "only the times between them: 'started' and 'ended')"
                )
            marker = start if which == "started" else end
            return base[1] + round(float(disp.event_elapsed_impl(q.dh, base[0].handle, marker.handle)) * 1e6)
        value = stamps.get(which)
        if value is None:
            raise UnsupportedError(f"profiling_info: the {q.device.backend} backend's driver gives no {which!r} time")
        return int(value)

    def __repr__(self) -> str:
        state = "complete" if self.seq <= self.queue.done else "pending"
        return f"<pyoffload.Event #{self.seq} on {self.queue.device.id} {state}>"
