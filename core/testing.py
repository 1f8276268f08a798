"""The conformance suite's pytest plugin: ``pytest -p pyoffload.testing --pyargs pyoffload.conformance``.

* ``device``: every device discovered (ids like ``host-0``, ``opencl-pocl-cpu-0``),
  so the one suite runs against every installed backend, third-party ones included.
* ``device_pair``: two devices of one platform (skipped where there are none).
* ``images``: the backend's conformance programs (``conformance_images_impl``).
* Known failures (``known_failures_impl``, after UR's ``UUR_KNOWN_FAILURE_ON``) are skips with
  the reason, listed at the end; ``PYOFFLOAD_RUN_KNOWN_FAILURES=1`` runs them anyway.
* The run ends with a per-device table of passed / skipped / failed tests.
"""

from __future__ import annotations

import collections
import itertools
import random
from typing import Any

import pytest

from pyoffload import settings

_results: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
_known: list[tuple[str, str, str]] = []
_device_of: dict[str, str] = {}


def _devices() -> list[Any]:
    import pyoffload

    return pyoffload.devices()


def _pairs() -> list[tuple[Any, Any]]:
    pairs = []
    for a, b in itertools.permutations(_devices(), 2):
        if a.platform is b.platform and a.index < b.index:
            pairs.append((a, b))
    return pairs


def _cross() -> list[tuple[Any, Any]]:
    """One device of each non-host backend paired with the host device."""
    import pyoffload

    host = pyoffload.host_device()
    seen, out = set(), []
    for d in _devices():
        if d is not host and d.backend not in seen:
            seen.add(d.backend)
            out.append((d, host))
    return out


def _or_skip(pairs: list[tuple[Any, Any]], reason: str) -> list[Any]:
    return list(pairs) or [pytest.param(None, marks=pytest.mark.skip(reason=reason))]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "device" in metafunc.fixturenames:
        devs = _devices()
        metafunc.parametrize("device", devs, ids=[d.id for d in devs])
    if "device_pair" in metafunc.fixturenames:
        pairs = _pairs()
        metafunc.parametrize(
            "device_pair",
            _or_skip(pairs, "needs two devices of one platform"),
            ids=[f"{a.id}+{b.index}" for a, b in pairs] or ["none"],
        )
    if "cross_pair" in metafunc.fixturenames:
        pairs = _cross()
        metafunc.parametrize(
            "cross_pair",
            _or_skip(pairs, "needs a non-host backend"),
            ids=[f"{a.id}+{b.id}" for a, b in pairs] or ["none"],
        )


def _item_device(item: pytest.Item) -> Any:
    params = getattr(getattr(item, "callspec", None), "params", {})
    for key in ("device", "device_pair", "cross_pair"):
        value = params.get(key)
        if value is not None:
            return value[0] if isinstance(value, tuple) else value
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    device = _item_device(item)
    if device is None:
        return
    _device_of[item.nodeid] = device.id
    known = device.disp.known_failures_impl(device.handle) or {}
    name = getattr(item, "originalname", item.name)
    reason = known.get(name)
    if reason and not settings.flag("PYOFFLOAD_RUN_KNOWN_FAILURES"):
        _known.append((device.id, name, reason))
        pytest.skip(f"known failure on {device.id}: {reason}")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    dev = _device_of.get(report.nodeid, "(no device)")
    if (
        report.when == "call"
        or (report.when == "setup" and report.outcome != "passed")
        or (report.when == "teardown" and report.outcome == "failed")
    ):
        _results[dev][report.outcome] += 1


@pytest.fixture
def images(device: Any) -> dict[str, bytes]:
    imgs: dict[str, bytes] = device.disp.conformance_images_impl(device.handle)
    if not imgs:
        pytest.skip(f"backend {device.backend!r} provides no conformance images")
    return imgs


@pytest.fixture
def queue(device: Any) -> Any:
    q = device.create_queue()
    yield q
    if q.live:
        q.destroy()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Shut the runtime down while pytest still watches: a backend's leak checks and teardown
    warnings belong to the run (at interpreter exit, pyoffload leaves memory to the process)."""
    from pyoffload import runtime

    if runtime.active() is not None:
        import pyoffload

        pyoffload.shutdown()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _results:
        return
    tr = terminalreporter
    tr.section("pyoffload conformance by device")
    tr.write_line(f"{'device':<44} {'passed':>7} {'skipped':>8} {'failed':>7}")
    for dev, counts in sorted(_results.items()):
        tr.write_line(f"{dev:<44} {counts['passed']:>7} {counts['skipped']:>8} {counts['failed']:>7}")
    if _known:
        tr.write_line("known failures (skipped; PYOFFLOAD_RUN_KNOWN_FAILURES=1 runs them):")
        for dev, name, reason in _known:
            tr.write_line(f"  {dev}: {name}: {reason}")


def image_mutant(image: bytes, seed: int, head: int = 512) -> bytes:
    """A mutant of a valid device image for a backend's fuzz tests of its image reader: a
    truncation (three in ten), or one to seven random bytes overwritten, mostly in the first
    ``head`` bytes, where formats keep their lengths and offsets.  The same seed gives the same
    mutant, so a failure reproduces."""
    rng = random.Random(seed)
    if rng.random() < 0.3:
        return image[: rng.randrange(0, len(image))]
    data = bytearray(image)
    for _ in range(rng.randrange(1, 8)):
        pos = rng.randrange(min(len(data), head)) if rng.random() < 0.7 else rng.randrange(len(data))
        data[pos] = rng.randrange(256)
    return bytes(data)
