/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope._tablerows: the optional C accelerator of the analysis table's row making.
 * The pure-Python reference is analysis/_table.py (TableBuilder._row and _store, with
 * _clean for values that do not fit their column); this file makes the same rows from the
 * same spans, for a whole batch at a time, into one bytes buffer per column (native-endian
 * int64 / uint64 / double, what array.array.frombytes takes).
 *
 * A row is made here when everything about it is the common case: the codes it needs
 * (operation, category, resource, device and stream lane) are already known to the builder
 * and its values are ints, strings or None. Anything else (a code seen for the first time, a
 * value of another type, never-ended spans, output bytes from a shape) calls the builder's
 * own Python TableBuilder._row for that span, which makes the new codes, and its row is
 * stored here as the Python code would store it: a value that does not fit its column goes
 * through the reference's _clean.
 *
 * setup(*, key_names, keys, columns, typecodes, kind_codes, clock_cuda, clock_gpu, hash, clean)
 *     once, from _table.py: the attribute keys a row is made of (_KEYS) and their names (checked
 *     against ROW_KEYS), the columns (checked against ROW_COLUMNS) and each one's typecode,
 *     KIND name -> code, the two GPU clock names, _hash, and clean(value, column).
 * records(builder, batch) -> tuple of one bytes per column
 *     batch: a list of SpanRecord tuples (name, start, end, span_id, parent_id, resource,
 *     attributes).
 * raws(builder, batch) -> the same, from TableBuilder.add's raw tuples (the six span fields,
 *     then one value per key).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdio.h>
#include <string.h>

#include "_fields.h"

/* The version of what this module expects from analysis/_table.py (setup's fields, the key
 * and column tables): _table.py states the one it was written for, and brickscope.native.load
 * refuses another. Raise it with any such change. */
#define TABLEROWS_ABI_VERSION 2

#define N_TILES 9
#define OP_CACHE 64 /* entries of a batch's operation-code cache (the slot: the top 6 bits of a hash) */

/* The attribute keys a row is made of, in the order of the K_* slots, by the name of their
 * constant in brickscope/trace/attributes.py (the declaration), or the short keyword itself;
 * then N_TILES / 3 levels of TILE_COUNT, TILE_DURATION_NS, TILE_ELEMENTS (named "TILE_COUNT.0"
 * ...). setup() checks _table.py's names against these, in order. */
#define ROW_KEYS(X)                                                                                          \
    X(KIND, "SCOPE_KIND") X(CATEGORY, "BRICK_CATEGORY") X(BRICK, "BRICK_NAME") X(SELF, "BRICK_SELF_DURATION_NS") \
    X(CLOCK, "CLOCK") X(ORDINAL, "GPU_DEVICE_ID") X(HANDLE, "GPU_STREAM_ID") X(STEP, "STEP_NUMBER")            \
    X(LAYER, "LAYER_INDEX") X(THREAD, "THREAD_ID") X(ELEMENTS, "BRICK_ELEMENTS") X(BYTES, "WORK_BYTES")        \
    X(SHORT_BYTES, "bytes") X(SHAPE, "WORK_OUTPUT_SHAPE") X(SHORT_SHAPE, "output_shape") X(DTYPE, "WORK_DTYPE") \
    X(SHORT_DTYPE, "dtype") X(FLOPS, "WORK_FLOPS") X(SHORT_FLOPS, "flops") X(TOKENS, "STEP_TOKENS")            \
    X(SHORT_TOKENS, "tokens") X(GRID, "KERNEL_GRID") X(BLOCK, "KERNEL_BLOCK") X(SMEM, "KERNEL_SHARED_MEM_BYTES") \
    X(SOURCE, "KERNEL_SOURCE_HASH") X(CHECKSUM, "OUTPUT_CHECKSUM")
enum {
#define X(slot, name) K_##slot,
    ROW_KEYS(X)
#undef X
    K_TILES
};
/* The columns (_table.COLUMNS), in their order; then the N_TILES tile columns,
 * "tile_<level>_count", "_ns", "_elements" per level. */
#define ROW_COLUMNS(X)                                                                                       \
    X(OP, "op") X(KIND, "kind") X(CATEGORY, "category") X(START, "start") X(END, "end") X(SELF, "self")       \
    X(CLOCK, "clock") X(DEVICE, "device") X(STREAM, "stream") X(STEP, "step") X(LAYER, "layer") X(RANK, "rank") \
    X(THREAD, "thread") X(SPAN_ID, "span_id") X(PARENT_ID, "parent_id") X(ELEMENTS, "elements")              \
    X(BYTES, "bytes") X(FLOPS, "flops") X(TOKENS, "tokens") X(LAUNCH, "launch") X(SOURCE, "source")            \
    X(CHECKSUM, "checksum")
enum {
#define X(slot, name) C_##slot,
    ROW_COLUMNS(X)
#undef X
    C_TILES
};
#define N_KEYS (K_TILES + N_TILES)
#define N_COLUMNS (C_TILES + N_TILES)
static const char *const key_names[K_TILES] = {
#define X(slot, name) name,
    ROW_KEYS(X)
#undef X
};
static const char *const column_names[C_TILES] = {
#define X(slot, name) name,
    ROW_COLUMNS(X)
#undef X
};
static const char *const tile_keys[3] = {"TILE_COUNT", "TILE_DURATION_NS", "TILE_ELEMENTS"};
static const char *const tile_columns[3] = {"_count", "_ns", "_elements"};
enum { KIND_OTHER, KIND_STEP, KIND_LAYER, KIND_BRICK, KIND_KERNEL, KIND_OVERHEAD, KIND_GC, N_KINDS };

#define FALLBACK 1 /* not the common case: the builder's Python _row makes this row */

static PyObject *g_keys[N_KEYS];
static PyObject *g_kind_codes, *g_cuda, *g_gpu, *g_hash, *g_clean;
static PyObject *g_key_index; /* key -> its index in g_keys (NULL if a key repeats) */
static char g_typecodes[N_COLUMNS];
static PyObject *g_kinds[N_KINDS]; /* the ints 0..N_KINDS-1 */
static PyObject *g_zero, *g_empty, *g_other;
static PyObject *g_two_to_64; /* the first int a uint64 column cannot hold */
static PyObject *s_op_codes, *s_category_codes, *s_resources, *s_lanes, *s_row, *s_launch_code, *s_get;

typedef union {
    long long q;
    unsigned long long u;
    double d;
} Slot;

typedef struct {
    PyObject *builder;
    PyObject *op_codes, *category_codes, *resources, *lanes; /* borrowed from the builder, per call */
    Slot *columns[N_COLUMNS];
    /* The previous row's code lookups, reused while rows repeat the same key objects (a
     * batch of one program's spans mostly does): the code tables only grow during a call,
     * and an entry, once made, keeps its code. Keys compared by identity (the same objects
     * are the same key); the objects are held, so an identity cannot be reused meanwhile. */
    struct {
        PyObject *name, *category, *brick; /* NULL: nothing cached in this entry */
        long long kind, code, category_code;
    } ops[OP_CACHE]; /* direct-mapped by the name's address: a batch interleaves a few dozen operations */
    PyObject *resource, *entry; /* the resource and its entry (resource, rank code, host, ...) */
    long long rank;
    PyObject *lane_ordinal, *lane_handle; /* with entry: the lane's key */
    long long device, stream;
    /* The keys met at each position of the last small attributes dict walked, and their
     * indexes into the keys (-1: not a table key): a brickscope span's dict has the same
     * key objects in the same order as the previous span's of its kind, so most keys are
     * found by identity instead of a lookup. Held, so an identity cannot be reused. */
    PyObject *seen_key[N_KEYS / 2];
    int seen_index[N_KEYS / 2];
} Ctx;

static void ctx_clear(Ctx *c) {
    for (int i = 0; i < N_KEYS / 2; i++) Py_CLEAR(c->seen_key[i]);
    for (int i = 0; i < OP_CACHE; i++) {
        Py_CLEAR(c->ops[i].name);
        Py_CLEAR(c->ops[i].category);
        Py_CLEAR(c->ops[i].brick);
    }
    Py_CLEAR(c->resource);
    Py_CLEAR(c->entry);
    Py_CLEAR(c->lane_ordinal);
    Py_CLEAR(c->lane_handle);
}

#define ABSENT(v) ((v) == NULL || (v) == Py_None)

/* Store any value as the Python code would (array.extend, else _clean(value)). */
static int store(Ctx *c, int column, Py_ssize_t row, PyObject *value) {
    Slot *slot = &c->columns[column][row];
    char typecode = g_typecodes[column];
    if (typecode == 'd') {
        if (PyFloat_CheckExact(value)) {
            slot->d = PyFloat_AS_DOUBLE(value);
            return 0;
        }
        if (PyLong_Check(value)) {
            double d = PyLong_AsDouble(value);
            if (!(d == -1.0 && PyErr_Occurred())) {
                slot->d = d;
                return 0;
            }
            PyErr_Clear();
        }
    } else if (PyLong_Check(value)) {
        if (typecode == 'Q') {
            /* Span ids are random 64-bit ints: PyLong_AsUnsignedLongLong converts those through
             * the generic _PyLong_AsByteArray (about 200 instructions each, two ids a row). The
             * signed conversion and the masked one walk the digits directly; 2**64 bounds the
             * masked one, so every value it takes is exact and the rest still go to _clean. */
            int overflow = 0;
            long long q = PyLong_AsLongLongAndOverflow(value, &overflow);
            if (overflow == 0 && q >= 0) {
                slot->u = (unsigned long long)q;
                return 0;
            }
            if (overflow > 0) {
                int fits = PyObject_RichCompareBool(value, g_two_to_64, Py_LT);
                if (fits > 0) {
                    slot->u = PyLong_AsUnsignedLongLongMask(value);
                    if (!PyErr_Occurred()) return 0;
                }
            }
        } else {
            int overflow = 0;
            long long q = PyLong_AsLongLongAndOverflow(value, &overflow);
            if (!overflow && !(q == -1 && PyErr_Occurred())) {
                slot->q = q;
                return 0;
            }
        }
        PyErr_Clear();
    }
    PyObject *column_index = PyLong_FromLong(column);
    if (column_index == NULL) return -1;
    PyObject *clean = PyObject_CallFunctionObjArgs(g_clean, value, column_index, NULL);
    Py_DECREF(column_index);
    if (clean == NULL) return -1;
    int rc = 0;
    if (typecode == 'd') {
        slot->d = PyFloat_AsDouble(clean);
        rc = slot->d == -1.0 && PyErr_Occurred() ? -1 : 0;
    } else if (typecode == 'Q') {
        slot->u = PyLong_AsUnsignedLongLong(clean);
        rc = slot->u == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
    } else {
        slot->q = PyLong_AsLongLong(clean);
        rc = slot->q == -1 && PyErr_Occurred() ? -1 : 0;
    }
    Py_DECREF(clean);
    return rc;
}

/* `value or 0`, stored. */
static int store_or_zero(Ctx *c, int column, Py_ssize_t row, PyObject *value) {
    if (ABSENT(value)) {
        c->columns[column][row].q = 0;
        return 0;
    }
    int truth = PyObject_IsTrue(value);
    if (truth < 0) return -1;
    if (!truth) {
        c->columns[column][row].q = 0;
        return 0;
    }
    return store(c, column, row, value);
}

/* The int a code dict holds (borrowed value from a dict of ours: always an int). */
static int code_of(PyObject *value, long long *out) {
    *out = PyLong_AsLongLong(value);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* Call fn(value) and store the result; for _hash and _launch_code. */
static int store_call(Ctx *c, int column, Py_ssize_t row, PyObject *result) {
    if (result == NULL) return -1;
    int rc = store(c, column, row, result);
    Py_DECREF(result);
    return rc;
}

/* Compare a str with a str constant: 1 equal, 0 not, -1 error. */
static int same_text(PyObject *text, PyObject *constant) {
    if (text == constant) return 1;
    /* two interned strings are equal only if they are one object (the constants are interned at setup) */
    if (PyUnicode_CHECK_INTERNED(text) && PyUnicode_CHECK_INTERNED(constant)) return 0;
    return PyUnicode_Compare(text, constant) == 0 ? 1 : (PyErr_Occurred() ? -1 : 0);
}

/* The common case of TableBuilder._row: 0 stored, FALLBACK, or -1 with an error set. */
static int fast_row(Ctx *c, Py_ssize_t row, PyObject *const *head, PyObject *const *v) {
    PyObject *name = head[0], *start = head[1], *end = head[2], *resource = head[5];
    if (!PyUnicode_CheckExact(name) || !PyLong_CheckExact(start) || !PyLong_CheckExact(end)) return FALLBACK;
    /* kind */
    long long kind = KIND_OTHER;
    PyObject *kind_name = v[K_KIND];
    if (!ABSENT(kind_name)) {
        if (!PyUnicode_CheckExact(kind_name)) return FALLBACK;
        PyObject *code = PyDict_GetItemWithError(g_kind_codes, kind_name);
        if (code == NULL && PyErr_Occurred()) return -1;
        if (code != NULL && code_of(code, &kind) < 0) return -1;
        if (kind < 0 || kind >= N_KINDS) return FALLBACK; /* a kind this build does not know */
    }
    /* the operation's key */
    PyObject *category_name = v[K_CATEGORY], *brick_name = Py_None;
    if (kind == KIND_BRICK || kind == KIND_KERNEL) {
        if (!ABSENT(category_name) && !PyUnicode_CheckExact(category_name)) return FALLBACK;
        if (ABSENT(category_name) || PyUnicode_GET_LENGTH(category_name) == 0)
            category_name = kind == KIND_BRICK ? g_other : g_empty;
        if (kind == KIND_KERNEL && !ABSENT(v[K_BRICK])) {
            if (!PyUnicode_CheckExact(v[K_BRICK])) return FALLBACK;
            brick_name = v[K_BRICK];
        }
    } else {
        category_name = g_empty;
    }
    /* the operation's codes: by identity from the cache entry of this name, else looked up and cached */
    long long op_code, category = -1;
    size_t slot = (size_t)((((uint64_t)(uintptr_t)name >> 4) * 0x9E3779B97F4A7C15ull) >> 58); /* Fibonacci hash: 64 slots */
    if (c->ops[slot].name == name && c->ops[slot].category == category_name && c->ops[slot].brick == brick_name &&
        c->ops[slot].kind == kind) {
        op_code = c->ops[slot].code;
        category = c->ops[slot].category_code;
    } else {
        PyObject *key = PyTuple_Pack(4, g_kinds[kind], name, category_name, brick_name);
        if (key == NULL) return -1;
        PyObject *op = PyDict_GetItemWithError(c->op_codes, key);
        Py_DECREF(key);
        if (op == NULL) return PyErr_Occurred() ? -1 : FALLBACK;
        if (code_of(op, &op_code) < 0) return -1;
        PyObject *category_code = PyDict_GetItemWithError(c->category_codes, category_name);
        if (category_code == NULL) {
            if (PyErr_Occurred()) return -1;
            if (PyUnicode_GET_LENGTH(category_name)) return FALLBACK; /* a new category */
        } else if (code_of(category_code, &category) < 0) {
            return -1;
        }
        Py_XSETREF(c->ops[slot].name, Py_NewRef(name));
        Py_XSETREF(c->ops[slot].category, Py_NewRef(category_name));
        Py_XSETREF(c->ops[slot].brick, Py_NewRef(brick_name));
        c->ops[slot].kind = kind;
        c->ops[slot].code = op_code;
        c->ops[slot].category_code = category;
    }
    /* start, end, self */
    int overflow = 0;
    long long t0 = PyLong_AsLongLongAndOverflow(start, &overflow);
    if (overflow) return FALLBACK;
    long long t1 = PyLong_AsLongLongAndOverflow(end, &overflow);
    if (overflow) return FALLBACK;
    if ((t0 == -1 || t1 == -1) && PyErr_Occurred()) return -1;
    long long self_ns = 0;
    int self_given = kind == KIND_BRICK && !ABSENT(v[K_SELF]);
    if (!self_given && __builtin_sub_overflow(t1, t0, &self_ns)) return FALLBACK;
    /* the resource's entry: (resource, rank code, host, device models) */
    PyObject *entry;
    long long rank;
    if (c->resource == resource) {
        entry = c->entry;
        rank = c->rank;
    } else {
        PyObject *resource_id = PyLong_FromVoidPtr(resource);
        if (resource_id == NULL) return -1;
        entry = PyDict_GetItemWithError(c->resources, resource_id);
        Py_DECREF(resource_id);
        if (entry == NULL) return PyErr_Occurred() ? -1 : FALLBACK;
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 3 || PyTuple_GET_ITEM(entry, 0) != resource) return FALLBACK;
        if (code_of(PyTuple_GET_ITEM(entry, 1), &rank) < 0) return -1;
        Py_XSETREF(c->resource, Py_NewRef(resource));
        Py_XSETREF(c->entry, Py_NewRef(entry));
        c->rank = rank;
        Py_CLEAR(c->lane_ordinal); /* the lane's key includes the entry's */
        Py_CLEAR(c->lane_handle);
    }
    /* clock, device, stream */
    long long clock = 0, device = -1, stream = -1;
    PyObject *clock_name = v[K_CLOCK];
    if (!ABSENT(clock_name)) {
        if (!PyUnicode_CheckExact(clock_name)) return FALLBACK;
        int cuda = same_text(clock_name, g_cuda), gpu = cuda ? 0 : same_text(clock_name, g_gpu);
        if (cuda < 0 || gpu < 0) return -1;
        if (cuda || gpu) {
            clock = cuda ? 1 : 2;
            PyObject *ordinal = v[K_ORDINAL], *handle = v[K_HANDLE];
            if (!ABSENT(ordinal)) {
                if (!PyLong_CheckExact(ordinal) || (!ABSENT(handle) && !PyLong_CheckExact(handle))) return FALLBACK;
                if (!ABSENT(handle)) {
                    int truth = PyObject_IsTrue(handle);
                    if (truth < 0) return -1;
                    if (!truth) handle = g_zero; /* handle or 0 */
                } else {
                    handle = g_zero;
                }
                if (c->lane_ordinal == ordinal && c->lane_handle == handle) {
                    device = c->device;
                    stream = c->stream;
                } else {
                    PyObject *lane = PyTuple_Pack(4, PyTuple_GET_ITEM(entry, 1), PyTuple_GET_ITEM(entry, 2), ordinal, handle);
                    if (lane == NULL) return -1;
                    PyObject *codes = PyDict_GetItemWithError(c->lanes, lane);
                    Py_DECREF(lane);
                    if (codes == NULL) return PyErr_Occurred() ? -1 : FALLBACK;
                    if (code_of(PyTuple_GET_ITEM(codes, 0), &device) < 0 || code_of(PyTuple_GET_ITEM(codes, 1), &stream) < 0)
                        return -1;
                    Py_XSETREF(c->lane_ordinal, Py_NewRef(ordinal));
                    Py_XSETREF(c->lane_handle, Py_NewRef(handle));
                    c->device = device;
                    c->stream = stream;
                }
            }
        }
    }
    /* bytes: from the attribute, else from an output shape (the Python code's) */
    PyObject *nbytes = ABSENT(v[K_BYTES]) ? v[K_SHORT_BYTES] : v[K_BYTES];
    if (ABSENT(nbytes) && !(ABSENT(v[K_SHAPE]) && ABSENT(v[K_SHORT_SHAPE]))) return FALLBACK;
    /* Everything is known: store the row. */
    Slot **col = c->columns;
    PyObject *flops = ABSENT(v[K_FLOPS]) ? v[K_SHORT_FLOPS] : v[K_FLOPS];
    PyObject *tokens = ABSENT(v[K_TOKENS]) ? v[K_SHORT_TOKENS] : v[K_TOKENS];
    col[C_OP][row].q = op_code;
    col[C_KIND][row].q = kind;
    col[C_CATEGORY][row].q = category;
    col[C_START][row].q = t0;
    col[C_END][row].q = t1;
    if (self_given) {
        if (store(c, C_SELF, row, v[K_SELF]) < 0) return -1;
    } else {
        col[C_SELF][row].q = self_ns;
    }
    col[C_CLOCK][row].q = clock;
    col[C_DEVICE][row].q = device;
    col[C_STREAM][row].q = stream;
    if (ABSENT(v[K_STEP])) col[C_STEP][row].q = -1;
    else if (store(c, C_STEP, row, v[K_STEP]) < 0) return -1;
    if (ABSENT(v[K_LAYER])) col[C_LAYER][row].q = -1;
    else if (store(c, C_LAYER, row, v[K_LAYER]) < 0) return -1;
    col[C_RANK][row].q = rank;
    if (store_or_zero(c, C_THREAD, row, v[K_THREAD]) < 0 || store(c, C_SPAN_ID, row, head[3]) < 0 ||
        store(c, C_PARENT_ID, row, head[4]) < 0 || store_or_zero(c, C_ELEMENTS, row, v[K_ELEMENTS]) < 0)
        return -1;
    if (ABSENT(nbytes)) col[C_BYTES][row].q = 0;
    else if (store(c, C_BYTES, row, nbytes) < 0) return -1;
    if (ABSENT(flops)) col[C_FLOPS][row].d = 0.0;
    else if (store(c, C_FLOPS, row, flops) < 0) return -1;
    if (ABSENT(tokens)) col[C_TOKENS][row].q = 0;
    else if (store(c, C_TOKENS, row, tokens) < 0) return -1;
    if (kind != KIND_KERNEL || (ABSENT(v[K_GRID]) && ABSENT(v[K_BLOCK]) && ABSENT(v[K_SMEM]))) {
        col[C_LAUNCH][row].q = -1;
    } else {
        PyObject *grid = v[K_GRID] ? v[K_GRID] : Py_None, *block = v[K_BLOCK] ? v[K_BLOCK] : Py_None;
        PyObject *smem = v[K_SMEM] ? v[K_SMEM] : Py_None;
        if (store_call(c, C_LAUNCH, row, PyObject_CallMethodObjArgs(c->builder, s_launch_code, grid, block, smem, NULL)) < 0)
            return -1;
    }
    if (ABSENT(v[K_SOURCE])) col[C_SOURCE][row].u = 0;
    else if (store_call(c, C_SOURCE, row, PyObject_CallOneArg(g_hash, v[K_SOURCE])) < 0) return -1;
    if (ABSENT(v[K_CHECKSUM])) col[C_CHECKSUM][row].u = 0;
    else if (store_call(c, C_CHECKSUM, row, PyObject_CallOneArg(g_hash, v[K_CHECKSUM])) < 0) return -1;
    for (int i = 0; i < N_TILES; i++)
        if (store_or_zero(c, C_TILES + i, row, v[K_TILES + i]) < 0) return -1;
    return 0;
}

/* The builder's Python _row for this span, stored. */
static int python_row(Ctx *c, Py_ssize_t row, PyObject *const *head, PyObject *const *v) {
    PyObject *raw = PyTuple_New(6 + N_KEYS);
    if (raw == NULL) return -1;
    for (int i = 0; i < 6 + N_KEYS; i++) {
        PyObject *item = i < 6 ? head[i] : v[i - 6];
        if (item == NULL) item = Py_None;
        Py_INCREF(item);
        PyTuple_SET_ITEM(raw, i, item);
    }
    PyObject *made = PyObject_CallMethodOneArg(c->builder, s_row, raw);
    Py_DECREF(raw);
    if (made == NULL) return -1;
    if (!PyTuple_Check(made) || PyTuple_GET_SIZE(made) != N_COLUMNS) {
        Py_DECREF(made);
        PyErr_SetString(PyExc_TypeError, "TableBuilder._row: a tuple of one value per column expected");
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < N_COLUMNS && rc == 0; i++) rc = store(c, i, row, PyTuple_GET_ITEM(made, i));
    Py_DECREF(made);
    return rc;
}

static int one_row(Ctx *c, Py_ssize_t row, PyObject *const *head, PyObject *const *v) {
    int rc = fast_row(c, row, head, v);
    return rc == FALLBACK ? python_row(c, row, head, v) : rc;
}

/* Shared by records() and raws(): one bytes buffer per column, filled row by row. */
static PyObject *make_rows(PyObject *builder, PyObject *batch, int from_records) {
    if (g_kind_codes == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "brickscope._tablerows: setup() was not called");
        return NULL;
    }
    if (!PyList_Check(batch)) {
        PyErr_SetString(PyExc_TypeError, "a list of spans expected");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(batch);
    Ctx c = {builder};
    PyObject *result = PyTuple_New(N_COLUMNS);
    PyObject *attrs[4] = {NULL, NULL, NULL, NULL};
    if (result == NULL) return NULL;
    for (int i = 0; i < N_COLUMNS; i++) {
        PyObject *buffer = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(Slot));
        if (buffer == NULL) goto failed;
        PyTuple_SET_ITEM(result, i, buffer);
        c.columns[i] = (Slot *)PyBytes_AS_STRING(buffer);
    }
    PyObject *names[4] = {s_op_codes, s_category_codes, s_resources, s_lanes};
    for (int i = 0; i < 4; i++) {
        attrs[i] = PyObject_GetAttr(builder, names[i]);
        if (attrs[i] == NULL) goto failed;
        if (!PyDict_Check(attrs[i])) {
            PyErr_SetString(PyExc_TypeError, "TableBuilder: its code tables are dicts");
            goto failed;
        }
    }
    c.op_codes = attrs[0];
    c.category_codes = attrs[1];
    c.resources = attrs[2];
    c.lanes = attrs[3];
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *item = PyList_GET_ITEM(batch, r);
        Py_INCREF(item); /* a Python _row may run: keep it alive */
        int rc;
        if (from_records) {
            if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 7) {
                Py_DECREF(item);
                PyErr_SetString(PyExc_ValueError, "a span record is a tuple of 7 fields");
                goto failed;
            }
            PyObject *attributes = PyTuple_GET_ITEM(item, 6);
            PyObject *values[N_KEYS];
            int held = 0; /* values are new references (a Mapping's get) rather than borrowed */
            rc = 0;
            if (PyDict_CheckExact(attributes) && g_key_index != NULL && PyDict_GET_SIZE(attributes) < N_KEYS / 2) {
                /* a small dict (a brickscope span's): walk its items, not one lookup per key */
                for (int k = 0; k < N_KEYS; k++) values[k] = NULL;
                Py_ssize_t pos = 0;
                PyObject *key, *value;
                for (int at = 0; rc == 0 && PyDict_Next(attributes, &pos, &key, &value); at++) {
                    /* at < N_KEYS / 2: the dict has fewer items than that */
                    if (key == c.seen_key[at]) {
                        if (c.seen_index[at] >= 0) values[c.seen_index[at]] = value;
                        continue;
                    }
                    PyObject *index = PyDict_GetItemWithError(g_key_index, key);
                    if (index == NULL && PyErr_Occurred()) {
                        rc = -1;
                        break;
                    }
                    int k = index == NULL ? -1 : (int)PyLong_AsLong(index);
                    if (k >= 0) values[k] = value;
                    Py_XSETREF(c.seen_key[at], Py_NewRef(key));
                    c.seen_index[at] = k;
                }
            } else if (PyDict_CheckExact(attributes)) {
                for (int k = 0; k < N_KEYS; k++) {
                    values[k] = PyDict_GetItemWithError(attributes, g_keys[k]);
                    if (values[k] == NULL && PyErr_Occurred()) rc = -1;
                }
            } else {
                held = 1;
                for (int k = 0; k < N_KEYS; k++) values[k] = NULL;
                for (int k = 0; k < N_KEYS && rc == 0; k++) {
                    values[k] = PyObject_CallMethodOneArg(attributes, s_get, g_keys[k]);
                    if (values[k] == NULL) rc = -1;
                }
            }
            if (rc == 0) rc = one_row(&c, r, &PyTuple_GET_ITEM(item, 0), values);
            if (held)
                for (int k = 0; k < N_KEYS; k++) Py_XDECREF(values[k]);
        } else {
            if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 6 + N_KEYS) {
                Py_DECREF(item);
                PyErr_SetString(PyExc_ValueError, "a raw row is a tuple of 6 span fields and one value per key");
                goto failed;
            }
            rc = one_row(&c, r, &PyTuple_GET_ITEM(item, 0), &PyTuple_GET_ITEM(item, 6));
        }
        Py_DECREF(item);
        if (rc < 0) goto failed;
        if (PyList_GET_SIZE(batch) != n) {
            PyErr_SetString(PyExc_RuntimeError, "the batch changed while its rows were made");
            goto failed;
        }
    }
    for (int i = 0; i < 4; i++) Py_DECREF(attrs[i]);
    ctx_clear(&c);
    return result;
failed:
    for (int i = 0; i < 4; i++) Py_XDECREF(attrs[i]);
    ctx_clear(&c);
    Py_DECREF(result);
    return NULL;
}

static PyObject *records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "records(builder, batch)");
        return NULL;
    }
    return make_rows(args[0], args[1], 1);
}

static PyObject *raws(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "raws(builder, batch)");
        return NULL;
    }
    return make_rows(args[0], args[1], 0);
}

/* given is a tuple of str whose item i is the name C expects there (tiles: checked by
 * tile_ok): 0; else -1 with a ValueError naming the first difference. */
static int check_table(const char *what, PyObject *given, const char *const *names, Py_ssize_t named,
                       Py_ssize_t total, int (*tile_ok)(Py_ssize_t, const char *)) {
    if (!PyTuple_Check(given)) {
        PyErr_Format(PyExc_TypeError, "setup: %s must be a tuple of str", what);
        return -1;
    }
    for (Py_ssize_t i = 0; i < total || i < PyTuple_GET_SIZE(given); i++) {
        PyObject *item = i < PyTuple_GET_SIZE(given) ? PyTuple_GET_ITEM(given, i) : NULL;
        const char *theirs = item == NULL ? "(nothing)" : PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : NULL;
        if (theirs == NULL) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "setup: %s must be a tuple of str", what);
            return -1;
        }
        int ok = i >= total ? 0 : i < named ? strcmp(names[i], theirs) == 0 : tile_ok(i - named, theirs);
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "setup: %s[%zd] is %s, the C table has %s there", what, i, theirs,
                         i >= total ? "(nothing)" : i < named ? names[i] : "a tile");
            return -1;
        }
    }
    return 0;
}

static int tile_key_ok(Py_ssize_t i, const char *name) {
    char expected[64];
    snprintf(expected, sizeof expected, "%s.%d", tile_keys[i % 3], (int)(i / 3));
    return strcmp(expected, name) == 0;
}

static int tile_column_ok(Py_ssize_t i, const char *name) {
    size_t n = strlen(name), m = strlen(tile_columns[i % 3]);
    return strncmp(name, "tile_", 5) == 0 && n > m + 5 && strcmp(name + n - m, tile_columns[i % 3]) == 0;
}

/* setup(*, key_names, keys, columns, typecodes, kind_codes, clock_cuda, clock_gpu, hash, clean):
 * keyword fields only (a missing or unknown one is a TypeError naming it); key_names and
 * columns checked against this file's tables by name. */
static PyObject *setup(PyObject *module, PyObject *args, PyObject *kwargs) {
    static const char *const fields[] = {"key_names", "keys", "columns", "typecodes", "kind_codes",
                                         "clock_cuda", "clock_gpu", "hash", "clean"};
    PyObject *v[9];
    if (take_fields("setup", args, kwargs, fields, 9, v) < 0) return NULL;
    if (check_table("key_names", v[0], key_names, K_TILES, N_KEYS, tile_key_ok) < 0 ||
        check_table("columns", v[2], column_names, C_TILES, N_COLUMNS, tile_column_ok) < 0)
        return NULL;
    PyObject *keys = v[1], *typecodes = v[3];
    if (!PyTuple_Check(keys) || PyTuple_GET_SIZE(keys) != N_KEYS || !PyDict_Check(v[4]) ||
        !PyUnicode_Check(v[5]) || !PyUnicode_Check(v[6]) || !PyUnicode_Check(typecodes) ||
        PyUnicode_GET_LENGTH(typecodes) != N_COLUMNS) {
        PyErr_Format(PyExc_TypeError, "setup: %d keys and %d column typecodes expected", N_KEYS, N_COLUMNS);
        return NULL;
    }
    for (int i = 0; i < N_KEYS; i++) {
        PyObject *key = PyTuple_GET_ITEM(keys, i);
        if (!PyUnicode_CheckExact(key)) {
            PyErr_SetString(PyExc_TypeError, "setup: keys are str");
            return NULL;
        }
        Py_INCREF(key);
        Py_XSETREF(g_keys[i], key);
    }
    PyObject *index = PyDict_New();
    if (index == NULL) return NULL;
    for (int i = 0; i < N_KEYS && index != NULL; i++) {
        PyObject *position = PyLong_FromLong(i);
        int rc = position == NULL ? -1 : PyDict_SetItem(index, g_keys[i], position);
        Py_XDECREF(position);
        if (rc < 0) {
            Py_DECREF(index);
            return NULL;
        }
    }
    if (PyDict_GET_SIZE(index) != N_KEYS) Py_CLEAR(index); /* a key twice: one lookup per key */
    Py_XSETREF(g_key_index, index);
    for (int i = 0; i < N_COLUMNS; i++) {
        Py_UCS4 code = PyUnicode_READ_CHAR(typecodes, i);
        if (code != 'q' && code != 'Q' && code != 'd') {
            PyErr_SetString(PyExc_ValueError, "setup: typecodes are q, Q or d");
            return NULL;
        }
        g_typecodes[i] = (char)code;
    }
    Py_INCREF(v[4]);
    Py_XSETREF(g_kind_codes, v[4]);
    PyObject *clocks[2] = {Py_NewRef(v[5]), Py_NewRef(v[6])}; /* interned: same_text's shortcut */
    for (int i = 0; i < 2; i++)
        if (PyUnicode_CheckExact(clocks[i])) PyUnicode_InternInPlace(&clocks[i]);
    Py_XSETREF(g_cuda, clocks[0]);
    Py_XSETREF(g_gpu, clocks[1]);
    Py_INCREF(v[7]);
    Py_XSETREF(g_hash, v[7]);
    Py_INCREF(v[8]);
    Py_XSETREF(g_clean, v[8]);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", (PyCFunction)(void (*)(void))setup, METH_VARARGS | METH_KEYWORDS,
     "setup(*, key_names, keys, columns, typecodes, kind_codes, clock_cuda, clock_gpu, hash, clean): what "
     "_table.py's rows are made of."},
    {"records", (PyCFunction)(void (*)(void))records, METH_FASTCALL,
     "records(builder, batch) -> one bytes per column: the rows TableBuilder._row makes of SpanRecords."},
    {"raws", (PyCFunction)(void (*)(void))raws, METH_FASTCALL,
     "raws(builder, batch) -> one bytes per column: the rows TableBuilder._row makes of add()'s raw tuples."},
    {NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "brickscope._tablerows",
                                        "C accelerator of the analysis table's row making.", -1, methods};

PyMODINIT_FUNC PyInit__tablerows(void) {
    for (int i = 0; i < N_KINDS; i++) {
        g_kinds[i] = PyLong_FromLong(i);
        if (g_kinds[i] == NULL) return NULL;
    }
    g_zero = g_kinds[0];
    PyObject *sixty_four = PyLong_FromLong(64);
    if (sixty_four == NULL) return NULL;
    g_two_to_64 = PyNumber_Lshift(g_kinds[1], sixty_four);
    Py_DECREF(sixty_four);
    g_empty = PyUnicode_InternFromString("");
    g_other = PyUnicode_InternFromString("other");
    s_op_codes = PyUnicode_InternFromString("_op_codes");
    s_category_codes = PyUnicode_InternFromString("_category_codes");
    s_resources = PyUnicode_InternFromString("_resources");
    s_lanes = PyUnicode_InternFromString("_lanes");
    s_row = PyUnicode_InternFromString("_row");
    s_launch_code = PyUnicode_InternFromString("_launch_code");
    s_get = PyUnicode_InternFromString("get");
    if (!g_two_to_64 || !g_empty || !g_other || !s_op_codes || !s_category_codes || !s_resources || !s_lanes || !s_row ||
        !s_launch_code || !s_get)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module != NULL && PyModule_AddIntConstant(module, "ABI_VERSION", TABLEROWS_ABI_VERSION) < 0) Py_CLEAR(module);
    return module;
}
