/* pyoffload._fastpath: the common allocation and free in one C call each.
 *
 * An allocation served from the pool touches four structures: the pool's free list of its size,
 * the registry of live allocations (and its lazily synced index), the live count of its backend's
 * address space, and its context's list of owned objects.  Written in Python that is some sixty
 * bytecodes and a lock per structure, several times what the vendor's own malloc costs.  Here the
 * common case is done in C; everything else (a first allocation of a (device, kind), a request
 * the pool must split or grow for, stream-ordered reuse, two backends with live memory, the
 * allocation tracker, a runtime or context that is closing, DLPack or buffer exports, queued
 * users, frees by kind) returns "not handled" and the caller takes the Python path, which stays
 * the reference for every rule.
 *
 * Thread safety, without taking locks: the fast path runs under the GIL and never releases it
 * between its checks and its last update, and it runs no Python code there (objects that could
 * trigger a garbage collection, hence finalizers, are made before the checks).  The Python paths
 * update the same structures only while holding the structure's lock, a pyoffload._fastpath.Lock
 * whose state the fast path can read: if any of them is held, a Python path may be half-way
 * through, and the fast path declines.  Otherwise no Python path is inside, and none can enter
 * before the fast path is done.  (This relies on the GIL: free-threaded builds are not supported.)
 *
 * A finalizer run by a collection may free memory while its thread is inside a Python path of
 * the allocator, holding one of these locks: waiting for it would never end.  The thread's held
 * locks are counted; such a free is deferred and runs when the thread releases its last one.
 *
 * Types here are the C bases of pyoffload's Python classes: Lock (the structures' lock),
 * AllocationBase (memory.Allocation's fields), BlockBase and PoolBase (pool.Block's and
 * pool.CachingAllocator's hot fields), FastState (what one runtime shares with the fast path) and
 * Lanes (a context's pools by (device, kind), compared by identity).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "_gcfields.h"
#include <pythread.h>
#include <stdint.h>
#include "_buffer.h"

#define ROUND 512ULL

static PyObject *str_state, *str_epoch;
static PyObject *one;  /* the int 1 */

/* ------------------------------------------------------------------------------------------ */
/* Lock                                                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    char held;              /* readable by the fast path: a Python path is inside */
    unsigned long owner;    /* the thread holding it */
} Lock;

/* Locks this thread holds.  A finalizer run by a garbage collection can interrupt a Python path
 * between any two bytecodes; if it frees memory, that free must not wait for a lock its own
 * thread holds (it would wait forever).  Such frees are deferred (see memory.free) and run by
 * the drain callback when the thread's last lock is released. */
static _Thread_local long held_here;
static int pending;          /* frees were deferred */
static PyObject *drain;      /* memory._drain_deferred, called when `pending` and no lock is held */

static PyObject *
Lock_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "Lock() takes no arguments");
        return NULL;
    }
    Lock *self = (Lock *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_MemoryError, "cannot allocate a lock");
        return NULL;
    }
    return (PyObject *)self;
}

static void
Lock_dealloc(Lock *self)
{
    if (self->lock != NULL) {
        if (self->held)
            PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* 1 acquired, 0 not (non-blocking or timed out), -1 error (a signal handler raised, or this
 * thread holds the lock already: waiting would never end). */
static int
lock_acquire(Lock *self, int blocking, PY_TIMEOUT_T timeout_us)
{
    unsigned long me = PyThread_get_thread_ident();
    PyLockStatus r = PyThread_acquire_lock_timed(self->lock, 0, 0);
    if (r == PY_LOCK_FAILURE && blocking && self->held && self->owner == me) {
        PyErr_SetString(PyExc_RuntimeError,
                        "pyoffload: this thread is inside the allocator already (a finalizer run by a "
                        "garbage collection allocated memory in the middle of an allocation or free); "
                        "allocate outside __del__");
        return -1;
    }
    while (r == PY_LOCK_FAILURE && blocking) {
        Py_BEGIN_ALLOW_THREADS
        r = PyThread_acquire_lock_timed(self->lock, timeout_us, 1);
        Py_END_ALLOW_THREADS
        if (r == PY_LOCK_INTR) {
            if (Py_MakePendingCalls() < 0)
                return -1;
            r = PY_LOCK_FAILURE;  /* interrupted by a signal whose handler returned: wait on */
            continue;
        }
        break;
    }
    if (r == PY_LOCK_ACQUIRED) {
        self->held = 1;
        self->owner = me;
        held_here++;
        return 1;
    }
    return 0;
}

static PyObject *
Lock_acquire(Lock *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"blocking", "timeout", NULL};
    int blocking = 1;
    double timeout = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pd:acquire", kwlist, &blocking, &timeout))
        return NULL;
    if (!blocking && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return NULL;
    }
    if (timeout < 0 && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    PY_TIMEOUT_T us = timeout < 0 ? -1 : (PY_TIMEOUT_T)(timeout * 1e6);
    int r = lock_acquire(self, blocking, us);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

static PyObject *
Lock_enter(Lock *self, PyObject *Py_UNUSED(ignored))
{
    int r = lock_acquire(self, 1, -1);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

/* Run the deferred frees once this thread holds no lock; their errors go to sys.unraisablehook
 * (they belong to a finalizer, which could not have raised either). */
static void
run_deferred(void)
{
    if (!pending || held_here || drain == NULL)
        return;
    pending = 0;
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);  /* release() may run while an exception propagates */
    PyObject *r = PyObject_CallNoArgs(drain);
    if (r == NULL)
        PyErr_WriteUnraisable(drain);
    Py_XDECREF(r);
    PyErr_Restore(exc_type, exc_value, exc_tb);
}

static PyObject *
Lock_release(Lock *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->held) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    if (self->owner == PyThread_get_thread_ident() && held_here > 0)
        held_here--;
    self->held = 0;
    self->owner = 0;
    PyThread_release_lock(self->lock);
    run_deferred();
    Py_RETURN_NONE;
}

static PyObject *
Lock_exit(Lock *self, PyObject *const *args, Py_ssize_t nargs)
{
    return Lock_release(self, NULL);
}

static PyObject *
Lock_locked(Lock *self, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(self->held);
}

static PyMethodDef Lock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))Lock_acquire, METH_VARARGS | METH_KEYWORDS,
     "acquire(blocking=True, timeout=-1): as threading.Lock.acquire, but a blocking acquire by the "
     "thread that holds the lock raises RuntimeError instead of waiting forever."},
    {"release", (PyCFunction)Lock_release, METH_NOARGS, "Release the lock."},
    {"locked", (PyCFunction)Lock_locked, METH_NOARGS, "Whether the lock is held."},
    {"__enter__", (PyCFunction)Lock_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Lock_exit, METH_FASTCALL, NULL},
    {NULL}
};

static PyTypeObject LockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyoffload._fastpath.Lock",
    .tp_doc = PyDoc_STR("A non-reentrant lock, as threading.Lock, whose state the C fast path can read; "
                        "a thread that tries to take it twice gets RuntimeError, not a hang."),
    .tp_basicsize = sizeof(Lock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Lock_new,
    .tp_dealloc = (destructor)Lock_dealloc,
    .tp_methods = Lock_methods,
};

#define LOCK_HELD(obj) ((obj) != NULL && Py_TYPE(obj) == &LockType && ((Lock *)(obj))->held)


/* ------------------------------------------------------------------------------------------ */
/* AllocationBase                                                                              */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    BufferBase base;
    unsigned long long size;
    PyObject *kind, *device, *context, *origin, *owner, *pool_block, *source_pool, *users;
    char owned, live;
    char prepared;  /* bound by a prepared launch at some time: freeing it bumps the runtime's epoch */
    Py_ssize_t dl_exports;
} AllocationBase;

#define ALLOCATIONBASE_FIELDS(X) X(kind) X(device) X(context) X(origin) X(owner) X(pool_block) X(source_pool) X(users)
GC_FUNCTIONS(AllocationBase, ALLOCATIONBASE_FIELDS)

static PyMemberDef AllocationBase_members[] = {
    {"size", T_ULONGLONG, offsetof(AllocationBase, size), 0, "bytes requested"},
    {"kind", T_OBJECT, offsetof(AllocationBase, kind), 0, "the AllocKind"},
    {"device", T_OBJECT, offsetof(AllocationBase, device), 0, "the device (None for HOST memory)"},
    {"context", T_OBJECT, offsetof(AllocationBase, context), 0, "the owning context"},
    {"origin", T_OBJECT, offsetof(AllocationBase, origin), 0, "where it was allocated (tracking on)"},
    {"owner", T_OBJECT, offsetof(AllocationBase, owner), 0, "what keeps external memory alive"},
    {"pool_block", T_OBJECT, offsetof(AllocationBase, pool_block), 0, "the pool block it uses"},
    {"source_pool", T_OBJECT, offsetof(AllocationBase, source_pool), 0, "the pool the block came from"},
    {"users", T_OBJECT, offsetof(AllocationBase, users), 0, "queue -> last sequence number using it"},
    {"owned", T_BOOL, offsetof(AllocationBase, owned), 0, "pyoffload's own memory (not external)"},
    {"live", T_BOOL, offsetof(AllocationBase, live), 0, "not yet freed or released"},
    {"prepared", T_BOOL, offsetof(AllocationBase, prepared), 0,
     "bound by a prepared launch at some time (its free must make the launch check again)"},
    {"dl_exports", T_PYSSIZET, offsetof(AllocationBase, dl_exports), 0, "DLPack exports outstanding"},
    {NULL}
};

static PyTypeObject AllocationBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyoffload._fastpath.AllocationBase",
    .tp_doc = PyDoc_STR("The fields of pyoffload.Allocation."),
    GC_FIELDS_TYPE_SLOTS(AllocationBase),
};

/* ------------------------------------------------------------------------------------------ */
/* BlockBase                                                                                   */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    unsigned long long ptr, size;
    PyObject *segment, *prev, *next, *queue;
    char free;
    char pooled;  /* part of a pooled segment (else a backend allocation of its own) */
    long long seq;
} BlockBase;

#define BLOCKBASE_FIELDS(X) X(segment) X(prev) X(next) X(queue)
GC_FUNCTIONS(BlockBase, BLOCKBASE_FIELDS)

static PyMemberDef BlockBase_members[] = {
    {"ptr", T_ULONGLONG, offsetof(BlockBase, ptr), 0, "the block's address"},
    {"size", T_ULONGLONG, offsetof(BlockBase, size), 0, "the block's (rounded) size"},
    {"segment", T_OBJECT, offsetof(BlockBase, segment), 0, "the backend allocation it is part of"},
    {"prev", T_OBJECT, offsetof(BlockBase, prev), 0, "the block below it in its segment"},
    {"next", T_OBJECT, offsetof(BlockBase, next), 0, "the block above it in its segment"},
    {"queue", T_OBJECT, offsetof(BlockBase, queue), 0, "the queue of a stream-ordered free, or None"},
    {"free", T_BOOL, offsetof(BlockBase, free), 0, "on its size's free list"},
    {"pooled", T_BOOL, offsetof(BlockBase, pooled), 0, "part of a pooled segment (its segment's pooled)"},
    {"seq", T_LONGLONG, offsetof(BlockBase, seq), 0, "the sequence number of a stream-ordered free"},
    {NULL}
};

static PyTypeObject BlockBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyoffload._fastpath.BlockBase",
    .tp_doc = PyDoc_STR("The fields of a pool block."),
    GC_FIELDS_TYPE_SLOTS(BlockBase),
};

/* ------------------------------------------------------------------------------------------ */
/* FastState: what one runtime shares with the fast path                                       */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *rt, *live_state, *host_kind, *entries, *to_add, *to_remove, *reg_lock,
             *live_per_space, *claim_lock, *alloc_type;
} FastState;

#define FASTSTATE_FIELDS(X) X(rt) X(live_state) X(host_kind) X(entries) X(to_add) X(to_remove) \
    X(reg_lock) X(live_per_space) X(claim_lock) X(alloc_type)

GC_FUNCTIONS(FastState, FASTSTATE_FIELDS)

static int
FastState_init(FastState *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"rt", "live_state", "host_kind", "entries", "to_add", "to_remove", "registry_lock",
                             "live_per_space", "claim_lock", "allocation_type", NULL};
    PyObject *v[10];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO!O!O!O!O!O!O!:FastState", kwlist,
                                     &v[0], &v[1], &v[2], &PyDict_Type, &v[3], &PySet_Type, &v[4],
                                     &PySet_Type, &v[5], &LockType, &v[6], &PyDict_Type, &v[7],
                                     &LockType, &v[8], &PyType_Type, &v[9]))
        return -1;
    if (!PyType_IsSubtype((PyTypeObject *)v[9], &AllocationBaseType)) {
        PyErr_SetString(PyExc_TypeError, "FastState: allocation_type must extend AllocationBase");
        return -1;
    }
    PyObject **fields[] = {&self->rt, &self->live_state, &self->host_kind, &self->entries, &self->to_add,
                           &self->to_remove, &self->reg_lock, &self->live_per_space, &self->claim_lock,
                           &self->alloc_type};
    for (int i = 0; i < 10; i++)
        Py_XSETREF(*fields[i], Py_NewRef(v[i]));
    return 0;
}

static PyTypeObject FastStateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyoffload._fastpath.FastState",
    .tp_doc = PyDoc_STR("FastState(rt, live_state, host_kind, entries, to_add, to_remove, registry_lock, "
                        "live_per_space, claim_lock, allocation_type): one runtime's structures, as the "
                        "fast path sees them (never made while the allocation tracker is on)."),
    .tp_basicsize = sizeof(FastState),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)FastState_init,
    .tp_dealloc = (destructor)FastState_dealloc,
    .tp_traverse = (traverseproc)FastState_traverse,
    .tp_clear = (inquiry)FastState_clear,
};

/* ------------------------------------------------------------------------------------------ */
/* PoolBase                                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *lists;        /* _lists: dict, rounded size -> list of free blocks (last = next) */
    PyObject *sizes;        /* _sizes: sorted list of the sizes with a non-empty list */
    PyObject *lock;         /* _lock: Lock */
    PyObject *max_request;  /* None: every size; 0: pool off; else the largest pooled request */
    long long in_use, peak_in_use, allocations, hits;
    /* the lane, set by enable_fast_path; state NULL: the fast path is off for this pool */
    PyObject *state, *ctx, *device, *kind, *space, *owned;
    char exportable;
    unsigned long long max_alloc;
} PoolBase;

#define POOLBASE_FIELDS(X) X(lists) X(sizes) X(lock) X(max_request) X(state) X(ctx) X(device) X(kind) X(space) X(owned)
GC_FUNCTIONS(PoolBase, POOLBASE_FIELDS)

static PyObject *
PoolBase_enable_fast_path(PoolBase *self, PyObject *args)
{
    PyObject *state, *ctx, *device, *kind, *space, *owned;
    int exportable;
    unsigned long long max_alloc;
    if (!PyArg_ParseTuple(args, "O!OOOUO!pK:enable_fast_path", &FastStateType, &state, &ctx, &device, &kind,
                          &space, &PyDict_Type, &owned, &exportable, &max_alloc))
        return NULL;
    Py_XSETREF(self->owned, Py_NewRef(owned));
    Py_XSETREF(self->state, Py_NewRef(state));
    Py_XSETREF(self->ctx, Py_NewRef(ctx));
    Py_XSETREF(self->device, Py_NewRef(device));
    Py_XSETREF(self->kind, Py_NewRef(kind));
    Py_XSETREF(self->space, Py_NewRef(space));
    self->exportable = (char)exportable;
    self->max_alloc = max_alloc;
    Py_RETURN_NONE;
}

static PyObject *
PoolBase_disable_fast_path(PoolBase *self, PyObject *Py_UNUSED(ignored))
{
    Py_CLEAR(self->state);
    Py_CLEAR(self->ctx);
    Py_CLEAR(self->owned);
    Py_RETURN_NONE;
}

static PyMemberDef PoolBase_members[] = {
    {"_lists", T_OBJECT, offsetof(PoolBase, lists), 0, "free blocks by size"},
    {"_sizes", T_OBJECT, offsetof(PoolBase, sizes), 0, "sizes with free blocks, sorted"},
    {"_lock", T_OBJECT, offsetof(PoolBase, lock), 0, "the pool's lock (a pyoffload._fastpath.Lock)"},
    {"max_request", T_OBJECT, offsetof(PoolBase, max_request), 0, "the largest pooled request (None: all; 0: off)"},
    {"in_use", T_LONGLONG, offsetof(PoolBase, in_use), 0, "bytes in use"},
    {"peak_in_use", T_LONGLONG, offsetof(PoolBase, peak_in_use), 0, "most bytes in use at once"},
    {"allocations", T_LONGLONG, offsetof(PoolBase, allocations), 0, "blocks handed out"},
    {"hits", T_LONGLONG, offsetof(PoolBase, hits), 0, "blocks handed out straight from a free list"},
    {"fast_path_state", T_OBJECT, offsetof(PoolBase, state), READONLY, "the FastState, None while off"},
    {NULL}
};

static PyMethodDef PoolBase_methods[] = {
    {"enable_fast_path", (PyCFunction)PoolBase_enable_fast_path, METH_VARARGS,
     "enable_fast_path(state, ctx, device, kind, space, owned_objects, exportable, max_alloc): serve this "
     "pool's common allocations and frees in C until disable_fast_path (the context closes)."},
    {"disable_fast_path", (PyCFunction)PoolBase_disable_fast_path, METH_NOARGS, "Back to the Python path only."},
    {NULL}
};

static PyTypeObject PoolBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyoffload._fastpath.PoolBase",
    .tp_doc = PyDoc_STR("The hot fields of a caching allocator."),
    GC_FIELDS_TYPE_SLOTS(PoolBase),
    .tp_methods = PoolBase_methods,
};

/* ------------------------------------------------------------------------------------------ */
/* Shared checks                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* 1 when the runtime is live (a plain attribute: reading it runs no Python code).  The context
 * needs no check: closing it turns the fast path of its pools off first. */
static int
runtime_live(FastState *st)
{
    PyObject *state = PyObject_GetAttr(st->rt, str_state);
    if (state == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(state);  /* compared by identity only */
    return state == st->live_state;
}

/* 1 when `pool`'s fast path is still on, with `st`, and its structures are in place. */
static int
lane_intact(PoolBase *pool, FastState *st)
{
    return pool->state == (PyObject *)st && pool->ctx != NULL && pool->owned != NULL && pool->lists != NULL &&
           PyDict_CheckExact(pool->lists) && pool->sizes != NULL && PyList_CheckExact(pool->sizes);
}

/* 1 when no other backend's address space has live memory (the registry then needs no overlap
 * check: a backend never hands out overlapping blocks itself). */
static int
single_space(FastState *st, PyObject *space)
{
    Py_ssize_t n = PyDict_GET_SIZE(st->live_per_space);
    if (n == 0)
        return 1;
    if (n > 1)
        return 0;
    int r = PyDict_Contains(st->live_per_space, space);
    if (r < 0) {
        PyErr_Clear();
        return 0;
    }
    return r;
}

/* Position of `size` in the sorted list of ints `sizes` (first index with sizes[i] >= size). */
static Py_ssize_t
sizes_position(PyObject *sizes, unsigned long long size)
{
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(sizes);
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        unsigned long long v = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(sizes, mid));
        if (v < size)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Add `delta` to live_per_space[space], dropping the key when it reaches 0. */
static int
count_space(FastState *st, PyObject *space, long delta)
{
    PyObject *old = PyDict_GetItemWithError(st->live_per_space, space);  /* borrowed */
    long n = old ? PyLong_AsLong(old) : 0;
    if (n == -1 && PyErr_Occurred())
        return -1;
    n += delta;
    if (n <= 0)
        return old ? PyDict_DelItem(st->live_per_space, space) : 0;
    PyObject *v = PyLong_FromLong(n);
    if (v == NULL)
        return -1;
    int r = PyDict_SetItem(st->live_per_space, space, v);
    Py_DECREF(v);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Allocation                                                                                  */
/* ------------------------------------------------------------------------------------------ */

/* A new Allocation of `size_obj` bytes from `pool`'s free list, or None (not handled). */
static PyObject *
pool_alloc(PoolBase *pool, PyObject *size_obj)
{
    FastState *st = (FastState *)pool->state;
    if (st == NULL || pending || !PyLong_CheckExact(size_obj) || pool->lists == NULL || !PyDict_CheckExact(pool->lists) ||
        pool->sizes == NULL || !PyList_CheckExact(pool->sizes))
        Py_RETURN_NONE;
    unsigned long long size = PyLong_AsUnsignedLongLong(size_obj);
    if (size == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (size == 0 || size > pool->max_alloc || size > (1ULL << 62))
        Py_RETURN_NONE;
    PyObject *bound = pool->max_request;
    if (bound != NULL && bound != Py_None) {
        unsigned long long b = PyLong_AsUnsignedLongLong(bound);
        if (b == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (b == 0 || size > b)
            Py_RETURN_NONE;
    }
    unsigned long long need = (size + ROUND - 1) & ~(ROUND - 1);

    /* Objects whose creation may collect garbage (and so run finalizers), made first. */
    PyTypeObject *atype = (PyTypeObject *)st->alloc_type;
    PyObject *alloc = atype->tp_alloc(atype, 0);
    PyObject *entry = alloc ? PyTuple_New(2) : NULL;
    PyObject *need_key = NULL, *ptr_key = NULL, *end = NULL, *id_key = NULL, *owned = NULL;
    if (entry == NULL)
        goto decline;
    need_key = PyLong_FromUnsignedLongLong(need);
    id_key = need_key ? PyLong_FromVoidPtr(alloc) : NULL;
    if (id_key == NULL)
        goto decline;

    /* Checks: no Python code runs from here to the end.  A finalizer run by a collection above
     * may have closed the context (turning this pool's fast path off): look again. */
    if (!lane_intact(pool, st) || !runtime_live(st) || !single_space(st, pool->space))
        goto decline;
    if (LOCK_HELD(pool->lock) || LOCK_HELD(st->reg_lock))
        goto decline;
    owned = Py_NewRef(pool->owned);
    PyObject *list = PyDict_GetItemWithError(pool->lists, need_key);  /* borrowed */
    if (list == NULL || !PyList_CheckExact(list) || PyList_GET_SIZE(list) == 0)
        goto decline;
    Py_ssize_t n = PyList_GET_SIZE(list);
    PyObject *bobj = PyList_GET_ITEM(list, n - 1);
    if (!PyObject_TypeCheck(bobj, &BlockBaseType))
        goto decline;
    BlockBase *block = (BlockBase *)bobj;
    if (block->queue != NULL && block->queue != Py_None)
        goto decline;  /* freed in a queue's order: the Python path knows when it may be reused */
    ptr_key = PyLong_FromUnsignedLongLong(block->ptr);
    end = ptr_key ? PyLong_FromUnsignedLongLong(block->ptr + size) : NULL;
    if (end == NULL)
        goto decline;
    /* Record it (one lookup: the clash check and the insert), then take the block. */
    PyTuple_SET_ITEM(entry, 0, end);
    PyTuple_SET_ITEM(entry, 1, Py_NewRef(alloc));
    end = NULL;
    PyObject *present = PyDict_SetDefault(st->entries, ptr_key, entry);  /* borrowed */
    if (present != entry)
        goto decline;  /* a live entry at this address (or an error): the Python path decides */
    Py_INCREF(block);
    if (PyList_SetSlice(list, n - 1, n, NULL) < 0)
        goto fail_block;
    if (n == 1) {  /* the list stays, empty, for the block's return; the size leaves _sizes */
        Py_ssize_t i = sizes_position(pool->sizes, need);
        if (PyList_SetSlice(pool->sizes, i, i + 1, NULL) < 0)
            goto fail_block;
    }
    block->free = 0;
    Py_XSETREF(block->queue, Py_NewRef(Py_None));
    pool->in_use += (long long)need;
    pool->allocations++;
    pool->hits++;
    if (pool->in_use > pool->peak_in_use)
        pool->peak_in_use = pool->in_use;

    /* Fill in the allocation (the block reference moves into it). */
    AllocationBase *a = (AllocationBase *)alloc;
    a->base.ptr = block->ptr;
    a->base.nbytes = (Py_ssize_t)size;
    a->base.exportable = pool->exportable;
    a->size = size;
    a->kind = Py_NewRef(pool->kind);
    a->device = Py_NewRef(pool->device);
    a->context = Py_NewRef(pool->ctx);
    a->origin = Py_NewRef(Py_None);
    a->owner = Py_NewRef(Py_None);
    a->pool_block = (PyObject *)block;
    a->source_pool = Py_NewRef((PyObject *)pool);
    a->users = Py_NewRef(Py_None);
    a->owned = 1;
    a->live = 1;
    a->dl_exports = 0;

    /* The index learns of it lazily. */
    int pending = PySet_Discard(st->to_remove, ptr_key);  /* 1: a removal was pending, and cancels */
    if (pending < 0 || (!pending && PySet_Add(st->to_add, ptr_key) < 0))
        goto fail;
    if (count_space(st, pool->space, 1) < 0 || PyDict_SetItem(owned, id_key, alloc) < 0)
        goto fail;
    Py_DECREF(entry);
    Py_DECREF(need_key);
    Py_DECREF(ptr_key);
    Py_DECREF(id_key);
    Py_DECREF(owned);
    return alloc;

fail_block:
    Py_DECREF(block);
fail:  /* out of memory half-way: report it, and leave no entry behind */
    if (PyDict_GetItemWithError(st->entries, ptr_key) == entry) {
        PyObject *exc_type, *exc_value, *exc_tb;
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
        if (PyDict_DelItem(st->entries, ptr_key) < 0)
            PyErr_Clear();
        PyErr_Restore(exc_type, exc_value, exc_tb);
    }
    Py_XDECREF(alloc);
    Py_XDECREF(entry);
    Py_XDECREF(need_key);
    Py_XDECREF(ptr_key);
    Py_XDECREF(end);
    Py_XDECREF(id_key);
    Py_XDECREF(owned);
    return NULL;

decline:
    if (PyErr_Occurred())
        PyErr_Clear();
    Py_XDECREF(alloc);
    Py_XDECREF(entry);
    Py_XDECREF(need_key);
    Py_XDECREF(ptr_key);
    Py_XDECREF(end);
    Py_XDECREF(id_key);
    Py_XDECREF(owned);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------------------ */
/* Lanes: a context's pools by (device, kind)                                                  */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *host_kind;
    PyObject *entries;  /* list of (device, kind, pool) tuples; device None for HOST */
} Lanes;

#define LANES_FIELDS(X) X(host_kind) X(entries)
GC_FUNCTIONS(Lanes, LANES_FIELDS)

static int
Lanes_init(Lanes *self, PyObject *args, PyObject *kwds)
{
    PyObject *host_kind;
    if (!PyArg_ParseTuple(args, "O:Lanes", &host_kind))
        return -1;
    Py_XSETREF(self->host_kind, Py_NewRef(host_kind));
    Py_XSETREF(self->entries, PyList_New(0));
    return self->entries ? 0 : -1;
}

static PyObject *
Lanes_add(Lanes *self, PyObject *args)
{
    PyObject *device, *kind, *pool;
    if (!PyArg_ParseTuple(args, "OOO!:add", &device, &kind, &PoolBaseType, &pool))
        return NULL;
    PyObject *t = PyTuple_Pack(3, device, kind, pool);
    if (t == NULL)
        return NULL;
    int r = PyList_Append(self->entries, t);
    Py_DECREF(t);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Lanes_forget(Lanes *self, PyObject *Py_UNUSED(ignored))
{
    if (PyList_SetSlice(self->entries, 0, PyList_GET_SIZE(self->entries), NULL) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
lanes_alloc(Lanes *self, PyObject *device, PyObject *size, PyObject *kind)
{
    if (kind == self->host_kind)
        device = Py_None;
    PyObject *entries = self->entries;
    if (entries == NULL)
        Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); i++) {
        PyObject *t = PyList_GET_ITEM(entries, i);
        if (PyTuple_GET_ITEM(t, 0) == device && PyTuple_GET_ITEM(t, 1) == kind) {
            PyObject *pool = Py_NewRef(PyTuple_GET_ITEM(t, 2));
            PyObject *r = pool_alloc((PoolBase *)pool, size);
            Py_DECREF(pool);
            return r;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
Lanes_alloc(Lanes *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "alloc(device, size, kind) takes three arguments");
        return NULL;
    }
    return lanes_alloc(self, args[0], args[1], args[2]);
}

static PyMethodDef Lanes_methods[] = {
    {"add", (PyCFunction)Lanes_add, METH_VARARGS, "add(device, kind, pool): the pool of (device, kind)."},
    {"clear", (PyCFunction)Lanes_forget, METH_NOARGS, "Forget every pool (the context is closing)."},
    {"alloc", (PyCFunction)(void (*)(void))Lanes_alloc, METH_FASTCALL,
     "alloc(device, size, kind): a new Allocation from the pool's free list, or None (not handled)."},
    {NULL}
};

static PyTypeObject LanesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyoffload._fastpath.Lanes",
    .tp_doc = PyDoc_STR("Lanes(host_kind): a context's pools by (device, kind), for the fast path."),
    .tp_basicsize = sizeof(Lanes),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Lanes_init,
    .tp_dealloc = (destructor)Lanes_dealloc,
    .tp_traverse = (traverseproc)Lanes_traverse,
    .tp_clear = (inquiry)Lanes_clear,
    .tp_methods = Lanes_methods,
};

/* ------------------------------------------------------------------------------------------ */
/* Free                                                                                        */
/* ------------------------------------------------------------------------------------------ */

static PyObject *
fast_free(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "free(target, kind=None) takes one or two arguments");
        return NULL;
    }
    if (held_here > 0) {  /* a finalizer interrupted this thread inside the allocator: defer */
        pending = 1;
        Py_RETURN_NONE;
    }
    PyObject *aobj = args[0], *held;
    if (pending || (nargs == 2 && args[1] != Py_None) || !PyObject_TypeCheck(aobj, &AllocationBaseType))
        return Py_NewRef(Py_False);
    AllocationBase *a = (AllocationBase *)aobj;
    PyObject *pobj = a->source_pool;
    if (pobj == NULL || !PyObject_TypeCheck(pobj, &PoolBaseType))
        return Py_NewRef(Py_False);
    PoolBase *pool = (PoolBase *)pobj;
    FastState *st = (FastState *)pool->state;
    if (st == NULL || Py_TYPE(aobj) != (PyTypeObject *)st->alloc_type || pool->ctx == NULL ||
        pool->lists == NULL || !PyDict_CheckExact(pool->lists) || pool->sizes == NULL || !PyList_CheckExact(pool->sizes))
        return Py_NewRef(Py_False);
    if (a->pool_block == NULL || !PyObject_TypeCheck(a->pool_block, &BlockBaseType))
        return Py_NewRef(Py_False);
    BlockBase *block = (BlockBase *)a->pool_block;

    /* Objects whose creation may collect garbage, made first. */
    Py_INCREF(aobj);
    held = aobj;
    Py_INCREF(pool);
    Py_INCREF(block);
    PyObject *size_key = PyLong_FromUnsignedLongLong(block->size);
    PyObject *new_list = NULL, *ptr_key = NULL, *id_key = NULL, *owned = NULL, *epoch = NULL,
             *next_epoch = NULL;
    if (size_key == NULL)
        goto decline;
    PyObject *list = PyDict_GetItemWithError(pool->lists, size_key);
    if (list == NULL) {
        if (PyErr_Occurred() || (new_list = PyList_New(0)) == NULL)
            goto decline;
    }
    ptr_key = PyLong_FromUnsignedLongLong(a->base.ptr);
    id_key = ptr_key ? PyLong_FromVoidPtr(aobj) : NULL;
    if (id_key == NULL)
        goto decline;

    /* Checks: no Python code runs from here to the end (and look at the lane again, as above). */
    if (!lane_intact(pool, st) || !a->owned || !a->live || a->base.exports || a->dl_exports)
        goto decline;
    if (a->users != NULL && a->users != Py_None && !(PyDict_CheckExact(a->users) && PyDict_GET_SIZE(a->users) == 0))
        goto decline;  /* queued work uses it: the Python path waits for it */
    if (!runtime_live(st))
        goto decline;
    if (LOCK_HELD(st->claim_lock) || LOCK_HELD(pool->lock) || LOCK_HELD(st->reg_lock))
        goto decline;
    if (!block->pooled)
        goto decline;  /* a segment of its own: the Python path hands it back to the backend */
    owned = Py_NewRef(pool->owned);
    if (a->prepared) {  /* a prepared launch holds it: bump the epoch, so the launch checks again */
        epoch = PyObject_GetAttr(st->rt, str_epoch);
        if (epoch == NULL || !PyLong_CheckExact(epoch))
            goto decline;
        next_epoch = PyNumber_Add(epoch, one);
        if (next_epoch == NULL)
            goto decline;
    }
    PyObject *entry = PyDict_GetItemWithError(st->entries, ptr_key);  /* borrowed */
    if (entry == NULL || !PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2 || PyTuple_GET_ITEM(entry, 1) != aobj)
        goto decline;
    if (new_list != NULL) {  /* its creation may have run a finalizer: look again */
        list = PyDict_GetItemWithError(pool->lists, size_key);
        if (list == NULL && PyErr_Occurred())
            goto decline;
    }
    if (list != NULL && !PyList_CheckExact(list))
        goto decline;

    /* Forget it. */
    a->live = 0;
    a->base.exportable = 0;
    if (PyDict_DelItem(st->entries, ptr_key) < 0)
        goto fail;
    int pending = PySet_Discard(st->to_add, ptr_key);  /* 1: the index never learnt of it */
    if (pending < 0 || (!pending && PySet_Add(st->to_remove, ptr_key) < 0))
        goto fail;
    if ((next_epoch != NULL && PyObject_SetAttr(st->rt, str_epoch, next_epoch) < 0) ||
        count_space(st, pool->space, -1) < 0)
        goto fail;
    if (PyDict_DelItem(owned, id_key) < 0) {  /* absent (the context forgot it already) is fine */
        if (!PyErr_ExceptionMatches(PyExc_KeyError))
            goto fail;
        PyErr_Clear();
    }

    /* Give the block back. */
    Py_XSETREF(block->queue, Py_NewRef(Py_None));
    block->seq = 0;
    pool->in_use -= (long long)block->size;
    block->free = 1;
    int was_empty = list == NULL || PyList_GET_SIZE(list) == 0;
    if (list != NULL) {
        if (PyList_Append(list, (PyObject *)block) < 0)
            goto fail;
    } else if (PyList_Append(new_list, (PyObject *)block) < 0 || PyDict_SetItem(pool->lists, size_key, new_list) < 0) {
        goto fail;
    }
    if (was_empty) {  /* the size has a free block again: back into _sizes */
        Py_ssize_t i = sizes_position(pool->sizes, block->size);
        if (PyList_Insert(pool->sizes, i, size_key) < 0)
            goto fail;
    }
    Py_DECREF(held);
    Py_DECREF(pool);
    Py_DECREF(block);
    Py_DECREF(size_key);
    Py_XDECREF(new_list);
    Py_DECREF(ptr_key);
    Py_DECREF(id_key);
    Py_DECREF(owned);
    Py_XDECREF(epoch);
    Py_XDECREF(next_epoch);
    Py_RETURN_TRUE;

fail:
    Py_DECREF(held);
    Py_DECREF(pool);
    Py_DECREF(block);
    Py_XDECREF(size_key);
    Py_XDECREF(new_list);
    Py_XDECREF(ptr_key);
    Py_XDECREF(id_key);
    Py_XDECREF(owned);
    Py_XDECREF(epoch);
    Py_XDECREF(next_epoch);
    return NULL;

decline:
    if (PyErr_Occurred())
        PyErr_Clear();
    Py_DECREF(held);
    Py_DECREF(pool);
    Py_DECREF(block);
    Py_XDECREF(size_key);
    Py_XDECREF(new_list);
    Py_XDECREF(ptr_key);
    Py_XDECREF(id_key);
    Py_XDECREF(owned);
    Py_XDECREF(epoch);
    Py_XDECREF(next_epoch);
    Py_RETURN_FALSE;
}

static PyObject *
set_drain(PyObject *module, PyObject *fn)
{
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "set_drain takes a callable");
        return NULL;
    }
    Py_XSETREF(drain, Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyObject *
inside_allocator(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(held_here > 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Entry points                                                                                */
/* ------------------------------------------------------------------------------------------ */

/* The public Device.alloc and pyoffload.free, as C callables in front of their Python functions.
 * A call the fast path serves enters no Python frame; any other call (keyword arguments, a
 * declined request, an error) goes to the Python function, which is the reference path and
 * carries the signature and the docstring (attributes are read through to it). */
typedef struct {
    PyObject_HEAD
    PyObject *fallback;      /* the Python function */
    PyObject *default_kind;  /* alloc: AllocKind.DEVICE; NULL for free */
    /* alloc: the last device served and its default context's lanes, so that a run of requests
     * on one device skips the four attribute reads of default_lanes().  Valid while the lanes
     * have pools: a context empties its lanes before it stops being live or being the default
     * context (Context._release), and a declined request forgets them. */
    PyObject *last_device;
    PyObject *last_lanes;
    vectorcallfunc vectorcall;
} Entry;

#define ENTRY_FIELDS(X) X(fallback) X(default_kind) X(last_device) X(last_lanes)
GC_FUNCTIONS(Entry, ENTRY_FIELDS)

static PyObject *fast_free(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
static PyObject *str_platform, *str_default_context_slot, *str_live, *str_lanes;

static PyObject *
free_entry_call(Entry *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames == NULL && (n == 1 || n == 2)) {
        PyObject *r = fast_free(NULL, args, n);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
        if (r == Py_True)
            Py_RETURN_NONE;
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

/* device.platform.default_context_slot.lanes when that context is live, else NULL (no error). */
static PyObject *
default_lanes(PyObject *device)
{
    PyObject *platform = PyObject_GetAttr(device, str_platform);
    PyObject *ctx = platform ? PyObject_GetAttr(platform, str_default_context_slot) : NULL;
    Py_XDECREF(platform);
    PyObject *live = ctx ? PyObject_GetAttr(ctx, str_live) : NULL;
    PyObject *lanes = live == Py_True ? PyObject_GetAttr(ctx, str_lanes) : NULL;
    Py_XDECREF(ctx);
    Py_XDECREF(live);
    if (lanes != NULL && Py_TYPE(lanes) != &LanesType)
        Py_CLEAR(lanes);
    if (lanes == NULL && PyErr_Occurred())
        PyErr_Clear();
    return lanes;
}

static PyObject *
alloc_entry_call(Entry *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames == NULL && (n == 2 || n == 3)) {
        PyObject *lanes;
        if (args[0] == self->last_device && self->last_lanes != NULL) {
            lanes = Py_NewRef(self->last_lanes);
        }
        else {
            lanes = default_lanes(args[0]);
            if (lanes != NULL) {
                Py_XSETREF(self->last_lanes, Py_NewRef(lanes));
                Py_XSETREF(self->last_device, Py_NewRef(args[0]));
            }
        }
        if (lanes != NULL) {
            PyObject *r = lanes_alloc((Lanes *)lanes, args[0], args[1], n == 3 ? args[2] : self->default_kind);
            Py_DECREF(lanes);
            if (r != Py_None)
                return r;  /* the allocation, or NULL with an error */
            Py_DECREF(r);
            Py_CLEAR(self->last_device);  /* declined: look the lanes up afresh next time */
            Py_CLEAR(self->last_lanes);
        }
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *
Entry_call(Entry *self, PyObject *args, PyObject *kwds)
{
    return PyVectorcall_Call((PyObject *)self, args, kwds);
}

/* A method when it is a class attribute (Device.alloc); Py_TPFLAGS_METHOD_DESCRIPTOR lets the
 * interpreter call it with the instance first without making a bound method. */
static PyObject *
Entry_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *
Entry_getattro(Entry *self, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr((PyObject *)self, name);
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return r;
    PyErr_Clear();
    return PyObject_GetAttr(self->fallback, name);
}

static PyObject *
Entry_forward(Entry *self, void *name)
{
    return PyObject_GetAttrString(self->fallback, (const char *)name);
}

static PyObject *
Entry_wrapped(Entry *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->fallback);
}

static PyObject *
Entry_repr(Entry *self)
{
    return PyUnicode_FromFormat("<fast entry of %R>", self->fallback);
}

static PyGetSetDef Entry_getset[] = {
    {"__doc__", (getter)Entry_forward, NULL, NULL, "__doc__"},
    {"__name__", (getter)Entry_forward, NULL, NULL, "__name__"},
    {"__qualname__", (getter)Entry_forward, NULL, NULL, "__qualname__"},
    {"__module__", (getter)Entry_forward, NULL, NULL, "__module__"},
    {"__wrapped__", (getter)Entry_wrapped, NULL, "the Python function: the reference path", NULL},
    {NULL}
};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyoffload._fastpath.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Entry, vectorcall),
    .tp_call = (ternaryfunc)Entry_call,
    .tp_descr_get = Entry_get,
    .tp_getattro = (getattrofunc)Entry_getattro,
    .tp_repr = (reprfunc)Entry_repr,
    .tp_getset = Entry_getset,
    .tp_dealloc = (destructor)Entry_dealloc,
    .tp_traverse = (traverseproc)Entry_traverse,
    .tp_clear = (inquiry)Entry_clear,
};

static PyObject *
make_entry(PyObject *fallback, PyObject *default_kind, vectorcallfunc call)
{
    if (!PyFunction_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "an entry point wraps a Python function");
        return NULL;
    }
    Entry *e = PyObject_GC_New(Entry, &EntryType);
    if (e == NULL)
        return NULL;
    e->fallback = Py_NewRef(fallback);
    e->default_kind = Py_XNewRef(default_kind);
    e->last_device = e->last_lanes = NULL;
    e->vectorcall = call;
    PyObject_GC_Track(e);
    return (PyObject *)e;
}

static PyObject *
free_entry(PyObject *module, PyObject *fn)
{
    return make_entry(fn, NULL, (vectorcallfunc)free_entry_call);
}

static PyObject *
alloc_entry(PyObject *module, PyObject *fn)
{
    /* fn(self, size, kind=<default>): the default is read from the function itself */
    PyObject *defaults = PyFunction_Check(fn) ? PyFunction_GetDefaults(fn) : NULL;  /* borrowed */
    if (defaults == NULL || !PyTuple_Check(defaults) || PyTuple_GET_SIZE(defaults) != 1) {
        PyErr_SetString(PyExc_TypeError, "alloc_entry wraps a function alloc(self, size, kind=<default>)");
        return NULL;
    }
    return make_entry(fn, PyTuple_GET_ITEM(defaults, 0), (vectorcallfunc)alloc_entry_call);
}

/* ------------------------------------------------------------------------------------------ */
/* Module                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static PyMethodDef module_methods[] = {
    {"free", (PyCFunction)(void (*)(void))fast_free, METH_FASTCALL,
     "free(target, kind=None): True: freed here; False: not handled (take the Python path); None: this "
     "thread is inside the allocator (a finalizer interrupted it): defer the free."},
    {"set_drain", (PyCFunction)set_drain, METH_O,
     "set_drain(callable): what runs the deferred frees once this thread holds no allocator lock."},
    {"free_entry", (PyCFunction)free_entry, METH_O,
     "free_entry(fn): pyoffload.free: the fast path of free, then fn (the Python function) for "
     "anything it does not serve."},
    {"alloc_entry", (PyCFunction)alloc_entry, METH_O,
     "alloc_entry(fn): Device.alloc(size, kind=...): the fast path in the device's default "
     "context, then fn (the Python method, whose default kind it takes) for anything it does not serve."},
    {"inside_allocator", (PyCFunction)inside_allocator, METH_NOARGS,
     "Whether this thread holds an allocator lock (a Python path of alloc or free is under way)."},
    {NULL}
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pyoffload._fastpath",
    .m_doc = "The common allocation and free in one C call each (see core/_fastpath.c).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    PyObject *buffer = PyImport_ImportModule("pyoffload._buffer");
    if (buffer == NULL)
        return NULL;
    PyObject *base = PyObject_GetAttrString(buffer, "BufferBase");
    Py_DECREF(buffer);
    if (base == NULL)
        return NULL;
    if (!PyType_Check(base) || ((PyTypeObject *)base)->tp_basicsize != sizeof(BufferBase)) {
        Py_DECREF(base);
        PyErr_SetString(PyExc_ImportError, "pyoffload._buffer.BufferBase has another layout than _buffer.h");
        return NULL;
    }
    AllocationBaseType.tp_base = (PyTypeObject *)base;  /* the reference is kept for good */
    if (PyType_Ready(&EntryType) < 0)
        return NULL;
    PyTypeObject *types[] = {&LockType, &AllocationBaseType, &BlockBaseType, &FastStateType, &PoolBaseType, &LanesType};
    const char *names[] = {"Lock", "AllocationBase", "BlockBase", "FastState", "PoolBase", "Lanes"};
    for (int i = 0; i < 6; i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    if (!(str_state = PyUnicode_InternFromString("state")) || !(str_epoch = PyUnicode_InternFromString("epoch")) ||
        !(str_platform = PyUnicode_InternFromString("platform")) || !(str_live = PyUnicode_InternFromString("live")) ||
        !(str_default_context_slot = PyUnicode_InternFromString("default_context_slot")) ||
        !(str_lanes = PyUnicode_InternFromString("lanes")) || !(one = PyLong_FromLong(1)))
        return NULL;
    PyObject *m = PyModule_Create(&fastpath_module);
    if (m == NULL)
        return NULL;
    for (int i = 0; i < 6; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
