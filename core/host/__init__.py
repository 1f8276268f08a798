"""The built-in host (CPU) backend; ``compile_c`` builds images for it."""

from .compiler import compile_c

__all__ = ["compile_c"]
