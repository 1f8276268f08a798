"""A test-only wrapper plugin that makes a chosen ``*_impl`` hook fail on its N-th call."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from pyoffload.hooks.wrappers import wrap_every_hook


@wrap_every_hook
class FaultPlugin:
    def __init__(self, hook: str, nth: int = 1, exc: BaseException | None = None, backend: str | None = None) -> None:
        self.hook, self.nth, self.backend = hook, nth, backend
        self.exc = exc or RuntimeError(f"injected fault in {hook}")
        self.calls = 0
        self.fired = 0

    def around(self, hook: str, kwargs: dict[str, Any]) -> Generator[None, Any, Any]:
        if hook == self.hook:
            self.calls += 1
            if self.calls == self.nth:
                self.fired += 1
                raise self.exc
        return (yield)


def install(plugin: FaultPlugin):
    """Register ``plugin`` in every backend; returns the factory to pass to remove_wrapper."""
    from pyoffload import runtime

    def factory(backend: str) -> Any:
        return plugin if plugin.backend in (None, backend) else _Nothing()

    runtime.add_wrapper(factory)
    return factory


class _Nothing:
    pass
