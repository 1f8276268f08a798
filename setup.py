"""The compiled parts of pyoffload: the buffer-protocol base type of allocations (core/_buffer.c;
Python 3.11 has no Python-level buffer protocol), the sorted address index of the address maps
(core/_index.c), the C fast path of the common allocation and free (core/_fastpath.c) and a
launch's hand-over to its queue (core/_launch.c).
Everything else is in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("pyoffload._buffer", sources=["core/_buffer.c"]),
    Extension("pyoffload._index", sources=["core/_index.c"]),
    Extension("pyoffload._fastpath", sources=["core/_fastpath.c"], depends=["core/_buffer.h", "core/_gcfields.h"]),
    Extension("pyoffload._launch", sources=["core/_launch.c"], depends=["core/_gcfields.h"]),
])
