"""Sanitizer rows: the unit, host and OpenCL rows against the compiled modules built with
AddressSanitizer + UndefinedBehaviorSanitizer. docs/sanitizers.md has the why and the details.

Build: every file git knows of in the working tree (committed or not, untracked files that git
does not ignore) is copied to ``build/asan-tree`` and installed editable, with the opencl plugin,
into ``.venv-asan``, with ``CFLAGS``/``LDFLAGS`` = ``-fsanitize=address,undefined
-fno-omit-frame-pointer -g -O1``: whatever setup.py compiles is built that way, and every ``.so``
of the copy is checked for ASan instrumentation. The copy keeps the instrumented in-place ``.so``
files away from ``core/``, where the normal environments keep theirs. The build is redone only
when a file, the flags or the Python changed (a stamp in ``.venv-asan``); the first row pays for it.

Run: the Python of ``.venv-asan`` with libasan, libubsan and libstdc++ in ``LD_PRELOAD``,
``PYTHONMALLOC=malloc``, the options below, and every report written as a file under a fresh
directory (``log_path``), child processes' included. A row fails if pytest fails (a report aborts
the process that has it) or if any report was written; the reports are printed at the end.

Interface:

    python scripts/sanitize.py --row unit|host|opencl|opencl-2dev [--junitxml PATH] [pytest args...]
        build if needed, run one row; exit status 0 only if it passed with no report
    python scripts/sanitize.py --build
        build only (names the instrumented modules)
    python scripts/sanitize.py run ARGS...
        the launcher: build if needed, then run ``python ARGS...`` under the sanitizers with the
        instrumented environment's Python; this is what ``rows()`` gives matrix.py
    rows(conformance)   (import sanitize)
        asan-unit, asan-host, asan-opencl, asan-opencl-2dev in scripts/matrix.py's ``Row`` shape;
        pass matrix.py's own CONFORMANCE list (matrix.py picks the working directory by identity)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "asan-tree"
VENV = ROOT / ".venv-asan"
PY = VENV / "bin" / "python"
STAMP = VENV / "asan-build.stamp"
SUPPRESSIONS = {"asan": ROOT / "scripts" / "asan.supp", "ubsan": ROOT / "scripts" / "ubsan.supp"}
SAN_FLAGS = "-fsanitize=address,undefined -fno-omit-frame-pointer -g -O1"

# detect_leaks=0: CPython, numpy, pyopencl and PoCL keep memory until exit by design (interned
# objects, module state, the ICD's platform list, caches of compiled kernels); LeakSanitizer would
# report those at every exit of every process. Everything else is ASan's default (an error halts).
# abort_on_error=1: a report ends the process with SIGABRT, which pytest cannot mistake for a result.
ASAN_OPTIONS = "detect_leaks=0:abort_on_error=1"
UBSAN_OPTIONS = "print_stacktrace=1:halt_on_error=1:abort_on_error=1"

Row = tuple[str, dict[str, str], list[str], str | None, str, tuple[str, ...]]


def rows(conformance: list[str]) -> list[Row]:
    """The sanitizer rows, shaped as scripts/matrix.py's rows: (name, extra environment, pytest
    arguments, backend whose devices must appear, python, launcher)."""
    py = sys.executable
    launcher = (py, str(Path(__file__).resolve()), "run")
    out: list[Row] = [
        # the tests of the copy that was built, so that they and the code are one snapshot
        (
            "asan-unit",
            {"PYOFFLOAD_PLUGINS": "opencl", "POCL_DEVICES": "pthread pthread"},
            [str(TREE / "tests")],
            None,
            py,
            launcher,
        ),
        ("asan-host", {"PYOFFLOAD_PLUGINS": ""}, conformance, "host", py, launcher),
    ]
    if (ROOT / "plugins" / "opencl" / "pyproject.toml").exists():
        out.append(
            (
                "asan-opencl",
                {"PYOFFLOAD_PLUGINS": "opencl", "POCL_DEVICES": "pthread"},
                conformance,
                "opencl",
                py,
                launcher,
            )
        )
        out.append(
            (
                "asan-opencl-2dev",
                {"PYOFFLOAD_PLUGINS": "opencl", "POCL_DEVICES": "pthread pthread"},
                conformance,
                "opencl",
                py,
                launcher,
            )
        )
    return out


def _say(msg: str) -> None:
    print(f"sanitize: {msg}", file=sys.stderr, flush=True)


def _sources() -> list[str]:
    listed = (
        subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"], check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    return sorted(p for p in listed if p and (ROOT / p).is_file())  # a deleted, unstaged file is listed


def _digest(files: list[str]) -> str:
    h = hashlib.sha256()
    h.update(f"{SAN_FLAGS}\0{sys.version}\0{sys.base_prefix}\0".encode())
    for name in files:
        h.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    return h.hexdigest()


def _instrumented(path: Path) -> bool:
    syms = subprocess.run(["nm", "-D", "--undefined-only", str(path)], capture_output=True, text=True).stdout
    return "__asan_init" in syms or "__asan_version_mismatch_check" in syms


def build() -> None:
    """Copy the tree and install it instrumented into .venv-asan, unless the stamp says it is current."""
    TREE.parent.mkdir(parents=True, exist_ok=True)
    with open(TREE.parent / "asan-tree.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        files = _sources()
        digest = _digest(files)
        if PY.exists() and STAMP.exists() and STAMP.read_text() == digest:
            return
        _say(f"building instrumented modules in {TREE.relative_to(ROOT)} for {VENV.relative_to(ROOT)}")
        if TREE.exists():
            shutil.rmtree(TREE)
        for name in files:
            dst = TREE / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dst, follow_symlinks=False)
        cfg = VENV / "pyvenv.cfg"
        if not PY.exists() or "version = {}.{}.{}".format(*sys.version_info[:3]) not in cfg.read_text():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
            subprocess.run([str(PY), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True, capture_output=True)
        STAMP.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
        env.update(CFLAGS=SAN_FLAGS, CXXFLAGS=SAN_FLAGS, LDFLAGS=SAN_FLAGS)
        pip = subprocess.run(
            [str(PY), "-m", "pip", "install", "-q", "-e", f"{TREE}[test]", "-e", str(TREE / "plugins" / "opencl")],
            env=env,
            capture_output=True,
            text=True,
        )
        if pip.returncode:  # the build's warnings are noise unless it failed
            sys.stderr.write(pip.stdout + pip.stderr)
            raise SystemExit(f"sanitize: pip install failed with exit status {pip.returncode}")
        # PyTorch for the DLPack interop tests, where setup.sh installs it (best effort, as there).
        torch = re.search(r"pip install -q (torch==[^ ]+)", (ROOT / "scripts" / "setup.sh").read_text())
        if torch and subprocess.run([str(PY), "-m", "pip", "install", "-q", torch[1]], capture_output=True).returncode:
            _say(f"{torch[1]} not installable; the torch interop tests will skip")
        # As scripts/setup.sh does: byte-compile once, or every process compiles every module again.
        subprocess.run(
            [str(PY), "-m", "compileall", "-q", str(TREE / "core"), str(TREE / "plugins" / "opencl")],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        _install_hook()
        built = sorted(TREE.rglob("*.so"))
        plain = [p for p in built if not _instrumented(p)]
        if not built or plain:
            names = [str(p.relative_to(TREE)) for p in plain] or "no compiled module at all"
            raise SystemExit(f"sanitize: not instrumented: {names}")
        _say("instrumented: " + ", ".join(str(p.relative_to(TREE)) for p in built))
        STAMP.write_text(digest)


# gcc's libubsan, next to libasan, ignores log_path in UBSAN_OPTIONS and writes to stderr, which
# pytest captures and loses when the process aborts. This hook, run at the start of every process of
# .venv-asan (a .pth file), hands it the path through its own __sanitizer_set_report_path.
UBSAN_HOOK = '''"""Installed by scripts/sanitize.py into .venv-asan only: gives gcc's libubsan the log_path of
UBSAN_OPTIONS, which it ignores when AddressSanitizer is loaded too."""
import os


def _hook() -> None:
    path = [o[9:] for o in os.environ.get("UBSAN_OPTIONS", "").split(":") if o.startswith("log_path=")]
    lib = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if "libubsan" in p]
    if path and lib:
        import ctypes
        ctypes.CDLL(lib[0]).__sanitizer_set_report_path(path[-1].encode())


_hook()
'''


def _install_hook() -> None:
    purelib = subprocess.run(
        [str(PY), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "_pyoffload_ubsan_log.py").write_text(UBSAN_HOOK)
    Path(purelib, "_pyoffload_ubsan_log.pth").write_text("import _pyoffload_ubsan_log\n")


def _runtime(name: str) -> str:
    path = subprocess.run(
        ["gcc", f"-print-file-name={name}"], check=True, capture_output=True, text=True
    ).stdout.strip()
    if not os.path.isabs(path):
        raise SystemExit(f"sanitize: gcc does not know {name}")
    return os.path.realpath(path)


def sanitized_env(report_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("CFLAGS", "CXXFLAGS", "LDFLAGS", "PYTHONHOME"):
        env.pop(name, None)
    # libasan first: the interpreter is not instrumented, so ASan's runtime must be loaded before
    # anything else. libubsan: for UBSAN_HOOK to find it by path. libstdc++: ASan looks up the
    # real __cxa_throw when it starts; if libstdc++ is not loaded by then, the first C++ exception
    # (pyopencl raises its errors that way) fails a CHECK inside ASan's interceptor.
    preload = [_runtime("libasan.so"), _runtime("libubsan.so"), _runtime("libstdc++.so")]
    if env.get("LD_PRELOAD"):
        preload.append(env["LD_PRELOAD"])
    asan = ASAN_OPTIONS + f":log_path={report_dir}/asan"
    ubsan = UBSAN_OPTIONS + f":log_path={report_dir}/ubsan"
    if SUPPRESSIONS["asan"].exists():
        asan += f":suppressions={SUPPRESSIONS['asan']}"
    if SUPPRESSIONS["ubsan"].exists():
        ubsan += f":suppressions={SUPPRESSIONS['ubsan']}"
    # PYTHONMALLOC=malloc: every object from malloc, where ASan sees it; pymalloc's arenas would hide
    # an overflow or a use after free of a small object inside memory that ASan counts as allocated.
    env.update(LD_PRELOAD=":".join(preload), PYTHONMALLOC="malloc", ASAN_OPTIONS=asan, UBSAN_OPTIONS=ubsan)
    env["VIRTUAL_ENV"] = str(VENV)
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def run(argv: list[str], extra_env: dict[str, str] | None = None, cwd: str | None = None) -> int:
    """Run PY with argv under the sanitizers; non-zero if it failed or any report was written."""
    build()
    with tempfile.TemporaryDirectory(prefix="pyoffload-asan-") as reports:
        env = sanitized_env(Path(reports))
        env.update(extra_env or {})
        rc = subprocess.run([str(PY), *argv], env=env, cwd=cwd).returncode
        found = sorted(Path(reports).iterdir())
        for report in found:
            sys.stderr.write(f"\n=== sanitizer report {report.name}\n{report.read_text(errors='replace')}")
        if rc < 0:
            _say(f"killed by signal {-rc}")
            rc = 128 - rc
        if found:
            _say(f"{len(found)} sanitizer report(s): the row fails")
            return rc or 1
        return rc


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"]:
        return run(argv[1:])
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="store_true", help="build only")
    parser.add_argument("--row", choices=["unit", "host", "opencl", "opencl-2dev"])
    parser.add_argument("--junitxml")
    args, extra = parser.parse_known_args(argv)
    if args.build:
        build()
        return 0
    if not args.row:
        parser.error("--row or --build")
    conformance = ["-p", "pyoffload.testing", "--pyargs", "pyoffload.conformance"]
    name, env_extra, pytest_args, _, _, _ = next(r for r in rows(conformance) if r[0] == f"asan-{args.row}")
    cmd = ["-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args, *extra]
    if args.junitxml:
        cmd.append(f"--junitxml={os.path.abspath(args.junitxml)}")
    cwd = tempfile.gettempdir() if pytest_args is conformance else str(ROOT)  # as matrix.py does
    rc = run(cmd, env_extra, cwd)
    print(f"{name}: {'clean' if rc == 0 else f'FAILED (exit status {rc})'}", flush=True)
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
