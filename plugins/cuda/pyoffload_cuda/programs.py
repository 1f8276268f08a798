"""Modules (programs), their kernels and globals."""

from __future__ import annotations

from typing import Any

from pyoffload.backend import (
    CompileError,
    InitFini,
    InvalidBinaryError,
    NotFoundError,
    OffloadError,
    SymbolDesc,
    SymbolKind,
)

from .binding import errors, translate
from .devices import CudaDevice
from .images import ImageFormat, ImageSymbols, detect_format, image_symbols

INIT = "nvptx$device$init"
FINI = "nvptx$device$fini"


class CudaKernel:
    def __init__(self, program: CudaProgram, name: str, function: Any) -> None:
        self.program = program
        self.name = name
        self.function = function
        # Parameter sizes from the image (PTX .param list, cubin EIATTR_KPARAM_INFO).
        syms = program.symbols
        self.param_sizes: tuple[int, ...] | None = syms.kernels.get(name) if syms is not None else None

    def release(self) -> None:
        # A pycuda Function keeps its Module alive: drop it so the module really unloads.
        self.function = None


class CudaProgram:
    """A loaded module.  ``symbols`` come from the image itself (the driver cannot list them);
    they are ``None`` only for a fatbin whose entries are all compressed."""

    def __init__(self, device: CudaDevice, image: bytes) -> None:
        self.device = device
        self.format = detect_format(image)  # before any driver call
        try:
            self.symbols: ImageSymbols | None = image_symbols(image, self.format)
        except InvalidBinaryError:
            if self.format is not ImageFormat.FATBIN:
                raise
            self.symbols = None  # the driver can still load it; lookups go to the driver
        # cuModuleLoadData reads PTX up to its NUL terminator.
        self.image = image + b"\0" if self.format is ImageFormat.PTX and not image.endswith(b"\0") else image
        cuda = device.cuda
        log: dict[str, str] = {}

        def message_handler(success: bool, info: str, error: str) -> None:
            log["info"], log["error"] = info, error

        with device.current():
            try:
                self.module: Any = cuda.module_from_buffer(self.image, [], message_handler)
            except cuda.Error as exc:
                err = translate(cuda, exc, f"loading a {self.format.value} image")
                if self.format is ImageFormat.PTX and not isinstance(err, CompileError):
                    # The driver JIT-compiles PTX: any failure to load it is a build failure.
                    raise CompileError(str(err), build_log=log.get("error", "")) from exc
                if isinstance(err, CompileError) and not err.build_log:
                    err.build_log = log.get("error", "")
                raise err from exc
        self.kernels: list[CudaKernel] = []
        device.handles.add(self)

    def symbol_descs(self) -> list[SymbolDesc]:
        if self.symbols is None:
            return []
        out = [SymbolDesc(n, SymbolKind.KERNEL) for n in self.symbols.kernels]
        out += [SymbolDesc(g.name, SymbolKind.GLOBAL, g.size) for g in self.symbols.globals.values()]
        return out

    def has_kernel(self, name: str) -> bool:
        if self.symbols is not None:
            return name in self.symbols.kernels
        try:
            self.kernel(name)
        except NotFoundError:
            return False
        return True

    def init_fini(self) -> InitFini:
        return InitFini(init=(INIT,) if self.has_kernel(INIT) else (),
                        fini=(FINI,) if self.has_kernel(FINI) else ())

    def _check_loaded(self) -> Any:
        if self.module is None:
            raise OffloadError("program was unloaded")
        return self.module

    def kernel(self, name: str) -> CudaKernel:
        module = self._check_loaded()
        with self.device.current(), errors(self.device.cuda, f"kernel {name!r}"):
            function = module.get_function(name)
        k = CudaKernel(self, name, function)
        self.kernels.append(k)
        return k

    def global_variable(self, name: str) -> tuple[int, int]:
        module = self._check_loaded()
        with self.device.current(), errors(self.device.cuda, f"global variable {name!r}"):
            ptr, size = module.get_global(name)
        return int(ptr), int(size)

    def release(self) -> None:
        for k in self.kernels:
            k.release()
        self.kernels.clear()
        self.module = None  # pycuda unloads the module when its last reference goes
