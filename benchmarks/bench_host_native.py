"""The host backend against PoCL's pthread device: launch cost, thread scaling, compile cost and
tinygrad-style workloads.

Run it alone (it is not one of run.py's suites: it restarts pyoffload to change the thread count)::

    POCL_DEVICES=pthread python benchmarks/bench_host_native.py [--repeats 15] [--only compile workloads]

1. Launch cost: the same tiny kernel (each work-item adds 1 to one float) as a plain C kernel with
   a trailing ``pyoffload_launch`` pointer on the host device, as a ``PYOFFLOAD_KERNEL`` kernel
   on the host device, and as an OpenCL C kernel on PoCL through pyopencl's ``knl(q, ...)``, with
   1 work-group and with N work-groups (the same global size per figure).  Two figures per shape:
   *batched* (100 launches, then one wait: the enqueue cost plus a share of one wait, as a
   framework issues work) and *round trip* (launch, then wait for it: what one synchronous
   launch costs).  Repeats rotate which contender goes first; medians and min-max over repeats.
2. Scaling: a compute-bound kernel (256 groups x 64 items, each item a dependent chain of
   multiply-adds) with ``PYOFFLOAD_HOST_THREADS=1`` and ``=2``, alternating, each a fresh runtime.
3. Compile cost: ``build_program`` with the build cache off (compile, load, read the symbols and
   kernel signatures) against the plain ``cc -O2 -shared -fPIC`` of the same source run alone
   from the same process, for a one-kernel source and for the 19-kernel MLP program below; also
   ``cc`` with the host's flags alone and with plain ``-g`` (what it used), and the first build in
   a fresh process (which also imports the ELF/DWARF reader).  Contenders alternate within each
   repeat; the ratio is taken per repeat.
4. Workloads from ``examples/generated_c.py`` (generated C, one work-item per work-group, as
   tinygrad's CPU kernels): a 512 x 512 float32 matmul (launch and wait), and a tiny MLP's SGD step
   (19 kernels launched in sequence from prepared launches, then one wait: a jitted step), the
   same kernels rendered as C on the host device and as OpenCL C on PoCL through pyoffload's
   OpenCL backend and through pyopencl directly.

Prints Markdown tables and the machine's load (``uptime``) before and after.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pyoffload

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
import generated_c  # noqa: E402  (the example, not a package)

HOST_SRC = r"""
#include <stdint.h>
#include <pyoffload_host.h>

void add1(float *x, const pyoffload_launch *ctx) {
    uint64_t base = ctx->group_id[0] * ctx->local_size[0];
    for (uint64_t l = 0; l < ctx->local_size[0]; l++) x[base + l] += 1.0f;
}

PYOFFLOAD_KERNEL(add1_macro)(PYOFFLOAD_GROUPS, float *x) {
    PYOFFLOAD_FOR_EACH_GROUP {
        PYOFFLOAD_FOR_EACH_ITEM { x[pyoffload_global_id(0)] += 1.0f; }
    }
}

/* compute-bound: each item runs a dependent chain of `iters` multiply-adds */
void chain(float *x, int32_t iters, const pyoffload_launch *ctx) {
    uint64_t base = ctx->group_id[0] * ctx->local_size[0];
    for (uint64_t l = 0; l < ctx->local_size[0]; l++) {
        float v = x[base + l];
        for (int32_t i = 0; i < iters; i++) v = v * 0.999f + 0.5f;
        x[base + l] = v;
    }
}
"""

CL_SRC = """
kernel void add1(global float *x) { x[get_global_id(0)] += 1.0f; }
"""

BATCH = 100


def _stats(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


def _time(fn: Callable[[int], Any], n: int) -> float:
    t0 = time.perf_counter_ns()
    fn(n)
    return (time.perf_counter_ns() - t0) / n / 1e3  # µs per launch


def launch_cost(repeats: int, groups: int) -> list[str]:
    dev = pyoffload.host_device()
    prog = dev.build_program(HOST_SRC)
    q = dev.create_queue()
    size = groups * 64
    x = dev.alloc(4 * size)
    pyoffload.memcpy(x, np.zeros(size, np.float32))
    ctx_k, macro_k = prog.kernel("add1"), prog.kernel("add1_macro")

    import pyopencl as cl

    platform = next(p for p in cl.get_platforms() if "Portable" in p.name or "pocl" in p.name.lower())
    cdev = platform.get_devices()[0]
    cctx = cl.Context([cdev])
    cq = cl.CommandQueue(cctx)
    knl = cl.Program(cctx, CL_SRC).build().add1
    cbuf = cl.Buffer(cctx, cl.mem_flags.READ_WRITE, 4 * size)
    cl.enqueue_fill_buffer(cq, cbuf, np.float32(0), 0, 4 * size)
    cq.finish()

    rows = []
    for local in (size, 64):  # 1 group of `size` items, then `groups` groups of 64
        n_groups = size // local

        def host(k: Any, wait_each: bool) -> Callable[[int], None]:
            launch = q.launch

            def run(n: int) -> None:
                for _ in range(n):
                    ev = launch(k, n_groups, local, [x])
                    if wait_each:
                        ev.wait()
                q.wait()

            return run

        def pocl(wait_each: bool) -> Callable[[int], None]:
            def run(n: int) -> None:
                for _ in range(n):
                    ev = knl(cq, (size,), (local,), cbuf)
                    if wait_each:
                        ev.wait()
                cq.finish()

            return run

        for wait_each, label in ((False, "batched"), (True, "round trip")):
            contenders = {
                "host, plain C + pyoffload_launch": host(ctx_k, wait_each),
                "host, PYOFFLOAD_KERNEL": host(macro_k, wait_each),
                "PoCL pthread, knl(q, ...)": pocl(wait_each),
            }
            for fn in contenders.values():
                fn(10)  # warm-up
            times: dict[str, list[float]] = {name: [] for name in contenders}
            names = list(contenders)
            for r in range(repeats):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    times[name].append(_time(contenders[name], BATCH))
            for name in names:
                rows.append(f"| {n_groups} × {local} | {label} | {name} | {_stats(times[name])} |")
    x.free()
    q.destroy()
    prog.unload()
    return rows


def scaling(repeats: int) -> list[str]:
    times: dict[int, list[float]] = {1: [], 2: []}
    groups, local, iters = 256, 64, 20000
    for r in range(repeats):
        for threads in (1, 2) if r % 2 == 0 else (2, 1):
            pyoffload.shutdown()
            os.environ["PYOFFLOAD_HOST_THREADS"] = str(threads)
            dev = pyoffload.host_device()
            prog = dev.build_program(HOST_SRC)
            q = dev.create_queue()
            x = dev.alloc(4 * groups * local)
            pyoffload.memcpy(x, np.zeros(groups * local, np.float32))
            k = prog.kernel("chain")
            q.launch(k, groups, local, [x, np.int32(iters // 10)]).wait()  # warm-up
            t0 = time.perf_counter()
            q.launch(k, groups, local, [x, np.int32(iters)]).wait()
            times[threads].append((time.perf_counter() - t0) * 1e3)
            x.free()
            q.destroy()
            prog.unload()
    os.environ.pop("PYOFFLOAD_HOST_THREADS", None)
    pyoffload.shutdown()
    speedups = [a / b for a, b in zip(times[1], times[2], strict=True)]
    return [
        f"| 1 | {_stats(times[1])} ms | |",
        f"| 2 | {_stats(times[2])} ms | {statistics.median(speedups):.2f}× ({min(speedups):.2f}–{max(speedups):.2f}) |",
    ]


def _rotate(names: list[str], r: int) -> list[str]:
    return names[r % len(names) :] + names[: r % len(names)]


SMALL_SRC = HOST_SRC.split("PYOFFLOAD_KERNEL")[0]  # one plain C kernel (add1) and the header


def compile_cost(repeats: int) -> list[str]:
    from pyoffload.host import compiler

    cc = compiler.find_cc()
    assert cc is not None
    dev = pyoffload.host_device()
    sources = {
        "1 kernel": SMALL_SRC,
        "MLP, 19 kernels": generated_c.render(generated_c.HOST, [k for k, _ in generated_c.Mlp().kernels()]),
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "k.c"), os.path.join(tmp, "k.so")
        base = [cc, "-O2", "-shared", "-fPIC", "-I", compiler.INCLUDE_DIR, "-o", out, src]
        # what compile_c adds to the plain command, in its order
        host_extra = [f for f in (*compiler._compiler_flags(cc), *compiler.DEFAULT_FLAGS) if f not in base]
        for what, source in sources.items():
            first = "add1" if what == "1 kernel" else "fc1"
            serial = iter(range(1 << 30))

            def fresh() -> str:  # a source no cache has seen (cc keeps none, but build_program's key)
                text = f"{source}\n/* {next(serial)} {time.time_ns()} */\n"
                with open(src, "w") as f:
                    f.write(text)
                return text

            def run_cc(extra: list[str]) -> Callable[[], float]:
                def timed() -> float:
                    fresh()
                    t0 = time.perf_counter()
                    subprocess.run(base[:1] + extra + base[1:], check=True)
                    return time.perf_counter() - t0

                return timed

            def build() -> float:
                text = fresh()
                t0 = time.perf_counter()
                prog = dev.build_program(text, cache=False)
                prog.kernel(first).signature  # noqa: B018  (read: the signatures are part of the cost)
                took = time.perf_counter() - t0
                prog.unload()
                return took

            contenders: dict[str, Callable[[], float]] = {
                "plain `cc -O2 -shared -fPIC`": run_cc([]),
                "`cc` with plain `-g` added (the host's flags before)": run_cc(["-g"]),
                f"`cc` with the host's flags (`{' '.join(host_extra)}` added)": run_cc(host_extra),
                "host `build_program` (cache off), signatures read": build,
            }
            for fn in contenders.values():
                fn()  # warm-up: the page cache, the compiler's own files
            times: dict[str, list[float]] = {name: [] for name in contenders}
            names = list(contenders)
            for r in range(repeats):
                for name in _rotate(names, r):
                    times[name].append(contenders[name]() * 1e3)
            plain = times[names[0]]
            for name in names:
                ratios = [a / b for a, b in zip(times[name], plain, strict=True)]
                ratio = f"{statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f})"
                rows.append(f"| {what} | {name} | {_stats(times[name])} | {ratio} |")
        code = (
            "import time, pyoffload; dev = pyoffload.host_device(); t0 = time.perf_counter(); "
            f"dev.build_program({SMALL_SRC!r} + '/* %d */' % time.time_ns(), cache=False).kernel('add1').signature; "
            "print((time.perf_counter() - t0) * 1e3)"
        )
        firsts = [
            float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
            for _ in range(max(3, repeats // 3))
        ]
        rows.append(f"| 1 kernel | host `build_program`, the first in a fresh process | {_stats(firsts)} | |")
    return rows


def _pocl_cl() -> tuple[Any, Any, Any]:
    """pyopencl's context and queue on PoCL, and pyopencl itself."""
    import pyopencl as cl

    platform = next(p for p in cl.get_platforms() if "Portable" in p.name or "pocl" in p.name.lower())
    cctx = cl.Context([platform.get_devices()[0]])
    return cl, cctx, cl.CommandQueue(cctx)


# What PoCL gives its kernels (LLVM at -O3 for the host CPU's own ISA), as a framework passes it
# to the host backend (tinygrad's CPU device builds with -march=native); the host's default is
# -O2 for the architecture's baseline ISA.
NATIVE = ("-O3", "-march=native")


def workloads(repeats: int) -> list[str]:
    host = pyoffload.host_device()
    ocl = next(d for d in pyoffload.devices() if d.backend == "opencl")
    cl, cctx, cq = _pocl_cl()
    rows = []

    # -- the 512 x 512 matmul: one launch, then a wait
    n = 512
    mm = generated_c.matmul_kernel(n)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    progs, runs, frees = [], {}, []
    contenders = (
        ("pyoffload host", host, generated_c.HOST, ()),
        (f"pyoffload host, `{' '.join(NATIVE)}`", host, generated_c.HOST, NATIVE),
        ("pyoffload OpenCL (PoCL)", ocl, generated_c.OPENCL, ()),
    )
    for label, dev, dialect, options in contenders:
        prog = dev.build_program(generated_c.render(dialect, [mm]), options)
        q = dev.create_queue()
        bufs = [dev.alloc(4 * n * n) for _ in range(3)]
        pyoffload.memcpy(bufs[1], a)
        pyoffload.memcpy(bufs[2], b)
        launch = q.prepare(prog.kernel("matmul"), mm.groups, 1, bufs)
        runs[label] = lambda launch=launch, q=q: (launch(), q.wait())
        progs.append(prog)
        frees += bufs
    mf = cl.mem_flags
    cbufs = [cl.Buffer(cctx, mf.READ_WRITE, 4 * n * n)] + [
        cl.Buffer(cctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=m) for m in (a, b)
    ]
    knl = cl.Program(cctx, generated_c.render(generated_c.OPENCL, [mm])).build().matmul
    knl.set_args(*cbufs)
    runs["pyopencl on PoCL"] = lambda: (cl.enqueue_nd_range_kernel(cq, knl, (mm.groups,), (1,)), cq.finish())
    rows += _contest(f"{n}×{n} matmul, {mm.groups} groups, ms", runs, repeats, 1)
    for buf in frees:
        buf.free()
    for prog in progs:
        prog.unload()

    # -- the MLP step: 19 prepared launches, then one wait
    mlp = generated_c.Mlp()
    steps = {
        label: generated_c.MlpStep(dev, dev.create_queue(), mlp, dialect, options)
        for label, dev, dialect, options in contenders
    }
    runs = {label: step.step for label, step in steps.items()}
    for step in steps.values():
        step.step()
        generated_c.check_mlp_step(mlp, step)  # the same kernels compute the same step
    kernels = mlp.kernels()
    prog = cl.Program(cctx, generated_c.render(generated_c.OPENCL, [k for k, _ in kernels])).build()
    shapes, values = mlp.shapes(), mlp.inputs()
    cb = {
        name: cl.Buffer(cctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=values[name])
        if name in values
        else cl.Buffer(cctx, mf.READ_WRITE, 4 * int(np.prod(shape)))
        for name, shape in shapes.items()
    }
    raw = []
    for k, names in kernels:
        kn = getattr(prog, k.name)
        kn.set_args(*[np.float32(mlp.lr) if name == "lr" else cb[name] for name in names])
        raw.append((kn, (k.groups,)))

    def raw_step() -> None:
        for kn, groups in raw:
            cl.enqueue_nd_range_kernel(cq, kn, groups, (1,))
        cq.finish()

    runs["pyopencl on PoCL"] = raw_step
    rows += _contest("MLP SGD step, 19 launches (jitted), µs", runs, repeats, 20, 1e6)
    for step in steps.values():
        step.close()
    return rows


def _contest(what: str, runs: dict[str, Callable[[], Any]], repeats: int, per: int, scale: float = 1e3) -> list[str]:
    """Each of ``runs`` ``per`` times a repeat, contenders rotating; seconds per run times ``scale``."""
    for fn in runs.values():
        for _ in range(3):
            fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(repeats):
        for name in _rotate(names, r):
            t0 = time.perf_counter()
            for _ in range(per):
                runs[name]()
            times[name].append((time.perf_counter() - t0) * scale / per)
    return [f"| {what} | {name} | {_stats(times[name])} |" for name in names]


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--groups", type=int, default=16, help="N, the work-groups of the multi-group launches")
    ap.add_argument("--only", nargs="*", choices=("launch", "scaling", "compile", "workloads"))
    args = ap.parse_args()
    only = set(args.only or ("launch", "scaling", "compile", "workloads"))
    print(f"load before: {_uptime()}", flush=True)
    if "compile" in only:
        print("\n| source | what | ms, median (min–max) | against plain, per repeat |")
        print("|---|---|---|---|")
        print("\n".join(compile_cost(args.repeats)), flush=True)
    if "workloads" in only:
        print("\n| workload | contender | median (min–max) |")
        print("|---|---|---|")
        print("\n".join(workloads(args.repeats)), flush=True)
    if "launch" in only:
        print("\n| grid × block | how | contender | µs per launch, median (min–max) |")
        print("|---|---|---|---|")
        print("\n".join(launch_cost(args.repeats, args.groups)), flush=True)
    if "scaling" in only:
        print("\n| threads | 256 × 64 items, 20000 dependent multiply-adds each | speed-up over 1 thread |")
        print("|---|---|---|")
        print("\n".join(scaling(max(3, args.repeats // 3))), flush=True)
    print(f"\nload after:  {_uptime()}")


if __name__ == "__main__":
    main()
