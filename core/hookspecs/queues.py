"""Hooks: queues, launches, host functions and events."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .marker import hookspec


@hookspec(firstresult=True)
def queue_create_impl(context: Any, device: Any, profiling: bool) -> Any:
    """Create an in-order queue (stream, command queue) on ``device`` of ``context``.

    With ``profiling``, events recorded on it must support ``event_elapsed_impl``.  The generic
    layer also creates one queue per device of each context for the synchronous operations.
    """


@hookspec(firstresult=True)
def queue_destroy_impl(device: Any, queue: Any) -> None:
    """Release a queue.  The generic layer has waited for all its work first.  May block."""


@hookspec(firstresult=True)
def queue_synchronize_impl(device: Any, queue: Any) -> None:
    """Block until every operation enqueued on ``queue`` before this call has completed; raise if
    one of them failed (see "When failures are reported").

    Work enqueued by other threads while this call waits need not be waited for: the generic
    layer relies on this call returning even while another thread keeps feeding the queue.
    """


@hookspec(firstresult=True)
def queue_query_impl(device: Any, queue: Any) -> bool:
    """Return ``True`` if every operation enqueued on ``queue`` has completed.  Must not block."""


@hookspec(firstresult=True)
def launch_impl(
    device: Any, queue: Any, kernel: Any, grid: tuple[int, int, int], block: tuple[int, int, int], args: Any
) -> None:
    """Enqueue one launch of ``kernel``.

    ``grid`` is the number of work-groups per dimension and ``block`` the work-group size, both
    3-tuples of positive ints within the device's reported limits, as in CUDA and liboffload
    (OpenCL's global size is their product).  ``args`` is what this backend's packer
    (``kernel_packer_impl``) returned for the launch's checked values, or those values themselves
    if the backend has no packer.  Must not block.  Example::

        @hookimpl
        def launch_impl(device, queue, kernel, grid, block, args):
            driver.launch_kernel(kernel.function, grid, block, args, stream=queue.stream)
    """


@hookspec(firstresult=True)
def launch_prepare_impl(
    device: Any, queue: Any, kernel: Any, grid: tuple[int, int, int], block: tuple[int, int, int], args: Any
) -> Callable[..., None] | None:
    """*Optional.* Bind one launch once and return a function that enqueues it again each time
    it is called (``Queue.prepare``).

    ``args`` is packed as for ``launch_impl``.  The function is the hot path of a prepared
    launch: the generic layer calls it directly (serialised per queue, like every enqueue) unless
    a wrapper plugin is registered, in which case each call goes through ``launch_impl`` so that
    wrappers see it.  It must not block.  The default returns ``None``: each prepared launch then
    calls ``launch_impl``.

    Called with no argument, it enqueues the launch with the ``args`` given here.  It *may* also
    take new packed arguments of the same kinds (what the packer returned for a prepared launch
    called with new values, ``PreparedLaunch(*new_args)``) as its first parameter, which must be
    named ``new_args`` and default to ``None``: given them, it enqueues the launch with those
    instead, and a later call without uses ``args`` again.  The generic layer reads the name
    once, at prepare: a function whose first parameter has another name (or none) is never given
    new arguments (launches with new values then go through ``launch_impl``), so backends written
    before this form keep working and no HOOK_API bump is needed.  Example::

        @hookimpl
        def launch_prepare_impl(device, queue, kernel, grid, block, args):
            bound = driver.bind(kernel.function, grid, block, args)

            def launch(new_args=None):
                driver.launch_bound(bound if new_args is None else driver.rebind(bound, new_args), queue.stream)

            return launch
    """


@hookspec(firstresult=True)
def enqueue_host_function_impl(device: Any, queue: Any, fn: Callable[[], None]) -> bool | None:
    """*Optional.* Enqueue ``fn`` to run on a host thread once all earlier work on ``queue`` has
    completed, holding back later work on the queue until it returns.

    ``fn`` never raises (the generic layer catches and records the user's exception) and may call
    any pyoffload API, so run it on a thread of your own or the driver's callback thread only if
    the driver allows API calls there.  Return ``True`` once enqueued.  The default returns
    ``None``: the generic layer then emulates host functions itself (it records an event, runs
    ``fn`` on a thread of its own when the event completes, and holds later operations back in
    the queue's backlog until then).  Must not block.
    """


@hookspec(firstresult=True)
def queue_wait_events_impl(device: Any, queue: Any, events: Sequence[Any]) -> bool | None:
    """*Optional.* Make later work on ``queue`` wait for ``events`` (events this backend recorded,
    possibly on queues of other devices of the same platform) without blocking the host, as
    ``cuStreamWaitEvent`` or an OpenCL barrier with a wait list do.

    Return ``True`` once ordered.  The default returns ``None``: the generic layer then orders the
    queue with a host-side dependency (the queue's later work is held back until the events
    complete), which is also what it does for events of other backends.  Must not block.
    """


@hookspec(firstresult=True)
def event_record_impl(device: Any, queue: Any) -> Any:
    """Record an event on ``queue`` that completes when all work enqueued before it has, and
    return it (``cuEventRecord``, ``clEnqueueMarkerWithWaitList``).

    Called only when the generic layer needs to observe completion; the event is released with
    ``event_release_impl`` when no longer needed.  On a profiling queue the event must carry a
    timestamp.  Must not block.
    """


@hookspec(firstresult=True)
def event_wait_impl(device: Any, event: Any) -> None:
    """Block until ``event`` has completed; raise if the work before it failed.  May block (that
    is its purpose); called with no lock of the generic layer held."""


@hookspec(firstresult=True)
def event_query_impl(device: Any, event: Any) -> bool:
    """Return ``True`` if ``event`` has completed; raise if the work before it failed.  Must not
    block."""


@hookspec(firstresult=True)
def event_release_impl(device: Any, event: Any) -> None:
    """*Optional.* Release an event ``event_record_impl`` returned.  The event may still be pending.

    Called exactly once per event, on any thread (also from a garbage-collection finaliser), so
    make the driver's context current here if the driver needs it.  The default drops the
    reference.
    """


@hookspec(firstresult=True)
def event_elapsed_impl(device: Any, start: Any, end: Any) -> float:
    """*Optional.* Milliseconds between two completed events of one profiling queue or of two
    profiling queues of ``device``.  The default raises ``UnsupportedError``."""


@hookspec(firstresult=True)
def event_profiling_impl(device: Any, start: Any, end: Any) -> dict[str, int] | None:
    """*Optional.* The timestamps, in nanoseconds on one clock of ``device``, of the operation
    of a profiling queue that the generic layer recorded event ``start`` right before and event
    ``end`` right after (``Event.profiling_info``; both have completed): a dict with any of
    ``"queued"`` (the operation was enqueued), ``"submitted"`` (handed to the device),
    ``"started"`` and ``"ended"`` (it ran), as ``clGetEventProfilingInfo`` and
    ``urEventGetProfilingInfo`` report them.  Leave out what the driver cannot tell: the user
    gets ``UNSUPPORTED`` for it.  The default returns ``None``: the generic layer then reports
    ``"started"`` and ``"ended"`` as the times of ``start`` and ``end``, from
    ``event_elapsed_impl`` against an event recorded when the queue was created (on the host's
    monotonic clock, aligned there), and nothing else.
    """
