"""``PYOFFLOAD_TRACE=1``: a wrapper plugin that logs every hook call of every backend.

It is an ordinary pluggy wrapper registered in every backend's plugin manager (see
:mod:`pyoffload.wrappers`), so backends contain no tracing code.  Each call is logged through
structlog (standard-library logger ``pyoffload``, level DEBUG) with the backend, hook, arguments,
result or error, and duration in milliseconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Generator
from typing import Any

from ..log import get_logger
from .wrappers import wrap_every_hook


def _short(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{type(value).__name__} {len(value)} bytes>"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


@wrap_every_hook
class TracingPlugin:
    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.log = get_logger()

    def around(self, hook: str, kwargs: dict[str, Any]) -> Generator[None, Any, Any]:
        if not logging.getLogger("pyoffload").isEnabledFor(logging.DEBUG):
            return (yield)  # nobody listens: do not pay for rendering the arguments
        start = time.perf_counter()
        args = {k: _short(v) for k, v in kwargs.items()}
        try:
            result = yield
        except BaseException as exc:
            ms = round((time.perf_counter() - start) * 1e3, 4)
            self.log.debug("hook", backend=self.backend, hook=hook, args=args, error=repr(exc), ms=ms)
            raise
        ms = round((time.perf_counter() - start) * 1e3, 4)
        self.log.debug("hook", backend=self.backend, hook=hook, args=args, result=_short(result), ms=ms)
        return result
