/* traverse, clear and dealloc of a garbage-collected C type, and its common type slots, from the list of its object fields
 * (an X-macro: FIELDS(X) applies X to each field).  Shared by core/_fastpath.c and core/_launch.c. */
#ifndef PYOFFLOAD_GC_FIELDS_H
#define PYOFFLOAD_GC_FIELDS_H

#define VISIT_FIELD(f) Py_VISIT(self->f);
#define CLEAR_FIELD(f) Py_CLEAR(self->f);
#define GC_FUNCTIONS(Type, FIELDS)                                     \
    static int Type##_traverse(Type *self, visitproc visit, void *arg) \
    {                                                                  \
        FIELDS(VISIT_FIELD)                                            \
        return 0;                                                      \
    }                                                                  \
    static int Type##_clear(Type *self)                                \
    {                                                                  \
        FIELDS(CLEAR_FIELD)                                            \
        return 0;                                                      \
    }                                                                  \
    static void Type##_dealloc(Type *self)                             \
    {                                                                  \
        PyObject_GC_UnTrack(self);                                     \
        Type##_clear(self);                                            \
        Py_TYPE(self)->tp_free((PyObject *)self);                      \
    }

/* The slots every such type fills the same way: a subclassable, garbage-collected holder of the
 * fields listed in Type##_members, with the three functions above. */
#define GC_FIELDS_TYPE_SLOTS(Type)                                           \
    .tp_basicsize = sizeof(Type),                                            \
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, \
    .tp_new = PyType_GenericNew,                                             \
    .tp_dealloc = (destructor)Type##_dealloc,                                \
    .tp_traverse = (traverseproc)Type##_traverse,                            \
    .tp_clear = (inquiry)Type##_clear,                                       \
    .tp_members = Type##_members

#endif
