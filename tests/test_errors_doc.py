"""docs/errors.md and the code agree: every failure mode it lists is a row of the bad-input table
with the documented errc (or TypeError), and every class it names exists with that errc."""

from __future__ import annotations

import re
from pathlib import Path

import pyoffload

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "errors.md").read_text()


def _bad_input_rows() -> dict[str, tuple[str, str]]:
    """``{row id: (exception class name, errc name or "None")}`` from the bad-input table."""
    source = (ROOT / "tests" / "reliability" / "test_bad_input.py").read_text()
    return {
        m[0]: (m[1], m[2].removeprefix("Errc.")) for m in re.findall(r'Row\(\s*"([^"]+)",\s*(\w+),\s*([\w.]+)', source)
    }


def test_every_documented_failure_is_tested_with_that_errc():
    rows = _bad_input_rows()
    documented = re.findall(r"^\| `[^`]+` \| [^|]+ \| (\w+) \| `([\w-]+)` \|$", DOC, re.M)
    assert len(documented) >= 70
    for errc, test_id in documented:
        assert test_id in rows, f"docs/errors.md cites {test_id}, which the bad-input table lacks"
        exc, tested = rows[test_id]
        if errc == "TypeError":
            assert exc == "TypeError" and tested == "None", test_id
        else:
            assert tested == errc, f"{test_id}: documented {errc}, tested {tested}"


def test_documented_classes_carry_their_errc():
    for cls_name, codes in re.findall(r"^\| `(\w+Error)` \| ([^|]+) \|", DOC, re.M):
        cls = getattr(pyoffload, cls_name)
        assert issubclass(cls, pyoffload.OffloadError)
        listed = [pyoffload.Errc[name] for name in re.findall(r"`(\w+)`", codes)]
        if len(listed) == 1 and cls is not pyoffload.OffloadError:  # the base class always names its errc
            assert cls.default_errc is listed[0], cls_name


def test_zero_sized_copy_and_fill_succeed(host):
    a = host.alloc(16)
    import numpy as np

    assert pyoffload.memcpy(a, np.zeros(4, np.uint8), 0) is None
    q = host.create_queue()
    ev = q.memcpy(a, np.zeros(4, np.uint8), 0)
    assert ev.is_complete
    assert q.memfill(a, b"\x01", 0).is_complete
    q.destroy()
    a.free()
