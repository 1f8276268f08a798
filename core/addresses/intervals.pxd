# Declarations for Cython (an "augmenting .pxd"): RangeMap becomes an extension type whose fields
# and *_locked methods the compiled allocator reaches directly; interpreted, intervals.py runs as it is.

cdef class RangeMap:
    cdef public dict _entries
    cdef public object _index
    cdef public set _to_add
    cdef public set _to_remove
    cdef public bint _busy
    cdef public object lock
    cdef object __weakref__

    cdef _begin(self)
    cpdef list insert_locked(self, base, end, value, bint check=*)
    cpdef remove_locked(self, base)
