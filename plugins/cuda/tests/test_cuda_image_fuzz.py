"""The CUDA image readers (format detection, cubin/PTX/fatbin symbol tables) run before the driver
sees an image: fuzzed with mutants and truncations of real nvcc output, they raise nothing but
``InvalidBinaryError``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyoffload import InvalidBinaryError
from pyoffload.testing import image_mutant
from pyoffload_cuda import images


def read(image: bytes) -> None:
    fmt = images.detect_format(image)
    images.image_symbols(image, fmt)


@pytest.mark.parametrize("fmt", ["cubin", "fatbin", "ptx"])
@settings(max_examples=300, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32))
def test_mutated_images_are_read_or_refused(built, fmt, seed):
    image = image_mutant(built[fmt]["kernels"], seed)
    try:
        read(image)
    except InvalidBinaryError:
        pass


@pytest.mark.parametrize("fmt", ["cubin", "fatbin"])
def test_every_truncation_of_the_headers_is_refused(built, fmt):
    image = built[fmt]["kernels"]
    read(image)
    for cut in range(0, 256, 3):
        with pytest.raises(InvalidBinaryError):
            read(image[:cut])
