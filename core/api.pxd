# Declarations for Cython (an "augmenting .pxd"): ``Device.alloc`` and ``Context.alloc`` call the
# allocator's entry points as C functions; interpreted, api.py imports them as it is.

from pyoffload.memory cimport allocate, device_alloc
