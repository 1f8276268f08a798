cimport cython

from pyoffload.locks cimport check_not_reentered

# Declarations that make the classes of pool.py extension types when Cython compiles it (an
# "augmenting .pxd"); interpreted, pool.py runs as it is.  Field meanings and their lock: pool.py.

cdef class Block

cdef class Segment:
    cdef public object base
    cdef public object size
    cdef public bint pooled
    cdef public Block first

    cpdef bint in_use(self)


cdef class Block:
    cdef public object ptr
    cdef public Py_ssize_t size
    cdef public Segment segment
    cdef public Block prev
    cdef public Block next
    cdef public bint free
    cdef public object queue
    cdef public object seq

    cpdef bint usable_by(self, queue)


cdef class CachingAllocator:
    cdef public object _alloc
    cdef public object backend_free
    cdef public object on_exhausted
    cdef public object _lock
    cdef public object max_request
    cdef public object limit
    cdef public object release_threshold
    cdef public dict _lists
    cdef public list _sizes
    cdef public dict _segments
    cdef public Py_ssize_t in_use
    cdef public Py_ssize_t reserved
    cdef public Py_ssize_t peak_in_use
    cdef public Py_ssize_t peak_reserved
    cdef public Py_ssize_t allocations
    cdef public Py_ssize_t hits
    cdef public Py_ssize_t backend_allocs
    cdef public Py_ssize_t backend_frees
    cdef object __weakref__

    @cython.locals(block=Block)
    cpdef Block take(self, size, queue=*)
    @cython.locals(free=list, block=Block, fit=Block, need=Py_ssize_t)
    cpdef Block take_cached(self, size, queue=*)
    cpdef give(self, Block block, queue=*, seq=*)
    cpdef give_locked(self, Block block, queue, seq)
    @cython.locals(free=list)
    cdef _put(self, Block block)
    cdef _unlist(self, Block block)
    cpdef _repair(self)
    cdef Block _best_fit(self, need, queue)
    @cython.locals(rest=Block)
    cdef Block _use(self, Block block, Py_ssize_t need)
    cpdef Py_ssize_t _coalesce(self) except -1
