"""Observer hooks: called on every registered plugin (tools, tracers, trackers), not only on the
device's backend; their results are ignored and their errors become ``TeardownWarning``."""

from __future__ import annotations

from typing import Any

from .marker import hookspec


@hookspec
def program_loaded(program: Any) -> None:
    """Observer: a :class:`pyoffload.Program` finished loading and its constructors ran.

    The program is fully usable: ``program.global_variable(name).read()`` works.
    """


@hookspec
def program_unloading(program: Any) -> None:
    """Observer: the program's destructors have run and it is about to be released.

    The last moment to read globals such as allocation-tracker or profiling counters::

        @hookimpl
        def program_unloading(program):
            if "__profile_counters" in {s.name for s in program.symbols()}:
                report(program.global_variable("__profile_counters").read())
    """
