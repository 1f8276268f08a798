"""The CUDA benchmarks' kernels (``bench_kernels.cu``) as PTX, built ahead of time or here.

A GPU machine may have no nvcc, so ``scripts/build_wheelhouse.sh`` builds the PTX where the
toolkit is (``python benchmarks/_cuda_kernels.py --out wheelhouse/cuda-kernels``) and ships it in
the wheelhouse.  :func:`load` takes, in order: ``$PYOFFLOAD_BENCH_CUDA_KERNELS/bench_kernels.ptx``,
``wheelhouse/cuda-kernels/bench_kernels.ptx`` in the repository, or a fresh nvcc build.  PTX for
an old virtual architecture is JIT-compiled by the driver for any newer GPU.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE / "bench_kernels.cu"
PTX_NAME = "bench_kernels.ptx"
SHIPPED = HERE.parent / "wheelhouse" / "cuda-kernels"
# sm_75 is the oldest architecture CUDA 13's nvcc targets; its PTX runs on every later GPU.
ARCH = os.environ.get("PYOFFLOAD_BENCH_CUDA_ARCH", "sm_75")


def build(out_dir: pathlib.Path) -> pathlib.Path:
    """Compile ``bench_kernels.cu`` to PTX in ``out_dir``; raises if nvcc is missing or fails."""
    nvcc = shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None
    )
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH and no prebuilt bench_kernels.ptx was found")
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / PTX_NAME
    subprocess.run(
        [nvcc, "-ptx", f"-arch={ARCH}", "-o", str(out), str(SOURCE)], check=True, capture_output=True, text=True
    )
    return out


def load() -> tuple[bytes, str]:
    """(PTX bytes, where they came from)."""
    env = os.environ.get("PYOFFLOAD_BENCH_CUDA_KERNELS")
    for d in ([pathlib.Path(env)] if env else []) + [SHIPPED]:
        if (d / PTX_NAME).is_file():
            return (d / PTX_NAME).read_bytes(), str(d / PTX_NAME)
    with tempfile.TemporaryDirectory(prefix="pyoffload-bench-") as tmp:
        path = build(pathlib.Path(tmp))
        return path.read_bytes(), f"built now by nvcc ({ARCH})"


def mangled(ptx: bytes) -> dict[str, str]:
    """Plain kernel name -> the mangled entry name in the PTX (``iota_i32`` -> ``_Z8iota_i32Piii``)."""
    out = {}
    for name in re.findall(rb"\.entry\s+(_Z\d+\w+?)\s*\(", ptx):
        text = name.decode()
        m = re.match(r"_Z(\d+)", text)
        assert m is not None
        start = len(m.group(0))
        out[text[start : start + int(m.group(1))]] = text
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description="build the CUDA benchmarks' PTX")
    ap.add_argument("--out", type=pathlib.Path, required=True)
    path = build(ap.parse_args().out)
    print(f"{path} ({path.stat().st_size} bytes, {ARCH})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
