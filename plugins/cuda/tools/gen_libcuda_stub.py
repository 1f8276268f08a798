"""Generate a link-time stand-in for the CUDA driver library (libcuda.so.1) from cuda.h.

pycuda's extension links against ``-lcuda``.  A machine without an NVIDIA driver has no
libcuda, and this toolkit ships no ``lib64/stubs``.  This script preprocesses the toolkit's own
``cuda.h`` (so the ``cuMemAlloc -> cuMemAlloc_v2`` style renames resolve exactly as they do for
pycuda's build), collects every driver entry point and writes a C file defining each one as a
function returning ``CUDA_ERROR_NO_DEVICE`` (100).  Compiled with ``-soname libcuda.so.1`` it
gives pycuda's extension the same ``DT_NEEDED`` entry the real library would.

The stand-in is for the linker only: it lives in a build directory that is never on the
loader's path, so importing pycuda.driver on a driver-less machine fails with the loader's own
reason, and on a GPU machine resolves to the real driver.

Usage: python gen_libcuda_stub.py CUDA_ROOT OUT.c
"""

from __future__ import annotations

import re
import subprocess
import sys

CUDA_ERROR_NO_DEVICE = 100
# The driver API headers pycuda includes (GL interop is not enabled in this build).
HEADERS = ("cuda.h", "cudaProfiler.h")
ENTRY_POINT = re.compile(r"\bCUresult\s+(cu\w+)\s*\(")
# Callers print these strings, so they must be valid even when nothing else works.
SPECIAL = {
    "cuGetErrorString": "int cuGetErrorString(int e, const char **s) "
    '{ if (s) *s = "no CUDA driver (link-time stand-in)"; return 0; }',
    "cuGetErrorName": 'int cuGetErrorName(int e, const char **s) { if (s) *s = "CUDA_ERROR_NO_DEVICE"; return 0; }',
}


def driver_entry_points(cuda_root: str) -> list[str]:
    source = "".join(f"#include <{h}>\n" for h in HEADERS)
    pre = subprocess.run(
        ["cc", "-E", "-P", "-x", "c", f"-I{cuda_root}/include", "-"],
        input=source,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(set(ENTRY_POINT.findall(pre)))


def main() -> int:
    cuda_root, out = sys.argv[1], sys.argv[2]
    names = driver_entry_points(cuda_root)
    if not names:
        print(f"no driver entry points found in {cuda_root}/include", file=sys.stderr)
        return 1
    with open(out, "w") as f:
        f.write("/* Link-time stand-in for libcuda.so.1: every entry point reports no device. */\n")
        for name in names:
            f.write(SPECIAL.get(name, f"int {name}(void) {{ return {CUDA_ERROR_NO_DEVICE}; }}") + "\n")
    print(f"{len(names)} driver entry points -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
