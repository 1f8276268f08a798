cimport cython

# Declarations for Cython (an "augmenting .pxd"): the users ledger's functions become C functions
# that the compiled allocator calls directly; interpreted, queue_core.py runs as it is.

cpdef list users_of(obj)
cpdef clear_users(obj)
cpdef record_user(obj, queue, seq)


# QueueCore as an extension type: the launch hand-over reads its fields as C fields.  Field
# meanings and the lock that guards each: queue_core.py.
cdef class QueueCore:
    cdef public object device
    cdef public object context
    cdef public bint profiling
    cdef public object _name
    cdef public object disp
    cdef public object dh
    cdef public object rt
    cdef public object handle
    cdef public object _native_host_functions
    cdef public object _native_waits
    cdef public object _lock
    cdef public object _moved
    cdef public bint live
    cdef public Py_ssize_t seq
    cdef public Py_ssize_t submitted
    cdef public Py_ssize_t done
    cdef public object _markers
    cdef public object _holds
    cdef public object _deferred
    cdef public dict failures
    cdef public list _unreported
    cdef public list failed_work
    cdef public object backlog
    cdef public object _drainer
    cdef public bint _dependent
    cdef public Py_ssize_t _syncs
    cdef public dict _launched
    cdef object __weakref__

    @cython.locals(seq=Py_ssize_t)
    cpdef Py_ssize_t _submit_locked(self, hook, fn, tuple args, fallback) except -1
    @cython.locals(seq=Py_ssize_t)
    cpdef Py_ssize_t enqueue_launch(self, prog, allocs, fn, tuple args) except -1
