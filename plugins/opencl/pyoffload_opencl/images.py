"""Device images: recognise the format from the bytes, then build with the driver.

Formats, checked in this order:

``spir``
    LLVM bitcode (magic ``BC\\xc0\\xde``, or the bitcode wrapper ``0x0B17C0DE``): SPIR 1.2, built
    with ``-x spir -spir-std=1.2`` (``cl_khr_spir``).  The target triple must match the device's
    address width: PoCL 3.1 crashes on 32-bit ``spir`` bitcode on a 64-bit device, so that is
    rejected here.
``spirv``
    SPIR-V (magic ``0x07230203``), for devices that report an IL version.
``binary``
    A device binary: PoCL's ``poclbin``, ELF (Intel, AMD) or PTX text (NVIDIA), loaded with
    ``clCreateProgramWithBinary``.
``source``
    OpenCL C source text: UTF-8 without NUL bytes that declares at least one kernel.  Built
    with :data:`SOURCE_OPTIONS`.  On a device without program-scope global variables (PoCL 3.1
    gives each kernel its own copy of them) source declaring writable ones is refused.

Anything else raises ``InvalidBinaryError`` before the driver sees it.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, cast

from pyoffload.backend import CompileError, InvalidBinaryError, UnsupportedError

from . import poclbin
from .handles import OclDevice

# OpenCL C 2.0 gives program-scope variables and generic pointers; kernel-arg-info makes
# clGetKernelArgInfo work (signatures and the hidden state parameter need it).
SOURCE_OPTIONS = ("-cl-std=CL2.0", "-cl-kernel-arg-info")
SPIR_OPTIONS = ("-x", "spir", "-spir-std=1.2", "-cl-kernel-arg-info")

_BITCODE_MAGIC = b"BC\xc0\xde"
_BITCODE_WRAPPER_MAGIC = (0x0B17C0DE).to_bytes(4, "little")
_SPIRV_MAGIC = (0x07230203).to_bytes(4, "little")
_SPIRV_MAGIC_BE = (0x07230203).to_bytes(4, "big")
_POCL_MAGIC = b"poclbin\x00"
_ELF_MAGIC = b"\x7fELF"

_KERNEL_RE = re.compile(r"(?<![\w$])(__)?kernel\b")
_PTX_RE = re.compile(r"^\s*\.version\s+\d+\.\d+", re.MULTILINE)
_SPIR_TRIPLE_RE = re.compile(rb"(spir64|spir)-[a-z0-9_]*-[a-z0-9_]*")


def detect_format(image: bytes) -> str:
    """Return ``"spir"``, ``"spirv"``, ``"binary"`` or ``"source"``; raise InvalidBinaryError."""
    head = image[:8]
    if head.startswith(_BITCODE_MAGIC) or head.startswith(_BITCODE_WRAPPER_MAGIC):
        return "spir"
    if head.startswith(_SPIRV_MAGIC) or head.startswith(_SPIRV_MAGIC_BE):
        return "spirv"
    if head.startswith(_POCL_MAGIC) or head.startswith(_ELF_MAGIC):
        return "binary"
    text = _as_text(image)
    if text is not None:
        if _PTX_RE.search(text) and ".target" in text:
            return "binary"
        if _KERNEL_RE.search(text):
            return "source"
    raise InvalidBinaryError(
        "not an OpenCL image: expected OpenCL C source declaring a kernel, SPIR 1.2 LLVM "
        "bitcode, SPIR-V, or a device program binary (poclbin, ELF, PTX); "
        f"got {len(image)} bytes starting {bytes(image[:8])!r}"
    )


def _as_text(image: bytes) -> str | None:
    body = image.rstrip(b"\x00")  # a C string's terminator is harmless
    if not body or b"\x00" in body:
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def check_spir_target(image: bytes, device: OclDevice) -> None:
    """Refuse bitcode whose target triple does not match the device's address width."""
    match = _SPIR_TRIPLE_RE.search(image)
    if match is None:
        return  # triple not stored as plain text (old bitcode): let the driver decide
    arch = match.group(1).decode()
    want = "spir64" if device.address_bits == 64 else "spir"
    if arch != want:
        raise InvalidBinaryError(
            f"SPIR bitcode targets {arch!r} but device {device.name!r} has "
            f"{device.address_bits}-bit addresses and needs {want!r}"
        )


# Program-scope variables in OpenCL C source: comments and literals, preprocessor lines and
# attributes are dropped first; what is left at file scope is split into declarations.
_NOISE_RE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', re.S)
_DIRECTIVE_RE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
_ATTRIBUTE_RE = re.compile(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)")
_FUNCTION_BODY_RE = re.compile(r"\)[^;{}]*\{\}")
_CONSTANT_RE = re.compile(r"\b(?:__)?constant\b")
_STATIC_RE = re.compile(r"\bstatic\b([^;]*)")
_DECLARATOR_RE = re.compile(r"(\w+)\s*(?:\[[^\]]*\]\s*)*(?:=.*)?$", re.S)


def program_scope_variables(source: str) -> list[str]:
    """The writable program-scope variables ``source`` declares: at file scope, or ``static``
    inside a function (both live in the global address space in OpenCL C 2.0)."""
    text = _ATTRIBUTE_RE.sub(" ", _DIRECTIVE_RE.sub("", _NOISE_RE.sub(" ", source)))
    top: list[str] = []
    body: list[str] = []
    depth = 0
    for ch in text:  # file scope with every brace body collapsed to "{}"; the bodies apart
        if ch == "{":
            depth += 1
            if depth == 1:
                top.append("{}")
                continue
        elif ch == "}":
            depth -= 1
            if depth == 0:
                body.append(";")
                continue
        (body if depth else top).append(ch)
    declarations = _FUNCTION_BODY_RE.sub(");", "".join(top)).split(";")
    declarations += [m.group(1) for m in _STATIC_RE.finditer("".join(body))]
    names = []
    for decl in declarations:
        decl = decl.strip()
        head = decl.split("=", 1)[0].rstrip()
        if not decl or decl.startswith("typedef") or "(" in head or head.endswith("{}") or _CONSTANT_RE.search(head):
            continue  # a type, a function, or a read-only constant
        for part in re.split(r",(?![^()]*\))", decl):
            match = _DECLARATOR_RE.search(part.strip())
            if match:
                names.append(match.group(1))
    return names


def check_source(device: OclDevice, source: str) -> None:
    """Refuse writable program-scope variables where the device would give every kernel its
    own copy of them: a value one kernel writes would silently be invisible to the others."""
    names = [] if device.program_scope_globals else program_scope_variables(source)
    if names:
        raise UnsupportedError(
            f"program-scope variable(s) {', '.join(map(repr, names))}: OpenCL device {device.name!r} "
            "gives each kernel its own copy (CL_DEVICE_MAX_GLOBAL_VARIABLE_SIZE is 0); keep program-wide "
            "state in the program state block (pyoffload_state) instead"
        )


def build(context: Any, device: OclDevice, image: bytes) -> Any:
    """Create and build a ``cl.Program`` for ``device`` from an image of any format."""
    fmt = detect_format(image)
    import pyopencl as cl

    devices = [device.cl_device]
    options: tuple[str, ...] = ("-cl-kernel-arg-info",)  # PoCL keeps arg info in binaries only then
    if fmt == "source":
        return build_source(context, device, image.rstrip(b"\x00").decode("utf-8"), ())
    if fmt == "spir":
        check_spir_target(image, device)
        options = SPIR_OPTIONS
    elif image.startswith(_POCL_MAGIC):
        poclbin.check(image)  # PoCL trusts every length in it: a corrupt one would abort the process
    elif fmt == "spirv" and not device.il_version:
        raise UnsupportedError(f"device {device.name!r} does not accept SPIR-V (no IL version)")
    try:
        if fmt == "spirv":
            raw = cl._cl._create_program_with_il(context, bytes(image))
        else:
            raw = cl._cl._Program(context, devices, [bytes(image)])
    except cl.Error as exc:  # the driver refused the bytes themselves (wrong device, corrupt)
        raise InvalidBinaryError(f"the OpenCL driver rejected the {fmt} image: {exc}") from exc
    return _build(raw, device, fmt, options)


def build_source(context: Any, device: OclDevice, source: str, options: tuple[str, ...]) -> Any:
    import pyopencl as cl

    # Built before the program-scope check: that check only reads declarations, and a source
    # that does not compile must report the compiler's error, not a guess from a parse of it.
    program = _build(cl._cl._Program(context, source), device, "source", SOURCE_OPTIONS + tuple(options))
    check_source(device, source)
    return program


def _build(raw: Any, device: OclDevice, fmt: str, options: tuple[str, ...]) -> Any:
    import pyopencl as cl

    try:
        with warnings.catch_warnings():
            # pyopencl warns about non-empty build logs; the log is not an error here.
            warnings.simplefilter("ignore")
            raw.build(" ".join(options).encode(), [device.cl_device])
    except cl.Error as exc:
        try:
            log = str(raw.get_build_info(device.cl_device, cl.program_build_info.LOG)).strip()
        except cl.Error:
            log = ""
        raise CompileError.from_log(f"building the {fmt} image for {device.name!r} failed", log or str(exc)) from exc
    return cl.Program(raw)


_CL_PROGRAM_BUILD_LOG = 0x1183


def link_sources(device: OclDevice, sources: tuple[str, ...], options: tuple[str, ...]) -> bytes:
    """``clCompileProgram`` for each of ``sources``, then ``clLinkProgram`` of them into one
    device binary (its bytes).  The link goes through the C API: pyopencl's ``link_program``
    drops the program object a failed link returns, and with it the log that names the undefined
    symbol."""
    import pyopencl as cl

    context = cl.Context([device.cl_device])
    compiled = []
    for i, source in enumerate(sources):
        raw = cl._cl._Program(context, source)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pyopencl warns about non-empty logs
                raw.compile(" ".join(SOURCE_OPTIONS + tuple(options)).encode(), [device.cl_device])
        except cl.Error as exc:
            log = str(raw.get_build_info(device.cl_device, cl.program_build_info.LOG)).strip()
            raise CompileError.from_log(f"compiling source {i} for {device.name!r} failed", log or str(exc)) from exc
        check_source(device, source)
        compiled.append(raw)
    linked = _link(context, device, compiled, " ".join(options), sources)
    binaries = cast("list[bytes]", cl.Program(linked).get_info(cl.program_info.BINARIES))
    return bytes(binaries[0])


def _link(context: Any, device: OclDevice, programs: list[Any], options: str, sources: tuple[str, ...]) -> Any:
    import ctypes
    import ctypes.util

    import pyopencl as cl

    lib = ctypes.CDLL(ctypes.util.find_library("OpenCL") or "libOpenCL.so.1")
    link = lib.clLinkProgram
    link.restype = ctypes.c_void_p
    link.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_char_p,
        ctypes.c_uint,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int),
    ]
    devices = (ctypes.c_void_p * 1)(device.cl_device.int_ptr)
    inputs = (ctypes.c_void_p * len(programs))(*(p.int_ptr for p in programs))
    status = ctypes.c_int(0)
    handle = link(
        context.int_ptr, 1, devices, options.encode(), len(programs), inputs, None, None, ctypes.byref(status)
    )
    if status.value == 0 and handle:
        return cl._cl._Program.from_int_ptr(handle, retain=False)
    log = ""
    if handle:  # a failed link still returns a program object that holds the log
        info = lib.clGetProgramBuildInfo
        info.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_uint,
            ctypes.c_size_t,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_size_t),
        ]
        size = ctypes.c_size_t(0)
        if info(handle, devices[0], _CL_PROGRAM_BUILD_LOG, 0, None, ctypes.byref(size)) == 0 and size.value:
            buf = ctypes.create_string_buffer(size.value)
            if info(handle, devices[0], _CL_PROGRAM_BUILD_LOG, size.value, buf, None) == 0:
                log = buf.value.decode(errors="replace").strip()
        lib.clReleaseProgram.argtypes = [ctypes.c_void_p]
        lib.clReleaseProgram(handle)
    if not log:
        # Some drivers (PoCL 3.1) return no program, hence no log: name what the sources declare
        # and none defines, which is what a link of OpenCL C can miss.
        missing = undefined_functions(sources)
        log = "clLinkProgram returned no log" + (
            f"; undefined symbol(s), declared but defined in no source: {', '.join(missing)}" if missing else ""
        )
    raise CompileError.from_link_log(
        f"linking {len(programs)} sources for {device.name!r} failed (clLinkProgram: {status.value})", log
    )


_PROTOTYPE_RE = re.compile(r"\b(\w+)\s*\([^;{}()]*(?:\([^()]*\)[^;{}()]*)*\)\s*(;|\{)")


def undefined_functions(sources: tuple[str, ...]) -> list[str]:
    """Functions that some of ``sources`` declare (a prototype at file scope) and none defines."""
    declared: dict[str, None] = {}
    defined: set[str] = set()
    for source in sources:
        text = _ATTRIBUTE_RE.sub(" ", _DIRECTIVE_RE.sub("", _NOISE_RE.sub(" ", source)))
        depth = 0
        top: list[str] = []
        for ch in text:  # file scope only, bodies collapsed to "{"
            if ch == "{":
                depth += 1
                if depth == 1:
                    top.append("{")
                continue
            if ch == "}":
                depth -= 1
                continue
            if depth == 0:
                top.append(ch)
        for match in _PROTOTYPE_RE.finditer("".join(top)):
            if match.group(2) == "{":
                defined.add(match.group(1))
            else:
                declared.setdefault(match.group(1))
    return [name for name in declared if name not in defined]
