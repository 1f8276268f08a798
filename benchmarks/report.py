"""Results as JSON, a markdown table, and PNG plots of the scaling runs."""

from __future__ import annotations

import importlib.util
import json
import pathlib
from typing import Any


def _num(x: float | None) -> str:
    if x is None:
        return "—"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    if abs(x) >= 0.1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Machine: {meta['machine']}; mode: {meta['mode']}; repeats per figure: {meta['repeats']}; "
        f"backends: {', '.join(meta['backends'])}; run took {meta['seconds']:.0f} s.",
        "",
        "Ratio = pyoffload ÷ baseline, per repeat (median [min–max]); for GB/s and cycles/s higher is better, "
        "for µs and ms lower is better.",
        "",
        "| suite | measurement | backend | param | pyoffload (median [min–max]) | baseline | baseline median "
        "| ratio median [min–max] | target | met |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        val = f"{_num(r['median'])} {r['unit']} [{_num(r['min'])}–{_num(r['max'])}]"
        ratio = (
            f"{r['ratio_median']:.3f} [{r['ratio_min']:.3f}–{r['ratio_max']:.3f}]"
            if r["ratio_median"] is not None
            else "—"
        )
        if r.get("diff_median") is not None and r["unit"] == "ms":
            ratio += f"; Δ {r['diff_median']:+.1f} ms [{r['diff_min']:+.1f}–{r['diff_max']:+.1f}]"
        met = {True: "yes", False: "**NO**", None: ""}[r["met"]]
        base = r["baseline"] or "—"
        lines.append(
            f"| {r['suite']} | {r['name']} | {r['backend']} | {r['param']} | {val} | {base} | "
            f"{_num(r['baseline_median'])} | {ratio} | {r['target'] or ''} | {met} |"
        )
    notes = [(r, r["note"]) for r in rows if r["note"]]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {r['name']} ({r['backend']}): {n}" for r, n in notes]
    tops = [r for r in rows if r.get("extra", {}).get("importtime_top_ms")]
    for r in tops:
        top = ", ".join(f"{name} {ms:.0f} ms" for name, ms in r["extra"]["importtime_top_ms"][:8])
        lines += ["", f"Slowest imports (cumulative, -X importtime) for “{r['name']}”: {top}"]
    if meta.get("skipped"):
        lines += ["", "Not measured:", ""] + [f"- {s}" for s in meta["skipped"]]
    return "\n".join(lines) + "\n"


def write(outdir: pathlib.Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[pathlib.Path]:
    """Write the JSON, the markdown and the plots; without matplotlib the plots are listed as not
    drawn (a GPU machine may lack it) and the rest is written all the same."""
    outdir.mkdir(parents=True, exist_ok=True)
    if importlib.util.find_spec("matplotlib") is None:
        meta["skipped"].append("plots: matplotlib is not installed (pip install -r benchmarks/requirements.txt)")
        drawn: list[pathlib.Path] = []
    else:
        drawn = plots(outdir, rows)
    (outdir / "results.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=1))
    (outdir / "results.md").write_text(markdown(rows, meta))
    return drawn


def _series(rows: list[dict[str, Any]], suite: str, name: str, backend: str, key: str) -> tuple[list, list, list]:
    # The CUDA suite measures the same alloc and lookup figures under its own suite name.
    suites = (suite, "cuda") if suite == "alloc" else (suite,)
    pts = sorted(
        (r["extra"][key], r)
        for r in rows
        if r["suite"] in suites and r["name"] == name and r["backend"] == backend and "extra" in r
    )
    return [p[0] for p in pts], [p[1]["median"] for p in pts], [p[1] for p in pts]


def plots(outdir: pathlib.Path, rows: list[dict[str, Any]]) -> list[pathlib.Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    backends = sorted({r["backend"] for r in rows})

    def save(fig: Any, name: str) -> None:
        path = outdir / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    for b in backends:
        # alloc + free against size
        x, on, on_rows = _series(rows, "alloc", "alloc+free, pool on", b, "size")
        if x:
            _, off, _ = _series(rows, "alloc", "alloc+free, pool off", b, "size")
            fig, ax = plt.subplots(figsize=(6.4, 4.2))
            ax.loglog(x, on, "o-", label="pyoffload, pool on")
            ax.loglog(x, off, "s--", label="pyoffload, pool off")
            ax.loglog(x, [r["baseline_median"] for r in on_rows], "^-", label=on_rows[0]["baseline"])
            ax.set(xlabel="allocation size (bytes)", ylabel="µs per alloc+free (median)", title=f"alloc + free, {b}")
            ax.legend()
            ax.grid(True, which="both", alpha=0.3)
            save(fig, f"alloc_{b}.png")
        # memcpy bandwidth against size
        fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharey=True)
        drew = False
        for ax, direction in zip(axes, ("h2d", "d2h", "d2d"), strict=True):
            x, ours, rr = _series(rows, "memcpy", f"memcpy {direction}", b, "size")
            if not x:
                continue
            drew = True
            ax.semilogx(x, ours, "o-", label="pyoffload.memcpy")
            ax.semilogx(x, [r["baseline_median"] for r in rr], "^-", label=rr[0]["baseline"])
            _, _, nr = _series(rows, "memcpy", f"memcpy {direction} vs numpy", b, "size")
            ax.semilogx(x, [r["baseline_median"] for r in nr], ":", color="grey", label="numpy copyto (limit)")
            if direction != "d2d":
                xp, pin, _ = _series(rows, "memcpy", f"memcpy {direction}, pinned (HOST alloc) vs unpinned", b, "size")
                ax.semilogx(xp, pin, "s--", label="pyoffload, pinned HOST alloc")
            ax.set(xlabel="bytes", title=f"{direction}, {b}")
            ax.grid(True, which="both", alpha=0.3)
        if drew:
            axes[0].set_ylabel("GB/s (median)")
            axes[0].legend(fontsize=7)
            save(fig, f"memcpy_{b}.png")
        else:
            plt.close(fig)
    # lookup scaling, per backend
    for b in backends:
        x, lk, _ = _series(rows, "alloc", "mem_info(interior ptr) lookup", b, "count")
        if not x:
            continue
        _, fr, _ = _series(rows, "alloc", "free(base ptr)", b, "count")
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        ax.semilogx(x, lk, "o-", label="mem_info(interior pointer)")
        ax.semilogx(x, fr, "s-", label="free(base pointer)")
        ax.set(xlabel="live allocations", ylabel="µs per call (median)", title=f"registry lookup, {b}", ylim=(0, None))
        ax.legend()
        ax.grid(True, which="both", alpha=0.3)
        save(fig, f"lookup_{b}.png")
    x, lk, _ = _series(rows, "pinning", "is_pinned(ptr) lookup", "host", "count")
    if x:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        ax.semilogx(x, lk, "o-", label="is_pinned(ptr)")
        for name, style in (("device.lock(slice)", "s-"), ("device.unlock(slice)", "^-")):
            _, v, _ = _series(rows, "pinning", name, "host", "count")
            ax.semilogx(x, v, style, label=name)
        ax.set(xlabel="locked ranges", ylabel="µs per call (median)", title="pinned-map scaling, host", ylim=(0, None))
        ax.legend()
        ax.grid(True, which="both", alpha=0.3)
        save(fig, "pinning_host.png")
    return written
