"""The matrix's pytest plugin, loaded into every row: a row that dies still says what happened.

pytest writes its summary and the row's JUnit file only at the end, so a row that a crash (a
signal, a sanitizer's abort) or the matrix's timeout ends leaves neither.  This plugin reports
each failure on stderr the moment it happens, one line with the test and the error, and keeps the
id of the test that is running in the file ``PYOFFLOAD_MATRIX_RUNNING`` names, which the matrix
reads when the row ends without a result.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    path = os.environ.get("PYOFFLOAD_MATRIX_RUNNING")
    if path:
        with open(path, "w") as f:
            f.write(nodeid)


def pytest_runtest_logreport(report: Any) -> None:
    if not report.failed:
        return
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    if crash is not None:
        what = crash.message.splitlines()[0] if crash.message else "failed"
    else:
        lines = str(report.longrepr).strip().splitlines()
        what = lines[-1] if lines else "failed"
    sys.stderr.write(f"\nFAILED {report.nodeid} ({report.when}): {what[:300]}\n")
    sys.stderr.flush()
