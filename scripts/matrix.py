"""Run the unit tests and the conformance matrix; print a table per row and a total line.

Rows: unit tests; conformance on host only; OpenCL with one PoCL device; OpenCL with two PoCL
devices; the CUDA and AMDGPU backends against their driver-level fakes; the MPI backend under
``mpirun -n 3`` on loopback (pytest on rank 0; the host and PoCL devices of ranks 1 and 2), again
as between machines (``mpi-tcp``: TCP only, no shared memory, no cross-memory attach), and
examples/arraylib's tests on those remote devices over the same path (``arraylib-mpi``), and the
conformance suite with every rank in a network namespace of its own (``mpi-netns``, root only:
scripts/netns_mpirun.py); the
core, host and OpenCL rows again on Python 3.12 and 3.13; again as installed without a C compiler
(``*-pure``: the same source, interpreted); under AddressSanitizer + UBSan (``asan-*``,
scripts/sanitize.py); and ``demo-no-pyenv``, the README's demo
command with the extra interpreters hidden, as on a stock Debian machine.  A row fails if pytest
fails, if it ran no test, or if the backend it is about contributed no device.  The rows of an
interpreter that set-up found nowhere (no ``.venv-3.X``) are reported as not run, with the reason,
and fail nothing.

Output has no colour codes unless the matrix itself writes to a terminal: ranks under ``mpirun``
get a pseudo-terminal and would colour theirs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = ["-p", "pyoffload.testing", "--pyargs", "pyoffload.conformance"]
PLUGINS = ROOT / "scripts" / "pytest_plugins"  # row_report, loaded into every row


Row = tuple[str, dict[str, str], list[str], str | None, str, tuple[str, ...]]
# The last field is what runs ``-m pytest ...``: the row's python, or a launcher ending in it.
ROW_TIMEOUT_S = 1200  # the slowest row takes under 2 minutes here
OTHER_PYTHONS = ("3.12", "3.13")  # besides the main environment's 3.11: core and OpenCL rows


def rows() -> list[Row]:
    """(name, extra environment, pytest arguments, backend whose devices must appear, python, launcher)."""
    py = sys.executable
    out: list[tuple[str, dict[str, str], list[str], str | None]] = [
        # the core's own tests use the host backend, OpenCL and their own test backends (the
        # reliability tests' twin joins the allow-list in-process, where it is registered)
        ("unit", {"PYOFFLOAD_PLUGINS": "opencl", "POCL_DEVICES": "pthread pthread"}, [str(ROOT / "tests")], None),
    ]
    # each plugin's own tests in a session of their own: their module names may coincide
    for tests in sorted((ROOT / "plugins").glob("*/tests")):
        if tests.is_dir():
            out.append((f"unit-{tests.parent.name}", {"POCL_DEVICES": "pthread pthread"}, [str(tests)], None))
    out.append(("host", {"PYOFFLOAD_PLUGINS": ""}, CONFORMANCE, "host"))
    plugins = {p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").exists()}
    if "opencl" in plugins:
        out.append(("opencl-1dev", {"PYOFFLOAD_PLUGINS": "opencl", "POCL_DEVICES": "pthread"}, CONFORMANCE, "opencl"))
        out.append(
            ("opencl-2dev", {"PYOFFLOAD_PLUGINS": "opencl", "POCL_DEVICES": "pthread pthread"}, CONFORMANCE, "opencl")
        )
    if "cuda" in plugins:
        out.append(("cuda-fake", {"PYOFFLOAD_PLUGINS": "cuda", "PYOFFLOAD_CUDA_DRIVER": "fake"}, CONFORMANCE, "cuda"))
    if "amdgpu" in plugins:
        out.append(
            ("amdgpu-fake", {"PYOFFLOAD_PLUGINS": "amdgpu", "PYOFFLOAD_AMDGPU_DRIVER": "fake"}, CONFORMANCE, "amdgpu")
        )
    full: list[Row] = [(*row, py, (py,)) for row in out]
    if "mpi" in plugins and shutil.which("mpirun"):
        # Loopback TCP and shared memory only; the job's ranks outnumber the cores, hence --oversubscribe.
        mpirun = (
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "--mca",
            "mtl",
            "^ofi,psm,psm2",
            "--mca",
            "btl",
            "tcp,self,vader",
            "--mca",
            "btl_tcp_if_include",
            "lo",
            "-n",
            "3",
        )
        full.append(
            (
                "mpi",
                {
                    "PYOFFLOAD_PLUGINS": "mpi",
                    "PYOFFLOAD_MPI_SERVE": "opencl",
                    "POCL_DEVICES": "pthread",
                    "PYOFFLOAD_MPI_TIMEOUT": "30",
                },
                CONFORMANCE,
                "mpi",
                py,
                (*mpirun, py, "-m", "pyoffload_mpi"),
            )
        )
        # The multi-machine path: TCP only (no shared-memory transport) and no cross-memory attach,
        # so every byte between ranks travels as it would between nodes; and the PoCL devices'
        # memory staged as a GPU's must be (PYOFFLOAD_MPI_IN_PLACE=0: the `mpi` row covers the
        # in-place path, where the servers address that memory themselves).
        # ob1 named: a PML of its own (UCX) would bring its own shared-memory transports.
        tcp_only = (
            *(a if a != "tcp,self,vader" else "tcp,self" for a in mpirun[:-2]),
            "--mca",
            "pml",
            "ob1",
            *mpirun[-2:],
        )
        tcp_env = {
            "PYOFFLOAD_PLUGINS": "mpi",
            "PYOFFLOAD_MPI_SERVE": "opencl",
            "PYOFFLOAD_MPI_CMA": "0",
            "PYOFFLOAD_MPI_IN_PLACE": "0",
            "POCL_DEVICES": "pthread",
            "PYOFFLOAD_MPI_TIMEOUT": "30",
        }
        full.append(("mpi-tcp", tcp_env, CONFORMANCE, "mpi", py, (*tcp_only, py, "-m", "pyoffload_mpi")))
        # Each rank in a network namespace of its own, joined by veth pairs (scripts/netns_mpirun.py,
        # root only): no rank shares a loopback or a host name with another.
        netns = (
            py,
            str(ROOT / "scripts" / "netns_mpirun.py"),
            "--",
            *tcp_only[: tcp_only.index("btl_tcp_if_include") - 1],  # (the script names the interface)
            *tcp_only[tcp_only.index("btl_tcp_if_include") + 2 :],
            py,
            "-m",
            "pyoffload_mpi",
        )
        full.append(("mpi-netns", tcp_env, CONFORMANCE, "mpi", py, netns))
        # A framework on other ranks' devices: examples/arraylib's tests, every remote device (each
        # server's host and PoCL device) and every pair of them, over the same TCP-only path.
        full.append(
            (
                "arraylib-mpi",
                tcp_env,
                [str(ROOT / "tests" / "test_examples.py")],
                "mpi",
                py,
                (*tcp_only, py, "-m", "pyoffload_mpi"),
            )
        )
    full.append(("demo-no-pyenv", {}, [str(ROOT / "scripts" / "tests")], None, py, (py,)))
    for version in OTHER_PYTHONS:
        other = str(ROOT / f".venv-{version}" / "bin" / "python")
        tag = "py" + version.replace(".", "")
        full += [
            (f"unit-{tag}", out[0][1], out[0][2], None, other, (other,)),
            (f"host-{tag}", {"PYOFFLOAD_PLUGINS": ""}, CONFORMANCE, "host", other, (other,)),
        ]
        if "opencl" in plugins:
            full.append(
                (
                    f"opencl-2dev-{tag}",
                    {"PYOFFLOAD_PLUGINS": "opencl", "POCL_DEVICES": "pthread pthread"},
                    CONFORMANCE,
                    "opencl",
                    other,
                    (other,),
                )
            )
    # Installed without a C compiler: every module interpreted (setup.sh makes .venv-pure).
    pure = str(ROOT / ".venv-pure" / "bin" / "python")
    full += [
        ("unit-pure", out[0][1], out[0][2], None, pure, (pure,)),
        ("host-pure", {"PYOFFLOAD_PLUGINS": ""}, CONFORMANCE, "host", pure, (pure,)),
    ]
    if "opencl" in plugins:
        full.append(
            (
                "opencl-2dev-pure",
                {"PYOFFLOAD_PLUGINS": "opencl", "POCL_DEVICES": "pthread pthread"},
                CONFORMANCE,
                "opencl",
                pure,
                (pure,),
            )
        )
    import sanitize  # scripts/sanitize.py: the AddressSanitizer + UBSan rows

    full += sanitize.rows(CONFORMANCE)
    return full


def not_run(name: str, python: str) -> str:
    """Why a row cannot run here ("" if it can): its interpreter's environment is missing, or (the
    ``mpi-netns`` row) network namespaces cannot be made."""
    if name == "mpi-netns":
        import netns_mpirun  # scripts/netns_mpirun.py

        reason = netns_mpirun.unavailable()
        return f"not run: {reason}" if reason else ""
    if python == sys.executable or Path(python).exists():
        return ""
    if Path(python).parent.parent.name == ".venv-pure":
        return "not run: no Python 3.12 or 3.13 here for the install without a compiler (.venv-pure)"
    version = Path(python).parent.parent.name.removeprefix(".venv-")
    return (
        f"not run: no Python {version} here (set-up makes {Path(python).parent.parent.name} where "
        f"pyenv or python{version} provides it)"
    )


def colour_options() -> tuple[dict[str, str], list[str]]:
    """Colour only on a terminal: the environment and pytest options of every row."""
    if sys.stdout.isatty():
        return {}, []
    return {"NO_COLOR": "1", "PY_COLORS": "0", "PYTHON_COLORS": "0"}, ["--color=no"]


def died_in(running: Path) -> str:
    """For a row that ended without a result: the test it was running, as written by the
    row_report plugin ("" if none had started)."""
    try:
        nodeid = running.read_text().strip()
    except OSError:
        return ""
    return f", in {nodeid}" if nodeid else ""


def count(junit: Path, backend: str | None) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0, "backend_tests": 0}
    if not junit.exists():
        return counts
    for case in ET.parse(junit).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        if "failure" in tags or "error" in tags:
            counts["failed"] += 1
        elif "skipped" in tags:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
        name = case.get("name", "")
        if backend and f"[{backend}-" in name and "skipped" not in tags:
            counts["backend_tests"] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", help="run only these rows")
    args, extra = parser.parse_known_args()
    results: list[tuple[str, dict[str, int] | None, str]] = []
    ok = True
    colour_env, colour_args = colour_options()
    with tempfile.TemporaryDirectory(prefix="pyoffload-matrix-") as tmp:
        for name, env_extra, pytest_args, backend, python, launcher in rows():
            if args.only and name not in args.only:
                continue
            reason = not_run(name, python)
            if reason:
                print(f"\n=== row {name}: {reason}", flush=True)
                results.append((name, None, reason))
                continue
            junit = Path(tmp) / f"{name}.xml"
            running = Path(tmp) / f"{name}.running"
            env = dict(os.environ, **colour_env, **env_extra)
            # scripts/pytest_plugins/row_report.py: failures reported as they happen, and the test
            # a row died in (see ``died_in``)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), env.get("PYTHONPATH")]))
            env["PYOFFLOAD_MATRIX_RUNNING"] = str(running)
            cmd = [
                *launcher,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "row_report",
                f"--junitxml={junit}",
                *colour_args,
                *pytest_args,
                *extra,
            ]
            print(f"\n=== row {name}: {' '.join(f'{k}={v!r}' for k, v in env_extra.items())}", flush=True)
            rc: int | str
            try:
                rc = subprocess.run(
                    cmd,
                    cwd=tempfile.gettempdir() if pytest_args is CONFORMANCE else ROOT,
                    env=env,
                    timeout=ROW_TIMEOUT_S,
                ).returncode
            except subprocess.TimeoutExpired:  # a hang fails its row, with the reason, not the whole run
                rc = f"no result within {ROW_TIMEOUT_S} s"
            c = count(junit, backend)
            total = c["passed"] + c["failed"] + c["skipped"]
            problem = ""
            if isinstance(rc, str):
                problem = rc
            elif rc != 0:
                problem = f"pytest exit status {rc}"
            if problem and not junit.exists():
                problem += died_in(running)
            elif total == 0:
                problem = "no tests ran"
            elif backend and backend != "host" and c["backend_tests"] == 0:
                problem = f"backend {backend!r} contributed no device"
            ok = ok and not problem
            results.append((name, c, problem))
    print("\npyoffload test matrix")
    print(f"{'row':<18} {'passed':>7} {'skipped':>8} {'failed':>7}  problem")
    for name, row, problem in results:
        if row is None:
            print(f"{name:<18} {'-':>7} {'-':>8} {'-':>7}  {problem}")
        else:
            print(f"{name:<18} {row['passed']:>7} {row['skipped']:>8} {row['failed']:>7}  {problem}")
    ran = [row for _, row, _ in results if row is not None]
    passed = sum(c["passed"] for c in ran)
    failed = sum(c["failed"] for c in ran)
    skipped = sum(c["skipped"] for c in ran)
    missing = len(results) - len(ran)
    print(
        f"matrix: {passed} passed, {failed} failed, {skipped} skipped"
        + (f"; {missing} row{'s' if missing != 1 else ''} not run" if missing else "")
    )
    return 0 if ok and passed else 1


if __name__ == "__main__":
    sys.exit(main())
