# Declarations for Cython (an "augmenting .pxd"): Event, made for every enqueued operation, becomes
# an extension type with three read-only fields; interpreted, queue.py runs as it is.

cimport cython


cdef class Event:
    cdef readonly object queue
    cdef readonly object seq
    cdef readonly object marker
    cdef object __weakref__
