/* pyoffload._buffer: the base type of allocations, exporting host-accessible memory through the
 * buffer protocol.
 *
 * Python 3.11 has no Python-level buffer protocol (PEP 688 came with 3.12), so memoryview(),
 * numpy.frombuffer() and numpy.asarray() can only use an allocation's memory directly if its type
 * implements bf_getbuffer in C.  The type also counts the exports it has handed out, so that
 * pyoffload.free() can refuse to free memory a memoryview or an array still points into.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

#include "_buffer.h"

/* An export and a free meet through two fields (pyoffload.memory._claim): the export counts
 * itself first, then checks `exportable`; a free clears `exportable` first, then checks the count.
 * Each writes its own field before it reads the other's, so at least one of them sees the other:
 * a free never misses an export that succeeded. */
static int
BufferBase_getbuffer(BufferBase *self, Py_buffer *view, int flags)
{
    self->exports++;
    if (!self->exportable) {
        self->exports--;
        PyErr_SetString(PyExc_BufferError,
                        "this memory is not host-accessible (DEVICE memory) or was freed: use pyoffload.memcpy");
        return -1;
    }
    if (self->ptr == 0 && self->nbytes != 0) {
        self->exports--;
        PyErr_SetString(PyExc_BufferError, "this allocation was freed");
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)self, (void *)(uintptr_t)self->ptr, self->nbytes,
                          self->readonly, flags) < 0) {
        self->exports--;
        return -1;
    }
    return 0;
}

static void
BufferBase_releasebuffer(BufferBase *self, Py_buffer *view)
{
    self->exports--;
}

static PyBufferProcs BufferBase_as_buffer = {
    (getbufferproc)BufferBase_getbuffer,
    (releasebufferproc)BufferBase_releasebuffer,
};

static PyMemberDef BufferBase_members[] = {
    {"ptr", T_ULONGLONG, offsetof(BufferBase, ptr), 0, "the address of the first byte"},
    {"nbytes", T_PYSSIZET, offsetof(BufferBase, nbytes), 0, "bytes the buffer protocol exports"},
    {"exportable", T_BOOL, offsetof(BufferBase, exportable), 0, "whether the memory may be exported"},
    {"readonly", T_BOOL, offsetof(BufferBase, readonly), 0, "whether exports are read-only"},
    {"export_count", T_PYSSIZET, offsetof(BufferBase, exports), READONLY, "live buffer exports"},
    {NULL}
};

static PyTypeObject BufferBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyoffload._buffer.BufferBase",
    .tp_doc = PyDoc_STR("Memory at an address, exported through the buffer protocol when host-accessible."),
    .tp_basicsize = sizeof(BufferBase),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_members = BufferBase_members,
    .tp_as_buffer = &BufferBase_as_buffer,
};

static struct PyModuleDef buffer_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pyoffload._buffer",
    .m_doc = "The buffer-protocol base type of pyoffload allocations.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__buffer(void)
{
    if (PyType_Ready(&BufferBaseType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&buffer_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&BufferBaseType);
    if (PyModule_AddObject(m, "BufferBase", (PyObject *)&BufferBaseType) < 0) {
        Py_DECREF(&BufferBaseType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
