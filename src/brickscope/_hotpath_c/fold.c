/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope._hotpath, FoldTable (unsampled bricks folded into C sums) and fold_sums
 * (CategoryAggregator.fold_batch's per-(brick, category) sums).
 * (The layout of these files: docs/native.md.)
 */
#include "hotpath.h"

/* ---- FoldTable: trace._unsampled.UnsampledBricks.fold_closed in C ------------------ */

/* The running sums of one (brick, category): plain C integers, so that a fold allocates
 * nothing (the Python table replaces a tuple of three ints per brick). */
typedef struct {
    PyObject_HEAD
    long long count, self_ns, elements;
} FoldCellObject;

PyTypeObject FoldCellType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath._FoldCell",
    .tp_doc = "The sums of one (brick, category) of a FoldTable.",
    .tp_basicsize = sizeof(FoldCellObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
};


/* Forget the cells remembered by identity (the table's cells are cleared or it is freed). */
static void fold_recent_clear(FoldTableObject *table) {
    for (int i = 0; i < FOLD_RECENT; i++) {
        Py_CLEAR(table->recent[i].name);
        Py_CLEAR(table->recent[i].category);
        Py_CLEAR(table->recent[i].cell);
    }
}



/* fold_closed's common case: 1 folded, 0 left to the Python method (nothing changed), -1 error.
 * Runs without calling Python code once the first change is made, so a resolver thread
 * taking the sums (FoldTable.take, under the GIL as well) sees a brick whole or not at all. */
static int fold_fast(FoldTableObject *table, RecordObject *rec) {
    PyObject *owner = rec->owner;
    if (owner == NULL || !has_base(owner, &ScopeBaseType)) return 0;
    ScopeObject *scope = (ScopeObject *)owner;
    int external = owner_flag(owner, s_external, &scope->external1);
    if (external != 0) return external < 0 ? -1 : 0; /* record_gpu's bricks: timed by their GPU interval */
    PyObject *name = scope->name, *category = scope->category;
    long long elements, start, end, nested, duration;
    if (name == NULL || !PyUnicode_CheckExact(name) || category == NULL ||
        (category != Py_None && !PyUnicode_CheckExact(category)) || !small_int(scope->elements, &elements) ||
        !record_time_value(rec, TIME_START, &start) || !record_time_value(rec, TIME_END, &end) ||
        !small_int(rec->nested_ns, &nested) ||
        __builtin_sub_overflow(end, start, &duration))
        return 0;
    /* the nearest enclosing brick on the scope stack gets this duration as nested time */
    RecordObject *enclosing = NULL;
    for (PyObject *link = rec->link; link != NULL && link != Py_None; link = ((RecordObject *)link)->link) {
        if (!Record_Check(link)) return 0;
        long kind = owner_kind(((RecordObject *)link)->owner);
        if (kind < 0) return -1;
        if (kind == KIND_BRICK) {
            enclosing = (RecordObject *)link;
            break;
        }
    }
    long long outer_nested = 0, self_ns;
    if (enclosing != NULL && (!small_int(enclosing->nested_ns, &outer_nested) ||
                              __builtin_add_overflow(outer_nested, duration, &outer_nested)))
        return 0;
    if (__builtin_sub_overflow(duration, nested, &self_ns)) return 0;
    int clamped = self_ns < 0; /* nested bricks overlapped on several streams */
    if (clamped) self_ns = 0;
    /* Fibonacci hashing of the two addresses: nearby objects spread over the slots */
    uint64_t mixed = ((uint64_t)(uintptr_t)name ^ ((uint64_t)(uintptr_t)category << 1)) * 0x9E3779B97F4A7C15ULL;
    size_t slot = (size_t)(mixed >> (64 - FOLD_RECENT_BITS));
    PyObject *cell = table->recent[slot].cell;
    if (cell == NULL || table->recent[slot].name != name || table->recent[slot].category != category) {
        PyObject *key = category == Py_None ? name : PyTuple_Pack(2, name, category);
        if (key == NULL) return -1;
        if (key == name) Py_INCREF(key);
        cell = PyDict_GetItemWithError(table->cells, key);
        if (cell == NULL) {
            if (PyErr_Occurred() || (cell = (PyObject *)PyObject_New(FoldCellObject, &FoldCellType)) == NULL) {
                Py_DECREF(key);
                return -1;
            }
            ((FoldCellObject *)cell)->count = ((FoldCellObject *)cell)->self_ns = ((FoldCellObject *)cell)->elements = 0;
            int rc = PyDict_SetItem(table->cells, key, cell);
            Py_DECREF(cell); /* the table holds it */
            if (rc < 0) {
                Py_DECREF(key);
                return -1;
            }
        }
        Py_DECREF(key);
        /* exact strs, None and cells: releasing the slot's old ones runs no Python code */
        Py_INCREF(name);
        Py_XSETREF(table->recent[slot].name, name);
        Py_INCREF(category);
        Py_XSETREF(table->recent[slot].category, category);
        Py_INCREF(cell);
        Py_XSETREF(table->recent[slot].cell, cell);
    }
    FoldCellObject *sums = (FoldCellObject *)cell;
    long long count, total, elems;
    if (__builtin_add_overflow(sums->count, 1, &count) || __builtin_add_overflow(sums->self_ns, self_ns, &total) ||
        __builtin_add_overflow(sums->elements, elements, &elems))
        return 0; /* the Python table takes the rest, in Python ints */
    PyObject *new_nested = NULL;
    if (enclosing != NULL && (new_nested = PyLong_FromLongLong(outer_nested)) == NULL) return -1;
    if (clamped && counts_add(table->counts, s_self_time_clamped) < 0) {
        Py_XDECREF(new_nested);
        return -1;
    }
    if (new_nested != NULL) Py_XSETREF(enclosing->nested_ns, new_nested);
    sums->count = count;
    sums->self_ns = total;
    sums->elements = elems;
    return 1;
}

int fold_table_fold(FoldTableObject *table, PyObject *rec) {
    int done = Record_Check(rec) ? fold_fast(table, (RecordObject *)rec) : 0;
    if (done != 0) return done < 0 ? -1 : 0;
    if (Record_Check(rec) && record_times_as_ints((RecordObject *)rec) < 0) return -1;
    PyObject *res = PyObject_CallOneArg(table->fallback, rec);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}

static PyObject *fold_table_call(FoldTableObject *self, PyObject *args, PyObject *kwargs) {
    PyObject *rec;
    if (!PyArg_ParseTuple(args, "O:FoldTable", &rec)) return NULL;
    if (fold_table_fold(self, rec) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *fold_table_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *counts, *fallback;
    if (!PyArg_ParseTuple(args, "O!O:FoldTable", &PyDict_Type, &counts, &fallback)) return NULL;
    FoldTableObject *self = (FoldTableObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    if ((self->cells = PyDict_New()) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(counts);
    self->counts = counts;
    Py_INCREF(fallback);
    self->fallback = fallback;
    return (PyObject *)self;
}

/* {(name, category): (count, self ns, elements)} folded since the last take, each cell read
 * and zeroed in one step (no allocation between: a fold from another thread cannot fall in
 * between); the cells stay, for the next folds. */
static PyObject *fold_table_take(FoldTableObject *self, PyObject *unused) {
    PyObject *items = PyDict_Items(self->cells), *out = PyDict_New();
    if (items == NULL || out == NULL) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *key = PyTuple_GET_ITEM(PyList_GET_ITEM(items, i), 0);
        FoldCellObject *cell = (FoldCellObject *)PyTuple_GET_ITEM(PyList_GET_ITEM(items, i), 1);
        long long count = cell->count, total = cell->self_ns, elems = cell->elements;
        cell->count = cell->self_ns = cell->elements = 0;
        if (count == 0) continue;
        PyObject *label = PyUnicode_CheckExact(key) ? PyTuple_Pack(2, key, Py_None) : (Py_INCREF(key), key);
        PyObject *value = label == NULL ? NULL : Py_BuildValue("(LLL)", count, total, elems);
        int rc = value == NULL ? -1 : PyDict_SetItem(out, label, value);
        Py_XDECREF(label);
        Py_XDECREF(value);
        if (rc < 0) { /* put them back for the next take */
            cell->count += count;
            cell->self_ns += total;
            cell->elements += elems;
            goto fail;
        }
    }
    Py_DECREF(items);
    return out;
fail:
    Py_XDECREF(items);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *fold_table_clear_method(FoldTableObject *self, PyObject *unused) {
    fold_recent_clear(self);
    PyDict_Clear(self->cells);
    Py_RETURN_NONE;
}

static int fold_table_traverse(FoldTableObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->cells);
    Py_VISIT(self->counts);
    Py_VISIT(self->fallback);
    return 0;
}

static int fold_table_clear(FoldTableObject *self) {
    fold_recent_clear(self);
    Py_CLEAR(self->cells);
    Py_CLEAR(self->counts);
    Py_CLEAR(self->fallback);
    return 0;
}

static void fold_table_dealloc(FoldTableObject *self) {
    PyObject_GC_UnTrack(self);
    fold_table_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef fold_table_methods[] = {
    {"take", (PyCFunction)fold_table_take, METH_NOARGS,
     "take(): {(name, category): (count, self ns, elements)} folded since the last take (category None: "
     "the catalog's)."},
    {"clear", (PyCFunction)fold_table_clear_method, METH_NOARGS, "Forget every sum (a forked child)."},
    {NULL}};

PyTypeObject FoldTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.FoldTable",
    .tp_doc = "FoldTable(counts, fallback): table(rec) folds an unsampled host-timed brick that just ended into "
              "per-(brick, category) sums (UnsampledBricks.fold_closed in C; anything unusual goes to fallback).",
    .tp_basicsize = sizeof(FoldTableObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = fold_table_new,
    .tp_call = (ternaryfunc)fold_table_call,
    .tp_dealloc = (destructor)fold_table_dealloc,
    .tp_traverse = (traverseproc)fold_table_traverse,
    .tp_clear = (inquiry)fold_table_clear,
    .tp_methods = fold_table_methods,
};

/* Recorder.open(owner, opener): mirrors _recorder._PyRecording.open. New reference. */
/* ---- fold_sums: CategoryAggregator.fold_batch's per-(brick, category) sums in C -------- */

enum { S_KIND, S_BRICK, S_NAME, S_CATEGORY, S_OTHER, S_SELF, S_ELEMENTS, S_COUNT };

/* attributes.get(key, default): borrowed; NULL with an error set only on failure. */
static PyObject *attr_get(PyObject *attributes, PyObject *key, PyObject *fallback) {
    PyObject *value = PyDict_GetItemWithError(attributes, key);
    return value != NULL || PyErr_Occurred() ? value : fallback;
}

/* Whether attributes are a brick's (kind == "brick"): 1, 0, or -1 (not what the C side folds). */
static int brick_kind(PyObject *attributes, PyObject *const *keys) {
    PyObject *kind = PyDict_GetItemWithError(attributes, keys[S_KIND]);
    if (kind == NULL) return PyErr_Occurred() ? -2 : 0;
    if (!PyUnicode_CheckExact(kind)) return -1;
    return PyUnicode_Compare(kind, keys[S_BRICK]) == 0;
}

/* A brick's figures as fold_sums reads them from its attributes (strong references). */
typedef struct {
    Py_ssize_t index; /* of the span in the batch */
    PyObject *name, *category, *self_ns, *elements;
} BrickFigures;

static void figures_clear(BrickFigures *figures, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_DECREF(figures[i].name);
        Py_DECREF(figures[i].category);
        Py_DECREF(figures[i].self_ns);
        Py_DECREF(figures[i].elements);
    }
    PyMem_Free(figures);
}

/* sums[(name, category)] += (1, self ns, elements). 0, or -1 with an error set. */
static int add_to_sums(PyObject *sums, BrickFigures *brick) {
    PyObject *key = PyTuple_Pack(2, brick->name, brick->category);
    if (key == NULL) return -1;
    PyObject *old = PyDict_GetItemWithError(sums, key), *sum = NULL;
    if (old == NULL && PyErr_Occurred()) {
        Py_DECREF(key);
        return -1;
    }
    if (old == NULL) {
        PyObject *one = PyLong_FromLong(1);
        if (one != NULL) sum = PyTuple_Pack(3, one, brick->self_ns, brick->elements);
        Py_XDECREF(one);
    } else if (PyTuple_CheckExact(old) && PyTuple_GET_SIZE(old) == 3) {
        PyObject *one = PyLong_FromLong(1);
        PyObject *count = one ? PyNumber_Add(PyTuple_GET_ITEM(old, 0), one) : NULL;
        PyObject *total = count ? PyNumber_Add(PyTuple_GET_ITEM(old, 1), brick->self_ns) : NULL;
        PyObject *elems = total ? PyNumber_Add(PyTuple_GET_ITEM(old, 2), brick->elements) : NULL;
        if (elems != NULL) sum = PyTuple_Pack(3, count, total, elems);
        Py_XDECREF(one);
        Py_XDECREF(count);
        Py_XDECREF(total);
        Py_XDECREF(elems);
    } else {
        PyErr_SetString(PyExc_TypeError, "fold_sums: sums holds (count, self ns, elements) tuples");
    }
    int rc = sum == NULL ? -1 : PyDict_SetItem(sums, key, sum);
    Py_DECREF(key);
    Py_XDECREF(sum);
    return rc;
}

/* fold_sums(spans, attributes, keys, sums, values) -> bool. The fold of fold_batch's
 * Python loop (sdk/trace/_aggregation.py) for a batch whose every attributes are a dict and
 * whose bricks carry a str name and category and int self time and elements: sums
 * (name, category) -> (count, self ns, elements) in the dict sums, and, when values is a
 * list, (self ns, name, category, span) per brick for the histogram. False: nothing
 * changed, the Python loop folds the batch. Each attributes dict is read once: the first
 * pass keeps the bricks' figures, the second folds them. */
PyObject *fold_sums(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) || !PyTuple_CheckExact(args[2]) ||
        PyTuple_GET_SIZE(args[2]) != S_COUNT || !PyDict_CheckExact(args[3]) ||
        (args[4] != Py_None && !PyList_CheckExact(args[4]))) {
        PyErr_SetString(PyExc_TypeError, "fold_sums(spans: list, attributes: list, keys: tuple, sums: dict, values)");
        return NULL;
    }
    PyObject *spans = args[0], *attributes = args[1], *sums = args[3], *values = args[4];
    PyObject *const *keys = &PyTuple_GET_ITEM(args[2], 0);
    Py_ssize_t n = PyList_GET_SIZE(attributes);
    if (PyList_GET_SIZE(spans) != n) Py_RETURN_FALSE;
    BrickFigures *figures = PyMem_New(BrickFigures, n > 0 ? n : 1);
    if (figures == NULL) return PyErr_NoMemory();
    Py_ssize_t bricks = 0;
    int fold = 1; /* 0: the Python loop folds the batch; -1: an error */
    for (Py_ssize_t i = 0; i < n && fold == 1; i++) { /* first: all of it is what the C side folds */
        PyObject *attrs = PyList_GET_ITEM(attributes, i);
        if (!PyDict_CheckExact(attrs)) {
            fold = 0;
            break;
        }
        int brick = brick_kind(attrs, keys);
        if (brick == -2) fold = -1;
        else if (brick < 0) fold = 0;
        if (brick != 1) continue;
        PyObject *name = attr_get(attrs, keys[S_NAME], NULL), *category = attr_get(attrs, keys[S_CATEGORY], keys[S_OTHER]);
        PyObject *self_ns = attr_get(attrs, keys[S_SELF], NULL), *elements = attr_get(attrs, keys[S_ELEMENTS], g_zero);
        if (PyErr_Occurred()) {
            fold = -1;
        } else if (name == NULL || !PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(category) || self_ns == NULL ||
                   !PyLong_CheckExact(self_ns) || !PyLong_CheckExact(elements)) {
            fold = 0;
        } else {
            figures[bricks++] = (BrickFigures){i, Py_NewRef(name), Py_NewRef(category), Py_NewRef(self_ns),
                                               Py_NewRef(elements)};
        }
    }
    for (Py_ssize_t b = 0; b < bricks && fold == 1; b++) {
        BrickFigures *brick = &figures[b];
        if (add_to_sums(sums, brick) < 0) {
            fold = -1;
            break;
        }
        if (values != Py_None) {
            PyObject *value =
                PyTuple_Pack(4, brick->self_ns, brick->name, brick->category, PyList_GET_ITEM(spans, brick->index));
            if (value == NULL || PyList_Append(values, value) < 0) fold = -1;
            Py_XDECREF(value);
        }
    }
    figures_clear(figures, bricks);
    if (fold < 0) return NULL;
    return Py_NewRef(fold ? Py_True : Py_False);
}
