"""Hooks: initialisation, devices and contexts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..backend import PlatformDesc
from .marker import hookspec


@hookspec(firstresult=True)
def init_impl() -> Sequence[PlatformDesc]:
    """Initialise the vendor runtime and report its platforms and devices.

    Called once per runtime, lazily, the first time the application asks for devices (and again
    after ``pyoffload.shutdown()`` when the application starts over).  Return a sequence of
    :class:`~pyoffload.backend.PlatformDesc`, each with its
    :class:`~pyoffload.backend.DeviceDesc` records; each device's ``handle`` is what later hooks
    receive as ``device``.

    Errors: if the driver is missing or finds no device, raise
    :class:`~pyoffload.backend.NoDevicesError` with the driver's reason; ``pyoffload plugins`` then
    lists the backend as ``no devices: <reason>`` and the rest of the runtime carries on.  Any
    other exception marks the backend ``failed``.  Import the vendor binding here, never at module
    import: importing a plugin must succeed on a machine without its driver.

    May block (driver start-up).  Called on one thread, with no other hook of this backend running.

    Example::

        @hookimpl
        def init_impl():
            try:
                import pyopencl as cl
                platforms = cl.get_platforms()
            except Exception as exc:
                raise NoDevicesError(str(exc)) from exc
            return [PlatformDesc(p.name, p.vendor, p.version,
                                 tuple(DeviceDesc(d.name, d.vendor, DeviceType.CPU, d)
                                       for d in p.get_devices()))
                    for p in platforms]
    """


@hookspec(firstresult=True)
def deinit_impl() -> None:
    """Release the vendor runtime.

    Called once at shutdown (``pyoffload.shutdown()`` or interpreter exit), after every program,
    queue, allocation, pinned range and context of this backend has been released through the
    other hooks.  Errors become ``TeardownWarning``.  May block.

    Example::

        @hookimpl
        def deinit_impl():
            _state.clear()
    """


@hookspec(firstresult=True)
def device_info_impl(device: Any) -> dict[str, Any]:
    """Describe the device as a flat dict of simple values.

    Use the standard keys of :data:`pyoffload.backend.INFO_KEYS` for what they name (the same key
    means the same thing on every backend: ``max_work_group_size``, ``max_work_item_sizes``,
    ``max_grid_size``, ``global_memory_bytes``, ``local_memory_bytes``, ``max_alloc_bytes``, ...)
    and prefix anything else with the backend's name (``"opencl.extensions"``).  The generic layer
    fills in ``name``, ``vendor``, ``type``, ``backend`` and ``platform``, sets absent standard
    keys to ``None``, and checks launch dimensions, local memory and allocation sizes against
    the limits reported here.  Called once per device, lazily.

    Example::

        @hookimpl
        def device_info_impl(device):
            return {"global_memory_bytes": device.global_mem_size,
                    "compute_units": device.max_compute_units,
                    "max_work_group_size": device.max_work_group_size,
                    "mybackend.extensions": device.extensions}
    """


@hookspec(firstresult=True)
def context_create_impl(devices: Sequence[Any]) -> Any:
    """*Optional.* Create a vendor context spanning ``devices`` (all of one platform, each listed
    once).

    Return any object; it is passed back as ``context`` to the memory, program and queue hooks.
    The default returns the tuple of devices, for backends with no context object.  A
    ``pyoffload.Context`` owns the allocations, programs and queues made in it.

    Example::

        @hookimpl
        def context_create_impl(devices):
            return cl.Context(list(devices))
    """


@hookspec(firstresult=True)
def context_destroy_impl(context: Any) -> None:
    """*Optional.* Release a context made by ``context_create_impl``.

    Everything allocated, loaded or created in it has been released first (the generic layer
    tracks that).  The default does nothing.  May block.
    """


@hookspec(firstresult=True)
def native_handle_impl(kind: str, handle: Any) -> Any:
    """*Optional.* The vendor's own object behind one of the backend's handles, for ``.native``
    on pyoffload's objects (interoperating with other libraries that use the same driver).

    ``kind`` is ``"device"``, ``"context"``, ``"queue"``, ``"program"``, ``"kernel"`` or
    ``"event"``.  For a queue, return the native stream or command queue *as an int address*
    (``CUstream``, ``hipStream_t``, ``cl_command_queue``) where the vendor has one: it is what
    ``__cuda_stream__`` and the CUDA array interface hand out.  The default returns the handle
    itself.
    """


@hookspec(firstresult=True)
def queue_from_native_impl(context: Any, device: Any, native: Any, profiling: bool) -> Any:
    """*Optional.* Wrap a queue (stream, command queue) created by another library — ``native`` as
    that library or the driver gives it (an int address or an object) — as a queue handle of this
    backend, for ``Queue.from_native``.  The backend must not destroy the native queue in
    ``queue_destroy_impl`` for such a handle (it is borrowed).  The default raises
    ``UnsupportedError``.
    """
