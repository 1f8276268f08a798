"""Allocation, free and the address registry, after liboffload's olMemAlloc / olMemFree /
olGetMemInfo tests and Unified Runtime's USM alloc, free and urUSMGetMemAllocInfo tests: every
kind, at its base and at an interior offset, with the error codes liboffload defines."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import pyoffload
from pyoffload import AllocKind, Context, Errc

from ._util import alloc_or_skip, errc_of, read

KINDS = list(AllocKind)
KIND_IDS = [k.name for k in KINDS]


@pytest.mark.parametrize("size", [1, 4097])
@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_alloc_of_each_kind_and_size_is_registered_until_freed(device, kind, size):
    a = alloc_or_skip(device, size, kind)
    assert a.ptr != 0 and a.size == size and not a.freed
    info = pyoffload.mem_info(a.ptr + size - 1)
    assert (info.base, info.size, info.kind, info.offset) == (a.ptr, size, kind, size - 1)
    pyoffload.free(a)
    assert a.freed
    assert errc_of(pyoffload.mem_info, a.ptr) is Errc.NOT_FOUND


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_mem_info_at_an_interior_offset(device, kind):
    """Any address inside an allocation reports the allocation: base, size, kind, device (none
    for HOST memory, which belongs to the context, not to a device) and context."""
    a = alloc_or_skip(device, 1024, kind)
    info = pyoffload.mem_info(a.ptr + 123)
    assert info.base == a.ptr and info.size == 1024 and info.kind is kind and info.offset == 123
    assert info.device is (None if kind is AllocKind.HOST else device)
    assert info.context is device.default_context and info.allocation is a
    a.free()


def test_mem_info_of_an_allocation_equals_that_of_its_pointer(device):
    a = device.alloc(777)
    assert pyoffload.mem_info(a) == pyoffload.mem_info(a.ptr)
    a.free()
    assert errc_of(pyoffload.mem_info, a) is Errc.INVALID_ARGUMENT


def test_one_past_the_end_is_not_found(device):
    a = device.alloc(1000)
    assert pyoffload.mem_info(a.ptr + 999).base == a.ptr
    assert errc_of(pyoffload.mem_info, a.ptr + 1000) is Errc.NOT_FOUND
    a.free()


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_size_zero_is_an_invalid_size_for_every_kind(device, kind):
    alloc_or_skip(device, 16, kind).free()  # the kind is supported: the error is about the size
    assert errc_of(device.alloc, 0, kind) is Errc.INVALID_SIZE


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_free_by_base_pointer_then_double_free(device, kind):
    a = alloc_or_skip(device, 256, kind)
    pyoffload.free(a.ptr)
    assert a.freed
    assert errc_of(a.free) is Errc.INVALID_ARGUMENT
    assert errc_of(pyoffload.free, a.ptr) is Errc.NOT_FOUND


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_free_with_a_kind_checks_it(device, kind):
    a = alloc_or_skip(device, 64, kind)
    other = next(k for k in KINDS if k is not kind)
    assert errc_of(pyoffload.free, a, other) is Errc.INVALID_ARGUMENT
    assert not a.freed, "a refused free released the memory"
    assert pyoffload.mem_info(a.ptr).allocation is a
    pyoffload.free(a, kind)
    assert a.freed


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_pointers_are_aligned_for_any_scalar(device, kind):
    """Every allocation is aligned at least as malloc's (16 bytes), whatever its size."""
    allocs = [alloc_or_skip(device, size, kind) for size in (1, 3, 17, 100, 4095)]
    for a in allocs:
        assert a.ptr % 16 == 0, f"{a!r} is not 16-byte aligned"
    for a in allocs:
        a.free()


def test_live_allocations_never_overlap(device):
    """Allocations of many sizes get disjoint ranges; each keeps what was written to it."""
    sizes = [1, 7, 64, 100, 511, 512, 513, 4096, 5000, 65536] * 2
    allocs = [device.alloc(s) for s in sizes]
    spans = sorted((a.ptr, a.ptr + a.size) for a in allocs)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, "two live allocations overlap"
    for i, a in enumerate(allocs):
        pyoffload.memfill(a, np.uint8(i))
    for i, a in enumerate(allocs):
        assert (read(a, np.uint8, a.size) == i).all(), f"allocation {i} was overwritten by another"
    for a in allocs:
        a.free()


def test_each_context_owns_its_allocations(device):
    c1, c2 = Context([device]), Context([device])
    a, b = c1.alloc(128), c2.alloc(128)
    assert pyoffload.mem_info(a.ptr).context is c1 and pyoffload.mem_info(b.ptr + 5).context is c2
    c1.close()
    assert a.freed and not b.freed
    assert pyoffload.mem_info(b.ptr).allocation is b
    c2.close()


def test_alloc_in_a_closed_context_is_invalid_context(device):
    ctx = Context([device])
    ctx.close()
    assert errc_of(ctx.alloc, 64) is Errc.INVALID_CONTEXT


def test_an_allocation_larger_than_the_device_allows_is_out_of_resources(device):
    limit = device.info["max_alloc_bytes"] or device.info["global_memory_bytes"]
    if limit is None:
        pytest.skip(f"{device.id} reports no allocation limit")
    assert errc_of(device.alloc, 2 * limit + 4096) is Errc.OUT_OF_RESOURCES


def test_free_of_null_is_an_invalid_null_pointer():
    assert errc_of(pyoffload.free, 0) is Errc.INVALID_NULL_POINTER


def test_mem_info_of_null_is_an_invalid_null_pointer():
    pyoffload.devices()  # a live runtime: the answer must not depend on initialisation
    assert errc_of(pyoffload.mem_info, 0) is Errc.INVALID_NULL_POINTER


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_alloc_with_an_alignment(device, kind):
    """urUSMDeviceAlloc's ``align``: the address is a multiple of it, from the pool (small sizes)
    and from segments of their own (large ones); the memory is whole and frees as any other."""
    alloc_or_skip(device, 16, kind).free()  # the kind is supported
    allocs = []
    for size, alignment in [(1, 1), (100, 2), (100, 64), (3000, 4096), (5000, 1 << 16), (3 << 20, 1 << 16)]:
        for _ in range(3):  # several live at once: they must not share bytes either
            a = device.alloc(size, kind, alignment=alignment)
            assert a.ptr % alignment == 0 and a.size == size, (a, alignment)
            info = pyoffload.mem_info(a.ptr + size - 1)
            assert (info.base, info.size, info.allocation) == (a.ptr, size, a)
            allocs.append(a)
    for i, a in enumerate(allocs):  # each whole and its own: a copy fills exactly its bytes
        pyoffload.memfill(a, np.uint8(i))
    for i, a in enumerate(allocs):
        assert (read(a, np.uint8, a.size) == i).all()
    spans = sorted((a.ptr, a.ptr + a.size) for a in allocs)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False))
    for a in allocs:
        pyoffload.free(a.ptr)
    again = device.default_context.alloc(64, kind, None if kind is AllocKind.HOST else device, alignment=256)
    assert again.ptr % 256 == 0 and again.kind is kind
    again.free()


@pytest.mark.parametrize("alignment", [0, 3, 48, -16, 2**64])
def test_an_alignment_that_is_no_power_of_two_is_invalid(device, alignment):
    assert errc_of(device.alloc, 64, AllocKind.DEVICE, alignment) is Errc.INVALID_ARGUMENT


@pytest.mark.parametrize("alignment", [16.0, "64", True])
def test_an_alignment_of_the_wrong_type_is_a_type_error(device, alignment):
    with pytest.raises(TypeError):
        device.alloc(64, alignment=alignment)
