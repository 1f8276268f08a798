"""Library-safe structured logging.

pyoffload never configures the application's logging.  It wraps the standard-library logger
``pyoffload`` with a private structlog processor chain (the recipe from structlog issue #815), so
events go wherever the application routes that logger, and structlog's global configuration is
left alone.  structlog is imported on first use: it costs ~55 ms, and most processes never log.
"""

from __future__ import annotations

import logging
from typing import Any

_LOGGER_NAME = "pyoffload"
_logger: Any = None


def get_logger() -> Any:
    """Return the library's bound structlog logger, creating it on first use."""
    global _logger
    if _logger is None:
        import structlog

        _logger = structlog.wrap_logger(
            logging.getLogger(_LOGGER_NAME),
            processors=[
                structlog.stdlib.filter_by_level,
                structlog.processors.TimeStamper(fmt="iso"),
                structlog.processors.format_exc_info,
                structlog.processors.KeyValueRenderer(key_order=["event"], sort_keys=False),
            ],
            wrapper_class=structlog.stdlib.BoundLogger,
            cache_logger_on_first_use=True,
        )
    return _logger
