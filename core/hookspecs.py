"""Hook specifications: every vendor call a backend provides, and the observer hooks.

This module is the contract between pyoffload's generic layer and a backend.  The generic layer
owns all shared logic (argument checking, the allocation registry, the small-allocation pool, the
pinned-host-memory map, global constructors/destructors, teardown order); a backend implements
only the vendor calls below, as ``*_impl`` hooks marked with :data:`pyoffload.backend.hookimpl`.

Rules every ``*_impl`` hook follows:

* Each call reaches exactly one backend: the one that owns the device.  Every backend has its own
  :class:`pluggy.PluginManager`; cross-cutting plugins (tracing, fault injection, validation) are
  registered as ``wrapper=True`` hooks in every manager and see every call.
* Arguments named ``device``, ``context``, ``program``, ``kernel``, ``queue`` and ``event`` are the
  backend's own handles: exactly the objects it returned from ``init_impl``,
  ``context_create_impl``, ``load_binary_impl``, ``get_kernel_impl``, ``queue_create_impl`` or an
  enqueue hook.  Pointers are ``int`` addresses.  Sizes are positive ``int`` byte counts.
* Everything is checked before the hook is called: sizes are positive, pointers are live and in
  bounds, kinds are valid.  A backend never has to validate what the generic layer owns.
* Errors: raise a subclass of :class:`pyoffload.OffloadError` from :mod:`pyoffload.backend`
  (``OutOfResourcesError`` on out-of-memory lets the pool free its cache and retry once;
  ``InvalidBinaryError`` for an image the backend cannot load; ``NotFoundError`` for a missing
  symbol; ``UnsupportedError`` for something the device cannot do).  Any other exception is
  wrapped in ``BackendError``.  A hook that raises must have created nothing.
* ``queue`` may be ``None``: the operation is then synchronous and the hook returns ``None``.  With
  a queue, the hook enqueues the work and returns an event handle for its completion (or ``None``
  if it completed before returning).

Hooks marked *optional* have a generic default (in :mod:`pyoffload.defaults`); a backend
implements them only when it can do better.

Observer hooks (no ``_impl`` suffix) are called on every registered plugin, not just the backend:
they let tools read a program's globals before it is unloaded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pluggy

from .backend import PROJECT, InitFini, PlatformDesc, SymbolDesc
from .enums import AllocKind, MemAdvice, MemoryConnection

hookspec = pluggy.HookspecMarker(PROJECT)

# --------------------------------------------------------------------------------------------
# Lifecycle and devices
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def init_impl() -> Sequence[PlatformDesc]:
    """Initialise the vendor runtime and report its platforms and devices.

    Called once, lazily, the first time the application asks for devices.  Return a sequence of
    :class:`~pyoffload.backend.PlatformDesc`, each with its :class:`~pyoffload.backend.DeviceDesc`
    records; the ``handle`` of each device is what later hooks receive as ``device``.

    If the driver is missing or finds no device, raise
    :class:`~pyoffload.backend.NoDevicesError` with the driver's reason: the plugin is then listed
    by ``pyoffload plugins`` as present with ``no devices: <reason>`` and the rest of the runtime
    carries on.  Importing the backend module must never fail for that reason: import the vendor
    binding inside this hook.

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
                                       for d in p.get_devices()), p)
                    for p in platforms]
    """


@hookspec(firstresult=True)
def deinit_impl() -> None:
    """Release the vendor runtime.  Called once at shutdown, after every program, allocation,
    queue and context of this backend has been released through the other hooks.

    Example::

        @hookimpl
        def deinit_impl():
            _state.clear()
    """


@hookspec(firstresult=True)
def device_info_impl(device: Any) -> dict[str, Any]:
    """Return the device's information as a flat dict of simple values.

    The generic layer adds ``name``, ``vendor``, ``type`` and ``platform``; the backend should
    report at least ``memory_bytes`` (total), ``compute_units``, ``architecture``,
    ``driver_version`` and ``max_work_group_size`` where the driver knows them.  Called lazily
    the first time ``Device.info`` is read.

    Example::

        @hookimpl
        def device_info_impl(device):
            return {"memory_bytes": device.global_mem_size,
                    "compute_units": device.max_compute_units}
    """


# --------------------------------------------------------------------------------------------
# Contexts (optional)
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def context_create_impl(devices: Sequence[Any]) -> Any:
    """*Optional.* Create a vendor context spanning ``devices`` (all of one platform).

    Return any object; it is passed back as ``context`` to the memory, program and queue hooks.
    The default returns the tuple of devices, for backends with no context object.

    Example::

        @hookimpl
        def context_create_impl(devices):
            return cl.Context(list(devices))
    """


@hookspec(firstresult=True)
def context_destroy_impl(context: Any) -> None:
    """*Optional.* Release a context created by ``context_create_impl``.  Everything allocated or
    loaded in it has already been released.  The default does nothing.
    """


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def data_alloc_impl(context: Any, device: Any, size: int, kind: AllocKind) -> int:
    """Allocate ``size`` bytes of ``kind`` memory and return its address as an ``int``.

    ``device`` is ``None`` for :attr:`AllocKind.HOST` (pinned host memory owned by the context,
    accessible from all its devices).  HOST and MANAGED memory must be readable and writable by
    the host at the returned address.  Raise ``OutOfResourcesError`` when memory is exhausted
    (the pool then frees its cache and retries once) and ``UnsupportedError`` when the device
    cannot provide that kind at all.

    Example::

        @hookimpl
        def data_alloc_impl(context, device, size, kind):
            if kind is AllocKind.DEVICE:
                return int(driver.mem_alloc(size))
            ...
    """


@hookspec(firstresult=True)
def data_free_impl(context: Any, device: Any, ptr: int, kind: AllocKind) -> None:
    """Release memory returned by ``data_alloc_impl`` with the same context, device and kind."""


@hookspec(firstresult=True)
def data_submit_impl(device: Any, queue: Any, dst: int, src: memoryview, size: int) -> Any:
    """Copy ``size`` bytes from host buffer ``src`` (a C-contiguous byte view) to device address
    ``dst``.  With a queue the copy is ordered after earlier work; the caller keeps ``src`` alive
    until the returned event completes.

    Example::

        @hookimpl
        def data_submit_impl(device, queue, dst, src, size):
            driver.memcpy_htod(dst, src[:size])
    """


@hookspec(firstresult=True)
def data_retrieve_impl(device: Any, queue: Any, dst: memoryview, src: int, size: int) -> Any:
    """Copy ``size`` bytes from device address ``src`` into the writable host byte view ``dst``."""


@hookspec(firstresult=True)
def data_exchange_impl(
    src_device: Any, src: int, dst_device: Any, dst: int, size: int, queue: Any
) -> Any:
    """Copy ``size`` bytes between two addresses of this backend, possibly on two devices.

    Only called when ``memory_connection_impl`` answered MIGRATABLE or UNIFIED for the pair;
    ``queue`` (if any) belongs to the same context and may be on either device of the pair.  Raise ``UnsupportedError`` if this particular
    pair has no direct path after all: the generic layer then stages through host memory.
    """


@hookspec(firstresult=True)
def data_fill_impl(device: Any, queue: Any, ptr: int, pattern: bytes, size: int) -> Any:
    """Fill ``size`` bytes at ``ptr`` by repeating ``pattern``.

    ``size`` is a multiple of ``len(pattern)``; patterns of any length are passed (1, 2, 4 and 8
    bytes are the common ones).  Raise ``UnsupportedError`` for a pattern length the device cannot
    fill: the generic layer then writes the expanded pattern with ``data_submit_impl``.
    """


@hookspec(firstresult=True)
def data_lock_impl(device: Any, ptr: int, size: int) -> int:
    """Pin (page-lock) the host range ``[ptr, ptr + size)`` and return the device-accessible
    address of ``ptr``.

    Called only for a range that is not already locked: the generic pinned map handles nested
    locks and reference counts.  Example (CUDA)::

        @hookimpl
        def data_lock_impl(device, ptr, size):
            driver.mem_host_register(ptr, size, DEVICEMAP)
            return driver.mem_host_get_device_pointer(ptr)
    """


@hookspec(firstresult=True)
def data_unlock_impl(device: Any, ptr: int) -> None:
    """Unpin a range previously pinned by ``data_lock_impl`` at host address ``ptr``.  Called once,
    when its last user unlocks it.  Never called for externally pinned memory."""


@hookspec(firstresult=True)
def data_pinned_info_impl(device: Any, ptr: int) -> tuple[int, int, int] | None:
    """*Optional.* Is host address ``ptr`` already pinned by the vendor (not by pyoffload)?

    Return ``(base, size, device_ptr_of_base)`` for the pinned range containing ``ptr``, or ``None``.
    The generic layer records such a range as externally locked and never unlocks it.  The
    default answers ``None``.
    """


@hookspec(firstresult=True)
def data_prefetch_impl(device: Any, queue: Any, ptr: int, size: int, to_device: bool) -> Any:
    """*Optional.* Migrate a MANAGED range to ``device`` (``to_device``) or to the host.  A hint:
    the default does nothing and returns ``None``."""


@hookspec(firstresult=True)
def data_advise_impl(device: Any, ptr: int, size: int, advice: MemAdvice) -> None:
    """*Optional.* Apply a usage hint to a MANAGED range.  The default ignores it."""


@hookspec(firstresult=True)
def data_alloc_async_impl(
    context: Any, device: Any, queue: Any, size: int, kind: AllocKind
) -> int | None:
    """*Optional.* Stream-ordered allocation (cuMemAllocAsync, hipMallocAsync): return an address
    usable by work enqueued on ``queue`` after this call.

    Return ``None`` when the backend has no stream-ordered allocator: the generic layer then
    waits for ``queue`` and allocates synchronously, which keeps the same observable order.
    Raise ``UnsupportedError`` for a kind that cannot be allocated asynchronously; that error is
    reported to the caller, never papered over.  The default returns ``None``.
    """


@hookspec(firstresult=True)
def data_free_async_impl(context: Any, device: Any, queue: Any, ptr: int, kind: AllocKind) -> Any:
    """*Optional.* Stream-ordered free of memory from ``data_alloc_async_impl``.  Return an event,
    or ``None`` if not supported (the generic layer waits for the queue, then frees)."""


@hookspec(firstresult=True)
def memory_connection_impl(
    context_a: Any, device_a: Any, context_b: Any, device_b: Any
) -> MemoryConnection | None:
    """*Optional.* How memory of ``(context_a, device_a)`` reaches ``(context_b, device_b)``, both of
    this backend.  ``device_*`` is ``None`` for HOST memory of that context.

    Return UNIFIED if a pointer of one is usable on the other, MIGRATABLE if
    ``data_exchange_impl`` can copy directly, NONE if copies must go through host memory, or
    ``None`` to take the generic answer (UNIFIED for the same device and context, MIGRATABLE for
    two devices of one context, NONE otherwise).
    """


# --------------------------------------------------------------------------------------------
# Programs and symbols
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def load_binary_impl(context: Any, device: Any, image: bytes) -> Any:
    """Load a device image and return a program handle.

    ``image`` is the generic layer's own copy of the caller's bytes, kept alive as long as the
    program.  Detect the format from the bytes; raise ``InvalidBinaryError`` (naming what was
    expected) for anything else before calling the driver, and ``CompileError`` with the build
    log when a source or IR image fails to build.  Do not run global constructors here unless the
    platform's loader does so itself (the host backend's ``dlopen``): the generic layer runs the
    entry points returned by ``global_init_fini_impl``.
    """


@hookspec(firstresult=True)
def unload_binary_impl(device: Any, program: Any) -> None:
    """Release a loaded program.  Its destructors have already run (see ``global_init_fini_impl``)
    and its kernels are no longer used.  Must not affect any other program on the device."""


@hookspec(firstresult=True)
def global_init_fini_impl(device: Any, program: Any) -> InitFini | None:
    """*Optional.* Name the program's global constructor and destructor entry points.

    Return an :class:`~pyoffload.backend.InitFini` with kernel names present in the program;
    the generic layer launches each once, without arguments, on a 1x1x1 grid, synchronously:
    ``init`` in order right after load, ``fini`` in order right before unload (also at shutdown
    and interpreter exit, in reverse load order).  The LLVM conventions are
    ``nvptx$device$init``/``nvptx$device$fini`` and ``amdgcn.device.init``/``amdgcn.device.fini``.
    The default returns ``None`` (no constructors).

    Example::

        @hookimpl
        def global_init_fini_impl(device, program):
            names = {s.name for s in program.symbols}
            return InitFini(init=tuple(n for n in ["nvptx$device$init"] if n in names),
                            fini=tuple(n for n in ["nvptx$device$fini"] if n in names))
    """


@hookspec(firstresult=True)
def get_symbols_impl(device: Any, program: Any) -> Sequence[SymbolDesc]:
    """List the program's kernels and global variables as
    :class:`~pyoffload.backend.SymbolDesc` records (globals with their size in bytes)."""


@hookspec(firstresult=True)
def get_kernel_impl(device: Any, program: Any, name: str) -> Any:
    """Return a kernel handle for ``name``; raise ``NotFoundError`` naming it if absent."""


@hookspec(firstresult=True)
def kernel_signature_impl(device: Any, kernel: Any) -> Sequence[str] | None:
    """*Optional.* The kernel's parameter kinds, if the image says: each one of ``"ptr"``,
    ``"local"``, ``"i8"``, ``"i16"``, ``"i32"``, ``"i64"``, ``"u8"``, ``"u16"``, ``"u32"``,
    ``"u64"``, ``"f16"``, ``"f32"``, ``"f64"``.  When known, the generic layer checks argument
    count and kinds at launch and reports mismatches as ``INVALID_ARGUMENT``.  Default ``None``.
    """


@hookspec(firstresult=True)
def get_global_impl(device: Any, program: Any, name: str) -> tuple[int, int]:
    """Return ``(address, size)`` of global variable ``name``; raise ``NotFoundError`` if absent
    and ``UnsupportedError`` if the platform cannot expose a global's address.

    The address must be usable with ``data_submit_impl``/``data_retrieve_impl`` on ``device``.
    """


# --------------------------------------------------------------------------------------------
# Queues, launches and events
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def queue_create_impl(context: Any, device: Any, profiling: bool) -> Any:
    """Create an in-order queue (stream, command queue) on ``device``.  With ``profiling`` the
    events it returns must support ``event_elapsed_impl``."""


@hookspec(firstresult=True)
def queue_destroy_impl(device: Any, queue: Any) -> None:
    """Release a queue.  The generic layer has already waited for it to finish."""


@hookspec(firstresult=True)
def queue_synchronize_impl(device: Any, queue: Any) -> None:
    """Block until all work enqueued on ``queue`` has completed; raise if any of it failed."""


@hookspec(firstresult=True)
def queue_query_impl(device: Any, queue: Any) -> bool:
    """Return ``True`` if all work enqueued on ``queue`` has completed, without blocking."""


@hookspec(firstresult=True)
def launch_impl(
    device: Any,
    queue: Any,
    kernel: Any,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: tuple[Any, ...],
) -> Any:
    """Enqueue one launch of ``kernel`` and return its event (or ``None`` when ``queue`` is None
    and the launch has completed).

    ``grid`` is the number of work-groups per dimension and ``block`` the work-group size, both
    3-tuples of positive ints, as in CUDA and liboffload (OpenCL's global size is their product).
    ``args`` are already checked and normalised: an ``int`` is a device-accessible pointer, a
    ``numpy.generic`` is a scalar of exactly that type, a
    :class:`~pyoffload.backend.LocalMemory` reserves local memory.

    Example::

        @hookimpl
        def launch_impl(device, queue, kernel, grid, block, args):
            return kernel.launch(queue, grid, block, args)
    """


@hookspec(firstresult=True)
def launch_prepare_impl(
    device: Any,
    queue: Any,
    kernel: Any,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: tuple[Any, ...],
) -> Callable[[], Any] | None:
    """*Optional.* Bind arguments and dimensions once and return a zero-argument callable that
    enqueues the launch and returns its event, as ``launch_impl`` would.

    This is the hot path of ``Queue.prepare``: the callable is invoked directly, with no hook
    dispatch, unless a wrapper plugin (tracing, fault injection) is active, in which case every
    launch goes through ``launch_impl`` so wrappers still see it.  The default returns ``None``
    and the generic layer calls ``launch_impl`` each time.
    """


@hookspec(firstresult=True)
def enqueue_host_function_impl(device: Any, queue: Any, fn: Callable[[], None]) -> Any:
    """Enqueue ``fn`` to run on a host thread once earlier work on ``queue`` has completed;
    later work waits for it.  Return its event."""


@hookspec(firstresult=True)
def event_wait_impl(device: Any, event: Any) -> None:
    """Block until ``event`` has completed; raise if the work it marks failed."""


@hookspec(firstresult=True)
def event_query_impl(device: Any, event: Any) -> bool:
    """Return ``True`` if ``event`` has completed, without blocking."""


@hookspec(firstresult=True)
def event_elapsed_impl(device: Any, start: Any, end: Any) -> float:
    """*Optional.* Milliseconds between two completed events of a profiling queue.  The default
    raises ``UnsupportedError``."""


# --------------------------------------------------------------------------------------------
# Conformance suite support
# --------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def conformance_images_impl(device: Any) -> dict[str, bytes] | None:
    """Build or return the conformance suite's test programs in the backend's own format.

    Return ``{"kernels": image, "ctor_dtor": image}``; the suite loads them with
    ``load_program``.  The programs are specified in ``docs/conformance.md`` and the host
    backend's ``pyoffload/host/conformance.c`` is the reference implementation.  Every pointer
    parameter is a global pointer, every kernel takes its element count ``n`` explicitly and
    ignores work-items at or beyond it:

    ``kernels``:
      * ``noop()``
      * ``iota_i32(int32 *out, int32 n, int32 base)``: ``out[i] = base + i``
      * ``axpy_f32(float *y, const float *x, float a, int32 n)``: ``y[i] += a * x[i]``
      * ``scalars(double *out, int8 a, int16 b, int32 c, int64 d, float e, double f, uint8 g,
        uint16 h, uint32 k, uint64 m)``: ``out[0..9] = a, b, c, d, e, f, g, h, k, m``
      * ``local_reverse(int32 *out, const int32 *in, local int32 *scratch, int32 n, int32 block)``:
        reverses ``in`` within each work-group of ``block`` items through local memory
      * ``bump(int32 *out)``: one work-item; ``counter += 1; out[0] = counter``
      * ``sleep_spin(int64 *out, int64 iterations)``: one work-item busy loop, then
        ``out[0] = iterations`` (keeps a queue busy for the asynchrony tests)
      * globals ``int32 counter`` (initially 0) and ``int32 table[16]`` (initially 0..15)

    ``ctor_dtor``:
      * a global constructor that sets ``ctor_value = 42`` and increments ``ctor_runs``
      * a global destructor that, if ``dtor_out`` is set, writes ``dtor_out[0] = 215`` and
        ``dtor_out[1] = ctor_runs``
      * ``get_state(int32 *out)``: ``out[0] = ctor_value; out[1] = ctor_runs``
      * ``set_dtor_out(int32 *p)``: ``dtor_out = p``

    Return ``None`` if the backend cannot build them (the suite then skips those tests).
    """


@hookspec(firstresult=True)
def known_failures_impl(device: Any) -> dict[str, str] | None:
    """*Optional.* Declare conformance tests this device is known to fail, after Unified
    Runtime's ``UUR_KNOWN_FAILURE_ON``: ``{test_name: reason}``, where ``test_name`` is the test
    function's name (``"test_global_variable_write"``).  They are reported as skips with the
    reason and listed at the end of the run; ``PYOFFLOAD_RUN_KNOWN_FAILURES=1`` runs them.
    """


# --------------------------------------------------------------------------------------------
# Observer hooks: called on every registered plugin, results ignored
# --------------------------------------------------------------------------------------------


@hookspec
def program_loaded(program: Any) -> None:
    """Observer: a :class:`pyoffload.Program` finished loading and its constructors ran.

    Called on every registered plugin (tools, tracers, allocation trackers), not only on the
    backend.  The program is fully usable: ``program.global_variable(name).read()`` works.
    """


@hookspec
def program_unloading(program: Any) -> None:
    """Observer: the program's destructors have run and it is about to be released.

    The last moment to read globals such as allocation-tracker or profiling counters::

        @hookimpl
        def program_unloading(program):
            if "__profile_counters" in {s.name for s in program.symbols()}:
                report(program.global_variable("__profile_counters").read())
    """
