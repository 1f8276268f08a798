"""The one compiled part of pyoffload: the buffer-protocol base type of allocations (see
core/_buffer.c; Python 3.11 has no Python-level buffer protocol).  Everything else is in
pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("pyoffload._buffer", sources=["core/_buffer.c"])])
