# Declarations for Cython (an "augmenting .pxd"): the users ledger's functions become C functions
# that the compiled allocator calls directly; interpreted, queue_core.py runs as it is.

cpdef list users_of(obj)
cpdef clear_users(obj)
cpdef record_user(obj, queue, seq)
