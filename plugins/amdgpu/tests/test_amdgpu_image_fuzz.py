"""The AMDGPU code-object reader (offload bundle, ELF, metadata note) runs before HIP sees an
image: fuzzed with mutants and truncations of a real clang-built code object, it raises nothing
but ``InvalidBinaryError``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amdgpu_test_support import conformance_images
from pyoffload import InvalidBinaryError
from pyoffload.testing import image_mutant
from pyoffload_amdgpu import codeobject


@pytest.fixture(scope="module")
def image() -> bytes:
    return conformance_images()["kernels"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32))
def test_mutated_code_objects_are_read_or_refused(image, seed):
    try:
        codeobject.parse(image_mutant(image, seed, head=1024), "gfx90a")
    except InvalidBinaryError:
        pass


def test_truncated_code_objects_are_refused(image):
    assert codeobject.parse(image, "gfx90a").kernels
    for cut in range(0, 512, 7):
        with pytest.raises(InvalidBinaryError):
            codeobject.parse(image[:cut], "gfx90a")
