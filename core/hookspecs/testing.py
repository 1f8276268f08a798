"""Hooks: what the conformance suite needs from a backend."""

from __future__ import annotations

from typing import Any

from .marker import hookspec


@hookspec(firstresult=True)
def conformance_images_impl(device: Any) -> dict[str, bytes] | None:
    """Build or return the conformance suite's test programs in the backend's own image format.

    Return ``{"kernels": image, "ctor_dtor": image}``; the suite loads them with
    ``device.load_program``.  The programs are specified in ``docs/plugin-guide.md`` ("The
    conformance programs"); the host backend's ``pyoffload/host/conformance_kernels.c`` and
    ``conformance_ctor_dtor.c`` are the reference implementation.  Return ``None`` if the backend
    cannot build them here (the suite then skips the tests that need them).  May block (compiling).
    """


@hookspec(firstresult=True)
def known_failures_impl(device: Any) -> dict[str, str] | None:
    """*Optional.* Declare conformance tests this device is known to fail, after Unified Runtime's
    ``UUR_KNOWN_FAILURE_ON``: ``{test_function_name: reason}``.

    They are reported as skips with the reason and listed at the end of the run;
    ``PYOFFLOAD_RUN_KNOWN_FAILURES=1`` runs them anyway.  The default declares none.
    """
