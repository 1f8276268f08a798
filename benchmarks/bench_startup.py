"""6. ``import pyoffload`` + discovery in a fresh process; 7. one dispatch with and without the
tracing wrapper.

The startup target is on whole processes: ``python -c "import pyoffload; pyoffload.devices()"``
against ``python -c "import pyopencl; <list every platform's devices>"``, each timed from outside
(start to exit, interpreter included), run in turn A B A B after one warm-up of each, the
difference taken per pair.  Inside-the-process timings (import alone; host backend only) say
where the time goes, and the slowest imports of one run (``-X importtime``) are kept in the JSON.

Like is compared with like: pyopencl, numpy and everything else installed from wheels come with
their bytecode (pip compiles a wheel's modules when it installs it), while pyoffload and its
plugins, installed editable from the source tree, have none until something writes it, and with
``PYTHONDONTWRITEBYTECODE`` set nothing ever does: every start would compile them again.  So the
startup suite first byte-compiles pyoffload and every installed plugin's package (``compileall``,
what a wheel install does); Python reads the ``__pycache__`` files whether or not it may write them.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import resource
import subprocess
import sys
import time
from typing import Any

from _env import Target as Dev
from _stats import Figure, Target, measure, us

OURS = (
    "import time; t=time.perf_counter(); import pyoffload; a=time.perf_counter(); "
    "pyoffload.devices(); b=time.perf_counter(); print((a-t)*1e3, (b-t)*1e3)"
)
OURS_PROCESS = "import pyoffload; pyoffload.devices()"
RAW_PROCESS = "import pyopencl as cl; [p.get_devices() for p in cl.get_platforms()]"


def _process_ms(code: str, cpu: list[float] | None = None) -> float:
    """Wall time of a whole ``python -c code`` process, start to exit, in ms; its CPU time (user +
    system, all its threads) is appended to ``cpu``."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
    wall = (time.perf_counter() - t0) * 1e3
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if cpu is not None:
        cpu.append((r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * 1e3)
    return wall


def _fresh(code: str, env: dict[str, str] | None = None, *flags: str) -> tuple[float, float, str]:
    res = subprocess.run(
        [sys.executable, *flags, "-c", code], capture_output=True, text=True, env=env or os.environ.copy(), check=True
    )
    imp, total = (float(x) for x in res.stdout.split()[-2:])
    return imp, total, res.stderr


def _importtime_top(k: int = 12, env: dict[str, str] | None = None) -> list[tuple[str, float]]:
    """The ``k`` largest cumulative import times (ms) in one cold ``import pyoffload; devices()``."""
    _, _, err = _fresh(OURS, env, "-X", "importtime")
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line[len("import time:") :].split("|")
        try:
            rows.append((parts[2].rstrip(), int(parts[1]) / 1e3))
        except ValueError:
            continue
    top = [(name.strip(), ms) for name, ms in rows]
    return sorted(top, key=lambda r: -r[1])[:k]


def _package_dirs() -> list[str]:
    """The source directories of pyoffload and of every package an installed plugin lives in."""
    from pyoffload.hooks import discovery

    tops = {"pyoffload"}
    for _, _, ep in discovery.entry_points():
        value = getattr(ep, "value", None) or getattr(ep, "__name__", "")
        tops.add(value.split(":")[0].split(".")[0].strip())
    dirs = []
    for top in sorted(tops):
        spec = importlib.util.find_spec(top) if top else None
        if spec is None:
            continue
        if spec.submodule_search_locations:
            dirs += list(spec.submodule_search_locations)
        elif spec.origin and spec.origin.endswith(".py"):
            dirs.append(spec.origin)
    return dirs


def _byte_compile() -> list[str]:
    """Compile pyoffload's and the plugins' modules as a wheel install would (see the module
    docstring); the directories compiled."""
    dirs = _package_dirs()
    for d in dirs:
        if os.path.isdir(d):
            compileall.compile_dir(d, quiet=1)
        else:
            compileall.compile_file(d, quiet=1)
    return dirs


def startup(devs: list[Dev], cfg: Any) -> list[Figure]:
    reps = 7 if cfg.quick else 21  # pairs: the machine is shared, so many, each pair run back to back
    compiled = _byte_compile()
    pyc_note = (
        f"pyoffload and its plugins byte-compiled first, as a wheel install does ({len(compiled)} package directories)"
    )
    has_pyopencl = importlib.util.find_spec("pyopencl") is not None
    env_host = {**os.environ, "PYOFFLOAD_PLUGINS": ""}
    ours_p, raw_p, ours_cpu, raw_cpu = [], [], [], []
    _process_ms(OURS_PROCESS)  # warm-up: the page cache, not pyoffload, is what a first run measures
    if has_pyopencl:
        _process_ms(RAW_PROCESS)
    for _ in range(reps):
        ours_p.append(_process_ms(OURS_PROCESS, ours_cpu))
        if has_pyopencl:
            raw_p.append(_process_ms(RAW_PROCESS, raw_cpu))
    imp, total, host_only = [], [], []
    for _ in range(3 if cfg.quick else 5):
        i, t, _ = _fresh(OURS)
        imp.append(i)
        total.append(t)
        host_only.append(_fresh(OURS, env_host)[1])
    backends = ", ".join(sorted({d.backend for d in devs}))
    return [
        Figure(
            "startup",
            f"process: import pyoffload + devices() (backends: {backends})",
            "all",
            "",
            "ms",
            ours_p,
            "process: import pyopencl + list devices" if raw_p else "",
            raw_p or None,
            Target("diff", "<=", 50.0, "≤ +50 ms over pyopencl") if raw_p else None,
            note=pyc_note if raw_p else f"pyopencl is not installed: no baseline; {pyc_note}",
            extra={"importtime_top_ms": _importtime_top()},
        ),
        Figure(
            "startup",
            f"process CPU time (user + system): import pyoffload + devices() (backends: {backends})",
            "all",
            "",
            "ms",
            ours_cpu,
            "process CPU time: import pyopencl + list devices" if raw_cpu else "",
            raw_cpu or None,
            note="the same processes as above; less disturbed than wall time by other work waiting for the same cores",
        ),
        Figure("startup", "in process: import pyoffload", "all", "", "ms", imp),
        Figure("startup", "in process: import pyoffload + devices()", "all", "", "ms", total),
        Figure(
            "startup",
            "in process: import pyoffload + devices(), host only (PYOFFLOAD_PLUGINS=)",
            "host",
            "",
            "ms",
            host_only,
            extra={"importtime_top_ms": _importtime_top(env=env_host)},
        ),
    ]


def dispatch(devs: list[Dev], cfg: Any) -> list[Figure]:
    """queue_query_impl: the backend's function itself, through the dispatcher, through pluggy,
    and through the dispatcher with the tracing wrapper registered."""
    from pyoffload import runtime
    from pyoffload.hooks.tracing import TracingPlugin

    figs = []
    for d in devs:
        dev = d.device
        q = dev.create_queue()
        dh, qh = dev.handle, q.handle
        hook = dev.plugin.pm.hook.queue_query_impl
        impl = [i for i in hook.get_hookimpls() if not (i.wrapper or i.hookwrapper)][-1].function
        disp = dev.disp

        def direct(n: int) -> None:
            for _ in range(n):
                impl(dh, qh)

        def dispatched(n: int) -> None:
            f = disp.queue_query_impl
            for _ in range(n):
                f(dh, qh)

        def pluggy_call(n: int) -> None:
            for _ in range(n):
                hook(device=dh, queue=qh)

        def public(n: int) -> None:
            for _ in range(n):
                q.query()

        n = cfg.n(20000)
        t = measure(
            {"direct": direct, "dispatched": dispatched, "pluggy": pluggy_call, "public": public}, n, cfg.repeats
        )
        runtime.add_wrapper(TracingPlugin)
        try:
            traced = measure({"traced": dispatched, "direct": direct}, n // 4, cfg.repeats)
        finally:
            runtime.remove_wrapper(TracingPlugin)
        base = "the backend's queue_query_impl called directly"
        b = d.backend
        figs += [
            Figure(
                "dispatch",
                "one dispatch (device.disp.queue_query_impl)",
                b,
                "",
                "us",
                us(t["dispatched"]),
                base,
                us(t["direct"]),
            ),
            Figure(
                "dispatch",
                "one pluggy hook call (pm.hook.queue_query_impl)",
                b,
                "",
                "us",
                us(t["pluggy"]),
                base,
                us(t["direct"]),
            ),
            Figure("dispatch", "public Queue.query()", b, "", "us", us(t["public"]), base, us(t["direct"])),
            Figure(
                "dispatch",
                "one dispatch, tracing wrapper on",
                b,
                "",
                "us",
                us(traced["traced"]),
                base,
                us(traced["direct"]),
                note="tracing logs through structlog at DEBUG; no handler is configured",
            ),
        ]
        q.destroy()
    return figs
