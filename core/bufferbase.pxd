# For Cython: the C type of core/_buffer.c, so that compiled modules can subclass it and read its
# fields directly (``cimport``-ed beside the Python import of this module).  Interpreted,
# bufferbase.py picks the class.

cdef extern from "_buffer.h":
    ctypedef class pyoffload._buffer.BufferBase [object BufferBase, check_size ignore]:
        cdef unsigned long long ptr
        cdef Py_ssize_t nbytes
        cdef char exportable
        cdef char readonly
        cdef Py_ssize_t export_count "exports"
