/* traverse, clear and dealloc of a garbage-collected C type, from the list of its object fields
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

#endif
