"""Building host images: C source to an ELF shared object with the system's ``cc``."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from importlib import resources

from ..errors import CompileError, Errc, OffloadError

DEFAULT_FLAGS = ("-shared", "-fPIC", "-g", "-O2")
# Where ``pyoffload_host.h`` lies (this package): every build gets it on the include path.
INCLUDE_DIR = os.path.dirname(os.path.abspath(__file__))


def find_cc() -> str | None:
    """The C compiler builds use: ``$CC``, else ``cc``, ``gcc`` or ``clang`` on ``PATH``."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def compiler_id() -> str | None:
    """The compiler's resolved path and version line, and a digest of the kernel header sources
    include (the build cache's key: a changed header must not reuse old images); ``None`` without
    a compiler."""
    compiler = find_cc()
    if not compiler:
        return None
    return f"{_identify(shutil.which(compiler) or compiler)} header {_header_digest()}"


@functools.cache
def _header_digest() -> str:
    header = resources.files(__package__).joinpath("pyoffload_host.h").read_bytes()
    return hashlib.sha256(header).hexdigest()[:16]


@functools.cache
def _identify(path: str) -> str:
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True)
    except OSError:
        return path
    lines = proc.stdout.splitlines()
    return f"{os.path.realpath(path)} {lines[0] if lines else ''}".strip()


def compile_c(source: str, flags: tuple[str, ...] = DEFAULT_FLAGS, cc: str | None = None) -> bytes:
    """Compile C ``source`` into a shared object and return its bytes.

    ``-g`` (on by default) keeps DWARF, from which the host backend reads kernel signatures and
    checks launch arguments.  ``pyoffload_host.h`` (data-parallel kernels) is on the include path.
    A compiler error raises ``CompileError`` with the compiler's output.
    """
    compiler = cc or find_cc()
    if not compiler:
        raise OffloadError("no C compiler found (set CC or install cc)", Errc.HOST_TOOL_NOT_FOUND)
    with tempfile.TemporaryDirectory(prefix="pyoffload-cc-") as tmp:
        src = os.path.join(tmp, "image.c")
        out = os.path.join(tmp, "image.so")
        with open(src, "w") as f:
            f.write(source)
        proc = subprocess.run([compiler, "-I", INCLUDE_DIR, *flags, "-o", out, src], capture_output=True, text=True)
        if proc.returncode != 0:
            # The temporary directory is gone once this returns: name the file as the user knows it.
            log = proc.stderr.replace(tmp + os.sep, "")
            raise CompileError.from_log(f"{compiler} failed with exit status {proc.returncode}", log)
        with open(out, "rb") as f:
            return f.read()


@functools.cache
def packaged_image(name: str) -> bytes:
    """Build one of the C programs shipped in this package (``conformance_kernels`` ...)."""
    source = resources.files(__package__).joinpath(f"{name}.c").read_text()
    return compile_c(source)
