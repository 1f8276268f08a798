# Declarations for Cython (an "augmenting .pxd"): the owner tests become C functions that the
# compiled allocator modules call directly; interpreted, locks.py runs as it is.

cpdef bint held_by_me(lock) except -1
cpdef check_not_reentered(lock, what)
cpdef Py_ssize_t pending() except -1
