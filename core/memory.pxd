# Declarations for Cython (an "augmenting .pxd"): the hot functions of memory.py become C functions
# that call each other and the pool directly, with typed locals; interpreted, memory.py runs as it is.

cimport cython

from pyoffload.locks cimport check_not_reentered, held_by_me
from pyoffload.locks cimport pending as _pending
from pyoffload.pool cimport Block, CachingAllocator


@cython.locals(pool=CachingAllocator, block=Block, exportable=bint, clash=list, live=dict)
cpdef allocate(ctx, device, size, kind, queue=*)

@cython.locals(pool=CachingAllocator, block=Block, users=object, forgotten=bint)
cpdef free(target, kind=*)

cpdef resolve(target, what, kind=*)
cpdef _claim(alloc, what)
cpdef _claim_locked(alloc, what)
cpdef bint _forget_locked(rt, alloc) except -1
cpdef _forgotten(rt, alloc)
cpdef unregister(rt, alloc)

@cython.locals(block=Block, pool=CachingAllocator)
cpdef release(alloc, queue=*, seq=*)
