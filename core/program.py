"""Programs (loaded device images), their kernels and global variables.

Load: copy the caller's bytes, ``load_binary_impl``, record the program, run its global
constructors, tell observers.  Unload: destructors, observers (``program_unloading``: the last
chance to read counters), ``unload_binary_impl``, forget.  Teardown unloads in reverse load order.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .backend import SymbolDesc
from .errors import (
    Errc,
    InvalidArgumentError,
    InvalidBinaryError,
    InvalidHandleError,
    InvalidSizeError,
    TeardownWarning,
)

if TYPE_CHECKING:
    import numpy as np

    from .context import Context
    from .device import Device

_LOADED, _UNLOADING, _UNLOADED = "loaded", "unloading", "unloaded"


class Program:
    """A device image loaded on one device.  Use as a context manager, or call ``unload()``."""

    def __init__(self, context: Context, device: Device, image: bytes | bytearray | memoryview) -> None:
        context.check_alive()
        if device not in context.devices:
            raise InvalidArgumentError(f"load_program: {device!r} is not in {context!r}")
        if not isinstance(image, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"load_program: image must be bytes-like, got {type(image).__name__}")
        data = bytes(image)  # our own copy: the caller's buffer need not outlive the program
        if not data:
            raise InvalidBinaryError("load_program: the image is empty")
        self.context = context
        self.device = device
        self.image = data
        self._disp = device._disp
        self._rt = device._rt
        self._kernels: dict[str, Kernel] = {}
        self._globals: dict[str, GlobalVariable] = {}
        self._symbols: list[SymbolDesc] | None = None
        self.handle = self._disp.load_binary_impl(context.handle, device.handle, data)
        self._state = _LOADED
        self._seq = self._rt.add_program(self)
        try:
            init_fini = self._disp.global_init_fini_impl(device.handle, self.handle)
            self._fini: tuple[str, ...] = tuple(init_fini.fini) if init_fini else ()
            for name in init_fini.init if init_fini else ():
                self._run_entry(name)
        except BaseException:
            # A failed load creates nothing: release the image without running destructors.
            self._state = _UNLOADED
            self._rt.programs.pop(self._seq, None)
            try:
                self._disp.unload_binary_impl(device.handle, self.handle)
            except BaseException as exc:
                warnings.warn(f"releasing a program whose constructor failed: {exc!r}", TeardownWarning, stacklevel=2)
            raise
        device._backend.pm.hook.program_loaded(program=self)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._state == _LOADED

    def _check_loaded(self) -> None:
        if self._state != _LOADED:
            raise InvalidHandleError(f"{self!r} is {self._state}", Errc.INVALID_PROGRAM)
        if not self._rt.alive:
            self._rt.check_alive()

    def _run_entry(self, name: str) -> None:
        kernel = self._disp.get_kernel_impl(self.device.handle, self.handle, name)
        self._disp.launch_impl(self.device.handle, None, kernel, (1, 1, 1), (1, 1, 1), ())

    def unload(self) -> None:
        """Run the destructors, notify observers, release the image.  Unloading twice is an
        ``INVALID_PROGRAM`` error.  Destructor failures are warnings: the unload completes."""
        with self._rt.lock:
            self._check_loaded()
            self._state = _UNLOADING
        self._release(teardown=False)

    def _release(self, teardown: bool) -> None:
        with self._rt.lock:
            if self._state == _UNLOADED:
                return
            self._state = _UNLOADING
        try:
            # Work still queued may run this program's code: let it finish before the code goes.
            for queue in list(self._rt.queues.values()):
                if queue.device is self.device and queue._live:
                    try:
                        self._disp.queue_synchronize_impl(self.device.handle, queue.handle)
                    except BaseException as exc:
                        warnings.warn(f"waiting for {queue!r} before unloading {self!r}: {exc!r}",
                                      TeardownWarning, stacklevel=3)
            for name in self._fini:
                try:
                    self._run_entry(name)
                except BaseException as exc:
                    warnings.warn(f"destructor {name!r} of {self!r} failed: {exc!r}", TeardownWarning, stacklevel=3)
            try:
                self.device._backend.pm.hook.program_unloading(program=self)
            except BaseException as exc:
                warnings.warn(f"program_unloading observer failed for {self!r}: {exc!r}", TeardownWarning, stacklevel=3)
            self._disp.unload_binary_impl(self.device.handle, self.handle)
        finally:
            self._state = _UNLOADED
            self._rt.epoch += 1
            self._rt.programs.pop(self._seq, None)

    def __enter__(self) -> Program:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._state == _LOADED:
            self.unload()

    # -- symbols --------------------------------------------------------------------------

    def symbols(self) -> list[SymbolDesc]:
        """The program's kernels and global variables."""
        self._check_loaded()
        if self._symbols is None:
            self._symbols = list(self._disp.get_symbols_impl(self.device.handle, self.handle))
        return list(self._symbols)

    def kernel(self, name: str) -> Kernel:
        """The kernel ``name``; ``NOT_FOUND`` if the image has none of that name."""
        self._check_loaded()
        k = self._kernels.get(name)
        if k is None:
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"kernel name must be a non-empty str, got {name!r}")
            k = Kernel(self, name, self._disp.get_kernel_impl(self.device.handle, self.handle, name))
            self._kernels[name] = k
        return k

    def global_variable(self, name: str) -> GlobalVariable:
        """The global variable ``name`` with its device address and size."""
        self._check_loaded()
        g = self._globals.get(name)
        if g is None:
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"global name must be a non-empty str, got {name!r}")
            addr, size = self._disp.get_global_impl(self.device.handle, self.handle, name)
            g = GlobalVariable(self, name, int(addr), int(size))
            self._globals[name] = g
        return g

    def __repr__(self) -> str:
        return f"<pyoffload.Program {len(self.image)} bytes on {self.device.id} {self._state}>"


class Kernel:
    """A kernel of a loaded program; launch it with ``Queue.launch`` or ``Queue.prepare``."""

    __slots__ = ("program", "name", "handle", "_signature")

    def __init__(self, program: Program, name: str, handle: Any) -> None:
        self.program = program
        self.name = name
        self.handle = handle
        self._signature: Sequence[str] | None | bool = False  # False: not asked yet

    @property
    def device(self) -> Device:
        return self.program.device

    @property
    def signature(self) -> Sequence[str] | None:
        """Parameter kinds (``"ptr"``, ``"i32"``, ...) if the image says, else ``None``."""
        if self._signature is False:
            prog = self.program
            sig = prog._disp.kernel_signature_impl(prog.device.handle, self.handle)
            self._signature = tuple(sig) if sig is not None else None
        return self._signature  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<pyoffload.Kernel {self.name!r} of {self.program!r}>"


class GlobalVariable:
    """A program's global: ``address`` on the device, ``size`` in bytes, ``read``/``write``."""

    __slots__ = ("program", "name", "address", "size")

    def __init__(self, program: Program, name: str, address: int, size: int) -> None:
        self.program = program
        self.name = name
        self.address = address
        self.size = size

    def read(self, dtype: Any = None) -> bytes | np.ndarray:
        """The current value: ``bytes``, or a numpy array of ``dtype``."""
        self.program._check_loaded()
        out = bytearray(self.size)
        dev = self.program.device
        dev._disp.data_retrieve_impl(dev.handle, None, memoryview(out), self.address, self.size)
        if dtype is None:
            return bytes(out)
        import numpy as np

        return np.frombuffer(out, dtype=dtype).copy()

    def write(self, data: Any, offset: int = 0) -> None:
        """Overwrite ``len(data)`` bytes at ``offset``; writing past the end is INVALID_SIZE."""
        self.program._check_loaded()
        try:
            mv = memoryview(data).cast("B")
        except TypeError:
            raise InvalidArgumentError(f"write: expected a buffer, got {type(data).__name__}") from None
        if type(offset) is not int or offset < 0:
            raise InvalidArgumentError(f"write: offset must be a non-negative int, got {offset!r}")
        if mv.nbytes == 0:
            raise InvalidSizeError("write: data is empty")
        if offset + mv.nbytes > self.size:
            raise InvalidSizeError(
                f"write of {mv.nbytes} bytes at offset {offset} overruns global {self.name!r} ({self.size} bytes)"
            )
        dev = self.program.device
        dev._disp.data_submit_impl(dev.handle, None, self.address + offset, mv, mv.nbytes)

    def __repr__(self) -> str:
        return f"<pyoffload.GlobalVariable {self.name!r} 0x{self.address:x} size={self.size}>"
