# Declarations for Cython (an "augmenting .pxd"): Event, made for every enqueued operation, becomes
# an extension type with three read-only fields; interpreted, queue.py runs as it is.

cimport cython


cdef class Event:
    cdef readonly object queue
    cdef readonly object seq
    cdef readonly object marker
    cdef object __weakref__


from pyoffload.queue_core cimport QueueCore


# A prepared launch calls its queue's hand-over directly (a C call on the QueueCore type).
cdef class PreparedLaunch:
    cdef readonly QueueCore queue
    cdef readonly object kernel
    cdef object _program
    cdef readonly object grid
    cdef readonly object block
    cdef readonly object args
    cdef tuple _allocs
    cdef object _fast
    cdef object _fast_args
    cdef object _binder
    cdef tuple _types
    cdef tuple _checked

    # A C call from __call__ (new values) rather than a method looked up per call.
    @cython.locals(same=bint, i=Py_ssize_t)
    cpdef _with(self, tuple args)
