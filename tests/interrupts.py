"""Interrupt a call at each line it runs: a ``KeyboardInterrupt`` raised by a trace function, as
Ctrl-C would raise it between two lines.

Two kinds of line event are skipped, places where no code runs and so no Ctrl-C can arrive (the
interpreter checks for signals on entering a function, on backward jumps and after calls):

* the one a ``with`` statement's line gets again when its block is left, just before
  ``__exit__`` is called;
* the ``NOP`` of a ``try:`` line (Python 3.11 leaves it outside the exception table of an
  enclosing ``with``).

An exception raised at either by a trace function would skip ``__exit__`` and leave the lock of
every ``with lock:`` held: an artefact of tracing, not a place Ctrl-C can reach.
"""

from __future__ import annotations

import dis
import functools
import sys
from types import CodeType
from collections.abc import Callable, Iterable
from typing import Any


def interrupt_each_line(fn: Callable[[], Any], modules: Iterable[str], limit: int = 2000) -> int:
    """Call ``fn`` again and again, the n-th time interrupting it at its n-th line event inside
    ``modules`` (module names), until a call runs to the end uninterrupted.  Returns how many
    calls were interrupted.  The interrupt of each call is swallowed here; what it left behind is
    for the caller to check."""
    wanted = tuple(modules)
    interrupted = 0
    for n in range(limit):
        count = [0]
        fired = [False]

        def tracer(frame: Any, event: str, arg: Any) -> Any:
            if not frame.f_globals.get("__name__", "").startswith(wanted):
                return None
            return local

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "line" and not fired[0] and frame.f_lasti not in _with_exits(frame.f_code):
                if count[0] == n:
                    fired[0] = True
                    raise KeyboardInterrupt(f"injected at {frame.f_code.co_qualname}:{frame.f_lineno}")
                count[0] += 1
            return local

        sys.settrace(tracer)
        try:
            fn()
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        if not fired[0]:
            return interrupted

        interrupted += 1
    raise AssertionError(f"{fn!r} still ran more than {limit} lines")


@functools.cache
def _with_exits(code: CodeType) -> frozenset[int]:
    """Offsets in ``code`` of the instructions that only call a ``with`` block's ``__exit__``
    (``SWAP``/``COPY``, then ``LOAD_CONST None`` three times, then a call of two arguments): a line
    event there, at a line start or after a jump, comes before ``__exit__``."""
    every = list(dis.get_instructions(code))
    exits: set[int] = {i.offset for i in every if i.opname == "NOP"}
    ins = [i for i in every if i.opname not in ("CACHE", "PRECALL", "NOP")]
    for k in range(len(ins)):
        j = k
        while j < len(ins) and ins[j].opname in ("SWAP", "COPY"):
            j += 1
        window = ins[j : j + 4]
        if (
            len(window) == 4
            and all(w.opname == "LOAD_CONST" and w.argval is None for w in window[:3])
            and window[3].opname == "CALL"
            and window[3].arg == 2
        ):
            exits.update(i.offset for i in ins[k : j + 4])
    return frozenset(exits)
