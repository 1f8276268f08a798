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
    with :data:`SOURCE_OPTIONS`.

Anything else raises ``InvalidBinaryError`` before the driver sees it.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from pyoffload.backend import CompileError, InvalidBinaryError, UnsupportedError

from .handles import OclContext, OclDevice

# OpenCL C 2.0 gives program-scope variables and generic pointers; kernel-arg-info makes
# clGetKernelArgInfo work (signatures and the hidden state parameter need it).
SOURCE_OPTIONS = ("-cl-std=CL2.0", "-cl-kernel-arg-info")
SOURCE_OPTIONS_CL12 = ("-cl-std=CL1.2", "-cl-kernel-arg-info")
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


def build(context: OclContext, device: OclDevice, image: bytes) -> tuple[Any, str]:
    """Create and build a program for ``device``; return ``(cl.Program, format)``."""
    fmt = detect_format(image)
    import pyopencl as cl

    devices = [device.cl_device]
    if fmt == "spir":
        check_spir_target(image, device)
        create = lambda: cl._cl._Program(context.cl_context, devices, [bytes(image)])  # noqa: E731
        options = SPIR_OPTIONS
    elif fmt == "binary":
        create = lambda: cl._cl._Program(context.cl_context, devices, [bytes(image)])  # noqa: E731
        options = ("-cl-kernel-arg-info",)  # PoCL keeps arg info in its binaries only then
    elif fmt == "spirv":
        if not device.il_version:
            raise UnsupportedError(f"device {device.name!r} does not accept SPIR-V (no IL version)")
        create = lambda: cl._cl._create_program_with_il(context.cl_context, bytes(image))  # noqa: E731
        options = ("-cl-kernel-arg-info",)
    else:
        text = image.rstrip(b"\x00").decode("utf-8")
        create = lambda: cl._cl._Program(context.cl_context, text)  # noqa: E731
        options = SOURCE_OPTIONS if device.svm_caps else SOURCE_OPTIONS_CL12

    try:
        raw = create()
    except cl.Error as exc:
        if fmt == "source":
            raise
        # The driver refused the bytes themselves (wrong device, corrupt binary).
        raise InvalidBinaryError(f"the OpenCL driver rejected the {fmt} image: {exc}") from exc
    try:
        with warnings.catch_warnings():
            # pyopencl warns about non-empty build logs; the log is not an error here.
            warnings.simplefilter("ignore")
            raw.build(" ".join(options).encode(), devices)
    except cl.Error as exc:
        log = _build_log(raw, device) or str(exc)
        first = next((line for line in log.splitlines() if "error" in line), log.splitlines()[0] if log else "")
        raise CompileError(
            f"building the {fmt} image for {device.name!r} failed: {first.strip()}", build_log=log
        ) from exc
    return cl.Program(raw), fmt


def _build_log(raw: Any, device: OclDevice) -> str:
    import pyopencl as cl

    try:
        return str(raw.get_build_info(device.cl_device, cl.program_build_info.LOG)).strip()
    except cl.Error:
        return ""
