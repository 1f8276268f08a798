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

# -g: DWARF gives kernel signatures (parameter types, and the launch-context parameter).  Only the
# declarations are read, never variable locations or columns, so column numbers are left out and,
# with GCC, variable tracking too (see compile_c).
DEFAULT_FLAGS = ("-shared", "-fPIC", "-O2", "-g", "-gno-column-info")
# GCC's variable tracking (locations of local variables at -O2) is the costliest part of its -g:
# about a tenth of the build of a small program, for nothing the backend reads.  It goes before
# the flags, so a user who debugs kernels turns it back on with -fvar-tracking.  Clang has no
# such pass and warns about the flag (an error under -Werror), so it gets none.
GCC_DEBUG_FLAGS = ("-fno-var-tracking",)
# Where ``pyoffload_host.h`` lies (this package): every build gets it on the include path.
INCLUDE_DIR = os.path.dirname(os.path.abspath(__file__))


def find_cc() -> str | None:
    """The C compiler builds use: ``$CC``, else ``cc``, ``gcc`` or ``clang`` on ``PATH``."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def resolve(compiler: str | None) -> str:
    """The path of the C compiler a build uses: ``compiler`` (a name on ``PATH`` or a path), or
    ``find_cc()``'s; ``HOST_TOOL_NOT_FOUND`` where there is none."""
    found = (
        find_cc() if compiler is None else shutil.which(compiler) or (compiler if os.path.isfile(compiler) else None)
    )
    if not found:
        what = (
            "no C compiler found (set CC or install cc)" if compiler is None else f"C compiler {compiler!r} not found"
        )
        raise OffloadError(what, Errc.HOST_TOOL_NOT_FOUND)
    return found


def compiler_id(compiler: str | None = None) -> str | None:
    """The compiler's resolved path and version line, and a digest of the kernel header sources
    include (the build cache's key: a changed header must not reuse old images); ``None`` without
    a compiler (``compiler=None``: the default one; a named one that is missing raises)."""
    if compiler is None and not find_cc():
        return None
    found = resolve(compiler)
    return f"{_identify(shutil.which(found) or found)} header {_header_digest()}"


@functools.cache
def _header_digest() -> str:
    header = resources.files(__package__).joinpath("pyoffload_host.h").read_bytes()
    return hashlib.sha256(header).hexdigest()[:16]


@functools.cache
def _version(path: str) -> str | None:
    """What ``path --version`` prints; ``None`` where it cannot run."""
    try:
        return subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    except OSError:
        return None


def _identify(path: str) -> str:
    version = _version(path)
    if version is None:
        return path
    lines = version.splitlines()
    return f"{os.path.realpath(path)} {lines[0] if lines else ''}".strip()


def _compiler_flags(compiler: str) -> tuple[str, ...]:
    """Flags for this compiler alone: GCC's debug-cost cuts.  GCC names its maker in --version
    (its first line may read just ``cc (Debian 12.2.0-14) 12.2.0``)."""
    version = _version(shutil.which(compiler) or compiler)
    return GCC_DEBUG_FLAGS if version and "Free Software Foundation" in version else ()


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
        command = [compiler, "-I", INCLUDE_DIR, *_compiler_flags(compiler), *flags, "-o", out, src]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            # The temporary directory is gone once this returns: name the file as the user knows it.
            log = proc.stderr.replace(tmp + os.sep, "")
            raise CompileError.from_log(f"{compiler} failed with exit status {proc.returncode}", log)
        with open(out, "rb") as f:
            return f.read()


def link_c(sources: tuple[str, ...], flags: tuple[str, ...] = DEFAULT_FLAGS, cc: str | None = None) -> bytes:
    """Compile each of ``sources`` into an object of its own (``cc -c``) and link the objects into
    one shared object, every symbol resolved at link time (``-Wl,--no-undefined``: a function no
    source defines fails here, not when the image loads); its bytes.

    ``flags`` go to every compile and to the link.  A compiler error raises ``CompileError``
    naming the source (``source<i>.c``); a link error raises ``CompileError`` with errc
    ``LINK_FAILURE``, naming the undefined symbol, with the linker's output in ``build_log``.
    """
    compiler = cc or find_cc()
    if not compiler:
        raise OffloadError("no C compiler found (set CC or install cc)", Errc.HOST_TOOL_NOT_FOUND)
    own = _compiler_flags(compiler)
    compile_flags = tuple(f for f in flags if f != "-shared")
    with tempfile.TemporaryDirectory(prefix="pyoffload-cc-") as tmp:
        objects = []
        for i, source in enumerate(sources):
            src = os.path.join(tmp, f"source{i}.c")
            obj = os.path.join(tmp, f"source{i}.o")
            with open(src, "w") as text:
                text.write(source)
            command = [compiler, "-I", INCLUDE_DIR, *own, *compile_flags, "-c", "-o", obj, src]
            proc = subprocess.run(command, capture_output=True, text=True)
            if proc.returncode != 0:
                log = proc.stderr.replace(tmp + os.sep, "")
                raise CompileError.from_log(f"{compiler} failed on source {i} with exit status {proc.returncode}", log)
            objects.append(obj)
        out = os.path.join(tmp, "image.so")
        command = [compiler, *own, *flags, "-Wl,--no-undefined", "-o", out, *objects]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            log = proc.stderr.replace(tmp + os.sep, "")
            raise CompileError.from_link_log(
                f"linking {len(sources)} sources with {compiler} failed (exit status {proc.returncode})", log
            )
        with open(out, "rb") as image:
            return image.read()


@functools.cache
def packaged_image(name: str) -> bytes:
    """Build one of the C programs shipped in this package (``conformance_kernels`` ...)."""
    source = resources.files(__package__).joinpath(f"{name}.c").read_text()
    return compile_c(source)
