/* pyoffload._index: a sorted set of 64-bit addresses with floor queries, for the address maps.
 *
 * The registry answers "which allocation contains this pointer" (mem_info, a launch argument, a
 * copy) by finding the largest base address at or below it.  Kept as Python lists of Python ints,
 * each comparison of that search follows a pointer to an int object somewhere on the heap: with
 * 10^5 live allocations those cache misses cost more than the rest of the lookup.  Here the bases
 * are plain uint64_t in blocks of at most 2 * LOAD (the layout of sortedcontainers' SortedList),
 * with each block's maximum in a flat array: a floor query is two binary searches over contiguous
 * memory, an insert or a removal moves at most one block's tail.
 *
 * Thread safety: every method runs under the GIL and never releases it, so each call is atomic;
 * callers that need several calls to be one step hold their own lock.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define LOAD 512
#define BLOCK_CAP (2 * LOAD + 1)

static PyObject *zero;  /* the int 0, for sign tests */

typedef struct {
    PyObject_HEAD
    uint64_t **blocks;   /* nblocks blocks, each BLOCK_CAP slots */
    Py_ssize_t *counts;  /* bases in each block */
    uint64_t *maxes;     /* the last (largest) base of each block */
    Py_ssize_t nblocks;
    Py_ssize_t cap;      /* slots in blocks / counts / maxes */
    Py_ssize_t size;     /* bases in all */
} SortedIndex;

/* First i in a[0..n) with a[i] >= x. */
static inline Py_ssize_t
lower_bound(const uint64_t *a, Py_ssize_t n, uint64_t x)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* First i in a[0..n) with a[i] > x. */
static inline Py_ssize_t
upper_bound(const uint64_t *a, Py_ssize_t n, uint64_t x)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (a[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* An address argument: 0 <= x < 2**64; anything else is a TypeError or an OverflowError. */
static int
as_address(PyObject *obj, uint64_t *out)
{
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* A query point, clamped to [0, 2**64 - 1]: *where is -1 below 0, 1 at or above 2**64, else 0. */
static int
as_query(PyObject *obj, uint64_t *out, int *where)
{
    *where = 0;
    *out = 0;
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "an address must be an int, not %.100s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    int sign = PyObject_RichCompareBool(obj, zero, Py_LT);
    if (sign < 0)
        return -1;
    if (sign) {
        *where = -1;
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();  /* 2**64 or above: the top of the address space */
        *where = 1;
        v = UINT64_MAX;
    }
    *out = (uint64_t)v;
    return 0;
}

static int
grow(SortedIndex *self)
{
    Py_ssize_t cap = self->cap ? self->cap * 2 : 8;
    uint64_t **blocks = PyMem_Realloc(self->blocks, cap * sizeof(*blocks));
    if (blocks == NULL)
        goto fail;
    self->blocks = blocks;
    Py_ssize_t *counts = PyMem_Realloc(self->counts, cap * sizeof(*counts));
    if (counts == NULL)
        goto fail;
    self->counts = counts;
    uint64_t *maxes = PyMem_Realloc(self->maxes, cap * sizeof(*maxes));
    if (maxes == NULL)
        goto fail;
    self->maxes = maxes;
    self->cap = cap;
    return 0;
fail:
    PyErr_NoMemory();
    return -1;
}

/* Insert a block slot at position pos (its contents are the caller's). */
static int
open_block(SortedIndex *self, Py_ssize_t pos)
{
    if (self->nblocks == self->cap && grow(self) < 0)
        return -1;
    uint64_t *block = PyMem_Malloc(BLOCK_CAP * sizeof(uint64_t));
    if (block == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t tail = self->nblocks - pos;
    memmove(self->blocks + pos + 1, self->blocks + pos, tail * sizeof(*self->blocks));
    memmove(self->counts + pos + 1, self->counts + pos, tail * sizeof(*self->counts));
    memmove(self->maxes + pos + 1, self->maxes + pos, tail * sizeof(*self->maxes));
    self->blocks[pos] = block;
    self->counts[pos] = 0;
    self->maxes[pos] = 0;
    self->nblocks++;
    return 0;
}

static void
close_block(SortedIndex *self, Py_ssize_t pos)
{
    PyMem_Free(self->blocks[pos]);
    Py_ssize_t tail = self->nblocks - pos - 1;
    memmove(self->blocks + pos, self->blocks + pos + 1, tail * sizeof(*self->blocks));
    memmove(self->counts + pos, self->counts + pos + 1, tail * sizeof(*self->counts));
    memmove(self->maxes + pos, self->maxes + pos + 1, tail * sizeof(*self->maxes));
    self->nblocks--;
}

/* 1: added; 0: already present; -1: error. */
static int
index_add(SortedIndex *self, uint64_t x)
{
    if (self->nblocks == 0) {
        if (open_block(self, 0) < 0)
            return -1;
        self->blocks[0][0] = x;
        self->counts[0] = 1;
        self->maxes[0] = x;
        self->size = 1;
        return 1;
    }
    Py_ssize_t pos = lower_bound(self->maxes, self->nblocks, x);
    if (pos == self->nblocks)
        pos--;  /* above every base: the last block grows */
    uint64_t *block = self->blocks[pos];
    Py_ssize_t n = self->counts[pos];
    Py_ssize_t i = lower_bound(block, n, x);
    if (i < n && block[i] == x)
        return 0;
    memmove(block + i + 1, block + i, (n - i) * sizeof(uint64_t));
    block[i] = x;
    n++;
    self->counts[pos] = n;
    self->maxes[pos] = block[n - 1];
    self->size++;
    if (n > 2 * LOAD) {  /* split: the upper half becomes the next block */
        if (open_block(self, pos + 1) < 0)
            return -1;  /* the base is in; the block is merely over-full */
        block = self->blocks[pos];
        memcpy(self->blocks[pos + 1], block + LOAD, (n - LOAD) * sizeof(uint64_t));
        self->counts[pos + 1] = n - LOAD;
        self->maxes[pos + 1] = block[n - 1];
        self->counts[pos] = LOAD;
        self->maxes[pos] = block[LOAD - 1];
    }
    return 1;
}

/* 1: removed; 0: absent. */
static int
index_remove(SortedIndex *self, uint64_t x)
{
    Py_ssize_t pos = lower_bound(self->maxes, self->nblocks, x);
    if (pos == self->nblocks)
        return 0;
    uint64_t *block = self->blocks[pos];
    Py_ssize_t n = self->counts[pos];
    Py_ssize_t i = lower_bound(block, n, x);
    if (i == n || block[i] != x)
        return 0;
    memmove(block + i, block + i + 1, (n - i - 1) * sizeof(uint64_t));
    n--;
    self->size--;
    if (n == 0) {
        close_block(self, pos);
    } else {
        self->counts[pos] = n;
        self->maxes[pos] = block[n - 1];
    }
    return 1;
}

/* The largest base <= x; 0 with *found = 0 when there is none. */
static uint64_t
index_floor(SortedIndex *self, uint64_t x, int *found)
{
    Py_ssize_t nb = self->nblocks;
    *found = 1;
    if (nb == 0) {
        *found = 0;
        return 0;
    }
    Py_ssize_t pos = lower_bound(self->maxes, nb, x);
    if (pos == nb)
        return self->maxes[nb - 1];
    Py_ssize_t j = upper_bound(self->blocks[pos], self->counts[pos], x);
    if (j > 0)
        return self->blocks[pos][j - 1];
    if (pos > 0)
        return self->maxes[pos - 1];
    *found = 0;
    return 0;
}

static void
SortedIndex_dealloc(SortedIndex *self)
{
    for (Py_ssize_t k = 0; k < self->nblocks; k++)
        PyMem_Free(self->blocks[k]);
    PyMem_Free(self->blocks);
    PyMem_Free(self->counts);
    PyMem_Free(self->maxes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
SortedIndex_add(SortedIndex *self, PyObject *arg)
{
    uint64_t x;
    if (as_address(arg, &x) < 0)
        return NULL;
    int r = index_add(self, x);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

static PyObject *
SortedIndex_discard(SortedIndex *self, PyObject *arg)
{
    uint64_t x;
    if (as_address(arg, &x) < 0)
        return NULL;
    return PyBool_FromLong(index_remove(self, x));
}

/* update(removed, added): drop every base of ``removed``, then add every base of ``added``. */
static PyObject *
SortedIndex_update(SortedIndex *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "update(removed, added) takes two iterables");
        return NULL;
    }
    for (int k = 0; k < 2; k++) {
        PyObject *it = PyObject_GetIter(args[k]);
        if (it == NULL)
            return NULL;
        PyObject *item;
        while ((item = PyIter_Next(it)) != NULL) {
            uint64_t x;
            int r = as_address(item, &x);
            Py_DECREF(item);
            if (r == 0)
                r = k == 0 ? index_remove(self, x) : index_add(self, x);
            if (r < 0) {
                Py_DECREF(it);
                return NULL;
            }
        }
        Py_DECREF(it);
        if (PyErr_Occurred())
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
SortedIndex_floor(SortedIndex *self, PyObject *arg)
{
    uint64_t x;
    int where, found;
    if (as_query(arg, &x, &where) < 0)
        return NULL;
    if (where < 0)
        Py_RETURN_NONE;
    uint64_t b = index_floor(self, x, &found);
    if (!found)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(b);
}

/* between(lo, hi): the bases b with lo <= b < hi, ascending (bounds clamped to the address space). */
static PyObject *
SortedIndex_between(SortedIndex *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "between(lo, hi) takes two addresses");
        return NULL;
    }
    uint64_t lo, hi;
    int lo_where, hi_where;
    if (as_query(args[0], &lo, &lo_where) < 0 || as_query(args[1], &hi, &hi_where) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL || hi_where < 0 || lo_where > 0)
        return out;
    int hi_top = hi_where > 0;  /* hi >= 2**64: every base from lo on */
    Py_ssize_t pos = lower_bound(self->maxes, self->nblocks, lo);
    for (; pos < self->nblocks; pos++) {
        uint64_t *block = self->blocks[pos];
        Py_ssize_t n = self->counts[pos];
        for (Py_ssize_t j = lower_bound(block, n, lo); j < n; j++) {
            if (block[j] >= hi && !hi_top)
                return out;
            PyObject *v = PyLong_FromUnsignedLongLong(block[j]);
            if (v == NULL || PyList_Append(out, v) < 0) {
                Py_XDECREF(v);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(v);
        }
    }
    return out;
}

static PyObject *
SortedIndex_blocks(SortedIndex *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(self->nblocks);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < self->nblocks; k++) {
        PyObject *sub = PyList_New(self->counts[k]);
        if (sub == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, sub);
        for (Py_ssize_t j = 0; j < self->counts[k]; j++) {
            PyObject *v = PyLong_FromUnsignedLongLong(self->blocks[k][j]);
            if (v == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            PyList_SET_ITEM(sub, j, v);
        }
    }
    return out;
}

static PyObject *
SortedIndex_maxes(SortedIndex *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(self->nblocks);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < self->nblocks; k++) {
        PyObject *v = PyLong_FromUnsignedLongLong(self->maxes[k]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, v);
    }
    return out;
}

static PyObject *
SortedIndex_clear(SortedIndex *self, PyObject *Py_UNUSED(ignored))
{
    for (Py_ssize_t k = 0; k < self->nblocks; k++)
        PyMem_Free(self->blocks[k]);
    self->nblocks = 0;
    self->size = 0;
    Py_RETURN_NONE;
}

static Py_ssize_t
SortedIndex_len(SortedIndex *self)
{
    return self->size;
}

static PyMethodDef SortedIndex_methods[] = {
    {"add", (PyCFunction)SortedIndex_add, METH_O, "add(x): insert address x; False if it was there."},
    {"discard", (PyCFunction)SortedIndex_discard, METH_O, "discard(x): remove address x; False if it was absent."},
    {"update", (PyCFunction)(void (*)(void))SortedIndex_update, METH_FASTCALL,
     "update(removed, added): discard every address of removed, then add every one of added."},
    {"floor", (PyCFunction)SortedIndex_floor, METH_O, "floor(x): the largest address <= x, or None."},
    {"between", (PyCFunction)(void (*)(void))SortedIndex_between, METH_FASTCALL,
     "between(lo, hi): the addresses b with lo <= b < hi, ascending."},
    {"blocks", (PyCFunction)SortedIndex_blocks, METH_NOARGS, "The layout: a list of each block's addresses."},
    {"maxes", (PyCFunction)SortedIndex_maxes, METH_NOARGS, "The layout: each block's largest address."},
    {"clear", (PyCFunction)SortedIndex_clear, METH_NOARGS, "Remove every address."},
    {NULL}
};

static PySequenceMethods SortedIndex_as_sequence = {
    .sq_length = (lenfunc)SortedIndex_len,
};

static PyTypeObject SortedIndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pyoffload._index.SortedIndex",
    .tp_doc = PyDoc_STR("A sorted set of 64-bit addresses with floor queries (blocks of at most 2 * LOAD)."),
    .tp_basicsize = sizeof(SortedIndex),
    .tp_itemsize = 0,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)SortedIndex_dealloc,
    .tp_methods = SortedIndex_methods,
    .tp_as_sequence = &SortedIndex_as_sequence,
};

static struct PyModuleDef index_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pyoffload._index",
    .m_doc = "A sorted set of 64-bit addresses for the address maps.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__index(void)
{
    if (PyType_Ready(&SortedIndexType) < 0)
        return NULL;
    if (zero == NULL && (zero = PyLong_FromLong(0)) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&index_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "LOAD", LOAD) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&SortedIndexType);
    if (PyModule_AddObject(m, "SortedIndex", (PyObject *)&SortedIndexType) < 0) {
        Py_DECREF(&SortedIndexType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
