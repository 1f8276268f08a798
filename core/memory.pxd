# Declarations for Cython (an "augmenting .pxd"): the hot functions of memory.py become C functions
# that call each other and the pool directly, with typed locals; interpreted, memory.py runs as it is.

cimport cython

from pyoffload cimport bufferbase
from pyoffload.locks cimport check_not_reentered, held_by_me
from pyoffload.locks cimport pending as _pending
from pyoffload.addresses.intervals cimport RangeMap
from pyoffload.pool cimport Block, CachingAllocator
from pyoffload.queue_core cimport clear_users, users_of


cdef class SpaceCount:
    cdef public Py_ssize_t live


cdef class LiveCounts:
    cdef public Py_ssize_t total
    cdef public dict per_space

    cpdef SpaceCount of(self, space)


cdef class AllocSite:
    cdef public object context
    cdef public object device
    cdef public object kind
    cdef public CachingAllocator pool
    cdef public object rt
    cdef public RangeMap registry
    cdef public object lock
    cdef public str space
    cdef public bint exportable
    cdef public object max_alloc
    cdef public LiveCounts counts
    cdef public SpaceCount count
    cdef public object tracker
    cdef public bint tracking
    cdef public bint open

    @cython.locals(alloc=Allocation, pool=CachingAllocator, block=Block, clash=list, counts=LiveCounts,
                   count=SpaceCount, registry=RangeMap)
    cpdef Allocation allocate(self, size, queue=*, alignment=*)


cdef class Allocation(bufferbase.BufferBase):
    cdef public object size
    cdef public object kind
    cdef public object device
    cdef public object context
    cdef public object origin
    cdef public bint owned
    cdef public object owner
    cdef public bint live
    cdef public Block pool_block
    cdef public CachingAllocator source_pool
    cdef public AllocSite site
    cdef public object users
    cdef public Py_ssize_t dl_exports
    cdef object __weakref__


@cython.locals(site=AllocSite)
cpdef AllocSite site_of(ctx, device, kind)
cpdef allocate(ctx, device, size, kind, queue=*, alignment=*)

@cython.locals(alloc=Allocation, site=AllocSite, pool=CachingAllocator, block=Block, users=list, forgotten=bint,
               given=bint)
cpdef _free(target, kind)

cpdef resolve(target, what, kind=*)
cpdef _claim(alloc, what)
cpdef _claim_locked(Allocation alloc, what)
@cython.locals(registry=RangeMap, site=AllocSite)
cpdef bint _forget_locked(rt, Allocation alloc) except -1
@cython.locals(site=AllocSite)
cpdef _forgotten(rt, Allocation alloc)
@cython.locals(sites=dict, site=AllocSite)
cpdef Allocation device_alloc(device, size, kind, alignment)
cpdef unregister(rt, alloc)

