"""The built-in host (CPU) backend; ``compile_c`` builds images for it.

``compile_c`` is imported on first use: the compiler driver (subprocess, hashlib, tempfile) is
not needed to find devices."""

from __future__ import annotations

from typing import Any

__all__ = ["compile_c"]


def __getattr__(name: str) -> Any:
    if name == "compile_c":
        from .compiler import compile_c

        return compile_c
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
