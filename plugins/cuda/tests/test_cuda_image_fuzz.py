"""The CUDA image readers (format detection, cubin/PTX/fatbin symbol tables) run before the driver
sees an image: fuzzed with mutants and truncations of real nvcc output, they raise nothing but
``InvalidBinaryError``."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyoffload import InvalidBinaryError
from pyoffload_cuda import images


def mutant(data: bytes, seed: int) -> bytes:
    rng = random.Random(seed)
    if rng.random() < 0.3:
        return data[: rng.randrange(0, len(data))]
    b = bytearray(data)
    for _ in range(rng.randrange(1, 8)):
        # mostly the headers and tables near the start, where the lengths and offsets live
        pos = rng.randrange(min(len(b), 512)) if rng.random() < 0.7 else rng.randrange(len(b))
        b[pos] = rng.randrange(256)
    return bytes(b)


def read(image: bytes) -> None:
    fmt = images.detect_format(image)
    images.image_symbols(image, fmt)


@pytest.mark.parametrize("fmt", ["cubin", "fatbin", "ptx"])
@settings(max_examples=300, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32))
def test_mutated_images_are_read_or_refused(built, fmt, seed):
    image = mutant(built[fmt]["kernels"], seed)
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
