"""Programs (loaded device images), their kernels and their global variables.

Load: copy the caller's bytes, ``load_binary_impl``, record the program, run its global
constructors (launches on the context's internal queue), tell observers.  Unload: refuse new
launches, wait for the launches already queued (each launch records itself as a user of its
program, so the wait covers exactly those), run the destructors, tell observers
(``program_unloading``: the last chance to read counters), ``unload_binary_impl``, forget the
program and its globals.  Teardown unloads in reverse load order.

A wait that would never finish (unloading from a host function of a queue that still has launches
of the program after it) is refused with an error and changes nothing; a ``KeyboardInterrupt``
while waiting leaves the program loaded and usable.

Exports of globals (a numpy view, a memoryview, a DLPack consumer of ``GlobalVariable.allocation``)
point into the image: ``unload`` refuses with ``INVALID_ARGUMENT`` while one is alive, and changes
nothing.  Teardown (context close, shutdown, exit) cannot refuse: it forgets the globals and keeps
the image loaded, leaked rather than unmapped under the export (a ``TeardownWarning`` says so,
except at interpreter exit).  An export taken by another thread while ``unload`` runs the
destructors is treated the same way; none can be taken once the globals are forgotten.
"""

from __future__ import annotations

import operator
import threading
import warnings
from typing import Any

import numpy as np

from .backend import KERNEL_ATTRIBUTE_KEYS, SymbolDesc
from .context import GenericContext
from .device import GenericDevice
from .enums import AllocKind, SymbolKind
from .errors import (
    got,
    Errc,
    InvalidArgumentError,
    InvalidBinaryError,
    InvalidHandleError,
    InvalidSizeError,
    NotFoundError,
    OffloadError,
    TeardownWarning,
    UnsupportedError,
)
from .checks import check_size, triple
from .memory import Allocation, register_external, unregister
from .queue_core import QueueCore, users_of
from .runtime import EXIT_WAIT_SECONDS, warn_teardown
from .transfer import memcpy

LOADED, UNLOADING, UNLOADED = "loaded", "unloading", "unloaded"


def _warn(message: str) -> None:
    warnings.warn(message, TeardownWarning, stacklevel=4)


class Program:
    """A device image loaded on one device.  Use it as a context manager, or call ``unload()``."""

    teardown_rank = 0

    def __init__(self, context: GenericContext, device: GenericDevice, image: bytes | bytearray | memoryview) -> None:
        context.check_alive()
        context.check_device(device, "load_program")
        if isinstance(image, str):
            raise TypeError(
                f"load_program takes the image's bytes, got {got(image)}; to build source, use Device.build_program"
            )
        try:
            data = bytes(memoryview(image))  # our own copy: the caller's buffer need not outlive it
            # (through memoryview: bytes(42) would be 42 zero bytes, and a list of ints an image)
        except TypeError:
            raise TypeError(f"load_program: image must be bytes-like, got {got(image)}") from None
        if not data:
            raise InvalidBinaryError("load_program: the image is empty")
        self.context = context
        self.device = device
        self.image = data
        self.disp = device.disp
        self.rt = device.rt
        self._lock = threading.Lock()
        self._kernels: dict[str, Kernel] = {}
        self._globals: dict[str, GlobalVariable] = {}
        self._symbols: dict[str, SymbolDesc] | None = None
        self._committed = False  # an unload went past its waits: it completes, interrupted or not
        self._done = 0  # steps of that unload completed (see _finish)
        # A constructor or destructor whose wait failed may still run: the image is then leaked,
        # never released under it (see _run_entry).
        self._entry_running = False
        self.handle = self.disp.load_binary_impl(context.handle, device.handle, data)
        self.state = LOADED
        try:
            self.rt.track(self.rt.programs, self)
            context.adopt(self)
            init_fini = self.disp.global_init_fini_impl(device.handle, self.handle)
            self._fini: tuple[str, ...] = tuple(init_fini.fini) if init_fini else ()
            for name in init_fini.init if init_fini else ():
                self._run_entry(name)
            self._register_globals()
            device.plugin.pm.hook.program_loaded(program=self)
        except BaseException:
            # A failed load creates nothing: release the image without running destructors.
            for g in self._globals.values():
                unregister(self.rt, g.allocation)
            self.state = UNLOADED
            self.rt.untrack(self.rt.programs, self)
            context.disown(self)
            if self._entry_running:
                warn_teardown(
                    "releasing a program whose constructor failed",
                    RuntimeError("the constructor may still be running: the image stays loaded (leaked)"),
                )
            else:
                try:
                    self.disp.unload_binary_impl(device.handle, self.handle)
                except Exception as exc:
                    warn_teardown("releasing a program whose constructor failed", exc)
            raise

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self.state is LOADED

    @property
    def native(self) -> Any:
        """The vendor's own program or module object."""
        self.check_loaded()
        return self.disp.native_handle_impl("program", self.handle)

    def check_loaded(self) -> None:
        if self.state is not LOADED:
            if not self.rt.alive:
                raise InvalidHandleError(f"{self!r} belongs to a runtime that was shut down", Errc.UNINITIALIZED)
            raise InvalidHandleError(f"{self!r} is {self.state}", Errc.INVALID_PROGRAM)

    def _run_entry(self, name: str) -> None:
        """Run a constructor or destructor: once, no arguments, 1x1x1, on the internal queue."""
        kernel = self.kernel(name) if self.state is LOADED else Kernel(self, name, self._kernel_handle(name))
        queue = self.context.internal_queue(self.device)
        args = kernel.packed(())
        seq = queue.enqueue(
            "launch_impl", (self.device.handle, queue.handle, kernel.handle, (1, 1, 1), (1, 1, 1), args)
        )
        try:
            queue.wait_for(seq)
        except BaseException as exc:
            # The entry failed, or the wait did (or was interrupted) while it may still run: the
            # image must outlive it.  Wait for it to stop unless it was an interrupt; where that
            # cannot be told, the caller leaks the image.
            if seq > queue.done:
                self._entry_running = True
                if not isinstance(exc, KeyboardInterrupt):
                    try:
                        queue.settle(seq)
                        self._entry_running = False
                    except Exception:
                        pass
            raise

    def unload(self) -> None:
        """Wait for queued launches of the program's kernels, run its destructors, notify
        observers, release the image.  Unloading twice is an ``INVALID_PROGRAM`` error; unloading
        while a global is exported (a view, memoryview, array or DLPack consumer of its
        ``allocation``) is an ``INVALID_ARGUMENT`` error that changes nothing; destructor failures
        are warnings (the unload completes).  Interrupted (Ctrl-C) while it waits, the program
        stays loaded; interrupted after, ``unload()`` again (or shutdown) finishes it."""
        with self._lock:
            resume = self.state is UNLOADING and self._committed
            if not resume:
                self.check_loaded()
            exported = "" if resume else self._exported_globals()
            if exported:
                raise InvalidArgumentError(
                    f"unload: {self!r} has globals still exported ({exported}: memoryviews, arrays, views, DLPack "
                    "consumers of their allocation); release them first"
                )
            self.state = UNLOADING  # no new launch from here on (see Queue.launch)
        try:
            if resume:  # an unload that an interrupt stopped after its waits: finish it
                self._finish(at_exit=False)
            else:
                self._release(at_exit=False)
        except BaseException:
            with self._lock:  # stopped before the unload went past its waits: still loaded
                if self.state is UNLOADING and not self._committed:
                    self.state = LOADED
            raise

    def _queues(self) -> list[QueueCore]:
        """The runtime's queues (the ones that launch kernels)."""
        with self.rt.lock:
            return [q for q in self.rt.queues.values() if isinstance(q, QueueCore)]

    def _exported_globals(self) -> str:
        """The globals with live exports, as ``'name' (n exports)``, comma-separated; empty if none."""
        return ", ".join(
            f"{g.name!r} ({g.allocation.exports} export{'s' if g.allocation.exports != 1 else ''})"
            for g in list(self._globals.values())
            if g.allocation.exports
        )

    def _release(self, at_exit: bool) -> None:
        try:
            # Launches of our kernels (each queue keeps its last one: read after the state says
            # UNLOADING, so a launch not seen here fails), and copies, fills and launches that
            # use our globals.
            users: dict[QueueCore, int] = {}
            for queue in self._queues():
                seq = queue.last_launch_of(self)
                if seq:
                    users[queue] = seq
            for g in list(self._globals.values()):
                for queue, seq in users_of(g.allocation):
                    if seq > users.get(queue, 0):
                        users[queue] = seq
            for queue, seq in users.items():
                if queue.live:
                    if at_exit:
                        if not queue.drain_within(EXIT_WAIT_SECONDS):
                            raise OffloadError(
                                f"{queue!r} still runs work of {self!r} at exit: leaked", Errc.BACKEND_FAILURE
                            )
                        continue
                    queue.settle(seq)  # raises (and the program stays loaded) if it cannot tell
        except BaseException:
            with self._lock:
                self.state = LOADED
            raise
        # From here on the unload completes: each step below runs once, and an unload stopped
        # between two of them (an interrupt) is resumed by the next unload() or by teardown.
        self._committed = True
        self._finish(at_exit)

    def _finish(self, at_exit: bool) -> None:
        """The unload's steps after its waits, each once (``_done`` counts those completed)."""
        interrupted: BaseException | None = None
        while self._done < len(self._fini):  # destructors, in order, each once
            name = self._fini[self._done]
            self._done += 1
            try:
                self._run_entry(name)
            except KeyboardInterrupt as exc:
                interrupted = exc
            except Exception as exc:
                _warn(f"destructor {name!r} of {self!r} failed: {exc!r}")
        if self._done == len(self._fini):
            self._done += 1
            try:
                self.device.plugin.pm.hook.program_unloading(program=self)
            except KeyboardInterrupt as exc:
                interrupted = exc
            except Exception as exc:
                _warn(f"program_unloading observer failed for {self!r}: {exc!r}")
        # Forget the globals' ranges before the image goes: once it is released, its addresses
        # may be reused at once by a program another thread loads.  Forgetting a global clears its
        # ``live`` and ``exportable`` first, so no export can start after the check below.
        # Forgetting is idempotent: a resumed unload forgets them again.
        for g in list(self._globals.values()):
            unregister(self.rt, g.allocation)
        if self._done == len(self._fini) + 1:
            self._done += 1
            exported = self._exported_globals()
            if self._entry_running:
                warn_teardown(
                    f"unloading {self!r}",
                    RuntimeError("a destructor may still be running: the image stays loaded (leaked)"),
                )
            elif not exported:
                self.disp.unload_binary_impl(self.device.handle, self.handle)
            elif not at_exit:
                warn_teardown(
                    f"unloading {self!r}",
                    RuntimeError(
                        f"its globals are still exported ({exported}): the image stays loaded (leaked) rather than "
                        "unmapped under them"
                    ),
                )
        self.state = UNLOADED
        for queue in self._queues():
            queue.last_launch_of(self, forget=True)
        self.rt.untrack(self.rt.programs, self)
        self.context.disown(self)
        if interrupted is not None:
            raise interrupted

    def teardown(self, at_exit: bool) -> None:
        with self._lock:
            if self.state is UNLOADING and self._committed:  # an interrupted unload: finish it
                resume = True
            elif self.state is not LOADED:
                return
            else:
                resume = False
                self.state = UNLOADING
        if resume:
            self._finish(at_exit)
        else:
            self._release(at_exit)

    def __enter__(self) -> Program:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.state is LOADED:
            self.unload()

    # -- symbols --------------------------------------------------------------------------

    def _symbol_table(self) -> dict[str, SymbolDesc]:
        if self._symbols is None:
            self._symbols = {s.name: s for s in self.disp.get_symbols_impl(self.device.handle, self.handle)}
        return self._symbols

    def symbols(self) -> list[SymbolDesc]:
        """The program's kernels and global variables."""
        self.check_loaded()
        return list(self._symbol_table().values())

    def _find(self, name: Any, kind: SymbolKind) -> SymbolDesc:
        if not isinstance(name, str):
            raise TypeError(f"{kind.value} name must be a str, got {got(name)}")
        sym = self._symbol_table().get(name)
        if sym is None:
            raise NotFoundError(f"{self!r} has no {kind.value} named {name!r}")
        if sym.kind is not kind:
            raise InvalidArgumentError(f"{name!r} is a {sym.kind.value}, not a {kind.value}", Errc.SYMBOL_KIND)
        return sym

    def _kernel_handle(self, name: str) -> Any:
        return self.disp.get_kernel_impl(self.device.handle, self.handle, name)

    def kernel(self, name: str) -> Kernel:
        """The kernel ``name``: ``NOT_FOUND`` if there is none, ``SYMBOL_KIND`` for a global."""
        k = self._kernels.get(name)
        if k is None:
            self.check_loaded()
            self._find(name, SymbolKind.KERNEL)
            with self._lock:
                k = self._kernels.get(name)
                if k is None:
                    k = self._kernels[name] = Kernel(self, name, self._kernel_handle(name))
        elif self.state is not LOADED:
            self.check_loaded()
        return k

    def _register_globals(self) -> None:
        """Record every global variable's range at load, so that its address resolves with
        ``mem_info`` and works as a launch argument before anyone asked for it by name.  A
        platform that cannot expose a global's address (``UnsupportedError``) keeps it unrecorded."""
        for sym in self._symbol_table().values():
            if sym.kind is SymbolKind.GLOBAL and sym.size:
                try:
                    self.global_variable(sym.name)
                except UnsupportedError:
                    continue

    def global_variable(self, name: str) -> GlobalVariable:
        """The global variable ``name`` (``NOT_FOUND`` / ``SYMBOL_KIND`` as for ``kernel``); its
        address resolves with ``mem_info`` and works as a launch argument and in copies (every
        global is recorded at load)."""
        self.check_loaded()
        g = self._globals.get(name)
        if g is None:
            self._find(name, SymbolKind.GLOBAL)
            with self._lock:
                g = self._globals.get(name)
                if g is None:
                    addr, size = self.disp.get_global_impl(self.device.handle, self.handle, name)
                    alloc = register_external(
                        self.rt, int(addr), int(size), AllocKind.DEVICE, self.device, self.context, self
                    )
                    try:  # recorded and known to the program together, or neither
                        g = self._globals[name] = GlobalVariable(self, name, alloc)
                    except BaseException:
                        unregister(self.rt, alloc)
                        raise
        return g

    def __repr__(self) -> str:
        return f"<pyoffload.Program {len(self.image)} bytes on {self.device.id} {self.state}>"


class Kernel:
    """A kernel of a loaded program; launch it with ``Queue.launch`` or ``Queue.prepare``."""

    __slots__ = (
        "program",
        "name",
        "handle",
        "_signature",
        "_attributes",
        "_packers",
        "binders",
        "_block_rule",
        "suggested",
    )

    def __init__(self, program: Program, name: str, handle: Any) -> None:
        self.program = program
        self.name = name
        self.handle = handle
        self._signature: tuple[str, ...] | None | bool = False  # False: not asked yet
        self._attributes: dict[str, Any] | None = None
        self._packers: dict[tuple[str, ...], Any] = {}
        self.binders: dict[tuple[type, ...], Any] = {}  # argument binders by argument types (launch.py)
        self._block_rule: Any = False  # False: not asked yet (see block_rule)
        # suggest_block's answers by global size (None: for a grid), at most 256 (launch.py)
        self.suggested: dict[Any, tuple[int, int, int]] = {}

    @property
    def device(self) -> GenericDevice:
        return self.program.device

    @property
    def native(self) -> Any:
        """The vendor's own kernel or function object."""
        self.program.check_loaded()
        return self.program.disp.native_handle_impl("kernel", self.handle)

    @property
    def signature(self) -> tuple[str, ...] | None:
        """Parameter kinds (``"ptr"``, ``"i32"``, ...) if the image declares them, else ``None``."""
        if self._signature is False:
            prog = self.program
            sig = prog.disp.kernel_signature_impl(prog.device.handle, self.handle)
            self._signature = tuple(sig) if sig is not None else None
        return self._signature  # type: ignore[return-value]

    def packer(self, kinds: tuple[str, ...]) -> Any:
        """The backend's packer for this argument-kind signature (``None``: the values as they are)."""
        try:
            return self._packers[kinds]
        except KeyError:
            prog = self.program
            packer = prog.disp.kernel_packer_impl(prog.device.handle, self.handle, kinds)
            self._packers[kinds] = packer
            return packer

    def packed(self, values: tuple[Any, ...]) -> Any:
        """``values`` packed for ``launch_impl`` (used for arguments-free entry points)."""
        packer = self.packer(tuple("ptr" if type(v) is int else "local" for v in values))
        return packer(values) if packer is not None else values

    @property
    def block_rule(self) -> tuple[int, tuple[int, int, int] | None] | None:
        """What the kernel's attributes demand of a launch's block beyond the device's limits,
        read from the backend once: ``(most work-items, required block or None)``, or ``None``
        where they demand nothing more (``launch.check_block`` applies it)."""
        if self._block_rule is False:
            attrs = self.attributes
            required = attrs.get("required_work_group_size")
            req: tuple[int, int, int] | None = None
            if required:
                dims = tuple(int(v) for v in required)[:3]
                req = dims + (1,) * (3 - len(dims))  # type: ignore[assignment]
            most = attrs.get("max_work_group_size")
            limit = self.program.device.limits.block_threads
            if req is None and (most is None or int(most) >= limit):
                self._block_rule = None
            else:
                self._block_rule = (int(most) if most else limit), req
        return self._block_rule  # type: ignore[no-any-return]

    @property
    def attributes(self) -> dict[str, Any]:
        """The kernel's attributes on its device: the keys of
        :data:`pyoffload.backend.KERNEL_ATTRIBUTE_KEYS` (``None`` where unknown; the device's
        limits where the backend reports nothing) plus the backend's own extras."""
        if self._attributes is None:
            prog = self.program
            prog.check_loaded()
            reported = prog.disp.kernel_attributes_impl(prog.device.handle, self.handle) or {}
            attrs: dict[str, Any] = dict.fromkeys(KERNEL_ATTRIBUTE_KEYS)
            info = prog.device.info
            attrs["max_work_group_size"] = info.get("max_work_group_size")
            attrs["preferred_work_group_multiple"] = info.get("sub_group_size")
            attrs.update(reported)
            self._attributes = attrs
        return dict(self._attributes)

    def suggest_block(self, global_size: Any = None) -> tuple[int, int, int]:
        """The block a launch with ``block=None`` gets (Unified Runtime's
        ``urKernelGetSuggestedLocalWorkSize``, CUDA's ``cuOccupancyMaxPotentialBlockSize``).

        The kernel's ``required_work_group_size`` where it has one.  Otherwise, given
        ``global_size`` (work-items per dimension, an int or 1 to 3 ints), the block that divides
        it exactly, dimension by dimension: in dimension 0 the largest divisor within the
        kernel's ``max_work_group_size`` that is a multiple of its
        ``preferred_work_group_multiple`` (the largest divisor where none is), in dimensions 1
        and 2 the largest divisor within what the earlier dimensions leave of the limit.
        Without ``global_size`` (a launch given as a grid of work-groups): ``(n, 1, 1)`` with
        ``n`` the largest multiple of the preferred multiple within the limit.  Each dimension
        also keeps to the device's ``max_work_item_sizes``."""

        return suggested_block(self, global_size)

    def launch_size(self, n: int, max_block: int = 256) -> tuple[int, int]:
        """A 1-D launch shape ``(grid, block)`` for ``n`` work-items of this kernel on its device:
        ``block`` is a multiple of the preferred work-group multiple (warp, SIMD width), within the
        kernel's work-group limit and ``max_block``, and no larger than ``n`` needs; ``grid`` is
        the number of work-groups that covers ``n`` (kernels take ``n`` and ignore ids past it)."""
        n = check_size(n, "launch_size n")
        attrs = self.attributes
        limit = min(int(attrs["max_work_group_size"] or 1), check_size(max_block, "launch_size max_block"))
        multiple = max(1, min(int(attrs["preferred_work_group_multiple"] or 1), limit))
        block = min(limit // multiple * multiple, -(-n // multiple) * multiple)
        grid = -(-n // block)
        if grid > self.program.device.limits.grid[0]:
            raise InvalidSizeError(
                f"launch_size: {n} work-items need {grid} work-groups of {block}, more than "
                f"{self.program.device.id} allows (info 'max_grid_size')"
            )
        return grid, block

    def __repr__(self) -> str:
        return f"<pyoffload.Kernel {self.name!r} of {self.program!r}>"


class GlobalVariable:
    """A program's global: ``address`` on the device, ``size`` in bytes, ``read``/``write``.

    ``allocation`` is its entry in the address registry (external: never freed by pyoffload).
    """

    __slots__ = ("program", "name", "allocation")

    def __init__(self, program: Program, name: str, allocation: Allocation) -> None:
        self.program = program
        self.name = name
        self.allocation = allocation

    @property
    def address(self) -> int:
        return self.allocation.ptr

    @property
    def size(self) -> int:
        return self.allocation.size

    def read(self, dtype: Any = None) -> bytes | np.ndarray:
        """The current value: ``bytes``, or a numpy array of ``dtype``."""
        self.program.check_loaded()
        out = bytearray(self.size)
        memcpy(out, self.allocation, self.size)
        if dtype is None:
            return bytes(out)
        return np.frombuffer(out, dtype=dtype).copy()

    def write(self, data: Any, offset: int = 0) -> None:
        """Overwrite ``len(data)`` bytes at ``offset``; writing past the end is ``INVALID_SIZE``."""
        self.program.check_loaded()
        offset = operator.index(offset)
        if offset < 0:
            raise InvalidSizeError(f"write: offset must be non-negative, got {offset}")
        mv = memoryview(data).cast("B")
        if mv.nbytes == 0:
            raise InvalidSizeError("write: data is empty")
        if offset + mv.nbytes > self.size:
            raise InvalidSizeError(
                f"write of {mv.nbytes} bytes at offset {offset} overruns global {self.name!r} ({self.size} bytes)"
            )
        memcpy(self.allocation.ptr + offset, mv, mv.nbytes)

    def __repr__(self) -> str:
        return f"<pyoffload.GlobalVariable {self.name!r} 0x{self.address:x} size={self.size}>"


def _largest_divisor(n: int, cap: int, multiple: int) -> int:
    """The largest divisor of ``n`` not above ``cap`` that is a multiple of ``multiple``, or the
    largest divisor not above ``cap`` where no multiple divides ``n`` (1 always does)."""
    first = 0
    for d in range(min(n, cap), 0, -1):
        if n % d == 0:
            if d % multiple == 0:
                return d
            if not first:
                first = d
    return first


def suggested_block(kernel: Kernel, global_size: Any = None) -> tuple[int, int, int]:
    """``Kernel.suggest_block``: the rule is documented there.  Answers are kept per kernel and
    global size (a divisor search costs up to a few thousand steps)."""
    g = None if global_size is None else triple(global_size, "global_size")
    block = kernel.suggested.get(g)
    if block is None:
        block = _suggest(kernel, g)
        if len(kernel.suggested) < 256:
            kernel.suggested[g] = block
    return block


def _suggest(kernel: Kernel, g: tuple[int, int, int] | None) -> tuple[int, int, int]:
    rule = kernel.block_rule
    if rule is not None and rule[1] is not None:
        return rule[1]
    attrs = kernel.attributes
    lim = kernel.program.device.limits
    limit = max(1, min(int(attrs["max_work_group_size"] or 1), lim.block_threads))
    multiple = max(1, int(attrs["preferred_work_group_multiple"] or 1))
    if g is None:
        n = min(limit, lim.block[0])
        return (n // multiple * multiple or n, 1, 1)
    out = []
    for axis in range(3):
        d = _largest_divisor(g[axis], min(limit, lim.block[axis]), multiple if axis == 0 else 1)
        out.append(d)
        limit //= d
    return out[0], out[1], out[2]
