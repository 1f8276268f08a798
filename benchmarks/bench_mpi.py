#!/usr/bin/env python3
"""The MPI backend against raw mpi4py, in the same job:

    PYOFFLOAD_PLUGINS=mpi PYOFFLOAD_MPI_SERVE= mpirun -n 3 python -m pyoffload_mpi benchmarks/bench_mpi.py [--quick]

(on one machine add ``--oversubscribe --mca btl tcp,self,vader --mca btl_tcp_if_include lo``.)
Rank 0 runs this script; ranks 1 and 2 serve their host device (``PYOFFLOAD_MPI_SERVE=`` keeps
them to the host backend, whose device memory is plain memory: the figures measure the transport,
not a device's copy engine).

* **Copy bandwidth**, 1 MiB to 256 MiB: host→remote (rank 0's numpy array to rank 1's device),
  remote→host, and remote→remote (rank 1's device to rank 2's), each synchronous
  (``pyoffload.memcpy``) and queued (``n`` copies on a queue, then one wait), against plain
  mpi4py ``Send``/``Recv`` of the same bytes between the same two ranks (buffer-based, no pickle),
  with the server's side of the baseline run by its ``raw`` request (rank 0 sleeps while it waits
  for that request's reply: it takes no core from the ranks it measures).  Target ≥ 0.8× raw.
* **Launch enqueue latency**: ``n`` prepared launches of an empty kernel on a rank-1 queue, then
  one wait, per launch; against ``n`` mpi4py ``Isend`` of a message of the same size.  Target ≤ 20 µs.

With ``--memory host device`` (and ``PYOFFLOAD_MPI_SERVE=opencl``) the bandwidth rows come once per
kind of remote memory: the host device's, and a PoCL device's own (staged on its rank).

Each figure is the median of repeats, the baseline measured in the same repeat, the ratio per
repeat with min–max (``_stats.measure``); the machine's load (1-minute average, at the start and at
the end) is reported with them.  Writes ``benchmarks/results/mpi.json`` and ``mpi.md``,
and ``mpi_bandwidth.png`` when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import pickle
import sys
import time
from typing import Any

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pyoffload  # noqa: E402
from _stats import Figure, Target, fmt_size, gbps, measure, time_batch, us  # noqa: E402
from report import markdown  # noqa: E402
from run import _machine  # noqa: E402

SUITE = "mpi"
MiB = 1 << 20
BANDWIDTH = Target("ratio", ">=", 0.8, "≥ 0.8× raw (≥ 1 MiB)")
LATENCY = Target("value", "<=", 20.0, "≤ 20 µs per launch")
SMALL = Target("diff", "<=", 20.0, "≤ round trip + local copy + 20 µs")


def _link() -> Any:
    from pyoffload_mpi import session

    current = session.CURRENT
    if current is None or current.link is None:
        sys.exit("run this under `mpirun -n 3 python -m pyoffload_mpi benchmarks/bench_mpi.py`")
    return current.link


def _device(rank: int) -> Any:
    """The host device of ``rank`` (else its first device)."""
    found = [d for d in pyoffload.devices() if d.backend == "mpi" and d.info["mpi.rank"] == rank]
    if not found:
        sys.exit(f"rank {rank} serves no device: start 3 ranks with PYOFFLOAD_PLUGINS=mpi")
    hosts = [d for d in found if d.info["mpi.remote_backend"] == "host"]
    return (hosts or found)[0]


def _devices(rank: int) -> dict[str, Any]:
    """``rank``'s devices by the kind of their memory: "host memory" (the host backend's) and
    "device memory" (any other backend's: PoCL here), where it serves one."""
    found = [d for d in pyoffload.devices() if d.backend == "mpi" and d.info["mpi.rank"] == rank]
    out: dict[str, Any] = {}
    for d in found:
        out.setdefault("host memory" if d.info["mpi.remote_backend"] == "host" else "device memory", d)
    return out


def transport(link: Any) -> str:
    """What carries the bytes between rank 0 and the servers in this job, for the figures' labels:
    Open MPI's byte transfer layers (``--mca btl``) and whether rank 0 reaches a server's memory
    by cross-memory attach."""
    btl = os.environ.get("OMPI_MCA_btl", "default btl")
    cma = "CMA" if any(0 in pair for pair in link.reach) else "no CMA"
    return f"{btl}, {cma}"


def _small(link: Any, cfg: argparse.Namespace) -> list[Figure]:
    """Synchronous small copies between rank 0 and each kind of rank-1 memory, against what they
    cannot beat: MPI's own round trip of the same bytes (``size`` one way, 1 byte back) plus the
    device's own blocking copy of them on its rank (timed there)."""
    from pyoffload_mpi.protocol import local_address

    comm, byte = link.comm, link.MPI.BYTE
    size = cfg.small
    n = 300 if cfg.quick else 2000
    host = np.ones(size, np.uint8)
    one = bytearray(1)
    label = transport(link)
    figs = []

    def raw(role: str) -> Any:
        def batch(k: int) -> None:
            tag = link.tags.take()
            started = link.start(1, "raw", role, 0, tag, size, k)
            first, then = ([host, byte], [one, byte]) if role == "echo" else ([one, byte], [host, byte])
            for _ in range(k):
                comm.Send(first, 1, tag)
                comm.Recv(then, 1, tag)
            link.finish(started, drive=False)

        return batch

    for kind, dev in _devices(1).items():
        a = dev.alloc(size)
        pyoffload.memcpy(a, host)
        for to_device in (True, False):
            pair = (a, host) if to_device else (host, a)
            name = f"synchronous {fmt_size(size)} copy {'host → rank 1' if to_device else 'rank 1 → host'} {kind}"

            def ours(k: int, pair: Any = pair) -> None:
                for _ in range(k):
                    pyoffload.memcpy(*pair, size)

            trip = raw("echo" if to_device else "serve")
            ours(n // 10)
            trip(n // 10)
            values, base = [], []
            for r in range(cfg.repeats):
                order = [ours, trip] if r % 2 == 0 else [trip, ours]
                got = {fn: time_batch(fn, n) for fn in order}
                local = link.call(1, "local_copy", local_address(a.ptr, 1), size, n, to_device)
                values.append(got[ours] * 1e6)
                base.append((got[trip] + local) * 1e6)
            figs.append(
                Figure(
                    SUITE,
                    name,
                    "mpi",
                    label,
                    "us",
                    values,
                    "mpi4py round trip + the device's local copy",
                    base,
                    SMALL,
                    extra={"kind": kind, "transport": label},
                )
            )
        pyoffload.free(a)
    return figs


def _bandwidth(link: Any, dev1: Any, dev2: Any, size: int, memory: str, cfg: argparse.Namespace) -> list[Figure]:
    comm, byte = link.comm, link.MPI.BYTE
    memcpy = pyoffload.memcpy
    src = np.ones(size, np.uint8)
    dst = np.zeros(size, np.uint8)
    a1, a2 = dev1.alloc(size), dev2.alloc(size)
    q1, q2 = dev1.create_queue(), dev2.create_queue()
    memcpy(a1, src)
    n = max(1, (64 if cfg.quick else 256) * MiB // size)

    def sync(op: Any) -> Any:
        def batch(k: int) -> None:
            for _ in range(k):
                op()

        return batch

    def queued(q: Any, d: Any, s: Any) -> Any:
        def batch(k: int) -> None:
            for _ in range(k):
                memcpy(d, s, size, queue=q)
            q.wait()

        return batch

    def raw_h2d(k: int) -> None:
        tag = link.tags.take()
        started = link.start(1, "raw", "recv", 0, tag, size, k)
        for _ in range(k):
            comm.Send([src, byte], 1, tag)
        link.finish(started, drive=False)

    def raw_d2h(k: int) -> None:
        tag = link.tags.take()
        started = link.start(1, "raw", "send", 0, tag, size, k)
        for _ in range(k):
            comm.Recv([dst, byte], 1, tag)
        link.finish(started, drive=False)

    def raw_r2r(k: int) -> None:
        tag = link.tags.take()
        receiving = link.start(2, "raw", "recv", 1, tag, size, k)
        sending = link.start(1, "raw", "send", 2, tag, size, k)
        link.finish(sending, drive=False)
        link.finish(receiving, drive=False)

    contenders = {
        "h2d": sync(lambda: memcpy(a1, src)),
        "h2d queued": queued(q1, a1, src),
        "raw h2d": raw_h2d,
        "d2h": sync(lambda: memcpy(dst, a1)),
        "d2h queued": queued(q1, dst, a1),
        "raw d2h": raw_d2h,
        "r2r": sync(lambda: memcpy(a2, a1)),
        "r2r queued": queued(q1, a2, a1),
        "raw r2r": raw_r2r,
    }
    t = measure(contenders, n, cfg.repeats, warmup=1)
    memcpy(dst, a2)
    assert (dst == 1).all(), "the remote→remote copy did not deliver the bytes"
    bw = {k: gbps(size, v) for k, v in t.items()}
    kind = f" ({memory} memory; {transport(link)})"
    what = {"h2d": "host → rank 1" + kind, "d2h": "rank 1 → host" + kind, "r2r": "rank 1 → rank 2" + kind}
    raw = {"h2d": "mpi4py Send (rank 0 → 1)", "d2h": "mpi4py Recv (rank 1 → 0)", "r2r": "mpi4py Send/Recv (rank 1 → 2)"}
    figs = []
    for direction, label in what.items():
        for mode in ("", " queued"):
            figs.append(
                Figure(
                    SUITE,
                    f"memcpy {label}{', queued' if mode else ''}",
                    "mpi",
                    fmt_size(size),
                    "GB/s",
                    bw[direction + mode],
                    raw[direction],
                    bw["raw " + direction],
                    BANDWIDTH,
                    extra={"size": size, "direction": direction + mode, "memory": memory},
                )
            )
    for q in (q1, q2):
        q.destroy()
    pyoffload.free(a1)
    pyoffload.free(a2)
    return figs


def _launch(link: Any, dev1: Any, cfg: argparse.Namespace) -> list[Figure]:
    comm, byte = link.comm, link.MPI.BYTE
    images = dev1.disp.conformance_images_impl(dev1.handle)
    program = dev1.load_program(images["kernels"])
    q = dev1.create_queue()
    prepared = q.prepare(program.kernel("noop"), 1, 1, ())
    launch = q.launch
    noop = program.kernel("noop")
    # What a launch request weighs on the wire: the baseline sends as many bytes per message.
    message = pickle.dumps(("launch", 1, 1, (1, 1, 1), (1, 1, 1), ()), pickle.HIGHEST_PROTOCOL)
    n = 200 if cfg.quick else 2000

    def ours_prepared(k: int) -> None:
        for _ in range(k):
            prepared()
        q.wait()

    def ours_launch(k: int) -> None:
        for _ in range(k):
            launch(noop, 1, 1, ())
        q.wait()

    def raw(k: int) -> None:
        tag = link.tags.take()
        started = link.start(1, "raw", "recv", 0, tag, len(message), k)
        requests = [comm.Isend([message, byte], 1, tag) for _ in range(k)]
        link.MPI.Request.Waitall(requests)
        link.finish(started, drive=False)

    t = measure({"prepared": ours_prepared, "launch": ours_launch, "raw": raw}, n, cfg.repeats)
    q.destroy()
    program.unload()
    base = "mpi4py Isend of the same bytes, then the server's Recv"
    return [
        Figure(
            SUITE,
            "launch enqueue, prepared (per launch, incl. a share of one wait)",
            "mpi",
            f"n={n}",
            "us",
            us(t["prepared"]),
            base,
            us(t["raw"]),
            LATENCY,
        ),
        Figure(
            SUITE,
            "launch enqueue, queue.launch (per launch, incl. a share of one wait)",
            "mpi",
            f"n={n}",
            "us",
            us(t["launch"]),
            base,
            us(t["raw"]),
            LATENCY,
        ),
    ]


def _plot(out: pathlib.Path, rows: list[dict[str, Any]]) -> list[pathlib.Path]:
    if importlib.util.find_spec("matplotlib") is None:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharey=True)
    memories = sorted({r["extra"]["memory"] for r in rows if "memory" in r.get("extra", {})})
    for ax, direction in zip(axes, ("h2d", "d2h", "r2r"), strict=True):
        for memory in memories:
            for mode, style in (("", "o-"), (" queued", "s--")):
                pts = sorted(
                    (r["extra"]["size"], r)
                    for r in rows
                    if r.get("extra", {}).get("direction") == direction + mode and r["extra"].get("memory") == memory
                )
                if pts:
                    ax.semilogx(
                        [p[0] for p in pts], [p[1]["median"] for p in pts], style, label=f"pyoffload{mode}, {memory}"
                    )
        pts = sorted((r["extra"]["size"], r) for r in rows if r.get("extra", {}).get("direction") == direction)
        if pts:
            ax.semilogx([p[0] for p in pts], [p[1]["baseline_median"] for p in pts], "^-", label=pts[0][1]["baseline"])
            ax.set(xlabel="bytes", title=pts[0][1]["name"])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("GB/s (median)")
    path = out / "mpi_bandwidth.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    ap.add_argument(
        "--sizes",
        type=lambda text: [int(float(v) * MiB) for v in text.split(",")],
        help="copy sizes in MiB, comma-separated (default 1,4,16,64,256; --quick: 1,16,256)",
    )
    ap.add_argument("--small", type=int, default=4096, help="bytes of the small synchronous copies (default 4096)")
    ap.add_argument(
        "--memory",
        choices=("host", "device"),
        nargs="+",
        default=["host"],
        help="the servers' memory the bandwidth rows use, one set of rows each: the host device's "
        "(default) and/or a PoCL device's own (PYOFFLOAD_MPI_SERVE=opencl)",
    )
    ap.add_argument("--only", choices=("small", "launch", "bandwidth"), nargs="*", help="run only these parts")
    cfg = ap.parse_args(argv)
    cfg.repeats = 3 if cfg.quick else 5
    link = _link()
    start = time.perf_counter()
    # The machine's load beside the figures: on a shared machine it says how far to trust them.
    load_before = os.getloadavg()[0]
    pairs: dict[str, tuple[Any, Any]] = {}
    for memory in dict.fromkeys(cfg.memory):
        if memory == "device":
            found = _devices(1).get("device memory"), _devices(2).get("device memory")
            if None in found:
                sys.exit(
                    "--memory device: ranks 1 and 2 serve no device with memory of its own (PYOFFLOAD_MPI_SERVE=opencl)"
                )
            pairs[memory] = found
        else:
            pairs[memory] = _device(1), _device(2)
    dev1 = next(iter(pairs.values()))[0]
    sizes = cfg.sizes or (
        [1 * MiB, 16 * MiB, 256 * MiB] if cfg.quick else [1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB]
    )
    parts = set(cfg.only or ("small", "launch", "bandwidth"))
    figures = _small(link, cfg) if "small" in parts else []
    if "launch" in parts:
        figures += _launch(link, dev1, cfg)
    for memory, (one, two) in pairs.items():
        for size in sizes if "bandwidth" in parts else ():
            print(f"[mpi] {memory} memory, {fmt_size(size)} ...", flush=True)
            figures += _bandwidth(link, one, two, size, memory, cfg)
    rows = [f.as_dict() for f in figures]
    load_after = os.getloadavg()[0]
    meta = {
        "machine": f"{_machine()}; load (1-minute average) {load_before:.2f} at the start, {load_after:.2f} at the end",
        "load": [load_before, load_after],
        "mode": "quick" if cfg.quick else "full",
        "repeats": cfg.repeats,
        "backends": [f"mpi ({one.name}, {two.name}; {link.size} ranks)" for one, two in pairs.values()],
        "pyoffload": pyoffload.__version__,
        "seconds": time.perf_counter() - start,
        "skipped": [] if importlib.util.find_spec("matplotlib") else ["plot: matplotlib is not installed"],
    }
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "mpi.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=1))
    text = markdown(rows, meta)
    (cfg.out / "mpi.md").write_text(text)
    print(text)
    for path in _plot(cfg.out, rows):
        print("plot:", path)
    missed = [r for r in rows if r["met"] is False]
    print(f"{len(rows)} figures, {len(rows) - len(missed)} targets met, {len(missed)} missed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
