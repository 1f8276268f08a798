#!/usr/bin/env python3
"""Run every benchmark on every backend present:  python benchmarks/run.py [--quick]

Each figure is the median of repeated runs, with its raw baseline measured in the same process
and the same repeat, reported as a ratio with min–max.  Writes ``benchmarks/results/results.json``,
``results.md`` (a markdown table) and PNG plots of the scaling runs.  Not a test: nothing here
fails on a number; targets are reported as met or missed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import platform
import sys
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SUITES = ("launch", "alloc", "memcpy", "pinning", "programs", "startup", "dispatch", "cuda")


@dataclasses.dataclass
class Config:
    quick: bool
    repeats: int
    skipped: list[str] = dataclasses.field(default_factory=list)

    def n(self, full: int) -> int:
        """Operations per timed batch: a tenth in quick mode."""
        return max(1, full // 10) if self.quick else full

    def skip(self, suite: str, backend: str, why: str) -> None:
        self.skipped.append(f"{suite} / {backend}: {why}")


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes, counts and repeats (< 2 minutes)")
    ap.add_argument("--only", nargs="*", choices=SUITES, help="run only these suites")
    ap.add_argument("--backend", nargs="*", help="run only on these backends")
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    args = ap.parse_args(argv)

    import pyoffload

    import _env
    import bench_alloc
    import bench_cuda
    import bench_launch
    import bench_memcpy
    import bench_pinning
    import bench_programs
    import bench_startup
    import report

    cfg = Config(quick=args.quick, repeats=3 if args.quick else 7)
    start = time.perf_counter()
    # Startup first: it runs in fresh processes and must not see this one's warm caches anyway.
    runners = {
        "startup": bench_startup.startup,
        "launch": bench_launch.run,
        "alloc": bench_alloc.run,
        "memcpy": bench_memcpy.run,
        "pinning": bench_pinning.run,
        "programs": bench_programs.run,
        "dispatch": bench_startup.dispatch,
        "cuda": bench_cuda.run,
    }
    devs = _env.targets(set(args.backend) if args.backend else None, cfg.skipped)
    for rep in pyoffload.plugins():
        if rep.status != "ok":
            cfg.skip("all", rep.name, f"{rep.status}: {rep.reason}")
    for d in devs:
        if d.raw is None and d.backend not in ("cuda", "opencl", "host"):  # cuda: its own suite
            cfg.skip("all", d.backend, "no raw baseline for this backend in the benchmarks yet")
    figures = []
    for name, fn in runners.items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        print(f"[{name}] ...", flush=True)
        try:
            got = fn(devs, cfg)
        except Exception:
            traceback.print_exc()
            cfg.skip(name, "all", "the suite raised; see the run's output")
            continue
        figures += got
        print(f"[{name}] {len(got)} figures in {time.perf_counter() - t0:.1f} s", flush=True)
    _env.cleanup(devs)
    rows = [f.as_dict() for f in figures]
    meta = {
        "machine": _machine(),
        "mode": "quick" if args.quick else "full",
        "repeats": cfg.repeats,
        "backends": [f"{d.backend} ({d.device.name})" for d in devs],
        "pyoffload": pyoffload.__version__,
        "seconds": time.perf_counter() - start,
        "skipped": cfg.skipped,
    }
    plots = report.write(args.out, rows, meta)
    print((args.out / "results.md").read_text())
    print(
        "plots:", ", ".join(str(p.relative_to(HERE.parent)) if p.is_relative_to(HERE.parent) else str(p) for p in plots)
    )
    missed = [r for r in rows if r["met"] is False]
    print(
        f"{len(rows)} figures, {sum(r['met'] is True for r in rows)} targets met, {len(missed)} missed, "
        f"{meta['seconds']:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
