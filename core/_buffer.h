/* The layout of pyoffload._buffer.BufferBase. */
#ifndef PYOFFLOAD_BUFFER_H
#define PYOFFLOAD_BUFFER_H

#include <Python.h>

typedef struct {
    PyObject_HEAD
    unsigned long long ptr;   /* the address of the first byte */
    Py_ssize_t nbytes;        /* bytes exported (the allocation's size) */
    char exportable;          /* host-accessible memory: may be exported */
    char readonly;            /* exports are read-only */
    Py_ssize_t exports;       /* live exports */
} BufferBase;

#endif
