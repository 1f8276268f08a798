/* pyoffload._launch: a launch's hand-over to its queue, in one C call.
 *
 * Every launch, prepared or not, ends the same way (Queue.enqueue_launch): under the queue's lock
 * it takes the next sequence number, records itself as a user of its program and of each
 * allocation it passes (so that unload and free wait for it) *before* it checks that they are
 * still alive, hands the backend's function to the backend (or to the backlog while one is
 * being drained), and returns an Event.  In Python that is two frames and some forty bytecodes
 * around a vendor enqueue of about a microsecond; a prepared launch is nothing else.  Here it is
 * C, with the queue's hot fields and the event's fields as C members (QueueBase, EventBase) and a
 * prepared launch's call written in C too (PreparedBase).
 *
 * Rules are the Python module's (core/queue.py), which says why they hold; this file only changes
 * where they run.  The queue's lock is the same threading.Lock (acquired through its methods:
 * waiting for it releases the GIL and Ctrl-C interrupts it), held while the backend's function
 * runs, as before.  Errors are worded by the Python side: the queue's dead(), the dispatcher's
 * failure() for a backend exception that is not an OffloadError, the program's check_loaded().
 *
 * Types here are C bases of pyoffload's Python classes: QueueBase (queue_core.QueueCore),
 * EventBase (queue.Event) and PreparedBase (queue.PreparedLaunch).  configure() gives the module
 * the Python objects it needs (the Event class, the "loaded" state, the error classes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "_gcfields.h"

static PyObject *str_acquire, *str_release, *str_dead, *str_users, *str_state, *str_live,
    *str_check_loaded, *str_failure, *str_launch_impl, *str_mark_locked, *str_event_for, *str_epoch,
    *str_revalidate, *str_append, *str_op, *one, *empty_tuple, *owned_kw;

/* set by configure() */
static PyTypeObject *event_type;      /* queue.Event, a subclass of EventBase */
static PyObject *loaded_state;        /* program.LOADED */
static PyObject *offload_error;       /* errors.OffloadError */
static PyObject *invalid_argument;    /* errors.InvalidArgumentError */


/* Members are T_OBJECT_EX: the interpreter's specialised attribute access covers those, so the
 * Python side reads and writes them as fast as __slots__. */
#define MEMBER(name, field, doc) {name, T_OBJECT_EX, offsetof(TYPE, field), 0, doc}

/* ------------------------------------------------------------------------------------------ */
/* EventBase                                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *queue, *seq, *marker;
} EventBase;

#define EVENT_FIELDS(X) X(queue) X(seq) X(marker)
GC_FUNCTIONS(EventBase, EVENT_FIELDS)

#define TYPE EventBase
static PyMemberDef EventBase_members[] = {
    MEMBER("queue", queue, "the queue the operation was enqueued on"),
    MEMBER("seq", seq, "the operation's sequence number in its queue"),
    MEMBER("marker", marker, "the operation's own driver event (a timestamp), or None"),
    {NULL}
};
#undef TYPE

static PyTypeObject EventBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyoffload._launch.EventBase",
    .tp_doc = PyDoc_STR("The fields of pyoffload.Event."),
    GC_FIELDS_TYPE_SLOTS(EventBase),
};

/* ------------------------------------------------------------------------------------------ */
/* QueueBase                                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *lock, *rt, *disp, *backlog, *seq, *submitted, *live, *profiling;
} QueueBase;

#define QUEUE_FIELDS(X) X(lock) X(rt) X(disp) X(backlog) X(seq) X(submitted) X(live) X(profiling)
GC_FUNCTIONS(QueueBase, QUEUE_FIELDS)

/* Raise the error ``queue.dead()`` words (the queue was destroyed, or the runtime shut down). */
static void
raise_dead(QueueBase *q)
{
    PyObject *exc = PyObject_CallMethodNoArgs((PyObject *)q, str_dead);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
}

/* The exception a failed backend call raises: an OffloadError as it is, anything else worded by
 * ``disp.failure("launch_impl", exc)`` and chained to it (``raise ... from exc``). */
static void
reraise_failure(QueueBase *q)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    if (value == NULL || PyObject_IsInstance(value, offload_error) != 0) {
        PyErr_Restore(type, value, tb);  /* an OffloadError (or the check failed: raise what we have) */
        return;
    }
    PyObject *worded = PyObject_CallMethodObjArgs(q->disp, str_failure, str_launch_impl, value, NULL);
    if (worded == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return;
    }
    PyException_SetCause(worded, Py_NewRef(value));  /* steals; sets __suppress_context__ */
    PyException_SetContext(worded, value);            /* steals */
    Py_XDECREF(type);
    Py_XDECREF(tb);
    PyErr_SetObject((PyObject *)Py_TYPE(worded), worded);
    Py_DECREF(worded);
}

static int
record_user(PyObject *users_owner, QueueBase *q, PyObject *seq, int may_be_none)
{
    PyObject *users = PyObject_GetAttr(users_owner, str_users);
    if (users == NULL)
        return -1;
    int r;
    if (users == Py_None && may_be_none) {
        PyObject *d = PyDict_New();
        r = d == NULL ? -1 : PyDict_SetItem(d, (PyObject *)q, seq);
        if (r == 0)
            r = PyObject_SetAttr(users_owner, str_users, d);
        Py_XDECREF(d);
    }
    else {
        r = PyObject_SetItem(users, (PyObject *)q, seq);
    }
    Py_DECREF(users);
    return r;
}

/* The body of Queue.enqueue_launch, with the queue's lock held; a new reference to the marker
 * (None unless the queue profiles) and *seq_out set, or NULL with an exception. */
static PyObject *
enqueue_locked(QueueBase *q, PyObject *prog, PyObject *allocs, PyObject *fn, PyObject *args, PyObject **seq_out)
{
    if (q->live != Py_True) {
        raise_dead(q);
        return NULL;
    }
    PyObject *seq = PyNumber_Add(q->seq, one);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(allocs);
    /* users first, then the liveness checks: see core/queue.py's module docstring */
    if (record_user(prog, q, seq, 0) < 0)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++)
        if (record_user(PySequence_Fast_GET_ITEM(allocs, i), q, seq, 1) < 0)
            goto fail;
    PyObject *state = PyObject_GetAttr(prog, str_state);
    if (state == NULL)
        goto fail;
    Py_DECREF(state);  /* compared by identity only */
    if (state != loaded_state) {
        PyObject *r = PyObject_CallMethodNoArgs(prog, str_check_loaded);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PySequence_Fast_GET_ITEM(allocs, i);
        PyObject *live = PyObject_GetAttr(a, str_live);
        if (live == NULL)
            goto fail;
        int ok = PyObject_IsTrue(live);
        Py_DECREF(live);
        if (ok < 0)
            goto fail;
        if (!ok) {
            PyObject *msg = PyUnicode_FromFormat("launch of a kernel of %R: %R was freed", prog, a);
            if (msg != NULL) {
                PyErr_SetObject(invalid_argument, msg);
                Py_DECREF(msg);
            }
            goto fail;
        }
    }
    if (q->backlog == Py_None) {
        PyObject *r = PyObject_Call(fn, args, NULL);
        if (r == NULL) {
            reraise_failure(q);
            goto fail;
        }
        Py_DECREF(r);
        Py_SETREF(q->submitted, Py_NewRef(seq));
    }
    else {
        PyObject *op = PyTuple_Pack(3, fn, args, Py_None);
        PyObject *item = op == NULL ? NULL : PyTuple_Pack(3, str_op, seq, op);
        Py_XDECREF(op);
        if (item == NULL)
            goto fail;
        PyObject *r = PyObject_CallMethodOneArg(q->backlog, str_append, item);
        Py_DECREF(item);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
    }
    Py_SETREF(q->seq, Py_NewRef(seq));
    PyObject *marker;
    if (q->profiling == Py_True) {
        /* the operation's event takes it (claim_marker) */
        PyObject *argv[] = {(PyObject *)q, Py_True};
        marker = PyObject_VectorcallMethod(str_mark_locked, argv, 1, owned_kw);
        if (marker == NULL)
            goto fail;
    }
    else {
        marker = Py_NewRef(Py_None);
    }
    *seq_out = seq;
    return marker;
fail:
    Py_DECREF(seq);
    return NULL;
}

static PyObject *
new_event(PyObject *q, PyObject *seq)
{
    EventBase *ev = (EventBase *)event_type->tp_alloc(event_type, 0);
    if (ev == NULL)
        return NULL;
    ev->queue = Py_NewRef(q);
    ev->seq = Py_NewRef(seq);
    ev->marker = Py_NewRef(Py_None);
    return (PyObject *)ev;
}

/* Queue.enqueue_launch(prog, allocs, fn, args) -> Event */
static PyObject *
enqueue_launch(QueueBase *q, PyObject *prog, PyObject *allocs, PyObject *fn, PyObject *args)
{
    if (event_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "pyoffload._launch is not configured");
        return NULL;
    }
    if (!(PyTuple_Check(allocs) || PyList_Check(allocs)) || !PyTuple_Check(args)) {
        PyErr_SetString(PyExc_TypeError, "enqueue_launch: allocs must be a tuple or list, args a tuple");
        return NULL;
    }
    PyObject *lock = q->lock;
    if (lock == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_lock");
        return NULL;
    }
    Py_INCREF(lock);  /* the queue may drop it while the backend runs (it does not today) */
    PyObject *r = PyObject_CallMethodNoArgs(lock, str_acquire);
    if (r == NULL) {
        Py_DECREF(lock);
        return NULL;
    }
    Py_DECREF(r);
    PyObject *seq = NULL;
    PyObject *marker = enqueue_locked(q, prog, allocs, fn, args, &seq);
    /* release even while an exception is set (release does not clear it) */
    PyObject *exc_type = NULL, *exc_value = NULL, *exc_tb = NULL;
    if (marker == NULL)
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    r = PyObject_CallMethodNoArgs(lock, str_release);
    Py_DECREF(lock);
    if (marker == NULL) {
        Py_XDECREF(r);
        PyErr_Restore(exc_type, exc_value, exc_tb);
        return NULL;
    }
    if (r == NULL) {
        Py_DECREF(marker);
        Py_DECREF(seq);
        return NULL;
    }
    Py_DECREF(r);
    PyObject *ev;
    if (marker == Py_None)
        ev = new_event((PyObject *)q, seq);
    else
        ev = PyObject_CallMethodObjArgs((PyObject *)q, str_event_for, seq, marker, NULL);
    Py_DECREF(marker);
    Py_DECREF(seq);
    return ev;
}

static PyObject *
QueueBase_enqueue_launch(QueueBase *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "enqueue_launch(prog, allocs, fn, args) takes 4 arguments");
        return NULL;
    }
    return enqueue_launch(self, args[0], args[1], args[2], args[3]);
}

static PyMethodDef QueueBase_methods[] = {
    {"enqueue_launch", (PyCFunction)(void (*)(void))QueueBase_enqueue_launch, METH_FASTCALL,
     "enqueue_launch(prog, allocs, fn, args) -> Event: hand one launch to the backend, fn(*args) "
     "(launch_impl unwrapped, or a prepared launch's function), in the queue's order, after "
     "recording it as a user of prog and of each allocation in allocs (a tuple or list); on a profiling "
     "queue the event has the launch's own timestamp."},
    {NULL}
};

#define TYPE QueueBase
static PyMemberDef QueueBase_members[] = {
    MEMBER("_lock", lock, "the lock of the queue's order and ledger (a threading.Lock)"),
    MEMBER("rt", rt, "the runtime"),
    MEMBER("disp", disp, "the backend's dispatcher"),
    MEMBER("backlog", backlog, "operations waiting for earlier cross-queue waits, or None"),
    MEMBER("seq", seq, "operations enqueued"),
    MEMBER("submitted", submitted, "operations handed to the backend"),
    MEMBER("live", live, "not destroyed"),
    MEMBER("profiling", profiling, "events carry timestamps"),
    {NULL}
};
#undef TYPE

static PyTypeObject QueueBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyoffload._launch.QueueBase",
    .tp_doc = PyDoc_STR("The hot fields of pyoffload.queue_core.QueueCore, and its launch hand-over."),
    GC_FIELDS_TYPE_SLOTS(QueueBase),
    .tp_methods = QueueBase_methods,
};

/* ------------------------------------------------------------------------------------------ */
/* PreparedBase                                                                                */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *queue, *kernel, *program, *grid, *block, *args, *allocs, *fast, *call, *epoch, *binder;
} PreparedBase;

#define PREPARED_FIELDS(X) \
    X(queue) X(kernel) X(program) X(grid) X(block) X(args) X(allocs) X(fast) X(call) X(epoch) X(binder)
GC_FUNCTIONS(PreparedBase, PREPARED_FIELDS)

/* PreparedLaunch.__call__: check again only if the runtime's epoch moved, then enqueue. */
static PyObject *
Prepared_launch(PreparedBase *self)
{
    if (self->queue == NULL || !PyObject_TypeCheck(self->queue, &QueueBaseType) || self->program == NULL ||
        self->allocs == NULL || self->call == NULL || self->epoch == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "prepared launch: not initialised");
        return NULL;
    }
    QueueBase *q = (QueueBase *)self->queue;
    PyObject *epoch = PyObject_GetAttr(q->rt, str_epoch);
    if (epoch == NULL)
        return NULL;
    int same = epoch == self->epoch ? 1 : PyObject_RichCompareBool(epoch, self->epoch, Py_EQ);
    Py_DECREF(epoch);
    if (same < 0)
        return NULL;
    if (!same) {
        PyObject *r = PyObject_CallMethodNoArgs((PyObject *)self, str_revalidate);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    PyObject *call = Py_NewRef(self->call);  /* _revalidate may replace it on another thread */
    PyObject *ev = enqueue_launch(q, self->program, self->allocs, call, empty_tuple);
    Py_DECREF(call);
    return ev;
}

static PyObject *
Prepared_call(PreparedBase *self, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "a prepared launch takes no arguments (they were bound by prepare)");
        return NULL;
    }
    return Prepared_launch(self);
}

static PyObject *
Prepared_launch_method(PreparedBase *self, PyObject *Py_UNUSED(ignored))
{
    return Prepared_launch(self);
}

static PyMethodDef PreparedBase_methods[] = {
    {"launch", (PyCFunction)Prepared_launch_method, METH_NOARGS, "Enqueue the launch again; its Event."},
    {NULL}
};

#define TYPE PreparedBase
static PyMemberDef PreparedBase_members[] = {
    MEMBER("queue", queue, "the Queue"),
    MEMBER("kernel", kernel, "the Kernel"),
    MEMBER("_program", program, "the kernel's Program"),
    MEMBER("grid", grid, "work-groups, (x, y, z)"),
    MEMBER("block", block, "work-items per work-group, (x, y, z)"),
    MEMBER("args", args, "the packed arguments"),
    MEMBER("_allocs", allocs, "the allocations it passes (a tuple)"),
    MEMBER("_fast", fast, "the backend's prepared function, or None"),
    MEMBER("_call", call, "what one launch calls: _fast, or the launch_impl hook"),
    MEMBER("_epoch", epoch, "the runtime's epoch when last checked"),
    MEMBER("_binder", binder, "the binder that packed the arguments"),
    {NULL}
};
#undef TYPE

static PyTypeObject PreparedBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyoffload._launch.PreparedBase",
    .tp_doc = PyDoc_STR("The fields of pyoffload.PreparedLaunch, and its call."),
    GC_FIELDS_TYPE_SLOTS(PreparedBase),
    .tp_methods = PreparedBase_methods,
    .tp_call = (ternaryfunc)Prepared_call,
};

/* ------------------------------------------------------------------------------------------ */
/* Module                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static PyObject *
configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &EventBaseType) ||
        !PyType_Check(args[2]) || !PyType_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "configure(event_type, loaded_state, OffloadError, InvalidArgumentError): event_type "
                        "must subclass EventBase, the errors must be classes");
        return NULL;
    }
    Py_XSETREF(event_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(loaded_state, Py_NewRef(args[1]));
    Py_XSETREF(offload_error, Py_NewRef(args[2]));
    Py_XSETREF(invalid_argument, Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "configure(event_type, loaded_state, OffloadError, InvalidArgumentError): the Python objects "
     "the launch hand-over needs (set once by pyoffload.queue)."},
    {NULL}
};

static struct PyModuleDef launch_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pyoffload._launch",
    .m_doc = "A launch's hand-over to its queue in one C call (see core/_launch.c).",
    .m_size = -1,
    .m_methods = module_methods,
};

static int
intern(PyObject **slot, const char *s)
{
    *slot = PyUnicode_InternFromString(s);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC
PyInit__launch(void)
{
    PyTypeObject *types[] = {&EventBaseType, &QueueBaseType, &PreparedBaseType};
    const char *names[] = {"EventBase", "QueueBase", "PreparedBase"};
    for (int i = 0; i < 3; i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    if (intern(&str_acquire, "acquire") || intern(&str_release, "release") || intern(&str_dead, "dead") ||
        intern(&str_users, "users") || intern(&str_state, "state") || intern(&str_live, "live") ||
        intern(&str_check_loaded, "check_loaded") || intern(&str_failure, "failure") ||
        intern(&str_launch_impl, "launch_impl") || intern(&str_mark_locked, "mark_locked") ||
        intern(&str_event_for, "event_for") || intern(&str_epoch, "epoch") ||
        intern(&str_revalidate, "_revalidate") || intern(&str_append, "append") || intern(&str_op, "op"))
        return NULL;
    if (!(one = PyLong_FromLong(1)) || !(empty_tuple = PyTuple_New(0)) || !(owned_kw = Py_BuildValue("(s)", "owned")))
        return NULL;
    PyObject *m = PyModule_Create(&launch_module);
    if (m == NULL)
        return NULL;
    for (int i = 0; i < 3; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
