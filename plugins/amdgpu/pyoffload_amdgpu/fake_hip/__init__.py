"""A driver-level fake of hip-python's ``hip.hip``, for running the AMDGPU backend without a GPU.

Select it with ``PYOFFLOAD_AMDGPU_DRIVER=fake``; ``PYOFFLOAD_AMDGPU_FAKE_DEVICES`` sets the number
of devices (default 2) and ``PYOFFLOAD_AMDGPU_FAKE_MEMORY`` their memory in bytes (default 4 GiB).
See :mod:`pyoffload_amdgpu.fake_hip.driver` for what it models and checks.
"""

from .driver import FakeHip, FakeHipWarning
from .memory import Fault
from .types import FakePointer

__all__ = ["FakeHip", "FakeHipWarning", "FakePointer", "Fault"]
