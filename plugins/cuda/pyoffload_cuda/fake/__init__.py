"""A driver-level fake of ``pycuda.driver`` for testing pyoffload-cuda without a GPU.

Selected with ``PYOFFLOAD_CUDA_DRIVER=fake``; see :mod:`pyoffload_cuda.fake.driver`.
"""

from .driver import FakeDriver, FakeDriverWarning

__all__ = ["FakeDriver", "FakeDriverWarning"]
