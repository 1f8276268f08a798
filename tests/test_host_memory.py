"""The host backend's memory: large allocations ask for transparent huge pages."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from pyoffload.backend import AllocKind
from pyoffload.host import plugin as host


def test_allocations_from_4_mib_ask_for_huge_pages_over_their_whole_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int, int]] = []

    def madvise(start: int, length: int, advice: int) -> int:
        calls.append((start, length, advice))
        return 0

    monkeypatch.setattr(host, "_madvise", madvise)
    small = host.data_alloc_impl(None, None, host.HUGE_PAGES_FROM - 1, AllocKind.DEVICE)
    assert calls == [], "a small allocation asked for huge pages"
    size = host.HUGE_PAGES_FROM + 12345
    big = host.data_alloc_impl(None, None, size, AllocKind.DEVICE)
    try:
        assert len(calls) == 1
        start, length, advice = calls[0]
        page = host._PAGE
        assert advice == host.MADV_HUGEPAGE
        assert start % page == 0 and length % page == 0 and length > 0
        assert big <= start < big + page, "the advice does not start at the allocation's first whole page"
        assert start + length <= big + size < start + length + page, "the advice leaves out whole pages, or runs past"
    finally:
        host.data_free_impl(None, None, big, AllocKind.DEVICE)
        host.data_free_impl(None, None, small, AllocKind.DEVICE)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages are Linux's")
def test_the_kernel_takes_the_advice_where_it_lets_processes_ask() -> None:
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not mode.exists() or "[never]" in mode.read_text():
        pytest.skip("transparent huge pages are off on this system")
    size = 16 << 20
    ptr = host.data_alloc_impl(None, None, size, AllocKind.DEVICE)
    try:
        flags = _vm_flags(ptr + size // 2)  # (the first page, with the allocator's header, is left out)
        if flags is None:
            pytest.skip("/proc/self/smaps does not list VmFlags")
        assert "hg" in flags, f"the mapping of a {size}-byte allocation has no huge-page advice: {flags}"
    finally:
        host.data_free_impl(None, None, ptr, AllocKind.DEVICE)


def _vm_flags(address: int) -> Any:
    """The VmFlags of the mapping that holds ``address`` (``hg``: MADV_HUGEPAGE)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(" ", 1)[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    return None
