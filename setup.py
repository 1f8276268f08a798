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

import os

from setuptools import Extension, setup

# The modules on the hot paths of allocation, free and launch, in import order.
COMPILED = [
    "core/locks.py",
    "core/addresses/sorted_index.py",
    "core/addresses/intervals.py",
    "core/pool.py",
    "core/memory.py",
]


def extensions() -> list[Extension]:
    if os.environ.get("PYOFFLOAD_COMPILE", "1") == "0":
        return []
    exts = [Extension("pyoffload._buffer", sources=["core/_buffer.c"], optional=True),
            Extension("pyoffload._launch", sources=["core/_launch.c"], depends=["core/_gcfields.h"])]
    try:
        from Cython.Build import cythonize
    except ImportError:  # a build without Cython: the modules run interpreted
        return exts
    modules = [Extension("pyoffload." + path[len("core/"):-len(".py")].replace("/", "."), [path], optional=True)
               for path in COMPILED]
    return exts + cythonize(
        modules, build_dir="build/cython", quiet=True,
        compiler_directives={
            "language_level": 3,
            "binding": True,  # functions keep their signatures, docstrings and introspection
            "annotation_typing": False,  # annotations stay hints: the same behaviour as interpreted
            "embedsignature": True,
        })


setup(ext_modules=extensions())
