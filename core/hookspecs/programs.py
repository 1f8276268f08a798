"""Hooks: device images, their symbols, kernels and how a launch's arguments are packed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..backend import InitFini, SymbolDesc
from .marker import hookspec


@hookspec(firstresult=True)
def load_binary_impl(context: Any, device: Any, image: bytes) -> Any:
    """Load a device image on ``device`` and return a program handle.

    ``image`` is the generic layer's own copy of the caller's bytes, kept as long as the program.
    Detect the format from the bytes and check it before the driver sees it: raise
    ``InvalidBinaryError`` naming what was expected for anything malformed (a driver's loader may
    crash on a malformed image; validation is the backend's duty), ``CompileError`` with the build
    log when a source or IR image fails to build.  Do not run global constructors here unless the
    platform's loader runs them itself (``dlopen``): the generic layer runs the entry points
    named by ``global_init_fini_impl``.  May block.
    """


@hookspec(firstresult=True)
def unload_binary_impl(device: Any, program: Any) -> None:
    """Release a loaded program.

    The generic layer guarantees: no queued operation uses the program any more (it waited for
    every launch of its kernels), its destructors have run and observers were told.  Must not
    affect any other program on the device.  May block.
    """


@hookspec(firstresult=True)
def global_init_fini_impl(device: Any, program: Any) -> InitFini | None:
    """*Optional.* Name the program's global constructor and destructor entry points.

    Return an :class:`~pyoffload.backend.InitFini` of kernel names present in the program; the
    generic layer launches each once without arguments (see ``InitFini``).  LLVM's conventions are
    ``nvptx$device$init``/``nvptx$device$fini`` and ``amdgcn.device.init``/``amdgcn.device.fini``.
    The default returns ``None`` (no constructors).  Example::

        @hookimpl
        def global_init_fini_impl(device, program):
            names = set(program.kernel_names)
            return InitFini(init=tuple(n for n in ["nvptx$device$init"] if n in names),
                            fini=tuple(n for n in ["nvptx$device$fini"] if n in names))
    """


@hookspec(firstresult=True)
def get_symbols_impl(device: Any, program: Any) -> Sequence[SymbolDesc]:
    """List the program's kernels and global variables as :class:`~pyoffload.backend.SymbolDesc`
    records (globals with their size in bytes).  Called once per program; cached."""


@hookspec(firstresult=True)
def get_kernel_impl(device: Any, program: Any, name: str) -> Any:
    """Return a kernel handle for ``name``.

    The generic layer asks only for names that ``get_symbols_impl`` listed as kernels (it
    answers ``NOT_FOUND`` / ``SYMBOL_KIND`` itself otherwise), once per name; the handle is shared
    by every launch and prepared launch of that kernel, from any thread.
    """


@hookspec(firstresult=True)
def get_global_impl(device: Any, program: Any, name: str) -> tuple[int, int]:
    """Return ``(address, size)`` of the global variable ``name`` (listed by ``get_symbols_impl``).

    The address must be usable by the copy hooks and as a kernel argument on ``device``; the
    generic layer records it so that ``mem_info`` resolves it.  Raise ``UnsupportedError`` if the
    platform cannot expose a global's address.
    """


@hookspec(firstresult=True)
def kernel_signature_impl(device: Any, kernel: Any) -> Sequence[str] | None:
    """*Optional.* The kernel's parameter kinds, if the image declares them: each one of
    :data:`pyoffload.backend.PARAM_KINDS` (``"ptr"``, ``"local"``, ``"i8"`` ... ``"f64"``).

    With a signature, the generic layer checks argument count and kinds at launch
    (``INVALID_ARGUMENT``) and converts Python ``int``/``float`` arguments to the declared scalar
    type; without one, a Python ``int`` is a pointer.  Default ``None``.
    """


@hookspec(firstresult=True)
def kernel_attributes_impl(device: Any, kernel: Any) -> dict[str, Any] | None:
    """*Optional.* The kernel's attributes on ``device`` with the standard keys of
    :data:`pyoffload.backend.KERNEL_ATTRIBUTE_KEYS` (``max_work_group_size``,
    ``preferred_work_group_multiple``, ``local_memory_bytes``, ``private_memory_bytes``,
    ``registers``); absent keys read as ``None``, extras take a ``"<backend>."`` prefix.  Default
    ``None`` (the generic layer then reports the device's limits).
    """


@hookspec(firstresult=True)
def kernel_packer_impl(device: Any, kernel: Any, kinds: tuple[str, ...]) -> Callable[[tuple[Any, ...]], Any] | None:
    """*Optional.* Return a function that packs one launch's arguments for ``kernel`` into whatever
    ``launch_impl`` and ``launch_prepare_impl`` take as ``args``.

    Called once per kernel and argument-kind signature ``kinds`` (a tuple of
    :data:`~pyoffload.backend.PARAM_KINDS`); the generic layer caches the packer and calls it on
    every launch with a tuple of already-checked values: an ``int`` address for ``"ptr"`` (0 for
    NULL), a :class:`~pyoffload.backend.LocalMemory` for ``"local"``, a numpy scalar of exactly
    the kind's dtype otherwise.  The packer must not keep the tuple.  The default returns ``None``:
    ``launch_impl`` then receives the tuple itself.  Example (CUDA, one parameter buffer)::

        @hookimpl
        def kernel_packer_impl(device, kernel, kinds):
            layout = struct.Struct(param_format(kinds))
            return lambda values: layout.pack(*values)
    """


@hookspec(firstresult=True)
def compile_impl(device: Any, source: str, options: tuple[str, ...]) -> bytes:
    """*Optional.* Build ``source`` in the backend's source language (OpenCL C, C for the host,
    CUDA C++, HIP) for ``device`` into an image that ``load_binary_impl`` loads
    (``Device.build_program``).

    ``options`` are the caller's compiler options; the backend appends them to its own defaults,
    which the caller cannot drop by accident (the host backend keeps ``-shared -fPIC -g``).
    Raise ``CompileError`` with the compiler's messages in ``build_log`` when the build fails
    (``CompileError.from_log``: its message then carries the compiler's first error line), and
    ``OffloadError`` with ``HOST_TOOL_NOT_FOUND`` when no compiler is available.  The generic layer
    caches the result on disk keyed by the source, the options, the device and
    ``compiler_id_impl``.  May block.  The default raises ``UnsupportedError``.
    """


@hookspec(firstresult=True)
def compiler_id_impl(device: Any) -> str | None:
    """*Optional.* What identifies the toolchain ``compile_impl`` uses for ``device`` (compiler
    and driver versions, target architecture): part of the build cache's key, so a new compiler
    or driver never reuses an old binary.  ``None`` (the default) turns the on-disk cache off for
    this device.
    """


@hookspec(firstresult=True)
def build_target_impl(device: Any) -> str | None:
    """*Optional.* The build target of ``device`` (``Device.target``): a string that starts with
    a backend's name and a colon (``"host:x86_64"``, ``"cuda:sm_80"``, ``"amdgpu:gfx90a"``) and
    that that backend's ``target_compile_impl`` builds for with no device, so that an image
    ``pyoffload.build_image(source, target=...)`` built loads on ``device``.  A remote backend may
    name another backend's target (the image is then built locally).  The default returns
    ``None``: the backend builds only through ``compile_impl``, with its device.
    """


@hookspec(firstresult=True)
def target_compiler_id_impl(target: str, compiler: str | None) -> str | None:
    """*Optional.* What identifies the toolchain that ``target_compile_impl`` would use for
    ``target`` with ``compiler`` (resolved path and version, target architecture): part of the
    build cache's key.  Called with no device and no driver initialised (``init_impl`` may not
    have run).  ``compiler`` is the caller's choice, a name on ``PATH`` or a path, or ``None``
    for the backend's default.  Raise ``InvalidArgumentError`` for a target this backend does
    not know, ``UnsupportedError`` for a compiler it cannot build with, ``OffloadError`` with
    ``HOST_TOOL_NOT_FOUND`` where the compiler is not installed.  The default returns ``None``:
    the backend builds nothing without a device.
    """


@hookspec(firstresult=True)
def target_compile_impl(target: str, source: str, options: tuple[str, ...], compiler: str | None) -> bytes | None:
    """*Optional.* Build ``source`` for ``target`` with ``compiler`` and return the image, with no
    device and no driver initialised (a framework's compile step in another process).

    As ``compile_impl`` otherwise: ``options`` after the backend's own defaults,
    ``CompileError`` with the compiler's messages, errors as ``target_compiler_id_impl``'s.  The
    generic layer calls ``target_compiler_id_impl`` first and caches the result on disk under
    the same key for ``pyoffload.build_image`` and ``Device.build_program``.  May block.  The
    default returns ``None`` (nothing built).
    """


@hookspec(firstresult=True)
def target_link_impl(
    target: str, sources: tuple[str, ...], options: tuple[str, ...], compiler: str | None
) -> bytes | None:
    """*Optional.* Compile each of ``sources`` as a translation unit of its own and link them into
    one image for ``target`` (a function one source declares and another defines is resolved by
    the link), with no device and no driver initialised: ``Device.build_program`` and
    ``pyoffload.build_image`` given a list of sources.

    As ``target_compile_impl`` otherwise (options after the backend's own, for every compile and
    the link; cached under a key of all the sources).  A compiler error is a ``CompileError``; a
    link that fails (a symbol no source defines) is a ``CompileError`` with errc
    ``LINK_FAILURE`` whose message names the symbol and whose ``build_log`` holds the linker's
    output (``CompileError.from_link_log``).  Added in HOOK_API 1.2.  The default returns
    ``None``: the backend links nothing without a device (``link_impl`` is asked next).
    """


@hookspec(firstresult=True)
def link_impl(device: Any, sources: tuple[str, ...], options: tuple[str, ...]) -> bytes | None:
    """*Optional.* ``target_link_impl`` with ``device``'s own toolchain (OpenCL:
    ``clCompileProgram`` per source, then ``clLinkProgram``): the image that ``load_binary_impl``
    loads.  Errors as ``target_link_impl``'s.  Added in HOOK_API 1.2.  The default returns
    ``None``: the backend cannot link separately compiled sources (``UNSUPPORTED``).
    """
