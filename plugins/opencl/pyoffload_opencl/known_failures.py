"""Conformance tests this backend is known to fail on a device, with the reason."""

from __future__ import annotations

from .handles import SVM_FINE_GRAIN_SYSTEM, OclDevice


def known_failures(device: OclDevice) -> dict[str, str]:
    failures: dict[str, str] = {}
    if not device.svm_caps & SVM_FINE_GRAIN_SYSTEM:
        reason = (
            "OpenCL cannot pin host memory it did not allocate: device.lock needs fine-grain "
            "system SVM, which this device lacks"
        )
        failures.update(dict.fromkeys(_LOCK_TESTS, reason))
    return failures


# Filled in against the conformance suite's test names.
_LOCK_TESTS: tuple[str, ...] = ()
