"""Conformance tests this backend is known to fail on a device, with the reason.

None at present on PoCL 3.1.  What OpenCL cannot do is reported as UNSUPPORTED instead, and the
suite skips those tests with the reason: ``device.lock`` (pinning memory OpenCL did not allocate
needs fine-grain *system* SVM, which PoCL's devices do not offer).
"""

from __future__ import annotations

from .handles import OclDevice


def known_failures(device: OclDevice) -> dict[str, str]:
    return {}
