"""The compiled parts of pyoffload; everything else is in pyproject.toml.

* ``pyoffload._buffer`` (core/_buffer.c): the buffer-protocol base type of allocations.  Python
  3.11 has no Python-level buffer protocol (PEP 688 came with 3.12), so ``memoryview(allocation)``
  needs a type with ``bf_getbuffer``; on 3.12 and later, without a compiler, a Python base type
  with ``__buffer__`` takes its place (core/bufferbase.py).
* The hot modules of the core, compiled by Cython from their Python source (pure-Python mode, as
  CuPy and cuda.core compile theirs): the same source runs interpreted where they are not built.

Every extension is optional: without a C compiler (or with ``PYOFFLOAD_COMPILE=0``) the install
still succeeds and runs the same code interpreted (slower: see the README).
"""

import filecmp
import glob
import os
import shutil

from setuptools import Extension, setup

# The modules on the hot paths of allocation, free and launch, in import order.
COMPILED = [
    "core/locks.py",
    "core/addresses/sorted_index.py",
    "core/addresses/intervals.py",
    "core/pool.py",
    "core/memory.py",
    "core/queue_core.py",
    "core/launch.py",
    "core/queue.py",
    "core/transfer.py",
    "core/program.py",
    "core/api.py",
    "core/context.py",
]

# Their declarations (Cython's "augmenting .pxd" files beside them): extension types and typed
# fields when compiled; interpreted, the .py files run as they are.
PXD = sorted(glob.glob("core/**/*.pxd", recursive=True))


def pxd_include() -> str:
    """A folder holding core/'s .pxd files as ``pyoffload/**.pxd``: Cython looks a module's .pxd up
    under the module's full name (``pyoffload.pool``), and the package's folder is core/."""
    root = os.path.join("build", "cython", "include")
    for package in ("", "addresses"):  # Cython takes a folder for a package if it has __init__
        os.makedirs(os.path.join(root, "pyoffload", package), exist_ok=True)
        open(os.path.join(root, "pyoffload", package, "__init__.pxd"), "a").close()
    for src in PXD:
        dst = os.path.join(root, "pyoffload", os.path.relpath(src, "core"))
        if not os.path.exists(dst) or not filecmp.cmp(src, dst, shallow=False):
            shutil.copy2(src, dst)
    return root


def extensions() -> list[Extension]:
    if os.environ.get("PYOFFLOAD_COMPILE", "1") == "0":
        return []
    exts = [Extension("pyoffload._buffer", sources=["core/_buffer.c"], optional=True)]
    try:
        from Cython.Build import cythonize
    except ImportError:  # a build without Cython: the modules run interpreted
        return exts
    modules = [
        Extension(
            "pyoffload." + path[len("core/") : -len(".py")].replace("/", "."),
            [path],
            optional=True,
            depends=PXD + ["core/_buffer.h"],
            include_dirs=["core"],
        )  # memory.pxd extends _buffer's type
        for path in COMPILED
    ]
    compiled = cythonize(
        modules,
        build_dir="build/cython",
        quiet=True,
        include_path=[pxd_include()],
        compiler_directives={
            "language_level": 3,
            "binding": True,  # functions keep their signatures, docstrings and introspection
            "annotation_typing": False,  # annotations stay hints: the same behaviour as interpreted
            "embedsignature": True,
        },
    )
    for ext in compiled:  # cythonize makes new Extensions, and drops `optional` on the way
        ext.optional = True
    return exts + compiled


setup(ext_modules=extensions())
