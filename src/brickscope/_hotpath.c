/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope._hotpath: the C accelerator of the scope hot path (optional).
 *
 * What `with bs.brick("x"):` runs, in C: the factory's cache lookup, the per-use
 * entry object, its __enter__/__exit__, the shared scope objects' own
 * __enter__/__exit__, and Recorder.open/close's common path (a nested scope on the
 * host clock: fill a record, push it on the ContextVar stack, pop it, queue it).
 * Everything rare or policy-laden stays in Python and is called from here: a root
 * scope's sampling and OTel context (Recorder._open_root), GPU marks
 * (Recorder._open_gpu/_mark_end), stack repairs, sync points, error descriptions,
 * failure logging. The pure-Python code in _record.py, _scope.py and
 * sdk/trace/_recorder.py is the reference; this file mirrors it line for line and
 * tests/unit/test_native.py checks that both give the same spans.
 *
 * Records are GC-tracked objects with the same attributes as the Python Record
 * (unset ones raise AttributeError), so resolution reads them unchanged.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include <time.h>

/* ---- what the Python side registers (init_stack / init_recorder / init_scopes) ---- */

static PyObject *g_top_var;             /* brickscope._record.TOP */
static PyObject *g_kind_names;          /* ("step", "layer", "brick", "kernel") */
static PyObject *g_otel_var;            /* OTel's runtime ContextVar, or NULL */
static PyObject *g_otel_current;        /* _otel_context.current (used without the var) */
static PyObject *g_clock_dict;          /* trace._recorder's globals: "perf_counter_ns" */
static PyObject *g_perf_counter_ns;     /* time.perf_counter_ns */
static int g_clock_is_monotonic;        /* perf_counter_ns is clock_gettime(CLOCK_MONOTONIC) */
static PyObject *g_release_context;     /* trace._recorder._release_context(rec) */
static PyObject *g_repair_stack;        /* trace._recorder._repair_stack(rec) */
static PyObject *g_describe;            /* trace._recorder._describe(error) */
static PyObject *g_state_dict;          /* brickscope._state.__dict__ */
static PyObject *g_enter_failed;        /* _scope._enter_failed(recorder, exc) */
static PyObject *g_exit_failed;         /* _scope._exit_failed(rec, exc) */
static PyObject *g_exit_out_of_order;   /* _scope._exit_out_of_order(scope, top, error) */
static PyObject *g_exit_entry_ooo;      /* _scope._exit_entry_out_of_order(entry, rec, error) */
static PyObject *g_inert;               /* _scope._INERT: the token of a scope that recorded nothing */
static PyObject *g_enter_scope_py;      /* _scope.enter_scope in Python: every unusual case */
static PyObject *g_exit_scope_py;       /* _scope.exit_scope in Python: every unusual case */

static PyObject *s_recorder, *s_compiling, *s_perf_counter_ns, *s_kind, *s_open_root, *s_open_gpu,
    *s_mark_end, *s_name_thread, *s_act, *s_overflow, *s_poll, *s_scope_repairs, *s_scopes_unsampled,
    *s_append, *s_open, *s_close, *s_name;
static PyObject *g_zero, *g_minus_one;

#define KIND_BRICK 2

static PyTypeObject RecordType, RecorderCoreType, ScopeBaseType, EntryType, FactoryType;

/* ---- Record ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *owner, *opener, *recorder, *link, *parent, *otel_parent, *otel_context, *trace_id, *span_id,
        *span_context, *sampled, *thread_id, *host_start, *host_end, *stream, *start_mark, *end_mark,
        *gpu_error, *error, *ended, *context_token, *nested_ns, *gpu_first, *gpu_last, *enclosing, *notes;
    /* The token of the ContextVar set that made this record the top of its stack, while open
     * (not an attribute): a LIFO close resets the stack with it (see stack_pop). */
    PyObject *stack_token;
    /* host_start / host_end read from the C clock are kept as C integers (a bit of in_c each)
     * and made ints when first read: an unsampled brick folded in C never needs them as
     * objects. Anything that hands a record on (pending, Python code) makes them ints first. */
    long long host_start_ns, host_end_ns;
    int in_c;
} RecordObject;

#define TIME_START 1
#define TIME_END 2

#define RECORD_FIELDS(X)                                                                              \
    X(owner) X(opener) X(recorder) X(link) X(parent) X(otel_parent) X(otel_context) X(trace_id)       \
    X(span_id) X(span_context) X(sampled) X(thread_id) X(host_start) X(host_end) X(stream)           \
    X(start_mark) X(end_mark) X(gpu_error) X(error) X(ended) X(context_token) X(nested_ns)          \
    X(gpu_first) X(gpu_last) X(enclosing) X(notes) X(stack_token)

#define Record_Check(o) (Py_TYPE(o) == &RecordType)

#define RECORD_MEMBER_FIELDS(X)                                                                       \
    X(owner) X(opener) X(recorder) X(link) X(parent) X(otel_parent) X(otel_context) X(trace_id)       \
    X(span_id) X(span_context) X(sampled) X(thread_id) X(stream)                                      \
    X(start_mark) X(end_mark) X(gpu_error) X(error) X(ended) X(context_token) X(nested_ns)          \
    X(gpu_first) X(gpu_last) X(enclosing) X(notes)

static PyMemberDef record_members[] = {
#define X(f) {#f, T_OBJECT_EX, offsetof(RecordObject, f), 0, NULL},
    RECORD_MEMBER_FIELDS(X)
#undef X
    {NULL}};

/* An exact int that fits a long long: 1 with *out set, 0 otherwise (never an error). */
static int small_int(PyObject *value, long long *out) {
    if (value == NULL || !PyLong_CheckExact(value)) return 0;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return !overflow;
}

static PyObject **record_time_slot(RecordObject *rec, int which) {
    return which == TIME_START ? &rec->host_start : &rec->host_end;
}

/* The C integer of a time (meaningful while its bit is set in rec->in_c). */
static long long *record_ns_slot(RecordObject *rec, int which) {
    return which == TIME_START ? &rec->host_start_ns : &rec->host_end_ns;
}

/* The AttributeError of an unset time (-1). */
static int record_time_missing(RecordObject *rec, int which) {
    PyErr_Format(PyExc_AttributeError, "'%.200s' object has no attribute '%s'", Py_TYPE(rec)->tp_name,
                 which == TIME_START ? "host_start" : "host_end");
    return -1;
}

/* rec.host_start / rec.host_end as an int (borrowed), made from the C integer if it is one;
 * NULL without an error: unset. */
static PyObject *record_time(RecordObject *rec, int which) {
    PyObject **slot = record_time_slot(rec, which);
    if (*slot == NULL && (rec->in_c & which)) {
        *slot = PyLong_FromLongLong(*record_ns_slot(rec, which));
        if (*slot == NULL) return NULL;
        rec->in_c &= ~which;
    }
    return *slot;
}

/* Both times as ints, for whatever reads the record's fields next (-1: error). */
static int record_times_as_ints(RecordObject *rec) {
    if ((rec->in_c & TIME_START) && record_time(rec, TIME_START) == NULL) return -1;
    if ((rec->in_c & TIME_END) && record_time(rec, TIME_END) == NULL) return -1;
    return 0;
}

/* A time read from the clock: the int the clock returned (stolen), or the C integer. */
static void record_set_time(RecordObject *rec, int which, long long value, PyObject *obj) {
    if (obj != NULL) {
        Py_XSETREF(*record_time_slot(rec, which), obj);
        rec->in_c &= ~which;
        return;
    }
    Py_CLEAR(*record_time_slot(rec, which));
    *record_ns_slot(rec, which) = value;
    rec->in_c |= which;
}

/* A time as a C integer: 1 with *out set, 0 not an int that fits (or unset). */
static int record_time_value(RecordObject *rec, int which, long long *out) {
    if (rec->in_c & which) {
        *out = *record_ns_slot(rec, which);
        return 1;
    }
    return small_int(*record_time_slot(rec, which), out);
}

static PyObject *record_get_time(RecordObject *self, void *closure) {
    int which = (int)(intptr_t)closure;
    PyObject *value = record_time(self, which);
    if (value == NULL) {
        if (!PyErr_Occurred()) record_time_missing(self, which);
        return NULL;
    }
    Py_INCREF(value);
    return value;
}

static int record_set_time_attr(RecordObject *self, PyObject *value, void *closure) {
    int which = (int)(intptr_t)closure;
    if (value == NULL && *record_time_slot(self, which) == NULL && !(self->in_c & which))
        return record_time_missing(self, which);
    Py_XINCREF(value);
    Py_XSETREF(*record_time_slot(self, which), value);
    self->in_c &= ~which;
    return 0;
}

static PyGetSetDef record_getset[] = {
    {"host_start", (getter)record_get_time, (setter)record_set_time_attr, NULL, (void *)(intptr_t)TIME_START},
    {"host_end", (getter)record_get_time, (setter)record_set_time_attr, NULL, (void *)(intptr_t)TIME_END},
    {NULL}};

static int record_traverse(RecordObject *self, visitproc visit, void *arg) {
#define X(f) Py_VISIT(self->f);
    RECORD_FIELDS(X)
#undef X
    return 0;
}

static int record_clear(RecordObject *self) {
#define X(f) Py_CLEAR(self->f);
    RECORD_FIELDS(X)
#undef X
    self->in_c = 0;
    return 0;
}

/* Free lists: a scope's record, a with-statement's entry and the Brick of
 * brick(name, category, elements) are made and dropped on every use; their memory is kept
 * here instead of going back to the allocator. An object comes back cleared (every field
 * NULL: unset, as a new one), untracked by the GC, holding no reference; a type's dealloc
 * puts it here and its constructor takes it back (the way CPython's own free lists of
 * tuples and floats work). A kept object is made live again by free_list_revive. Not kept:
 * on a free-threaded build (per-thread reference counts), and on a debug build of 3.13+
 * (its reference total would drift). */
#if defined(Py_GIL_DISABLED) || (PY_VERSION_HEX >= 0x030D0000 && defined(Py_REF_DEBUG))
#define FREE_LIST_MAX 0
#else
#define FREE_LIST_MAX 256
#endif
typedef struct {
    PyObject *items[FREE_LIST_MAX > 0 ? FREE_LIST_MAX : 1];
    int size;
} FreeList;

/* Whether objects may be kept or taken now. 3.13+: not while a reference tracer
 * (PyRefTracer_SetTracer) watches objects: it must see a creation for each destruction. */
static int free_list_usable(void) {
#if PY_VERSION_HEX >= 0x030D0000
    void *data;
    return PyRefTracer_GetTracer(&data) == NULL;
#else
    return 1;
#endif
}

/* Keep a cleared, untracked object: 1 kept, 0 (full) the caller frees it. */
static int free_list_keep(FreeList *list, PyObject *op) {
    if (list->size >= FREE_LIST_MAX || !free_list_usable()) return 0;
    list->items[list->size++] = op;
    return 1;
}

#if FREE_LIST_MAX > 0
/* A kept object live again, with one reference: _Py_NewReference, which CPython exports up
 * to 3.12; from 3.13 what it does on a release build (sets the count; tracemalloc keeps the
 * block's first allocation site). */
static void free_list_revive(PyObject *op) {
#if PY_VERSION_HEX < 0x030D0000
    _Py_NewReference(op);
#else
    Py_SET_REFCNT(op, 1);
#endif
}
#endif

/* An object of a static type with every field unset and tracked by the GC, as
 * type->tp_alloc(type, 0) gives it (every object in the list is of that type). */
static PyObject *free_list_take(FreeList *list, PyTypeObject *type) {
#if FREE_LIST_MAX > 0
    if (list->size > 0 && free_list_usable()) {
        PyObject *op = list->items[--list->size];
        free_list_revive(op);
        PyObject_GC_Track(op);
        return op;
    }
#endif
    return type->tp_alloc(type, 0);
}

static FreeList record_free;

static void record_dealloc(RecordObject *self) {
    PyObject_GC_UnTrack(self);
    Py_TRASHCAN_BEGIN(self, record_dealloc)
    record_clear(self);
    if (!free_list_keep(&record_free, (PyObject *)self)) Py_TYPE(self)->tp_free((PyObject *)self);
    Py_TRASHCAN_END
}

static PyObject *record_repr(RecordObject *self) {
    if (self->owner == NULL || self->owner == Py_None)
        return PyUnicode_FromString("<brickscope scope token (inert)>");
    PyObject *kind = PyObject_GetAttr(self->owner, s_kind);
    if (kind == NULL) return NULL;
    PyObject *kind_name = PyObject_GetItem(g_kind_names, kind);
    Py_DECREF(kind);
    if (kind_name == NULL) return NULL;
    PyObject *name = PyObject_GetAttr(self->owner, s_name);
    if (name == NULL) {
        Py_DECREF(kind_name);
        return NULL;
    }
    PyObject *out = PyUnicode_FromFormat("<brickscope scope token: %U %R>", kind_name, name);
    Py_DECREF(kind_name);
    Py_DECREF(name);
    return out;
}

static PyTypeObject RecordType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.Record",
    .tp_doc = "One scope, open or ended but not yet turned into a span (C layout of brickscope._record.Record).",
    .tp_basicsize = sizeof(RecordObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)record_dealloc,
    .tp_traverse = (traverseproc)record_traverse,
    .tp_clear = (inquiry)record_clear,
    .tp_repr = (reprfunc)record_repr,
    .tp_members = record_members,
    .tp_getset = record_getset,
};

/* ---- small helpers ------------------------------------------------------------------ */

/* The scope stack's top: a new reference (None when empty). */
static PyObject *stack_top(void) {
    PyObject *top = NULL;
    if (PyContextVar_Get(g_top_var, Py_None, &top) < 0) return NULL;
    return top;
}

static int stack_set(PyObject *value) {
    PyObject *token = PyContextVar_Set(g_top_var, value);
    if (token == NULL) return -1;
    Py_DECREF(token);
    return 0;
}

/* A new record on top of `link`: the ContextVar set, and its token kept on the record when
 * the value it replaces is link (as it is unless code run since link was read changed it). */
static int stack_push(PyObject *rec, PyObject *link, PyObject **token) {
    PyObject *current = stack_top();
    if (current == NULL) return -1;
    Py_DECREF(current); /* only compared */
    PyObject *made = PyContextVar_Set(g_top_var, rec);
    if (made == NULL) return -1;
    if (current == link) {
        Py_XSETREF(*token, made);
    } else {
        Py_DECREF(made);
        Py_CLEAR(*token);
    }
    return 0;
}

/* The innermost open record `rec` leaves the stack, `below` becomes the top. When below is
 * what the stack held when rec was pushed (no ended record skipped) and the token of that
 * push is there, resetting the ContextVar with it gives the same value as setting it,
 * without a new token and the lookup of the value it would remember; a token of another
 * Context (a close from another task or thread) cannot reset: then the value is set. */
static int stack_pop(PyObject *below, PyObject *link, PyObject **token) {
    PyObject *used = *token;
    *token = NULL;
    if (used == NULL || below != link || below == Py_None) {
        Py_XDECREF(used);
        return stack_set(below);
    }
    int rc = PyContextVar_Reset(g_top_var, used);
    Py_DECREF(used);
    if (rc == 0) return 0;
    if (!PyErr_ExceptionMatches(PyExc_ValueError)) return -1;
    PyErr_Clear();
    return stack_set(below);
}

static PyObject *otel_current(void) {
    if (g_otel_var != NULL) {
        PyObject *value = NULL;
        if (PyContextVar_Get(g_otel_var, NULL, &value) < 0) return NULL;
        if (value == NULL) {
            PyErr_SetString(PyExc_LookupError, "OpenTelemetry's runtime context is unset");
            return NULL;
        }
        return value;
    }
    return PyObject_CallNoArgs(g_otel_current);
}

/* A module global read on every scope, re-read only when its module's dict changed. On
 * CPython < 3.12 a dict's version tag (a value no other dict or state of this one has) says
 * so. On later releases, where the tag is deprecated, a dict watcher (PyDict_AddWatcher) on
 * each dict read through a cache counts every change of those dicts, before it happens, in
 * g_watched_generation: an entry is fresh while the count it was read at is current. Where
 * no watcher can be had (an interpreter has 8), or on a free-threaded build, every read is a
 * lookup. The value is borrowed: the dict holds it as long as the entry is fresh. */
typedef struct {
    PyObject *dict;  /* borrowed: the dict the entry was read from (only compared) */
    uint64_t tag;
    PyObject *value; /* borrowed, or NULL: the key is missing */
} GlobalCache;

#if PY_VERSION_HEX >= 0x030C0000 && !defined(Py_GIL_DISABLED)
#define GLOBAL_CACHE_WATCHES 1
static int g_dict_watcher = -1; /* -1: none added yet; -2: none to be had */
static uint64_t g_watched_generation = 1;

static int on_watched_dict_change(PyDict_WatchEvent event, PyObject *dict, PyObject *key, PyObject *new_value) {
    g_watched_generation++;
    return 0;
}
#endif

/* Watch dict for changes, so that reads from it can be cached (3.12+); a dict that cannot
 * be watched is read afresh every time. Never fails. */
static void global_cache_watch(PyObject *dict) {
#ifdef GLOBAL_CACHE_WATCHES
    if (g_dict_watcher == -1) {
        g_dict_watcher = PyDict_AddWatcher(on_watched_dict_change);
        if (g_dict_watcher < 0) {
            PyErr_Clear();
            g_dict_watcher = -2;
        }
    }
    if (g_dict_watcher >= 0 && PyDict_Watch(g_dict_watcher, dict) < 0) {
        PyErr_Clear();
        g_dict_watcher = -2; /* a dict read unwatched: no entry can be trusted */
    }
    g_watched_generation++; /* entries read before the watch began are stale */
#endif
}

static int global_cache_fresh(GlobalCache *cache, PyObject *dict) {
#if PY_VERSION_HEX < 0x030C0000
    return cache->dict == dict && cache->tag == ((PyDictObject *)dict)->ma_version_tag;
#elif defined(GLOBAL_CACHE_WATCHES)
    return cache->dict == dict && cache->tag == g_watched_generation && g_dict_watcher >= 0;
#else
    return 0;
#endif
}

static void global_cache_keep(GlobalCache *cache, PyObject *dict, PyObject *value) {
#if PY_VERSION_HEX < 0x030C0000
    cache->dict = dict;
    cache->tag = ((PyDictObject *)dict)->ma_version_tag;
    cache->value = value;
#elif defined(GLOBAL_CACHE_WATCHES)
    cache->dict = dict; /* without a watcher it is never fresh (global_cache_fresh) */
    cache->tag = g_watched_generation;
    cache->value = value;
#endif
}

/* dict[key] through its cache: borrowed, NULL without an error when missing. */
static PyObject *global_get(GlobalCache *cache, PyObject *dict, PyObject *key) {
    if (global_cache_fresh(cache, dict)) return cache->value;
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value != NULL || !PyErr_Occurred()) global_cache_keep(cache, dict, value);
    return value;
}

static GlobalCache g_clock_cache; /* g_clock_dict["perf_counter_ns"] */

/* perf_counter_ns() as the recorder module sees it (tests drive it by replacing it): 0 with
 * *value set, and *obj the int a Python clock returned (a new reference) or NULL when the
 * clock was read in C; -1 on error. */
static int clock_read(long long *value, PyObject **obj) {
    *obj = NULL;
    PyObject *clock = global_get(&g_clock_cache, g_clock_dict, s_perf_counter_ns);
    if (clock == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "brickscope: recorder clock missing");
        return -1;
    }
    if (clock == g_perf_counter_ns && g_clock_is_monotonic) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        *value = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
        return 0;
    }
    PyObject *now = PyObject_CallNoArgs(clock);
    if (now == NULL) return -1;
    *value = PyLong_AsLongLong(now);
    if (*value == -1 && PyErr_Occurred()) {
        Py_DECREF(now);
        return -1;
    }
    *obj = now;
    return 0;
}

static int counts_add(PyObject *counts, PyObject *key) {
    PyObject *old = PyDict_GetItemWithError(counts, key);
    if (old == NULL) {
        if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
        return -1;
    }
    PyObject *one = PyLong_FromLong(1);
    PyObject *new = PyNumber_Add(old, one);
    Py_DECREF(one);
    if (new == NULL) return -1;
    int rc = PyDict_SetItem(counts, key, new);
    Py_DECREF(new);
    return rc;
}

/* Whether the exception set is an Exception (what `except Exception` catches); if so it
 * is taken and returned (normalized), else NULL with the error left set. */
static PyObject *take_exception(void) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    if (value == NULL) {
        Py_INCREF(Py_None);
        value = Py_None;
    }
    return value;
}

/* PyObject_TypeCheck(obj, base) for the C bases that Python classes extend (ScopeBase,
 * RecorderCore): a class's tp_base chain holds its C base, so a short walk answers
 * without the call; anything else asks PyType_IsSubtype (the MRO), which stays exact. */
static int has_base(PyObject *obj, PyTypeObject *base) {
    PyTypeObject *type = Py_TYPE(obj);
    for (; type != NULL; type = type->tp_base)
        if (type == base) return 1;
    return PyType_IsSubtype(Py_TYPE(obj), base);
}

static int is_true(PyObject *value) {
    if (value == Py_True) return 1;
    if (value == Py_False || value == NULL) return 0;
    return PyObject_IsTrue(value);
}

/* ---- CudaMarker: CudaTimer.mark without cuda-bindings' per-call cost ------------- */

/* cuEventRecord and cuCtxGetCurrent, as the driver's cuGetProcAddress gave them. */
typedef int (*EventRecordFn)(void *event, void *stream);
typedef int (*CtxGetCurrentFn)(void **ctx);
typedef int (*EventQueryFn)(void *event);
typedef int (*EventElapsedFn)(float *ms, void *start, void *end);
typedef int (*CtxPushFn)(void *ctx);
typedef int (*CtxPopFn)(void **ctx);
#define CUDA_ERROR_NOT_READY 600

typedef struct {
    PyObject_HEAD
    PyObject *timer;  /* the CudaTimer: its mark() does everything this does not */
    PyObject *marks;  /* timer._marks: mark id -> (CUevent, _Context) */
    PyObject *ids;    /* timer._ids: the mark id counter */
    PyObject *cache;  /* StreamRef -> (free list, _Context, stream handle, context handle) */
    PyObject *timer_globals; /* brickscope._gpu._timer's globals: ANCHOR_MAX_AGE_NS (tests change it) */
    EventRecordFn record;
    CtxGetCurrentFn get_current;
    EventQueryFn query;
    EventElapsedFn elapsed;
    CtxPushFn push;
    CtxPopFn pop;
    int enabled; /* 0 once the timer closed or the process forked: every mark goes to Python */
} MarkerObject;

static PyObject *s_cuda_error, *s_anchor, *s_ctx, *s_lock, *s_acquire, *s_release, *s_host_ns_attr, *s_anchor_max_age, *s_host_ns_field;
static PyObject *s_mark, *s_marker_entry, *s_record_failed, *s_marker, *s_host_only, *s_mark_failed, *s_stream;

/* A pointer-sized handle from an int. CPython 3.11's PyLong_AsUnsignedLongLong converts a
 * multi-digit int through _PyLong_AsByteArray; PyLong_AsUnsignedLong (the same 64 bits on
 * LP64) shifts its digits in, which costs less for every event and context handle. */
static unsigned long long handle_value(PyObject *value) {
#if ULONG_MAX == ULLONG_MAX
    return PyLong_AsUnsignedLong(value);
#else
    return PyLong_AsUnsignedLongLong(value);
#endif
}

/* CudaTimer.mark(ref) in C: the same events, pool, mark ids and table; anything unusual
 * (unknown or legacy stream, empty pool, another context current, a failed record) is
 * the Python method's (or its _record_failed's) to handle. New reference. */
static PyObject *marker_mark(MarkerObject *self, PyObject *ref) {
    if (!self->enabled) return PyObject_CallMethodOneArg(self->timer, s_mark, ref);
    PyObject *entry = PyDict_GetItemWithError(self->cache, ref);
    if (entry == NULL) {
        if (PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;
            PyErr_Clear();
            return PyObject_CallMethodOneArg(self->timer, s_mark, ref);
        }
        PyObject *made = PyObject_CallMethodOneArg(self->timer, s_marker_entry, ref);
        if (made == NULL) return NULL;
        if (made == Py_None) {
            Py_DECREF(made);
            return PyObject_CallMethodOneArg(self->timer, s_mark, ref);
        }
        if (!PyTuple_CheckExact(made) || PyTuple_GET_SIZE(made) != 4 || !PyList_CheckExact(PyTuple_GET_ITEM(made, 0))) {
            Py_DECREF(made);
            PyErr_SetString(PyExc_TypeError, "brickscope: _marker_entry must give (list, context, int, int)");
            return NULL;
        }
        int rc = PyDict_SetItem(self->cache, ref, made);
        Py_DECREF(made);
        if (rc < 0) return NULL;
        entry = PyDict_GetItemWithError(self->cache, ref);
        if (entry == NULL) return NULL;
    }
    PyObject *free = PyTuple_GET_ITEM(entry, 0), *context = PyTuple_GET_ITEM(entry, 1);
    unsigned long long stream = handle_value(PyTuple_GET_ITEM(entry, 2));
    unsigned long long ctx = handle_value(PyTuple_GET_ITEM(entry, 3));
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(free);
    void *current = NULL;
    if (n == 0 || self->get_current(&current) != 0 || (unsigned long long)(uintptr_t)current != ctx)
        return PyObject_CallMethodOneArg(self->timer, s_mark, ref);
    PyObject *event = PyList_GET_ITEM(free, n - 1);
    Py_INCREF(event);
    if (PyList_SetSlice(free, n - 1, n, NULL) < 0) {
        Py_DECREF(event);
        return NULL;
    }
    PyObject *handle = PyNumber_Long(event);
    unsigned long long event_handle = handle == NULL ? 0 : handle_value(handle);
    Py_XDECREF(handle);
    if (PyErr_Occurred()) {
        PyList_Append(free, event);
        Py_DECREF(event);
        return NULL;
    }
    int err = self->record((void *)(uintptr_t)event_handle, (void *)(uintptr_t)stream);
    if (err != 0) {
        int rc = PyList_Append(free, event);
        Py_DECREF(event);
        if (rc < 0) return NULL;
        PyObject *code = PyLong_FromLong(err);
        if (code == NULL) return NULL;
        PyObject *res = PyObject_CallMethodOneArg(self->timer, s_record_failed, code);
        Py_DECREF(code);
        return res;
    }
    PyObject *mark = PyIter_Next(self->ids);
    PyObject *value = mark == NULL ? NULL : PyTuple_Pack(2, event, context);
    Py_DECREF(event);
    if (value == NULL || PyDict_SetItem(self->marks, mark, value) < 0) {
        Py_XDECREF(mark);
        Py_XDECREF(value);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "brickscope: the mark counter ended");
        return NULL;
    }
    Py_DECREF(value);
    return mark;
}

static PyObject *marker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *timer, *marks, *ids, *timer_globals;
    unsigned long long record, get_current, query, elapsed, push, pop;
    if (!PyArg_ParseTuple(args, "OO!OO!KKKKKK:CudaMarker", &timer, &PyDict_Type, &marks, &ids, &PyDict_Type,
                          &timer_globals, &record, &get_current, &query, &elapsed, &push, &pop))
        return NULL;
    if (!PyIter_Check(ids) || !record || !get_current || !query || !elapsed || !push || !pop) {
        PyErr_SetString(PyExc_ValueError, "CudaMarker(timer, marks, ids, timer_globals, cuEventRecord, "
                                          "cuCtxGetCurrent, cuEventQuery, cuEventElapsedTime, cuCtxPushCurrent, "
                                          "cuCtxPopCurrent)");
        return NULL;
    }
    MarkerObject *self = (MarkerObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->cache = PyDict_New();
    if (self->cache == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(timer);
    self->timer = timer;
    Py_INCREF(marks);
    self->marks = marks;
    Py_INCREF(ids);
    self->ids = ids;
    Py_INCREF(timer_globals);
    self->timer_globals = timer_globals;
    self->record = (EventRecordFn)(uintptr_t)record;
    self->get_current = (CtxGetCurrentFn)(uintptr_t)get_current;
    self->query = (EventQueryFn)(uintptr_t)query;
    self->elapsed = (EventElapsedFn)(uintptr_t)elapsed;
    self->push = (CtxPushFn)(uintptr_t)push;
    self->pop = (CtxPopFn)(uintptr_t)pop;
    self->enabled = 1;
    return (PyObject *)self;
}

static int marker_traverse(MarkerObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->timer);
    Py_VISIT(self->marks);
    Py_VISIT(self->ids);
    Py_VISIT(self->cache);
    Py_VISIT(self->timer_globals);
    return 0;
}

static int marker_clear(MarkerObject *self) {
    Py_CLEAR(self->timer_globals);
    Py_CLEAR(self->timer);
    Py_CLEAR(self->marks);
    Py_CLEAR(self->ids);
    Py_CLEAR(self->cache);
    return 0;
}

static void marker_dealloc(MarkerObject *self) {
    PyObject_GC_UnTrack(self);
    marker_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *marker_call_mark(MarkerObject *self, PyObject *ref) { return marker_mark(self, ref); }

static PyObject *marker_disable(MarkerObject *self, PyObject *unused) {
    self->enabled = 0;
    PyDict_Clear(self->cache);
    Py_RETURN_NONE;
}

/* The raw handle of a cuda-bindings object (CUevent, CUcontext); 0 with an error set. */
static unsigned long long raw_handle(PyObject *object) {
    PyObject *value = PyNumber_Long(object);
    if (value == NULL) return 0;
    unsigned long long handle = handle_value(value);
    Py_DECREF(value);
    return handle;
}

/* Raise the CudaError the timer's methods raise for driver result err (CudaTimer._cuda_error). */
static PyObject *cuda_error(MarkerObject *self, int err) {
    PyObject *code = PyLong_FromLong(err);
    if (code == NULL) return NULL;
    PyObject *res = PyObject_CallMethodOneArg(self->timer, s_cuda_error, code);
    Py_DECREF(code);
    if (res == NULL) return NULL;
    Py_DECREF(res);
    PyErr_Format(PyExc_RuntimeError, "brickscope: CUDA driver error %d", err);
    return NULL;
}

/* What the GPU queries of one call, or of one SpanMaker.drain, keep between spans (strong
 * references, dropped by interval_cache_clear): the _Context last used (its context handle,
 * its lock's bound acquire/release, its pool's free list), the anchor last read (the tuple
 * object; its event handle and host time), and the host clock for the anchor-age check,
 * read once. A drain of up to 128 spans thus checks the anchor's age against the time the
 * drain started (ANCHOR_MAX_AGE_NS is a second; a drain lasts well under a millisecond). */
typedef struct {
    PyObject *context, *acquire, *release, *free_list, *anchor;
    void *ctx, *anchor_event;
    long long anchor_ns, now_ns;
    int have_now;
    MarkerObject *pusher; /* a context pushed by a query and left current for the next ones: */
    void *pushed;         /* popped by interval_cache_clear (pusher: borrowed, alive meanwhile) */
} IntervalCache;

static void interval_cache_forget_context(IntervalCache *cache) {
    Py_CLEAR(cache->context);
    Py_CLEAR(cache->acquire);
    Py_CLEAR(cache->release);
    Py_CLEAR(cache->free_list);
    Py_CLEAR(cache->anchor);
}

static void interval_cache_clear(IntervalCache *cache) {
    interval_cache_forget_context(cache);
    cache->have_now = 0;
    if (cache->pusher != NULL) {
        void *popped = NULL;
        cache->pusher->pop(&popped);
        cache->pusher = NULL;
        cache->pushed = NULL;
    }
}

/* (event handle, _Context, context handle) of a live mark; 0: not a live mark. The context
 * handle comes from the cache when the mark's _Context is the one it holds. */
static int mark_event(MarkerObject *self, PyObject *mark, IntervalCache *cache, void **event, PyObject **context,
                      void **ctx) {
    PyObject *entry = PyDict_GetItemWithError(self->marks, mark);
    if (entry == NULL || !PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) return PyErr_Occurred() ? -1 : 0;
    PyObject *owner = PyTuple_GET_ITEM(entry, 1);
    unsigned long long ctx_handle;
    if (cache != NULL && owner == cache->context) {
        ctx_handle = (unsigned long long)(uintptr_t)cache->ctx;
    } else {
        PyObject *ctx_object = PyObject_GetAttr(owner, s_ctx);
        if (ctx_object == NULL) return -1;
        ctx_handle = raw_handle(ctx_object);
        Py_DECREF(ctx_object);
        if (PyErr_Occurred()) return -1;
        if (cache != NULL) { /* the context of the marks that follow, most likely */
            interval_cache_forget_context(cache);
            cache->context = Py_NewRef(owner);
            cache->ctx = (void *)(uintptr_t)ctx_handle;
        }
    }
    unsigned long long event_handle = raw_handle(PyTuple_GET_ITEM(entry, 0));
    if (PyErr_Occurred()) return -1;
    *event = (void *)(uintptr_t)event_handle;
    *context = owner;
    *ctx = (void *)(uintptr_t)ctx_handle;
    return 1;
}

/* What _driver.in_context does: make ctx current for the calls that follow, pushing it if
 * another (or none) is current. 0: it was current; 1: pushed (leave_context pops it);
 * -1: the driver failed (nothing pushed). */
static int enter_context(MarkerObject *self, void *ctx) {
    void *current = NULL;
    if (self->get_current(&current) != 0) return -1;
    if (current == ctx) return 0;
    return self->push(ctx) == 0 ? 1 : -1;
}

static void leave_context(MarkerObject *self, int pushed) {
    void *popped = NULL;
    if (pushed == 1) self->pop(&popped);
}

/* enter_context for a run of queries (cache given): a context it pushes stays current
 * until the cache is cleared (or another context is needed), instead of a push and a pop
 * per query. 0: current; -1: the driver failed. Without a cache: enter_context. */
static int enter_context_cached(MarkerObject *self, void *ctx, IntervalCache *cache, int *pushed) {
    *pushed = 0;
    if (cache == NULL) {
        int rc = enter_context(self, ctx);
        *pushed = rc == 1;
        return rc < 0 ? -1 : 0;
    }
    void *current = NULL;
    if (self->get_current(&current) != 0) return -1;
    if (current == ctx) return 0;
    if (cache->pusher != NULL) { /* ours, but another context is needed now */
        if (current == cache->pushed) {
            void *popped = NULL;
            cache->pusher->pop(&popped);
        }
        cache->pusher = NULL;
        cache->pushed = NULL;
        if (self->get_current(&current) != 0) return -1;
        if (current == ctx) return 0;
    }
    if (self->push(ctx) != 0) return -1;
    cache->pusher = self;
    cache->pushed = ctx;
    return 0;
}

/* CudaTimer.is_complete(mark) in C: 1 complete, 0 not yet, 2 the Python method decides,
 * -1 error (a driver error raises the CudaError is_complete would). cache: see
 * enter_context_cached (NULL: one query). */
static int marker_complete_cached(MarkerObject *self, PyObject *mark, IntervalCache *cache) {
    void *event, *ctx;
    PyObject *context;
    int found = self->enabled ? mark_event(self, mark, cache, &event, &context, &ctx) : 0;
    if (found <= 0) return found < 0 ? -1 : 2;
    int pushed;
    if (enter_context_cached(self, ctx, cache, &pushed) < 0) return 2;
    int err = self->query(event);
    leave_context(self, pushed);
    if (err == 0) return 1;
    if (err == CUDA_ERROR_NOT_READY) return 0;
    cuda_error(self, err); /* the CudaError is_complete would raise */
    return -1;
}

/* CudaTimer.is_complete(mark) in C: True, False, or None (the Python method decides). */
static PyObject *marker_complete(MarkerObject *self, PyObject *mark) {
    int complete = marker_complete_cached(self, mark, NULL);
    if (complete < 0) return NULL;
    if (complete == 2) Py_RETURN_NONE;
    return PyBool_FromLong(complete);
}

/* brickscope._clock.host_ns() without its Python frame: perf_counter_ns() + EPOCH_OFFSET_NS,
 * when fn is that function and its module still uses time.perf_counter_ns (tests replace
 * either). 1: *value set; 0: call fn; -1: error. */
static PyObject *g_clock_host_ns, *g_clock_module_dict;
static int host_ns_in_c(PyObject *fn, long long *value) {
    if (g_clock_host_ns == NULL) {
        PyObject *module = PyImport_ImportModule("brickscope._clock");
        if (module == NULL) return -1;
        g_clock_host_ns = PyObject_GetAttrString(module, "host_ns");
        g_clock_module_dict = Py_NewRef(PyModule_GetDict(module));
        Py_DECREF(module);
        if (g_clock_host_ns == NULL) {
            Py_CLEAR(g_clock_module_dict);
            return -1;
        }
    }
    if (fn != g_clock_host_ns || g_perf_counter_ns == NULL || !g_clock_is_monotonic) return 0;
    PyObject *counter = PyDict_GetItemWithError(g_clock_module_dict, s_perf_counter_ns);
    if (counter != g_perf_counter_ns) return PyErr_Occurred() ? -1 : 0;
    PyObject *offset = PyDict_GetItemString(g_clock_module_dict, "EPOCH_OFFSET_NS");
    if (offset == NULL || !PyLong_CheckExact(offset)) return 0;
    long long epoch = PyLong_AsLongLong(offset);
    if (epoch == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *value = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec + epoch;
    return 1;
}

static long long round_ms_to_ns(float ms) { return (long long)nearbyint((double)ms * 1e6); }

/* The host clock for the anchor-age check (the timer's _host_ns), read once per cache.
 * 0 ok, -1 error. */
static int cache_now(MarkerObject *self, IntervalCache *cache) {
    if (cache->have_now) return 0;
    PyObject *host_ns = PyObject_GetAttr(self->timer, s_host_ns_attr);
    if (host_ns == NULL) return -1;
    long long now_ns = 0;
    int known = host_ns_in_c(host_ns, &now_ns);
    if (known == 0) {
        PyObject *now = PyObject_CallNoArgs(host_ns);
        now_ns = now == NULL ? -1 : PyLong_AsLongLong(now);
        Py_XDECREF(now);
        known = now_ns == -1 && PyErr_Occurred() ? -1 : 1;
    }
    Py_DECREF(host_ns);
    if (known < 0) return -1;
    cache->now_ns = now_ns;
    cache->have_now = 1;
    return 0;
}

/* The cached context's lock, taken without blocking: 1 taken, 0 held elsewhere, -1 error. */
static int cache_lock(IntervalCache *cache) {
    if (cache->acquire == NULL) {
        PyObject *lock = PyObject_GetAttr(cache->context, s_lock);
        if (lock == NULL) return -1;
        cache->acquire = PyObject_GetAttr(lock, s_acquire);
        cache->release = cache->acquire == NULL ? NULL : PyObject_GetAttr(lock, s_release);
        Py_DECREF(lock);
        if (cache->release == NULL) {
            Py_CLEAR(cache->acquire);
            return -1;
        }
    }
    PyObject *no = Py_False;
    PyObject *got = PyObject_Vectorcall(cache->acquire, &no, 1, NULL);
    if (got == NULL) return -1;
    Py_DECREF(got);
    return got == Py_True;
}

/* host_time_ns(start) and host_time_ns(start) + elapsed_ns(start, end) in C, into *start_ns
 * and *end_ns: 1. 0: the Python methods decide (a stale anchor to re-establish, another
 * context current, the context's lock held by a re-anchoring thread, not live marks);
 * -1: error (a driver error raises the CudaError the Python methods would). */
static int marker_interval_ns(MarkerObject *self, PyObject *start_mark, PyObject *end_mark, IntervalCache *cache,
                              long long *start_ns, long long *end_ns) {
    void *start_event, *end_event, *ctx, *end_ctx;
    PyObject *context, *end_context;
    int found = self->enabled ? mark_event(self, start_mark, cache, &start_event, &context, &ctx) : 0;
    if (found > 0) found = mark_event(self, end_mark, cache, &end_event, &end_context, &end_ctx);
    if (found <= 0 || end_ctx != ctx) return found < 0 ? -1 : 0;
    if (context != cache->context) { /* not the cached context: cache it (mark_event did, unless equal handles) */
        interval_cache_forget_context(cache);
        cache->context = Py_NewRef(context);
        cache->ctx = ctx;
    }
    int locked = cache_lock(cache);
    if (locked <= 0) return locked; /* held by a re-anchoring thread: Python waits for it */
    int result = -1;
    PyObject *anchor = PyObject_GetAttr(context, s_anchor);
    PyObject *max_age = anchor == NULL ? NULL : PyDict_GetItemWithError(self->timer_globals, s_anchor_max_age);
    if (anchor == NULL || max_age == NULL) goto done;
    if (anchor != cache->anchor) {
        if (anchor == Py_None || !PyTuple_Check(anchor) || PyTuple_GET_SIZE(anchor) < 2) {
            result = 0;
            goto done;
        }
        long long base = PyLong_AsLongLong(PyTuple_GET_ITEM(anchor, 1));
        unsigned long long anchor_event = raw_handle(PyTuple_GET_ITEM(anchor, 0));
        if (PyErr_Occurred()) goto done;
        Py_XSETREF(cache->anchor, Py_NewRef(anchor));
        cache->anchor_event = (void *)(uintptr_t)anchor_event;
        cache->anchor_ns = base;
    }
    long long age_limit = PyLong_AsLongLong(max_age);
    if ((age_limit == -1 && PyErr_Occurred()) || cache_now(self, cache) < 0) goto done;
    if (cache->now_ns - cache->anchor_ns > age_limit) {
        result = 0; /* a stale anchor to re-establish: the Python methods */
        goto done;
    }
    float to_start = 0, length = 0;
    int pushed, err = 0;
    if (enter_context_cached(self, ctx, cache, &pushed) < 0) {
        result = 0;
        goto done;
    }
    err = self->elapsed(&to_start, cache->anchor_event, start_event);
    if (err == 0) err = self->elapsed(&length, start_event, end_event);
    leave_context(self, pushed);
    if (err != 0) {
        cuda_error(self, err); /* the CudaError host_time_ns / elapsed_ns would raise */
        goto done;
    }
    *start_ns = cache->anchor_ns + round_ms_to_ns(to_start);
    *end_ns = *start_ns + round_ms_to_ns(length);
    result = 1;
done:
    Py_XDECREF(anchor);
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback); /* the lock is released whatever happened */
    PyObject *released = PyObject_CallNoArgs(cache->release);
    if (released == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return -1;
    }
    Py_DECREF(released);
    PyErr_Restore(type, value, traceback);
    return result;
}

/* (host_time_ns(start), + elapsed_ns(start, end)) in C, or None: the Python methods decide
 * (a stale anchor to re-establish, another context current, a driver error, its lock held). */
static PyObject *marker_interval(MarkerObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "interval(start_mark, end_mark)");
        return NULL;
    }
    IntervalCache cache = {0};
    long long start = 0, end = 0;
    int found = marker_interval_ns(self, args[0], args[1], &cache, &start, &end);
    interval_cache_clear(&cache);
    if (found < 0) return NULL;
    if (found == 0) Py_RETURN_NONE;
    return Py_BuildValue("(LL)", start, end);
}

static PyMethodDef marker_methods[] = {
    {"complete", (PyCFunction)marker_complete, METH_O,
     "complete(mark): CudaTimer.is_complete(mark) in C, or None where the Python method must decide."},
    {"interval", (PyCFunction)(void (*)(void))marker_interval, METH_FASTCALL,
     "interval(start, end): (host_time_ns(start), host_time_ns(start) + elapsed_ns(start, end)) in C, "
     "or None where the Python methods must decide."},
    {"mark", (PyCFunction)marker_call_mark, METH_O, "mark(ref): CudaTimer.mark(ref), the common case in C."},
    {"disable", (PyCFunction)marker_disable, METH_NOARGS,
     "Every later mark goes to CudaTimer.mark (the timer closed, or the process forked)."},
    {NULL}};

static PyTypeObject MarkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.CudaMarker",
    .tp_doc = "CudaMarker(timer, marks, ids, cuEventRecord, cuCtxGetCurrent): CudaTimer.mark's common case, "
              "calling the driver through the function pointers cuGetProcAddress gave.",
    .tp_basicsize = sizeof(MarkerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = marker_new,
    .tp_dealloc = (destructor)marker_dealloc,
    .tp_traverse = (traverseproc)marker_traverse,
    .tp_clear = (inquiry)marker_clear,
    .tp_methods = marker_methods,
};

/* ---- RecorderCore: the hot-path half of trace._recorder.Recorder ------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *timer, *pending, *pending_append, *close_actions, *counts, *thread_names, *aggregate_unsampled;
    PyObject *fold_closed;
    PyObject *gpu_timed, *stream_refs;
    MarkerObject *marker; /* the timer's CudaMarker, or NULL */
    PyObject *last_thread; /* the thread id of the last open, known to be in thread_names ... */
    PyObject *last_names;  /* ... of this dict */
    long long pending_limit, next_poll_ns, max_delay_ns;
    /* scopes_unsampled counted here and added to counts by flush_counts (stats() calls it):
     * a dict update per unsampled scope was ~7 % of a brick's record */
    long long unsampled;
    char poll_without_pending; /* the time-based poll runs with nothing pending too */
} RecorderCore;

static PyMemberDef recorder_members[] = {
    {"_gpu_timed", T_OBJECT_EX, offsetof(RecorderCore, gpu_timed), 0, NULL},
    {"_stream_refs", T_OBJECT_EX, offsetof(RecorderCore, stream_refs), 0, NULL},
    {"close_actions", T_OBJECT_EX, offsetof(RecorderCore, close_actions), 0, NULL},
    {"_counts", T_OBJECT_EX, offsetof(RecorderCore, counts), 0, NULL},
    {"thread_names", T_OBJECT_EX, offsetof(RecorderCore, thread_names), 0, NULL},
    {"aggregate_unsampled", T_OBJECT_EX, offsetof(RecorderCore, aggregate_unsampled), 0, NULL},
    {"fold_closed", T_OBJECT_EX, offsetof(RecorderCore, fold_closed), 0, NULL},
    {"_pending_limit", T_LONGLONG, offsetof(RecorderCore, pending_limit), 0, NULL},
    {"_next_poll_ns", T_LONGLONG, offsetof(RecorderCore, next_poll_ns), 0, NULL},
    {"_max_delay_ns", T_LONGLONG, offsetof(RecorderCore, max_delay_ns), 0, NULL},
    {"poll_without_pending", T_BOOL, offsetof(RecorderCore, poll_without_pending), 0, NULL},
    {NULL}};

static PyObject *recorder_get_pending(RecorderCore *self, void *closure) {
    if (self->pending == NULL) {
        PyErr_SetString(PyExc_AttributeError, "pending");
        return NULL;
    }
    Py_INCREF(self->pending);
    return self->pending;
}

static int recorder_set_pending(RecorderCore *self, PyObject *value, void *closure) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "pending cannot be deleted");
        return -1;
    }
    PyObject *append = PyObject_GetAttr(value, s_append);
    if (append == NULL) return -1;
    Py_INCREF(value);
    Py_XSETREF(self->pending, value);
    Py_XSETREF(self->pending_append, append);
    return 0;
}

static PyObject *recorder_get_timer(RecorderCore *self, void *closure) {
    if (self->timer == NULL) {
        PyErr_SetString(PyExc_AttributeError, "timer");
        return NULL;
    }
    Py_INCREF(self->timer);
    return self->timer;
}

/* Setting the timer also picks up its CudaMarker (timer._marker), if it has one. */
static int recorder_set_timer(RecorderCore *self, PyObject *value, void *closure) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "timer cannot be deleted");
        return -1;
    }
    PyObject *marker = NULL;
    if (value != Py_None) {
        marker = PyObject_GetAttr(value, s_marker);
        if (marker == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
            PyErr_Clear();
        } else if (!PyObject_TypeCheck(marker, &MarkerType)) {
            Py_CLEAR(marker);
        }
    }
    Py_INCREF(value);
    Py_XSETREF(self->timer, value);
    Py_XSETREF(self->marker, (MarkerObject *)marker);
    return 0;
}

static PyGetSetDef recorder_getset[] = {
    {"pending", (getter)recorder_get_pending, (setter)recorder_set_pending, "Ended records waiting for resolution.", NULL},
    {"timer", (getter)recorder_get_timer, (setter)recorder_set_timer, "The GPU timer, or None on the host clock.", NULL},
    {NULL}};

static int recorder_traverse(RecorderCore *self, visitproc visit, void *arg) {
    Py_VISIT(self->timer);
    Py_VISIT(self->pending);
    Py_VISIT(self->pending_append);
    Py_VISIT(self->close_actions);
    Py_VISIT(self->counts);
    Py_VISIT(self->thread_names);
    Py_VISIT(self->aggregate_unsampled);
    Py_VISIT(self->fold_closed);
    Py_VISIT(self->gpu_timed);
    Py_VISIT(self->stream_refs);
    Py_VISIT(self->marker);
    Py_VISIT(self->last_names);
    return 0;
}

static int recorder_clear(RecorderCore *self) {
    Py_CLEAR(self->timer);
    Py_CLEAR(self->pending);
    Py_CLEAR(self->pending_append);
    Py_CLEAR(self->close_actions);
    Py_CLEAR(self->counts);
    Py_CLEAR(self->thread_names);
    Py_CLEAR(self->aggregate_unsampled);
    Py_CLEAR(self->fold_closed);
    Py_CLEAR(self->gpu_timed);
    Py_CLEAR(self->stream_refs);
    Py_CLEAR(self->marker);
    Py_CLEAR(self->last_thread);
    Py_CLEAR(self->last_names);
    return 0;
}

static void recorder_dealloc(RecorderCore *self) {
    PyObject_GC_UnTrack(self);
    recorder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int recorder_ready(RecorderCore *self) {
    if (self->timer && self->pending_append && self->close_actions && self->counts && self->thread_names &&
        self->aggregate_unsampled && self->fold_closed)
        return 1;
    PyErr_SetString(PyExc_RuntimeError, "brickscope: Recorder used before its __init__ ran");
    return 0;
}

/* The kind of a scope object (0 step .. 3 kernel); cached on the C scope base. */
typedef struct {
    PyObject_HEAD
    PyObject *name, *category, *elements, *stream, *index, *attributes;
    int kind1;      /* kind + 1; 0: not looked up yet */
    int host_only1; /* _host_only + 1; 0: not looked up yet */
    int external1;  /* _external + 1; 0: not looked up yet */
} ScopeObject;

/* A class attribute of a C scope object as a flag (0/1), cached in *cache as value + 1. -1: error. */
static int owner_flag(PyObject *owner, PyObject *attribute, int *cache) {
    if (*cache > 0) return *cache - 1;
    PyObject *value = PyObject_GetAttr(owner, attribute);
    if (value == NULL) return -1;
    int flag = PyObject_IsTrue(value);
    Py_DECREF(value);
    if (flag >= 0) *cache = flag + 1;
    return flag;
}

/* The scope object's class attribute _host_only (cached on the C scope base). -1: error. */
static int owner_host_only(PyObject *owner) {
    int uncached = 0;
    int *cache = has_base(owner, &ScopeBaseType) ? &((ScopeObject *)owner)->host_only1 : &uncached;
    return owner_flag(owner, s_host_only, cache);
}

static long owner_kind(PyObject *owner) {
    int is_scope = has_base(owner, &ScopeBaseType);
    if (is_scope && ((ScopeObject *)owner)->kind1 > 0) return ((ScopeObject *)owner)->kind1 - 1;
    PyObject *kind = PyObject_GetAttr(owner, s_kind);
    if (kind == NULL) return -1;
    long value = PyLong_AsLong(kind);
    Py_DECREF(kind);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (value < 0 || value > 3) {
        PyErr_Format(PyExc_ValueError, "brickscope: unknown scope kind %ld", value);
        return -1;
    }
    if (is_scope) ((ScopeObject *)owner)->kind1 = (int)value + 1;
    return value;
}

/* Recorder._open_gpu in C, for a timer with a CudaMarker: 1 done, 0 left to the Python
 * helper (a stream seen for the first time, an unusable one...), -1 error. */
static int open_gpu_fast(RecorderCore *self, RecordObject *rec, PyObject *owner) {
    if (!self->marker->enabled || self->gpu_timed == NULL || !PyTuple_Check(self->gpu_timed) ||
        self->stream_refs == NULL || !PyDict_Check(self->stream_refs))
        return 0;
    long kind = owner_kind(owner);
    if (kind < 0) return -1;
    if (PyTuple_GET_SIZE(self->gpu_timed) <= kind) return 0;
    int sampled = is_true(rec->sampled), aggregate = is_true(self->aggregate_unsampled);
    int timed = is_true(PyTuple_GET_ITEM(self->gpu_timed, kind)), host_only = owner_host_only(owner);
    if (sampled < 0 || aggregate < 0 || timed < 0 || host_only < 0) return -1;
    if (!((sampled || (aggregate && kind == KIND_BRICK)) && timed && !host_only)) {
        Py_INCREF(Py_None);
        Py_XSETREF(rec->stream, Py_None);
        Py_INCREF(g_minus_one);
        Py_XSETREF(rec->start_mark, g_minus_one);
        return 1;
    }
    PyObject *stream = has_base(owner, &ScopeBaseType) ? ((ScopeObject *)owner)->stream : NULL;
    if (stream == NULL) return 0; /* not a C scope, or no _stream: Python says what is wrong */
    PyObject *top = rec->link, *ref;
    if (stream == Py_None && top != NULL && top != Py_None && Record_Check(top) &&
        ((RecordObject *)top)->stream != NULL && ((RecordObject *)top)->stream != Py_None) {
        ref = ((RecordObject *)top)->stream; /* the enclosing scope's stream */
    } else {
        ref = PyDict_GetItemWithError(self->stream_refs, stream);
        if (ref == NULL) {
            if (PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
                PyErr_Clear();
            }
            return 0; /* first use of this stream (set-up), or unhashable */
        }
        if (!PyTuple_Check(ref)) return 0; /* a stream whose set-up failed */
    }
    Py_INCREF(ref);
    Py_XSETREF(rec->stream, ref);
    PyObject *mark = marker_mark(self->marker, ref);
    if (mark == NULL) return -1;
    Py_XSETREF(rec->start_mark, mark);
    long long value = PyLong_AsLongLong(mark);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (value < 0) {
        Py_INCREF(s_mark_failed);
        Py_XSETREF(rec->gpu_error, s_mark_failed);
    }
    return 1;
}

/* Recorder._mark_end in C, for a timer with a CudaMarker: 1 done, 0 left to Python. */
static int mark_end_fast(RecorderCore *self, RecordObject *rec) {
    if (self->marker == NULL || !self->marker->enabled || rec->stream == NULL || !PyTuple_Check(rec->stream))
        return 0;
    PyObject *mark = marker_mark(self->marker, rec->stream);
    if (mark != NULL) {
        Py_XSETREF(rec->end_mark, mark);
        return 1;
    }
    PyObject *exc = take_exception(); /* as in Python: a failing mark leaves host timing */
    if (exc == NULL) return -1;
    PyObject *name = PyObject_GetAttrString(exc, "code_name");
    if (name == NULL) {
        PyErr_Clear();
        name = PyObject_GetAttrString((PyObject *)Py_TYPE(exc), "__name__");
    }
    Py_DECREF(exc);
    if (name == NULL) return -1;
    Py_XSETREF(rec->gpu_error, name);
    return 1;
}

/* ---- FoldTable: trace._unsampled.UnsampledBricks.fold_closed in C ------------------ */

/* The running sums of one (brick, category): plain C integers, so that a fold allocates
 * nothing (the Python table replaces a tuple of three ints per brick). */
typedef struct {
    PyObject_HEAD
    long long count, self_ns, elements;
} FoldCellObject;

static PyTypeObject FoldCellType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath._FoldCell",
    .tp_doc = "The sums of one (brick, category) of a FoldTable.",
    .tp_basicsize = sizeof(FoldCellObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

#define FOLD_RECENT_BITS 5
#define FOLD_RECENT (1 << FOLD_RECENT_BITS)

typedef struct {
    PyObject_HEAD
    PyObject *cells;    /* name (category None) or (name, category) -> FoldCell */
    PyObject *counts;   /* the pipeline's counters (self_time_clamped) */
    PyObject *fallback; /* UnsampledBricks.fold_closed: every brick this does not handle */
    /* The cells last folded into, by the identity of the (name, category) objects: a brick
     * name is usually the same str object on every call (a literal), so most folds find their
     * cell here, without hashing or building a key. Strong references; emptied with cells. */
    struct {
        PyObject *name, *category, *cell;
    } recent[FOLD_RECENT];
} FoldTableObject;

/* Forget the cells remembered by identity (the table's cells are cleared or it is freed). */
static void fold_recent_clear(FoldTableObject *table) {
    for (int i = 0; i < FOLD_RECENT; i++) {
        Py_CLEAR(table->recent[i].name);
        Py_CLEAR(table->recent[i].category);
        Py_CLEAR(table->recent[i].cell);
    }
}

static PyObject *s_external, *s_self_time_clamped;


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

static int fold_table_fold(FoldTableObject *table, PyObject *rec) {
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

static PyTypeObject FoldTableType = {
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
static PyObject *rc_open(RecorderCore *self, PyObject *owner, PyObject *opener) {
    if (!recorder_ready(self)) return NULL;
    PyObject *top = stack_top();
    if (top == NULL) return NULL;
    PyObject *current = otel_current();
    if (current == NULL) {
        Py_DECREF(top);
        return NULL;
    }
    RecordObject *rec = (RecordObject *)free_list_take(&record_free, &RecordType);
    if (rec == NULL) goto fail;
    if (top != Py_None && !Record_Check(top)) {
        PyErr_SetString(PyExc_TypeError, "brickscope: the scope stack holds a foreign object");
        goto fail;
    }
    if (top == Py_None || ((RecordObject *)top)->otel_context != current) {
        /* outermost scope, or a user span started since the scope below opened */
        PyObject *args[] = {(PyObject *)self, (PyObject *)rec, owner, current};
        PyObject *res = PyObject_VectorcallMethod(s_open_root, args, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (res == NULL) goto fail;
        Py_SETREF(current, res);
    } else {
        RecordObject *below = (RecordObject *)top;
        if (below->trace_id == NULL || below->sampled == NULL) {
            PyErr_SetString(PyExc_AttributeError, "brickscope: the record below has no trace");
            goto fail;
        }
        Py_INCREF(below->trace_id);
        rec->trace_id = below->trace_id;
        Py_INCREF(below->sampled);
        rec->sampled = below->sampled;
        Py_INCREF(Py_None);
        rec->otel_parent = Py_None;
        Py_INCREF(top);
        rec->parent = top;
        Py_INCREF(Py_None);
        rec->context_token = Py_None;
    }
    rec->otel_context = current; /* the reference moves */
    current = NULL;
    Py_INCREF(owner);
    rec->owner = owner;
    Py_INCREF(opener);
    rec->opener = opener;
    Py_INCREF(self);
    rec->recorder = (PyObject *)self;
    rec->link = top; /* the reference moves */
    top = NULL;
    Py_INCREF(g_zero);
    rec->span_id = g_zero;
    Py_INCREF(Py_None);
    rec->span_context = Py_None;
    unsigned long tid = PyThread_get_thread_ident();
    int known = 0;
    if (self->last_thread != NULL && self->last_names == self->thread_names &&
        PyLong_AsUnsignedLong(self->last_thread) == tid) { /* the same thread as last time: named */
        Py_INCREF(self->last_thread);
        rec->thread_id = self->last_thread;
        known = 1;
    } else {
        rec->thread_id = PyLong_FromUnsignedLong(tid);
        if (rec->thread_id == NULL) goto fail;
        known = PyDict_Contains(self->thread_names, rec->thread_id);
        if (known < 0) goto fail;
    }
    if (!known) {
        PyObject *args[] = {(PyObject *)self, rec->thread_id};
        PyObject *res = PyObject_VectorcallMethod(s_name_thread, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (res == NULL) goto fail;
        Py_DECREF(res);
        known = 1;
    }
    if (known && self->last_thread != rec->thread_id) {
        Py_INCREF(rec->thread_id);
        Py_XSETREF(self->last_thread, rec->thread_id);
        Py_INCREF(self->thread_names);
        Py_XSETREF(self->last_names, self->thread_names);
    }
    Py_INCREF(Py_False);
    rec->ended = Py_False;
    Py_INCREF(Py_None);
    rec->error = Py_None;
    Py_INCREF(Py_None);
    rec->gpu_error = Py_None;
    Py_INCREF(g_zero);
    rec->nested_ns = g_zero;
    Py_INCREF(Py_None);
    rec->enclosing = Py_None;
    Py_INCREF(Py_None);
    rec->notes = Py_None;
    Py_INCREF(g_zero);
    rec->gpu_first = g_zero;
    Py_INCREF(g_zero);
    rec->gpu_last = g_zero;
    if (stack_push((PyObject *)rec, rec->link, &rec->stack_token) < 0) goto fail;
    if (self->timer != Py_None) {
        int done = self->marker != NULL ? open_gpu_fast(self, rec, owner) : 0;
        if (done < 0) goto fail;
        if (!done) {
            PyObject *args[] = {(PyObject *)self, (PyObject *)rec, owner, rec->link};
            PyObject *res = PyObject_VectorcallMethod(s_open_gpu, args, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            if (res == NULL) goto fail;
            Py_DECREF(res);
        }
    } else {
        Py_INCREF(Py_None);
        Py_XSETREF(rec->stream, Py_None);
        Py_INCREF(g_minus_one);
        Py_XSETREF(rec->start_mark, g_minus_one);
    }
    Py_INCREF(g_minus_one);
    rec->end_mark = g_minus_one;
    long long start;
    PyObject *start_obj;
    if (clock_read(&start, &start_obj) < 0) goto fail;
    record_set_time(rec, TIME_START, start, start_obj);
    return (PyObject *)rec;
fail:
    Py_XDECREF(top);
    Py_XDECREF(current);
    Py_XDECREF(rec);
    return NULL;
}

/* Release the OTel context of records leaving the stack (Python: _release_context). */
static int release_context(RecordObject *rec) {
    if (rec->context_token == NULL || rec->context_token == Py_None) return 0;
    PyObject *res = PyObject_CallOneArg(g_release_context, (PyObject *)rec);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}


/* Recorder.close(rec, error): mirrors _recorder._PyRecording.close. */
static int rc_close(RecorderCore *self, RecordObject *rec, PyObject *error) {
    if (!recorder_ready(self)) return -1;
    long long end;
    PyObject *end_obj;
    if (clock_read(&end, &end_obj) < 0) return -1;
    long long start_mark = rec->start_mark ? PyLong_AsLongLong(rec->start_mark) : -1;
    if (start_mark == -1 && PyErr_Occurred()) goto fail;
    if (start_mark >= 0) {
        int done = mark_end_fast(self, rec);
        if (done < 0) goto fail;
        if (!done) {
            PyObject *args[] = {(PyObject *)self, (PyObject *)rec};
            PyObject *res = PyObject_VectorcallMethod(s_mark_end, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            if (res == NULL) goto fail;
            Py_DECREF(res);
        }
    }
    record_set_time(rec, TIME_END, end, end_obj);
    end_obj = NULL;
    Py_INCREF(Py_True);
    Py_XSETREF(rec->ended, Py_True);
    Py_INCREF(Py_None);
    Py_XSETREF(rec->opener, Py_None);
    PyObject *top = stack_top();
    if (top == NULL) return -1;
    int innermost = top == (PyObject *)rec;
    Py_DECREF(top);
    if (innermost) {
        if (release_context(rec) < 0) return -1;
        PyObject *below = rec->link ? rec->link : Py_None;
        while (below != Py_None && Record_Check(below)) {
            int ended = is_true(((RecordObject *)below)->ended);
            if (ended < 0) return -1;
            if (!ended) break;
            if (release_context((RecordObject *)below) < 0) return -1;
            below = ((RecordObject *)below)->link ? ((RecordObject *)below)->link : Py_None;
        }
        if (stack_pop(below, rec->link, &rec->stack_token) < 0) return -1;
    } else {
        Py_CLEAR(rec->stack_token);
        if (counts_add(self->counts, s_scope_repairs) < 0) return -1;
        PyObject *res = PyObject_CallOneArg(g_repair_stack, (PyObject *)rec);
        if (res == NULL) return -1;
        Py_DECREF(res);
    }
    if (error != Py_None) {
        PyObject *described = PyObject_CallOneArg(g_describe, error);
        if (described == NULL) return -1;
        Py_XSETREF(rec->error, described);
    }
    int sampled = is_true(rec->sampled);
    if (sampled < 0) return -1;
    long kind = owner_kind(rec->owner);
    if (kind < 0) return -1;
    if (sampled) {
        if (record_times_as_ints(rec) < 0) return -1; /* the resolver reads the fields */
        PyObject *res = PyObject_CallOneArg(self->pending_append, (PyObject *)rec);
        if (res == NULL) return -1;
        Py_DECREF(res);
    } else { /* no span; an unsampled brick still goes to the metrics (folded, not built) */
        self->unsampled++;
        int aggregate = is_true(self->aggregate_unsampled);
        if (aggregate < 0) return -1;
        if (!aggregate) return 0;
        if (kind == KIND_BRICK) { /* host clock: folded now, never pending */
            if (Py_TYPE(self->fold_closed) == &FoldTableType) {
                if (fold_table_fold((FoldTableObject *)self->fold_closed, (PyObject *)rec) < 0) return -1;
            } else {
                if (record_times_as_ints(rec) < 0) return -1;
                PyObject *res = PyObject_CallOneArg(
                    self->fold_closed != Py_None ? self->fold_closed : self->pending_append, (PyObject *)rec);
                if (res == NULL) return -1;
                Py_DECREF(res);
            }
        }
    }
    PyObject *action = PyTuple_Check(self->close_actions) && PyTuple_GET_SIZE(self->close_actions) > kind
                           ? PyTuple_GET_ITEM(self->close_actions, kind)
                           : NULL;
    if (action == NULL) {
        PyErr_SetString(PyExc_TypeError, "brickscope: close_actions must be a tuple of four actions");
        return -1;
    }
    int act = is_true(action);
    if (act < 0) return -1;
    PyObject *res;
    if (act) {
        PyObject *args[] = {(PyObject *)self, (PyObject *)rec, action};
        res = PyObject_VectorcallMethod(s_act, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    } else {
        Py_ssize_t size = PyObject_Length(self->pending);
        if (size < 0) return -1;
        if (size >= self->pending_limit) {
            PyObject *n = PyLong_FromSsize_t(size);
            if (n == NULL) return -1;
            PyObject *args[] = {(PyObject *)self, n};
            res = PyObject_VectorcallMethod(s_overflow, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            Py_DECREF(n);
        } else if (end >= self->next_poll_ns && (size > 0 || self->poll_without_pending)) {
            PyObject *args[] = {(PyObject *)self, record_time(rec, TIME_END)};
            if (args[1] == NULL) return -1;
            res = PyObject_VectorcallMethod(s_poll, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        } else {
            return 0;
        }
    }
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
fail:
    Py_XDECREF(end_obj);
    return -1;
}

static PyObject *recorder_open(RecorderCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "open(owner, opener=None)");
        return NULL;
    }
    return rc_open(self, args[0], nargs == 2 ? args[1] : Py_None);
}

static PyObject *recorder_close(RecorderCore *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !Record_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "close(rec, error): rec must be a Record");
        return NULL;
    }
    if (rc_close(self, (RecordObject *)args[0], args[1]) < 0) return NULL;
    Py_RETURN_NONE;
}

/* Add the unsampled scopes counted in C to counts["scopes_unsampled"]. Runs no Python code
 * (a str key, ints), so under the GIL a concurrent close counts either before or after. */
static PyObject *recorder_flush_counts(RecorderCore *self, PyObject *unused) {
    if (self->unsampled == 0 || self->counts == NULL) Py_RETURN_NONE;
    PyObject *old = PyDict_GetItemWithError(self->counts, s_scopes_unsampled);
    if (old == NULL && PyErr_Occurred()) return NULL;
    PyObject *add = PyLong_FromLongLong(self->unsampled);
    PyObject *new = add == NULL ? NULL : old == NULL ? (Py_INCREF(add), add) : PyNumber_Add(old, add);
    Py_XDECREF(add);
    if (new == NULL) return NULL;
    int rc = PyDict_SetItem(self->counts, s_scopes_unsampled, new);
    Py_DECREF(new);
    if (rc < 0) return NULL;
    self->unsampled = 0;
    Py_RETURN_NONE;
}

static PyMethodDef recorder_methods[] = {
    {"flush_counts", (PyCFunction)recorder_flush_counts, METH_NOARGS,
     "flush_counts(): add the counts kept in C (scopes_unsampled) to the counters' dict."},
    {"open", (PyCFunction)(void (*)(void))recorder_open, METH_FASTCALL,
     "open(owner, opener=None): push a new record for a scope entering on this thread/task."},
    {"close", (PyCFunction)(void (*)(void))recorder_close, METH_FASTCALL,
     "close(rec, error): pop rec and queue it for resolution; a sync point if the policy says so."},
    {NULL}};

static PyTypeObject RecorderCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.RecorderCore",
    .tp_doc = "The hot-path half of brickscope.sdk.trace._recorder.Recorder (open/close in C).",
    .tp_basicsize = sizeof(RecorderCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)recorder_dealloc,
    .tp_traverse = (traverseproc)recorder_traverse,
    .tp_clear = (inquiry)recorder_clear,
    .tp_members = recorder_members,
    .tp_getset = recorder_getset,
    .tp_methods = recorder_methods,
};

/* ---- opening and closing from a scope or entry ------------------------------------- */

/* _state.recorder (a new reference), or NULL when off or torch.compile is tracing this
 * call; -1 on error. As in Python: both read first, then compiling() asked. */
static GlobalCache g_recorder_cache, g_compiling_cache; /* _state.recorder, _state.compiling */

static int active_recorder(PyObject **out) {
    *out = NULL;
    PyObject *recorder = global_get(&g_recorder_cache, g_state_dict, s_recorder);
    if (recorder == NULL) return PyErr_Occurred() ? -1 : 0;
    if (recorder == Py_None) return 0;
    PyObject *compiling = global_get(&g_compiling_cache, g_state_dict, s_compiling);
    if (compiling == NULL && PyErr_Occurred()) return -1;
    Py_INCREF(recorder);
    if (compiling != NULL && compiling != Py_None) {
        PyObject *res = PyObject_CallNoArgs(compiling);
        int tracing = res == NULL ? -1 : PyObject_IsTrue(res);
        Py_XDECREF(res);
        if (tracing != 0) {
            Py_DECREF(recorder);
            return tracing < 0 ? -1 : 0;
        }
    }
    *out = recorder;
    return 0;
}

static int is_tracing(void) {
    PyObject *compiling = global_get(&g_compiling_cache, g_state_dict, s_compiling);
    if (compiling == NULL) return PyErr_Occurred() ? -1 : 0;
    if (compiling == Py_None) return 0;
    PyObject *res = PyObject_CallNoArgs(compiling);
    if (res == NULL) return -1;
    int tracing = PyObject_IsTrue(res);
    Py_DECREF(res);
    return tracing;
}

/* recorder.open(scope, opener), "never raises": an Exception is counted and logged
 * (_scope._enter_failed) and gives None. New reference, or NULL for a BaseException. */
static PyObject *open_record(PyObject *recorder, PyObject *scope, PyObject *opener) {
    Py_INCREF(recorder);
    PyObject *rec;
    if (has_base(recorder, &RecorderCoreType)) {
        rec = rc_open((RecorderCore *)recorder, scope, opener);
    } else {
        PyObject *args[] = {recorder, scope, opener};
        rec = PyObject_VectorcallMethod(s_open, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    if (rec == NULL) {
        PyObject *exc = take_exception();
        if (exc != NULL) {
            PyObject *res = PyObject_CallFunctionObjArgs(g_enter_failed, recorder, exc, NULL);
            Py_DECREF(exc);
            if (res != NULL) {
                Py_DECREF(res);
                Py_INCREF(Py_None);
                rec = Py_None;
            }
        }
    }
    Py_DECREF(recorder);
    return rec;
}

/* rec.recorder.close(rec, error), never raising an Exception (_scope._exit_failed). */
static int close_record(PyObject *rec, PyObject *error) {
    int rc;
    Py_INCREF(rec);
    PyObject *recorder = ((RecordObject *)rec)->recorder;
    if (recorder != NULL && has_base(recorder, &RecorderCoreType)) {
        Py_INCREF(recorder);
        rc = rc_close((RecorderCore *)recorder, (RecordObject *)rec, error);
        Py_DECREF(recorder);
    } else if (recorder != NULL) {
        PyObject *args[] = {recorder, rec, error};
        Py_INCREF(recorder);
        PyObject *res = PyObject_VectorcallMethod(s_close, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(recorder);
        rc = res == NULL ? -1 : 0;
        Py_XDECREF(res);
    } else {
        PyErr_SetString(PyExc_AttributeError, "recorder");
        rc = -1;
    }
    if (rc < 0) {
        PyObject *exc = take_exception();
        if (exc != NULL) {
            PyObject *res = PyObject_CallFunctionObjArgs(g_exit_failed, rec, exc, NULL);
            Py_DECREF(exc);
            rc = res == NULL ? -1 : 0;
            Py_XDECREF(res);
        }
    }
    Py_DECREF(rec);
    return rc;
}

static int check_exit_args(Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "__exit__(exc_type, exc, tb)");
        return -1;
    }
    return 0;
}

/* ---- ScopeBase: the C base of _scope._Scope (shared, immutable scope objects) ------- */

static PyMemberDef scope_members[] = {
    {"_name", T_OBJECT_EX, offsetof(ScopeObject, name), 0, NULL},
    {"_category", T_OBJECT_EX, offsetof(ScopeObject, category), 0, NULL},
    {"_elements", T_OBJECT_EX, offsetof(ScopeObject, elements), 0, NULL},
    {"_stream", T_OBJECT_EX, offsetof(ScopeObject, stream), 0, NULL},
    {"_index", T_OBJECT_EX, offsetof(ScopeObject, index), 0, NULL},
    {"_attributes", T_OBJECT_EX, offsetof(ScopeObject, attributes), 0, NULL},
    {NULL}};

static int scope_traverse(ScopeObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->name);
    Py_VISIT(self->category);
    Py_VISIT(self->elements);
    Py_VISIT(self->stream);
    Py_VISIT(self->index);
    Py_VISIT(self->attributes);
    return 0;
}

static int scope_clear(ScopeObject *self) {
    Py_CLEAR(self->name);
    Py_CLEAR(self->category);
    Py_CLEAR(self->elements);
    Py_CLEAR(self->stream);
    Py_CLEAR(self->index);
    Py_CLEAR(self->attributes);
    return 0;
}

/* Scope objects of Python classes that add no field to ScopeBase (Brick, Layer...), freed:
 * brick(name, category, elements) builds one per call, and takes its memory from here. */
static FreeList scope_free;

static void scope_dealloc(ScopeObject *self) {
    /* subclasses are Python classes: subtype_dealloc releases their type (after this) */
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    scope_clear(self);
    self->kind1 = self->host_only1 = self->external1 = 0;
    if ((type->tp_flags & Py_TPFLAGS_HEAPTYPE) && type->tp_basicsize == ScopeBaseType.tp_basicsize &&
        type->tp_itemsize == 0 && type->tp_dictoffset == 0 && type->tp_weaklistoffset == 0 &&
        type->tp_free == PyObject_GC_Del && free_list_keep(&scope_free, (PyObject *)self))
        return;
    type->tp_free((PyObject *)self);
}

/* A new instance of cls (a Python class adding no field to ScopeBase), every field unset,
 * tracked by the GC: cls->tp_alloc(cls, 0), or a freed scope object made one. */
static ScopeObject *scope_new(PyTypeObject *cls) {
#if FREE_LIST_MAX > 0
    if (scope_free.size > 0 && cls->tp_alloc == PyType_GenericAlloc && cls->tp_weaklistoffset == 0 &&
        free_list_usable()) {
        PyObject *op = scope_free.items[--scope_free.size];
        Py_INCREF(cls); /* an instance of a heap type holds its type, as PyType_GenericAlloc does */
        Py_SET_TYPE(op, cls);
        free_list_revive(op);
        PyObject_GC_Track(op);
        return (ScopeObject *)op;
    }
#endif
    return (ScopeObject *)cls->tp_alloc(cls, 0);
}

static PyObject *scope_enter(ScopeObject *self, PyObject *unused) {
    PyObject *recorder;
    if (active_recorder(&recorder) < 0) return NULL;
    if (recorder != NULL) {
        PyObject *rec = open_record(recorder, (PyObject *)self, (PyObject *)self);
        Py_DECREF(recorder);
        if (rec == NULL) return NULL;
        Py_DECREF(rec);
    }
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *scope_exit(ScopeObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_exit_args(nargs) < 0) return NULL;
    int tracing = is_tracing();
    if (tracing < 0) return NULL;
    if (tracing) Py_RETURN_NONE;
    PyObject *top = stack_top();
    if (top == NULL) return NULL;
    int rc = 0;
    if (top != Py_None && Record_Check(top) && ((RecordObject *)top)->opener == (PyObject *)self) {
        rc = close_record(top, args[1]);
    } else if (top != Py_None) {
        PyObject *res = PyObject_CallFunctionObjArgs(g_exit_out_of_order, (PyObject *)self, top, args[1], NULL);
        rc = res == NULL ? -1 : 0;
        Py_XDECREF(res);
    }
    Py_DECREF(top);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef scope_methods[] = {
    {"__enter__", (PyCFunction)scope_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))scope_exit, METH_FASTCALL, NULL},
    {NULL}};

static PyTypeObject ScopeBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.ScopeBase",
    .tp_doc = "The C base of brickscope's scope objects: their fields and with-statement.",
    .tp_basicsize = sizeof(ScopeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)scope_dealloc,
    .tp_traverse = (traverseproc)scope_traverse,
    .tp_clear = (inquiry)scope_clear,
    .tp_members = scope_members,
    .tp_methods = scope_methods,
};

/* ---- Entry: one use of a shared scope object (_scope._Entry) ------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *scope, *record;
} EntryObject;

static PyMemberDef entry_members[] = {
    {"_scope", T_OBJECT_EX, offsetof(EntryObject, scope), 0, NULL},
    {"_record", T_OBJECT_EX, offsetof(EntryObject, record), 0, NULL},
    {NULL}};

static int entry_traverse(EntryObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->scope);
    Py_VISIT(self->record);
    return 0;
}

static int entry_clear(EntryObject *self) {
    Py_CLEAR(self->scope);
    Py_CLEAR(self->record);
    return 0;
}

static FreeList entry_free;

static void entry_dealloc(EntryObject *self) {
    PyObject_GC_UnTrack(self);
    entry_clear(self);
    if (!free_list_keep(&entry_free, (PyObject *)self)) Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *new_entry(PyObject *scope) {
    EntryObject *entry = (EntryObject *)free_list_take(&entry_free, &EntryType);
    if (entry == NULL) return NULL;
    Py_INCREF(scope);
    entry->scope = scope;
    return (PyObject *)entry;
}

static PyObject *entry_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *scope;
    if (!PyArg_ParseTuple(args, "O:Entry", &scope)) return NULL;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "Entry(scope) takes no keyword arguments");
        return NULL;
    }
    return new_entry(scope);
}

static PyObject *entry_enter(EntryObject *self, PyObject *unused) {
    PyObject *recorder;
    if (active_recorder(&recorder) < 0) return NULL;
    PyObject *rec;
    if (recorder == NULL || self->scope == NULL) {
        Py_XDECREF(recorder);
        Py_INCREF(Py_None);
        rec = Py_None;
    } else {
        rec = open_record(recorder, self->scope, (PyObject *)self);
        Py_DECREF(recorder);
        if (rec == NULL) return NULL;
    }
    Py_XSETREF(self->record, rec);
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *entry_exit(EntryObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_exit_args(nargs) < 0) return NULL;
    PyObject *rec = self->record;
    if (rec == NULL || rec == Py_None) Py_RETURN_NONE;
    Py_INCREF(rec);
    PyObject *top = stack_top();
    if (top == NULL) {
        Py_DECREF(rec);
        return NULL;
    }
    int rc;
    if (top == rec && Record_Check(rec)) {
        rc = close_record(rec, args[1]);
    } else {
        PyObject *res = PyObject_CallFunctionObjArgs(g_exit_entry_ooo, (PyObject *)self, rec, args[1], NULL);
        rc = res == NULL ? -1 : 0;
        Py_XDECREF(res);
    }
    Py_DECREF(top);
    Py_DECREF(rec);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *entry_call(EntryObject *self, PyObject *args, PyObject *kwargs) {
    /* decorate with the shared scope (each call opens its own record) */
    return PyObject_Call(self->scope, args, kwargs);
}

static PyObject *entry_repr(EntryObject *self) {
    long kind = owner_kind(self->scope);
    if (kind < 0) return NULL;
    PyObject *name = PyObject_GetAttr(self->scope, s_name);
    if (name == NULL) return NULL;
    PyObject *out = PyUnicode_FromFormat("<brickscope %U %R>", PyTuple_GET_ITEM(g_kind_names, kind), name);
    Py_DECREF(name);
    return out;
}

static PyMethodDef entry_methods[] = {
    {"__enter__", (PyCFunction)entry_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))entry_exit, METH_FASTCALL, NULL},
    {NULL}};

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.Entry",
    .tp_doc = "One use of a shared scope object: a with-statement closes exactly the record it opened.",
    .tp_basicsize = sizeof(EntryObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = entry_new,
    .tp_dealloc = (destructor)entry_dealloc,
    .tp_traverse = (traverseproc)entry_traverse,
    .tp_clear = (inquiry)entry_clear,
    .tp_repr = (reprfunc)entry_repr,
    .tp_call = (ternaryfunc)entry_call,
    .tp_members = entry_members,
    .tp_methods = entry_methods,
};

/* ---- factories: brick(name) / kernel(name) / layer(i) / step(i) fast path ----------- */

/* What a factory function closes over (its `self`): the cache and the Python factory. */
typedef struct {
    PyObject_HEAD
    PyObject *cache;  /* key -> shared scope object */
    PyObject *slow;   /* the Python factory: every other form, and cache misses */
    PyTypeObject *cls; /* brick: _scope.Brick, built here for brick(name, category, elements); or NULL */
    int exact_int;    /* keys are ints: only an exact int hits the cache (not True) */
    int stream_key;   /* brick: name=..., stream=s is cached under (name, s) */
    int kind1, host_only1, external1; /* cls's class attributes, as ScopeObject caches them */
} FactoryObject;

static PyObject *s_category, *s_elements;

/* A non-empty exact str. */
static int is_name(PyObject *value) { return PyUnicode_CheckExact(value) && PyUnicode_GET_LENGTH(value) > 0; }

/* brick(name, category, elements) with a category or elements, no stream and no attributes:
 * the Brick built here as Brick.__init__ would (valid arguments only). NULL without an
 * error set: not this form, or an argument the Python factory must judge. */
static PyObject *factory_build_brick(FactoryObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (self->cls == NULL || nargs < 1 || nargs > 3 || nargs + nkw < 2) return NULL;
    PyObject *category = nargs > 1 ? args[1] : NULL, *elements = nargs > 2 ? args[2] : NULL;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
        if (kw == s_category && category == NULL) { /* interned: the compiler's keyword names */
            category = args[nargs + i];
        } else if (kw == s_elements && elements == NULL) {
            elements = args[nargs + i];
        } else {
            return NULL;
        }
    }
    if (category == NULL) category = Py_None;
    if (elements == NULL) elements = g_zero;
    int overflow = 0;
    long long count = 0;
    if (!is_name(args[0]) || (category != Py_None && !is_name(category)) || !PyLong_CheckExact(elements) ||
        ((count = PyLong_AsLongLongAndOverflow(elements, &overflow)) < 0 && !overflow) || overflow < 0) {
        PyErr_Clear();
        return NULL;
    }
    /* no category and no elements: the shared form, the cache's */
    if (category == Py_None && count == 0 && !overflow) return NULL;
    ScopeObject *scope = scope_new(self->cls);
    if (scope == NULL) return NULL;
    Py_INCREF(args[0]);
    scope->name = args[0];
    Py_INCREF(category);
    scope->category = category;
    Py_INCREF(elements);
    scope->elements = elements;
    Py_INCREF(Py_None);
    scope->stream = Py_None;
    Py_INCREF(Py_None);
    scope->attributes = Py_None;
    scope->kind1 = self->kind1;
    scope->host_only1 = self->host_only1;
    scope->external1 = self->external1;
    return (PyObject *)scope;
}

static PyObject *factory_call(FactoryObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *built = factory_build_brick(self, args, nargs, kwnames);
    if (built != NULL || PyErr_Occurred()) return built;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    PyObject *key = NULL; /* brick(name, stream=s): (name, s) */
    if (nargs == 1 && nkw == 1 && self->stream_key &&
        PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, 0), s_stream) == 0) {
        if (args[1] == Py_None) {
            nkw = 0;
        } else if ((key = PyTuple_Pack(2, args[0], args[1])) == NULL) {
            return NULL;
        }
    } else if (PyErr_Occurred()) {
        return NULL;
    }
    if (nargs == 1 && (nkw == 0 || key != NULL) && (!self->exact_int || PyLong_CheckExact(args[0]))) {
        PyObject *scope = PyDict_GetItemWithError(self->cache, key != NULL ? key : args[0]);
        Py_XDECREF(key);
        if (scope == NULL && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;
            PyErr_Clear(); /* unhashable: the Python factory says what is wrong */
        }
        if (scope != NULL) {
            PyObject *recorder = global_get(&g_recorder_cache, g_state_dict, s_recorder);
            if (recorder == NULL && PyErr_Occurred()) return NULL;
            if (recorder == NULL || recorder == Py_None) {
                Py_INCREF(scope);
                return scope;
            }
            return new_entry(scope);
        }
    }
    return PyObject_Vectorcall(self->slow, args, nargs, kwnames);
}

static int factory_traverse(FactoryObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->cache);
    Py_VISIT(self->slow);
    Py_VISIT(self->cls);
    return 0;
}

static int factory_clear(FactoryObject *self) {
    Py_CLEAR(self->cache);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->cls);
    return 0;
}

static void factory_dealloc(FactoryObject *self) {
    PyObject_GC_UnTrack(self);
    factory_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject FactoryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.FactoryState",
    .tp_doc = "What a scope factory function closes over: its cache and the Python factory.",
    .tp_basicsize = sizeof(FactoryObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)factory_dealloc,
    .tp_traverse = (traverseproc)factory_traverse,
    .tp_clear = (inquiry)factory_clear,
};

/* The factories are builtin functions (not callable objects), so that torch.compile can be
 * given a Python stand-in for each (torch.compiler.substitute_in_graph takes functions). */
#define FACTORY_DEF(name, signature, doc) \
    {name, (PyCFunction)(void (*)(void))factory_call, METH_FASTCALL | METH_KEYWORDS, signature "\n--\n\n" doc}
static PyMethodDef factory_defs[] = {
    FACTORY_DEF("brick", "brick(name, category=None, elements=0, stream=None, **attributes)",
                "A brick scope: one logical operation (see brickscope.Brick)."),
    FACTORY_DEF("kernel", "kernel(name, grid=None, block=None, shared_mem_bytes=None, stream=None, **attributes)",
                "A kernel scope: one launch inside a brick (see brickscope.Kernel)."),
    FACTORY_DEF("layer", "layer(index, **attributes)", "A layer scope grouping bricks (see brickscope.Layer)."),
    FACTORY_DEF("step", "step(number, **attributes)", "A step scope; its end is a sync point (see brickscope.Step)."),
    {NULL}};

/* The class attribute `attribute` of cls as a flag, + 1 (ScopeObject's caches); 0 on error. */
static int class_flag1(PyTypeObject *cls, PyObject *attribute) {
    PyObject *value = PyObject_GetAttr((PyObject *)cls, attribute);
    int flag = value == NULL ? -1 : PyObject_IsTrue(value);
    Py_XDECREF(value);
    return flag + 1;
}

static PyObject *make_factory(PyObject *module, PyObject *args) {
    const char *name;
    PyObject *cache, *slow;
    PyTypeObject *cls = NULL;
    int exact_int;
    if (!PyArg_ParseTuple(args, "sO!Op|O!", &name, &PyDict_Type, &cache, &slow, &exact_int, &PyType_Type, &cls))
        return NULL;
    PyMethodDef *def = factory_defs;
    while (def->ml_name != NULL && strcmp(def->ml_name, name) != 0) def++;
    if (def->ml_name == NULL) {
        PyErr_Format(PyExc_ValueError, "no scope factory named %s", name);
        return NULL;
    }
    int kind1 = 0, host_only1 = 0, external1 = 0;
    if (cls != NULL) { /* built here: a subclass of ScopeBase adding no field, no __dict__, no __init__ of its own use */
        if (strcmp(name, "brick") != 0 || !PyType_IsSubtype(cls, &ScopeBaseType) ||
            cls->tp_basicsize != ScopeBaseType.tp_basicsize || cls->tp_dictoffset != 0) {
            PyErr_SetString(PyExc_TypeError, "factory: cls must be a brick class with the fields of ScopeBase only");
            return NULL;
        }
        PyObject *kind = PyObject_GetAttr((PyObject *)cls, s_kind);
        kind1 = kind == NULL ? 0 : (int)PyLong_AsLong(kind) + 1;
        Py_XDECREF(kind);
        host_only1 = class_flag1(cls, s_host_only);
        external1 = class_flag1(cls, s_external);
        if (PyErr_Occurred()) return NULL;
        if (kind1 != KIND_BRICK + 1) {
            PyErr_SetString(PyExc_TypeError, "factory: cls must be a brick class");
            return NULL;
        }
    }
    FactoryObject *state = PyObject_GC_New(FactoryObject, &FactoryType);
    if (state == NULL) return NULL;
    Py_INCREF(cache);
    state->cache = cache;
    Py_INCREF(slow);
    state->slow = slow;
    Py_XINCREF(cls);
    state->cls = cls;
    state->kind1 = kind1;
    state->host_only1 = host_only1;
    state->external1 = external1;
    state->exact_int = exact_int;
    state->stream_key = strcmp(name, "brick") == 0;
    PyObject_GC_Track(state);
    PyObject *module_name = PyUnicode_FromString("brickscope");
    if (module_name == NULL) {
        Py_DECREF(state);
        return NULL;
    }
    PyObject *function = PyCFunction_NewEx(def, (PyObject *)state, module_name);
    Py_DECREF(module_name);
    Py_DECREF(state);
    return function;
}

/* ---- enter_scope / exit_scope: tokens (the torch instrumentation's path) ---------------- */

/* _scope.enter_scope's common case in C; anything else is the Python function's. */
static PyObject *hot_enter_scope(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (g_inert == NULL || nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)))
        return PyObject_Vectorcall(g_enter_scope_py, args, nargs, kwnames);
    PyObject *scope = args[0];
    if (Py_TYPE(scope) == &EntryType && ((EntryObject *)scope)->scope != NULL) scope = ((EntryObject *)scope)->scope;
    PyObject *recorder;
    if (active_recorder(&recorder) < 0) return NULL;
    if (recorder == NULL) {
        Py_INCREF(g_inert);
        return g_inert;
    }
    if (!has_base(scope, &ScopeBaseType)) { /* misuse: the Python function says so */
        Py_DECREF(recorder);
        return PyObject_Vectorcall(g_enter_scope_py, args, nargs, kwnames);
    }
    PyObject *rec = open_record(recorder, scope, Py_None);
    Py_DECREF(recorder);
    if (rec == Py_None) {
        Py_DECREF(rec);
        Py_INCREF(g_inert);
        return g_inert;
    }
    return rec;
}

/* _scope.exit_scope's common case in C (an open token); anything else is the Python function's. */
static PyObject *hot_exit_scope(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (g_inert == NULL || nargs < 1 || nargs > 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) ||
        !Record_Check(args[0]) || args[0] == g_inert || ((RecordObject *)args[0])->ended != Py_False)
        return PyObject_Vectorcall(g_exit_scope_py, args, nargs, kwnames);
    if (close_record(args[0], nargs == 2 ? args[1] : Py_None) < 0) return NULL;
    Py_RETURN_NONE;
}

/* ---- registration ------------------------------------------------------------------- */

static void set_global(PyObject **slot, PyObject *value) {
    Py_XINCREF(value);
    Py_XSETREF(*slot, value);
}

static PyObject *init_stack(PyObject *module, PyObject *args) {
    PyObject *top, *kind_names;
    if (!PyArg_ParseTuple(args, "O!O!", &PyContextVar_Type, &top, &PyTuple_Type, &kind_names)) return NULL;
    if (PyTuple_GET_SIZE(kind_names) != 4) {
        PyErr_SetString(PyExc_ValueError, "four kind names");
        return NULL;
    }
    set_global(&g_top_var, top);
    set_global(&g_kind_names, kind_names);
    Py_RETURN_NONE;
}

static PyObject *init_recorder(PyObject *module, PyObject *args) {
    PyObject *otel_var, *otel_current, *clock_dict, *perf_counter_ns, *release_context, *repair_stack, *describe;
    int monotonic;
    if (!PyArg_ParseTuple(args, "OOO!OpOOO", &otel_var, &otel_current, &PyDict_Type, &clock_dict, &perf_counter_ns,
                          &monotonic, &release_context, &repair_stack, &describe))
        return NULL;
    if (otel_var != Py_None && !PyContextVar_CheckExact(otel_var)) {
        PyErr_SetString(PyExc_TypeError, "otel_var must be a ContextVar or None");
        return NULL;
    }
    set_global(&g_otel_var, otel_var == Py_None ? NULL : otel_var);
    set_global(&g_otel_current, otel_current);
    set_global(&g_clock_dict, clock_dict);
    global_cache_watch(clock_dict);
    set_global(&g_perf_counter_ns, perf_counter_ns);
    g_clock_is_monotonic = monotonic;
    set_global(&g_release_context, release_context);
    set_global(&g_repair_stack, repair_stack);
    set_global(&g_describe, describe);
    Py_RETURN_NONE;
}

static PyObject *init_scopes(PyObject *module, PyObject *args) {
    PyObject *state_dict, *enter_failed, *exit_failed, *exit_ooo, *exit_entry_ooo, *inert, *enter_py, *exit_py;
    if (!PyArg_ParseTuple(args, "O!OOOOO!OO", &PyDict_Type, &state_dict, &enter_failed, &exit_failed, &exit_ooo,
                          &exit_entry_ooo, &RecordType, &inert, &enter_py, &exit_py))
        return NULL;
    set_global(&g_inert, inert);
    set_global(&g_enter_scope_py, enter_py);
    set_global(&g_exit_scope_py, exit_py);
    set_global(&g_state_dict, state_dict);
    global_cache_watch(state_dict);
    set_global(&g_enter_failed, enter_failed);
    set_global(&g_exit_failed, exit_failed);
    set_global(&g_exit_out_of_order, exit_ooo);
    set_global(&g_exit_entry_ooo, exit_entry_ooo);
    Py_RETURN_NONE;
}

/* ---- SpanMaker: SpanBuilder.build's common case in C ---------------------------- */

/* SpanBuilder.build (sdk/trace/_spans.py) for an ordinary record: a step, layer, brick or
 * kernel scope with no notes from user code, no exception, not a record_gpu brick.
 * The ReadableSpan is made without running its Python __init__ (its instance dict is
 * filled with what __init__ would store: SpanBuilder checks once, on a probe span, that
 * the SDK's __init__ stores exactly that), the SpanContexts as _otel_context's fast form.
 * Every check that can send a record to the Python builder runs before anything is
 * changed (self time credited, GPU marks released, ids assigned), so a record is built
 * by one side only. GPU intervals are the Python builder's _gpu_interval (its C marker). */

enum {
    K_SCOPE_KIND, K_HOST_START, K_HOST_DURATION, K_THREAD_ID, K_THREAD_NAME, K_GPU_DURATION, K_GPU_DEVICE,
    K_GPU_STREAM, K_GPU_ERROR, K_CLOCK, K_BRICK_NAME, K_BRICK_CATEGORY, K_LAYER_INDEX, K_STEP_NUMBER, K_SELF,
    K_ELEMENTS, K_KERNEL_NAME, K_KERNEL_HASH, K_COUNT
};
/* the ReadableSpan's instance dict, in __init__'s order */
enum {
    F_NAME, F_CONTEXT, F_KIND, F_INFO, F_SCOPE, F_PARENT, F_START, F_END, F_ATTRIBUTES, F_EVENTS, F_LINKS,
    F_RESOURCE, F_STATUS, F_COUNT
};

typedef struct {
    PyObject_HEAD
    PyObject *span_type, *context_type, *keys, *fields, *clock_host, *clock_cuda, *epoch, *thread_names, *counts,
        *gpu_interval, *resolved, *resolve, *hash_of, *sampled, *trace_state, *span_kind, *status, *scope,
        *getrandbits, *id_lock, *assign_span_id, *id_generator, *provider, *recorder;
} SpanMakerObject;

#define SPANMAKER_FIELDS(X)                                                                                     \
    X(span_type) X(context_type) X(keys) X(fields) X(clock_host) X(clock_cuda) X(epoch) X(thread_names) X(counts) \
    X(gpu_interval) X(resolved) X(resolve) X(hash_of) X(sampled) X(trace_state) X(span_kind) X(status) X(scope)   \
    X(getrandbits) X(id_lock) X(assign_span_id) X(id_generator) X(provider) X(recorder)

static PyObject *g_empty_str, *g_empty_tuple;
static PyObject *s_timer, *s_pool, *s_free, *s_code_name, *s_dunder_name;
static PyObject *s_span_id, *s_resource, *s_gpu_timing_errors, *s_device, *s_handle, *s_hex16, *s_sixty_four;

#define KEY(m, k) PyTuple_GET_ITEM((m)->keys, k)

/* What SpanMaker.drain keeps from one span to the next (strong references, dropped by
 * build_cache_clear; build() uses a fresh one per call): the GPU queries' cache, the
 * timer's CudaMarker, the provider's resource (read once per drain: a kernel source
 * registered meanwhile reaches the spans of the next drain), the last stream's device and
 * handle, and assign_span_id's lock's bound acquire/release. */
typedef struct {
    IntervalCache iv;
    PyObject *marker; /* NULL: not looked up yet; Py_None: no usable C marker */
    PyObject *resource, *stream, *device, *handle, *id_acquire, *id_release;
} BuildCache;

static void build_cache_clear(BuildCache *cache) {
    interval_cache_clear(&cache->iv);
    Py_CLEAR(cache->marker);
    Py_CLEAR(cache->resource);
    Py_CLEAR(cache->stream);
    Py_CLEAR(cache->device);
    Py_CLEAR(cache->handle);
    Py_CLEAR(cache->id_acquire);
    Py_CLEAR(cache->id_release);
}

/* The timer's CudaMarker (borrowed from the cache), or NULL: none (no error set). */
static MarkerObject *cache_marker(SpanMakerObject *m, BuildCache *cache) {
    if (cache->marker == NULL) {
        PyObject *timer = PyObject_GetAttr(m->recorder, s_timer);
        PyObject *marker = timer == NULL || timer == Py_None ? NULL : PyObject_GetAttr(timer, s_marker);
        Py_XDECREF(timer);
        if (marker == NULL || Py_TYPE(marker) != &MarkerType) {
            Py_XDECREF(marker);
            if (PyErr_Occurred()) {
                if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
                PyErr_Clear();
            }
            marker = Py_NewRef(Py_None);
        }
        cache->marker = marker;
    }
    return cache->marker == Py_None ? NULL : (MarkerObject *)cache->marker;
}

/* Whether the record's fields the builder reads are all set. */
static int record_complete(RecordObject *r) {
    return r->owner && r->link && r->parent && r->otel_parent && r->trace_id && r->span_id && r->span_context &&
           r->thread_id && r->host_start && r->host_end && r->stream && r->start_mark && r->end_mark &&
           r->gpu_error && r->error && r->nested_ns && r->gpu_first && r->gpu_last && r->enclosing && r->notes;
}

/* (brick info, layer index, step number) of rec or the scopes around it, memoised on each
 * record (_spans._enclosing; memo 0: not on rec itself, whose children have all been
 * resolved when it is). New reference; NULL with an error, or NULL without one when
 * a record in the chain is not one the C side reads (the Python builder takes it). */
static PyObject *enclosing_of(SpanMakerObject *m, RecordObject *rec, int memo) {
    if (rec->enclosing != NULL && rec->enclosing != Py_None) {
        if (!PyTuple_CheckExact(rec->enclosing) || PyTuple_GET_SIZE(rec->enclosing) != 3) return NULL;
        Py_INCREF(rec->enclosing);
        return rec->enclosing;
    }
    PyObject *owner = rec->owner;
    if (owner == NULL || !PyObject_TypeCheck(owner, &ScopeBaseType) || rec->link == NULL) return NULL;
    PyObject *outer = NULL;
    if (rec->link != Py_None) {
        if (!Record_Check(rec->link)) return NULL;
        outer = enclosing_of(m, (RecordObject *)rec->link, 1);
        if (outer == NULL) return NULL;
    }
    long kind = owner_kind(owner);
    if (kind < 0) {
        Py_XDECREF(outer);
        return NULL;
    }
    PyObject *brick = outer ? PyTuple_GET_ITEM(outer, 0) : Py_None;
    PyObject *layer = outer ? PyTuple_GET_ITEM(outer, 1) : Py_None;
    PyObject *step = outer ? PyTuple_GET_ITEM(outer, 2) : Py_None;
    PyObject *info = NULL;
    ScopeObject *scope = (ScopeObject *)owner;
    if (kind == KIND_BRICK) { /* _catalog.resolve(name, category), its memo read directly */
        PyObject *key = PyTuple_Pack(2, scope->name ? scope->name : Py_None, scope->category ? scope->category : Py_None);
        if (key == NULL) goto fail;
        info = PyDict_GetItemWithError(m->resolved, key);
        if (info != NULL) {
            Py_INCREF(info);
        } else if (!PyErr_Occurred()) {
            info = PyObject_Call(m->resolve, key, NULL);
        }
        Py_DECREF(key);
        if (info == NULL) goto fail;
        brick = info;
    } else if (kind == 1) {
        if (scope->index == NULL) goto fail;
        layer = scope->index;
    } else if (kind == 0) {
        if (scope->index == NULL) goto fail;
        step = scope->index;
    }
    PyObject *found = PyTuple_Pack(3, brick, layer, step);
    Py_XDECREF(info);
    Py_XDECREF(outer);
    if (found == NULL) return NULL;
    if (memo) { /* read by the record's later children; the record being built has none left */
        Py_INCREF(found);
        Py_XSETREF(rec->enclosing, found);
    }
    return found;
fail:
    Py_XDECREF(info);
    Py_XDECREF(outer);
    return NULL;
}

/* rec's SpanContext, made once (_spans.SpanBuilder._span_context). New reference. */
static PyObject *span_context_of(SpanMakerObject *m, RecordObject *rec, BuildCache *cache) {
    if (rec->span_context != Py_None) {
        Py_INCREF(rec->span_context);
        return rec->span_context;
    }
    int has_id = is_true(rec->span_id);
    if (has_id < 0) return NULL;
    if (!has_id) {
        if (m->getrandbits == Py_None) { /* another id generator: _otel_context.assign_span_id */
            PyObject *id = PyObject_CallFunctionObjArgs(m->assign_span_id, (PyObject *)rec, m->id_generator, NULL);
            if (id == NULL) return NULL;
            Py_DECREF(id);
        } else { /* RandomIdGenerator.generate_span_id, under assign_span_id's lock */
            if (cache->id_acquire == NULL) {
                cache->id_acquire = PyObject_GetAttr(m->id_lock, s_acquire);
                if (cache->id_acquire == NULL) return NULL;
                cache->id_release = PyObject_GetAttr(m->id_lock, s_release);
                if (cache->id_release == NULL) {
                    Py_CLEAR(cache->id_acquire);
                    return NULL;
                }
            }
            PyObject *got = PyObject_CallNoArgs(cache->id_acquire);
            if (got == NULL) return NULL;
            Py_DECREF(got);
            PyObject *id = NULL;
            int set_meanwhile = is_true(rec->span_id);
            if (set_meanwhile == 0) {
                for (;;) {
                    id = PyObject_CallOneArg(m->getrandbits, s_sixty_four);
                    if (id == NULL) break;
                    int nonzero = PyObject_IsTrue(id);
                    if (nonzero != 0) {
                        if (nonzero < 0) Py_CLEAR(id);
                        break;
                    }
                    Py_DECREF(id);
                }
                if (id != NULL) Py_XSETREF(rec->span_id, id);
            }
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            PyObject *released = PyObject_CallNoArgs(cache->id_release);
            if (released == NULL) {
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(traceback);
                return NULL;
            }
            Py_DECREF(released);
            PyErr_Restore(type, value, traceback);
            if (PyErr_Occurred()) return NULL;
        }
    }
    /* tuple.__new__(SpanContext, items) without its argument and temporary tuples: what it
     * ends with (the subtype's tp_alloc, the items stored in order) */
    PyTypeObject *context_type = (PyTypeObject *)m->context_type;
    PyObject *context = context_type->tp_alloc(context_type, 6);
    if (context == NULL) return NULL;
    PyObject *items[6] = {rec->trace_id, rec->span_id, Py_False, m->sampled, m->trace_state, Py_True};
    for (int i = 0; i < 6; i++) PyTuple_SET_ITEM(context, i, Py_NewRef(items[i]));
    /* Immutable, and its items (ints, bools, the shared flags and trace state) cannot refer
     * back to it: it can be in no cycle, so the cyclic GC need not track it (what CPython
     * does itself for tuples of untracked items). One GC-tracked object less per span. */
    if (PyObject_GC_IsTracked(context)) PyObject_GC_UnTrack(context);
    Py_INCREF(context);
    Py_XSETREF(rec->span_context, context);
    return context;
}

static int set_key(PyObject *dict, PyObject *key, PyObject *value) {
    if (value == NULL) return -1;
    int rc = PyDict_SetItem(dict, key, value);
    Py_DECREF(value);
    return rc;
}

/* _widen_extent: grow rec's GPU extent to cover [start, end]. */
static int widen_extent(RecordObject *rec, PyObject *start, PyObject *end) {
    int first_set = is_true(rec->gpu_first);
    if (first_set < 0) return -1;
    int earlier = first_set ? PyObject_RichCompareBool(start, rec->gpu_first, Py_LT) : 1;
    if (earlier < 0) return -1;
    if (earlier) {
        Py_INCREF(start);
        Py_XSETREF(rec->gpu_first, start);
    }
    int later = PyObject_RichCompareBool(end, rec->gpu_last, Py_GT);
    if (later < 0) return -1;
    if (later) {
        Py_INCREF(end);
        Py_XSETREF(rec->gpu_last, end);
    }
    return 0;
}

/* _unsampled.self_time: rec's duration minus its nested bricks'; credits the enclosing brick. */
static PyObject *self_time_of(SpanMakerObject *m, RecordObject *rec, PyObject *duration) {
    PyObject *link = rec->link;
    while (link != NULL && link != Py_None) {
        if (!Record_Check(link)) {
            PyErr_SetString(PyExc_TypeError, "brickscope: a record links to something else");
            return NULL;
        }
        long kind = owner_kind(((RecordObject *)link)->owner);
        if (kind < 0) return NULL;
        if (kind == KIND_BRICK) break;
        link = ((RecordObject *)link)->link;
    }
    if (link != NULL && link != Py_None) {
        RecordObject *enclosing = (RecordObject *)link;
        PyObject *nested = PyNumber_Add(enclosing->nested_ns, duration);
        if (nested == NULL) return NULL;
        Py_XSETREF(enclosing->nested_ns, nested);
    }
    PyObject *self_ns = PyNumber_Subtract(duration, rec->nested_ns);
    if (self_ns == NULL) return NULL;
    int negative = PyObject_RichCompareBool(self_ns, g_zero, Py_LT);
    if (negative != 0) { /* nested bricks overlapped on several streams */
        Py_DECREF(self_ns);
        if (negative < 0 || counts_add(m->counts, s_self_time_clamped) < 0) return NULL;
        Py_INCREF(g_zero);
        self_ns = g_zero;
    }
    return self_ns;
}

/* `rec.gpu_error = getattr(exc, "code_name", type(exc).__name__)` for the Exception set (taken);
 * 0, or -1 with a non-Exception error left set (or a new failure). */
static int gpu_error_from_exception(RecordObject *rec) {
    PyObject *exc = take_exception();
    if (exc == NULL) return -1;
    PyObject *name = PyObject_GetAttr(exc, s_code_name);
    if (name == NULL) {
        PyErr_Clear();
        name = PyObject_GetAttr((PyObject *)Py_TYPE(exc), s_dunder_name);
    }
    Py_DECREF(exc);
    if (name == NULL) return -1;
    Py_XSETREF(rec->gpu_error, name);
    return 0;
}

/* CudaTimer.release(mark) in C: the mark's event back to its context's pool (the cached
 * context's free list when it is a plain list). */
static int release_mark(MarkerObject *marker, PyObject *mark, IntervalCache *cache) {
    PyObject *entry = PyDict_GetItemWithError(marker->marks, mark);
    if (entry == NULL) return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(entry);
    int rc = PyDict_DelItem(marker->marks, mark);
    if (rc == 0 && PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == 2) {
        PyObject *owner = PyTuple_GET_ITEM(entry, 1);
        if (owner == cache->context && cache->free_list != NULL) {
            rc = PyList_Append(cache->free_list, PyTuple_GET_ITEM(entry, 0));
            Py_DECREF(entry);
            return rc;
        }
        PyObject *pool = PyObject_GetAttr(owner, s_pool);
        PyObject *free_list = pool ? PyObject_GetAttr(pool, s_free) : NULL;
        Py_XDECREF(pool);
        if (free_list != NULL && PyList_CheckExact(free_list)) { /* the pool's list: append without the call */
            rc = PyList_Append(free_list, PyTuple_GET_ITEM(entry, 0));
            if (owner == cache->context) Py_XSETREF(cache->free_list, Py_NewRef(free_list));
            Py_DECREF(free_list);
            Py_DECREF(entry);
            return rc;
        }
        PyObject *done = free_list ? PyObject_CallMethodOneArg(free_list, s_append, PyTuple_GET_ITEM(entry, 0)) : NULL;
        rc = done == NULL ? -1 : 0;
        Py_XDECREF(free_list);
        Py_XDECREF(done);
    }
    Py_DECREF(entry);
    return rc;
}

/* SpanBuilder._gpu_interval's common case: the C marker's interval into *start, *end, both
 * marks released: 1. 2: the driver failed (rec.gpu_error set and the marks released, as the
 * Python method does): host timing. 0: the Python method takes the record (the marker could
 * not answer: a stale anchor, another context...). -1: failure. */
static int gpu_interval_fast(SpanMakerObject *m, RecordObject *rec, BuildCache *cache, long long *start,
                             long long *end) {
    long long end_mark;
    if (rec->gpu_error != Py_None || !small_int(rec->end_mark, &end_mark) || end_mark < 0) return 0;
    MarkerObject *marker = cache_marker(m, cache);
    if (marker == NULL) return PyErr_Occurred() ? -1 : 0;
    int found = marker_interval_ns(marker, rec->start_mark, rec->end_mark, &cache->iv, start, end);
    if (found == 0) return 0;
    if (found < 0) { /* a driver error (CudaError): the record falls back to host timing */
        if (gpu_error_from_exception(rec) < 0) return -1;
        found = 2;
    }
    if (release_mark(marker, rec->start_mark, &cache->iv) < 0 || release_mark(marker, rec->end_mark, &cache->iv) < 0)
        return -1;
    return found;
}

/* The attributes dict, sized for a GPU brick's 14 keys: grown from empty it is resized twice
 * (at the 6th and the 11th key) and ends with the same 32-slot table. */
static PyObject *new_attributes_dict(void) {
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_NewPresized(14);
#else
    return PyDict_New();
#endif
}

/* The span of rec into built[0..2] (ReadableSpan, attributes, row; new references): 1.
 * 0: the Python builder takes rec (nothing changed). -1: failure. */
static int build_span(SpanMakerObject *m, PyObject *arg, BuildCache *cache, PyObject **built) {
    if (!Record_Check(arg)) return 0;
    RecordObject *rec = (RecordObject *)arg;
    if (!record_complete(rec) || rec->notes != Py_None || rec->error != Py_None) return 0;
    PyObject *owner = rec->owner;
    if (!PyObject_TypeCheck(owner, &ScopeBaseType)) return 0;
    ScopeObject *scope = (ScopeObject *)owner;
    long kind = owner_kind(owner);
    if (kind < 0) return -1;
    int external = owner_flag(owner, s_external, &scope->external1);
    if (external != 0) return external < 0 ? -1 : 0; /* bs.record_gpu: the Python builder */
    PyObject *parent = rec->parent;
    if (scope->name == NULL || !PyUnicode_CheckExact(scope->name) || scope->attributes == NULL ||
        (scope->attributes != Py_None && !PyDict_CheckExact(scope->attributes)) || scope->elements == NULL ||
        (parent != Py_None && (!Record_Check(parent) || !record_complete((RecordObject *)parent))) ||
        !PyLong_CheckExact(rec->host_start) || !PyLong_CheckExact(rec->host_end) || !PyLong_CheckExact(rec->start_mark))
        return 0;
    long long start_mark;
    if (!small_int(rec->start_mark, &start_mark)) return 0;
    PyObject *enclosing = enclosing_of(m, rec, 0);
    if (enclosing == NULL) return PyErr_Occurred() ? -1 : 0;
    /* from here on the record is ours: no return to the Python builder */
    PyObject *attributes = NULL, *host_start = NULL, *host_duration = NULL, *start = NULL, *end = NULL;
    PyObject *clock = m->clock_host, *parent_context = NULL, *context = NULL, *span = NULL;
    PyObject *resource = NULL;
    int out = -1;
    if ((attributes = new_attributes_dict()) == NULL) goto done;
    if ((host_start = PyNumber_Add(rec->host_start, m->epoch)) == NULL) goto done;
    if ((host_duration = PyNumber_Subtract(rec->host_end, rec->host_start)) == NULL) goto done;
    PyObject *thread_name = PyDict_GetItemWithError(m->thread_names, rec->thread_id);
    if (thread_name == NULL && PyErr_Occurred()) goto done;
    if (PyDict_SetItem(attributes, KEY(m, K_SCOPE_KIND), PyTuple_GET_ITEM(g_kind_names, kind)) < 0 ||
        PyDict_SetItem(attributes, KEY(m, K_HOST_START), host_start) < 0 ||
        PyDict_SetItem(attributes, KEY(m, K_HOST_DURATION), host_duration) < 0 ||
        PyDict_SetItem(attributes, KEY(m, K_THREAD_ID), rec->thread_id) < 0 ||
        PyDict_SetItem(attributes, KEY(m, K_THREAD_NAME), thread_name ? thread_name : g_empty_str) < 0)
        goto done;
    if (start_mark >= 0) {
        long long gpu_start = 0, gpu_end = 0;
        int got = gpu_interval_fast(m, rec, cache, &gpu_start, &gpu_end);
        if (got < 0) goto done;
        if (got == 1) {
            if ((start = PyLong_FromLongLong(gpu_start)) == NULL || (end = PyLong_FromLongLong(gpu_end)) == NULL) goto done;
        } else if (got == 0) {
            PyObject *interval = PyObject_CallOneArg(m->gpu_interval, arg);
            if (interval == NULL) goto done;
            if (interval != Py_None) {
                if (!PyTuple_Check(interval) || PyTuple_GET_SIZE(interval) != 2) {
                    Py_DECREF(interval);
                    PyErr_SetString(PyExc_TypeError, "brickscope: a GPU interval is a (start, end) pair");
                    goto done;
                }
                start = Py_NewRef(PyTuple_GET_ITEM(interval, 0));
                end = Py_NewRef(PyTuple_GET_ITEM(interval, 1));
            }
            Py_DECREF(interval);
        }
        if (start != NULL) {
            clock = m->clock_cuda;
            if (rec->stream != cache->stream) { /* the stream's device and handle, kept while it repeats */
                Py_CLEAR(cache->stream);
                Py_CLEAR(cache->handle);
                Py_XSETREF(cache->device, PyObject_GetAttr(rec->stream, s_device));
                if (cache->device == NULL) goto done;
                if ((cache->handle = PyObject_GetAttr(rec->stream, s_handle)) == NULL) goto done;
                cache->stream = Py_NewRef(rec->stream);
            }
            if (set_key(attributes, KEY(m, K_GPU_DURATION), PyNumber_Subtract(end, start)) < 0 ||
                PyDict_SetItem(attributes, KEY(m, K_GPU_DEVICE), cache->device) < 0 ||
                PyDict_SetItem(attributes, KEY(m, K_GPU_STREAM), cache->handle) < 0)
                goto done;
        }
    }
    if (start == NULL) {
        start = Py_NewRef(host_start);
        if ((end = PyNumber_Add(host_start, host_duration)) == NULL) goto done;
    }
    if (start_mark < 0) {
        int gpu_timed = is_true(rec->gpu_first);
        if (gpu_timed < 0) goto done;
        if (gpu_timed) { /* a step or layer: the extent of the GPU work timed inside it */
            Py_SETREF(start, Py_NewRef(rec->gpu_first));
            Py_SETREF(end, Py_NewRef(rec->gpu_last));
            clock = m->clock_cuda;
            if (set_key(attributes, KEY(m, K_GPU_DURATION), PyNumber_Subtract(end, start)) < 0) goto done;
        }
    }
    if (clock == m->clock_cuda && rec->link != Py_None) {
        if (!Record_Check(rec->link)) {
            PyErr_SetString(PyExc_TypeError, "brickscope: a record links to something else");
            goto done;
        }
        if (widen_extent((RecordObject *)rec->link, start, end) < 0) goto done;
    }
    if (rec->gpu_error != Py_None) {
        if (PyDict_SetItem(attributes, KEY(m, K_GPU_ERROR), rec->gpu_error) < 0 ||
            counts_add(m->counts, s_gpu_timing_errors) < 0)
            goto done;
    }
    if (PyDict_SetItem(attributes, KEY(m, K_CLOCK), clock) < 0) goto done;
    PyObject *brick = PyTuple_GET_ITEM(enclosing, 0), *layer = PyTuple_GET_ITEM(enclosing, 1),
             *step = PyTuple_GET_ITEM(enclosing, 2);
    if (brick != Py_None) {
        if (!PyTuple_Check(brick) || PyTuple_GET_SIZE(brick) < 2) {
            PyErr_SetString(PyExc_TypeError, "brickscope: a brick's info is (name, category, builtin)");
            goto done;
        }
        if (PyDict_SetItem(attributes, KEY(m, K_BRICK_NAME), PyTuple_GET_ITEM(brick, 0)) < 0 ||
            PyDict_SetItem(attributes, KEY(m, K_BRICK_CATEGORY), PyTuple_GET_ITEM(brick, 1)) < 0)
            goto done;
    }
    if (layer != Py_None && PyDict_SetItem(attributes, KEY(m, K_LAYER_INDEX), layer) < 0) goto done;
    if (step != Py_None && PyDict_SetItem(attributes, KEY(m, K_STEP_NUMBER), step) < 0) goto done;
    if (kind == KIND_BRICK) {
        PyObject *duration = PyNumber_Subtract(end, start);
        if (duration == NULL) goto done;
        PyObject *self_ns = self_time_of(m, rec, duration);
        Py_DECREF(duration);
        if (set_key(attributes, KEY(m, K_SELF), self_ns) < 0) goto done;
        int has_elements = is_true(scope->elements);
        if (has_elements < 0) goto done;
        if (has_elements && PyDict_SetItem(attributes, KEY(m, K_ELEMENTS), scope->elements) < 0) goto done;
    } else if (kind == 3) {
        if (PyDict_SetItem(attributes, KEY(m, K_KERNEL_NAME), scope->name) < 0) goto done;
        PyObject *source = PyObject_CallOneArg(m->hash_of, scope->name);
        if (source == NULL) goto done;
        if (source != Py_None) {
            PyObject *text = PyObject_Format(source, s_hex16);
            Py_DECREF(source);
            if (set_key(attributes, KEY(m, K_KERNEL_HASH), text) < 0) goto done;
        } else {
            Py_DECREF(source);
        }
    }
    if (scope->attributes != Py_None && PyDict_Update(attributes, scope->attributes) < 0) goto done;
    if (parent != Py_None) {
        if ((parent_context = span_context_of(m, (RecordObject *)parent, cache)) == NULL) goto done;
    } else {
        parent_context = Py_NewRef(rec->otel_parent);
    }
    if ((context = span_context_of(m, rec, cache)) == NULL) goto done;
    if (cache->resource == NULL && (cache->resource = PyObject_GetAttr(m->provider, s_resource)) == NULL) goto done;
    resource = Py_NewRef(cache->resource);
    PyObject *empty = g_empty_tuple;
    if ((span = PyBaseObject_Type.tp_new((PyTypeObject *)m->span_type, empty, NULL)) == NULL) goto done;
    /* stored as __init__ stores them, in its order: CPython keeps them in the instance's
     * inline values (the class's shared keys), with no dict object */
    PyObject *values[F_COUNT] = {scope->name, context, m->span_kind, Py_None, m->scope, parent_context, start, end,
                                 attributes, empty, empty, resource, m->status};
    for (int i = 0; i < F_COUNT; i++)
        if (PyObject_GenericSetAttr(span, PyTuple_GET_ITEM(m->fields, i), values[i]) < 0) goto done;
    PyObject *parent_id = g_zero; /* borrowed, or a new reference in held_parent_id */
    PyObject *held_parent_id = NULL;
    if (parent_context != Py_None) {
        if (Py_TYPE(parent_context) == (PyTypeObject *)m->context_type && PyTuple_GET_SIZE(parent_context) > 1) {
            parent_id = PyTuple_GET_ITEM(parent_context, 1);
        } else {
            if ((held_parent_id = PyObject_GetAttr(parent_context, s_span_id)) == NULL) goto done;
            parent_id = held_parent_id;
        }
    }
    /* the row the live report's table takes (a brickscope.offline.SpanRecord's fields) */
    PyObject *row = PyTuple_Pack(7, scope->name, start, end, rec->span_id, parent_id, resource, attributes);
    Py_XDECREF(held_parent_id);
    if (row == NULL) goto done;
    PyObject_GC_UnTrack(row); /* as the SpanContext: an immutable tuple nothing refers back to */
    built[0] = Py_NewRef(span);
    built[1] = Py_NewRef(attributes);
    built[2] = row;
    out = 1;
done:
    Py_DECREF(enclosing);
    Py_XDECREF(attributes);
    Py_XDECREF(host_start);
    Py_XDECREF(host_duration);
    Py_XDECREF(start);
    Py_XDECREF(end);
    Py_XDECREF(parent_context);
    Py_XDECREF(context);
    Py_XDECREF(resource);
    Py_XDECREF(span);
    return out;
}

/* The span: (ReadableSpan, attributes, row), None (the Python builder takes rec), or NULL. */
static PyObject *span_maker_build(SpanMakerObject *m, PyObject *arg) {
    BuildCache cache = {0};
    PyObject *built[3];
    int got = build_span(m, arg, &cache, built);
    build_cache_clear(&cache);
    if (got <= 0) {
        if (got < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *out = PyTuple_Pack(3, built[0], built[1], built[2]);
    for (int i = 0; i < 3; i++) Py_DECREF(built[i]);
    return out;
}

static PyObject *span_maker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    SpanMakerObject *self = (SpanMakerObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    PyObject **slots[] = {
#define X(f) &self->f,
        SPANMAKER_FIELDS(X)
#undef X
    };
    Py_ssize_t n = (Py_ssize_t)(sizeof(slots) / sizeof(slots[0]));
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "SpanMaker takes positional arguments only");
        Py_DECREF(self);
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) != n) {
        PyErr_Format(PyExc_TypeError, "SpanMaker takes %zd arguments", n);
        Py_DECREF(self);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) *slots[i] = Py_NewRef(PyTuple_GET_ITEM(args, i));
    if (!PyType_Check(self->span_type) || !PyType_Check(self->context_type) ||
        !PyType_IsSubtype((PyTypeObject *)self->context_type, &PyTuple_Type) || !PyTuple_CheckExact(self->keys) ||
        PyTuple_GET_SIZE(self->keys) != K_COUNT || !PyTuple_CheckExact(self->fields) ||
        PyTuple_GET_SIZE(self->fields) != F_COUNT || !PyDict_CheckExact(self->thread_names) ||
        !PyDict_CheckExact(self->counts) || !PyDict_CheckExact(self->resolved) || g_kind_names == NULL) {
        PyErr_SetString(PyExc_TypeError, "SpanMaker: unexpected arguments (see sdk/trace/_spans.py)");
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int span_maker_traverse(SpanMakerObject *self, visitproc visit, void *arg) {
#define X(f) Py_VISIT(self->f);
    SPANMAKER_FIELDS(X)
#undef X
    return 0;
}

static int span_maker_clear(SpanMakerObject *self) {
#define X(f) Py_CLEAR(self->f);
    SPANMAKER_FIELDS(X)
#undef X
    return 0;
}

static void span_maker_dealloc(SpanMakerObject *self) {
    PyObject_GC_UnTrack(self);
    span_maker_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Resolver._resolve's loop for the records SpanMaker builds: pops them from the head of
 * pending while they are sampled, their GPU end event (if any) has completed (the C marker
 * says so without waiting) and build() takes them, appending each span, its attributes and
 * its row to the three lists, until the lists hold `limit` spans. Stops at the first record
 * it does not take, leaving it at the head for the Python loop (which asks again). A record
 * whose build fails is popped and the error raised: the caller counts it as a build failure. */
static PyObject *span_maker_drain(SpanMakerObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyList_CheckExact(args[1]) || !PyList_CheckExact(args[2]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "drain(pending, spans: list, attributes: list, rows: list, limit)");
        return NULL;
    }
    PyObject *pending = args[0], *spans = args[1], *attributes = args[2], *rows = args[3];
    Py_ssize_t limit = PyLong_AsSsize_t(args[4]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    PyObject *popleft = PyObject_GetAttrString(pending, "popleft");
    if (popleft == NULL) return NULL;
    BuildCache cache = {0};
    Py_ssize_t taken = 0;
    int failed = 0;
    while (PyList_GET_SIZE(spans) < limit) {
        Py_ssize_t size = PyObject_Length(pending);
        if (size <= 0) {
            failed = size < 0;
            break;
        }
        PyObject *head = PySequence_GetItem(pending, 0);
        if (head == NULL) {
            failed = 1;
            break;
        }
        RecordObject *rec = (RecordObject *)head;
        long long end_mark;
        if (!Record_Check(head) || rec->sampled != Py_True || !record_complete(rec) || !small_int(rec->end_mark, &end_mark)) {
            Py_DECREF(head);
            break;
        }
        if (end_mark >= 0) { /* done on the GPU? only the C marker's answer, without waiting */
            MarkerObject *marker = cache_marker(m, &cache);
            if (marker == NULL) {
                PyErr_Clear();
                Py_DECREF(head);
                break;
            }
            int complete = marker_complete_cached(marker, rec->end_mark, &cache.iv);
            if (complete < 0) { /* a driver error: host timing, as Resolver._gpu_ready does */
                if (gpu_error_from_exception(rec) < 0) {
                    Py_DECREF(head);
                    failed = 1;
                    break;
                }
            } else if (complete != 1) { /* not yet, or the Python loop decides (and waits) */
                Py_DECREF(head);
                break;
            }
        }
        PyObject *built[3];
        int got = build_span(m, head, &cache, built);
        if (got == 0) {
            Py_DECREF(head);
            break;
        }
        PyObject *popped = PyObject_CallNoArgs(popleft);
        if (popped == NULL || popped != head) { /* pending changed under us: cannot happen under the GIL */
            Py_XDECREF(popped);
            if (got > 0)
                for (int i = 0; i < 3; i++) Py_DECREF(built[i]);
            Py_DECREF(head);
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "brickscope: pending changed while resolving");
            failed = 1;
            break;
        }
        Py_DECREF(popped);
        Py_DECREF(head);
        if (got < 0) { /* the record is taken out: the caller counts the failure */
            failed = 1;
            break;
        }
        int rc = PyList_Append(spans, built[0]) < 0 || PyList_Append(attributes, built[1]) < 0 ||
                 PyList_Append(rows, built[2]) < 0;
        for (int i = 0; i < 3; i++) Py_DECREF(built[i]);
        if (rc) {
            failed = 1;
            break;
        }
        taken++;
    }
    Py_DECREF(popleft);
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    build_cache_clear(&cache); /* may pop a context a query pushed */
    PyErr_Restore(type, value, traceback);
    if (failed) return NULL;
    return PyLong_FromSsize_t(taken);
}

static PyMethodDef span_maker_methods[] = {
    {"build", (PyCFunction)span_maker_build, METH_O,
     "build(rec): (ReadableSpan, attributes, row) for an ordinary resolved record (row: the SpanRecord "
     "fields the live report's table takes), or None: the Python builder takes it."},
    {"drain", (PyCFunction)(void (*)(void))span_maker_drain, METH_FASTCALL,
     "drain(pending, spans, attributes, rows, limit) -> records taken: Resolver._resolve's loop for the "
     "records build() takes, up to limit spans in the lists; stops at the first other record."},
    {NULL}};

static PyTypeObject SpanMakerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.SpanMaker",
    .tp_doc = "SpanMaker(...).build(rec): SpanBuilder.build's common case in C: (span, attributes, row), or None for the "
              "Python builder (see sdk/trace/_spans.py).",
    .tp_basicsize = sizeof(SpanMakerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = span_maker_new,
    .tp_dealloc = (destructor)span_maker_dealloc,
    .tp_traverse = (traverseproc)span_maker_traverse,
    .tp_clear = (inquiry)span_maker_clear,
    .tp_methods = span_maker_methods,
};

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

/* fold_sums(spans, attributes, keys, sums, values) -> bool. The fold of fold_batch's
 * Python loop (sdk/trace/_aggregation.py) for a batch whose every attributes are a dict and
 * whose bricks carry a str name and category and int self time and elements: sums
 * (name, category) -> (count, self ns, elements) in the dict sums, and, when values is a
 * list, (self ns, name, category, span) per brick for the histogram. False: nothing
 * changed, the Python loop folds the batch. */
static PyObject *fold_sums(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
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
    for (Py_ssize_t i = 0; i < n; i++) { /* first: all of it is what the C side folds */
        PyObject *attrs = PyList_GET_ITEM(attributes, i);
        if (!PyDict_CheckExact(attrs)) Py_RETURN_FALSE;
        int brick = brick_kind(attrs, keys);
        if (brick == -2) return NULL;
        if (brick < 0) Py_RETURN_FALSE;
        if (!brick) continue;
        PyObject *name = attr_get(attrs, keys[S_NAME], NULL), *category = attr_get(attrs, keys[S_CATEGORY], keys[S_OTHER]);
        PyObject *self_ns = attr_get(attrs, keys[S_SELF], NULL), *elements = attr_get(attrs, keys[S_ELEMENTS], g_zero);
        if (PyErr_Occurred()) return NULL;
        if (name == NULL || !PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(category) || self_ns == NULL ||
            !PyLong_CheckExact(self_ns) || !PyLong_CheckExact(elements))
            Py_RETURN_FALSE;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *attrs = PyList_GET_ITEM(attributes, i);
        if (brick_kind(attrs, keys) != 1) continue;
        PyObject *name = attr_get(attrs, keys[S_NAME], NULL), *category = attr_get(attrs, keys[S_CATEGORY], keys[S_OTHER]);
        PyObject *self_ns = attr_get(attrs, keys[S_SELF], NULL), *elements = attr_get(attrs, keys[S_ELEMENTS], g_zero);
        if (name == NULL || self_ns == NULL) return NULL; /* checked above: only an error */
        PyObject *key = PyTuple_Pack(2, name, category);
        if (key == NULL) return NULL;
        PyObject *old = PyDict_GetItemWithError(sums, key), *sum = NULL;
        if (old == NULL && PyErr_Occurred()) {
            Py_DECREF(key);
            return NULL;
        }
        if (old == NULL) {
            sum = Py_BuildValue("(iOO)", 1, self_ns, elements);
        } else if (PyTuple_CheckExact(old) && PyTuple_GET_SIZE(old) == 3) {
            PyObject *one = PyLong_FromLong(1);
            PyObject *count = one ? PyNumber_Add(PyTuple_GET_ITEM(old, 0), one) : NULL;
            PyObject *total = count ? PyNumber_Add(PyTuple_GET_ITEM(old, 1), self_ns) : NULL;
            PyObject *elems = total ? PyNumber_Add(PyTuple_GET_ITEM(old, 2), elements) : NULL;
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
        if (rc < 0) return NULL;
        if (values != Py_None) {
            PyObject *value = PyTuple_Pack(4, self_ns, name, category, PyList_GET_ITEM(spans, i));
            rc = value == NULL ? -1 : PyList_Append(values, value);
            Py_XDECREF(value);
            if (rc < 0) return NULL;
        }
    }
    Py_RETURN_TRUE;
}

static PyMethodDef module_methods[] = {
    {"factory", make_factory, METH_VARARGS,
     "factory(name, cache, slow, exact_int): the scope factory `name` (brick, kernel, layer, step) whose "
     "one-argument form is a lookup in cache (exact ints only if exact_int); every other call runs slow."},
    {"init_stack", init_stack, METH_VARARGS, "init_stack(TOP, KIND_NAMES): the scope stack (brickscope._record)."},
    {"init_recorder", init_recorder, METH_VARARGS,
     "init_recorder(otel_var, otel_current, clock_globals, perf_counter_ns, monotonic, release_context, "
     "repair_stack, describe): what Recorder.open/close call (brickscope.sdk.trace._recorder)."},
    {"init_scopes", init_scopes, METH_VARARGS,
     "init_scopes(state_dict, enter_failed, exit_failed, exit_out_of_order, exit_entry_out_of_order, INERT, "
     "enter_scope, exit_scope) (brickscope._scope)."},
    {"fold_sums", (PyCFunction)(void (*)(void))fold_sums, METH_FASTCALL,
     "fold_sums(spans, attributes, keys, sums, values) -> bool: CategoryAggregator.fold_batch's sums per "
     "(brick, category) in C; False: nothing changed, the Python loop folds the batch."},
    {"enter_scope", (PyCFunction)(void (*)(void))hot_enter_scope, METH_FASTCALL | METH_KEYWORDS,
     "enter_scope(scope)\n--\n\nOpen scope without a with block; returns the token for exit_scope "
     "(see brickscope.enter_scope)."},
    {"exit_scope", (PyCFunction)(void (*)(void))hot_exit_scope, METH_FASTCALL | METH_KEYWORDS,
     "exit_scope(token, error=None)\n--\n\nClose the scope token was returned for (see brickscope.exit_scope)."},
    {NULL}};

static struct PyModuleDef hotpath_module = {
    PyModuleDef_HEAD_INIT, "_hotpath", "The C accelerator of brickscope's scope hot path (optional; see brickscope.native).",
    -1, module_methods,
};

PyMODINIT_FUNC PyInit__hotpath(void) {
#define INTERN(var, text)                                      \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL;
    INTERN(s_recorder, "recorder")
    INTERN(s_compiling, "compiling")
    INTERN(s_perf_counter_ns, "perf_counter_ns")
    INTERN(s_kind, "_kind")
    INTERN(s_open_root, "_open_root")
    INTERN(s_open_gpu, "_open_gpu")
    INTERN(s_mark_end, "_mark_end")
    INTERN(s_name_thread, "_name_thread")
    INTERN(s_act, "_act")
    INTERN(s_overflow, "_overflow")
    INTERN(s_poll, "_poll")
    INTERN(s_scope_repairs, "scope_repairs")
    INTERN(s_scopes_unsampled, "scopes_unsampled")
    INTERN(s_append, "append")
    INTERN(s_open, "open")
    INTERN(s_close, "close")
    INTERN(s_name, "_name")
    INTERN(s_mark, "mark")
    INTERN(s_marker_entry, "_marker_entry")
    INTERN(s_record_failed, "_record_failed")
    INTERN(s_marker, "_marker")
    INTERN(s_host_only, "_host_only")
    INTERN(s_external, "_external")
    INTERN(s_category, "category")
    INTERN(s_elements, "elements")
    INTERN(s_self_time_clamped, "self_time_clamped")
    INTERN(s_mark_failed, "mark_failed")
    INTERN(s_stream, "stream")
    INTERN(s_anchor, "anchor")
    INTERN(s_cuda_error, "_cuda_error")
    INTERN(s_ctx, "ctx")
    INTERN(s_lock, "lock")
    INTERN(s_acquire, "acquire")
    INTERN(s_release, "release")
    INTERN(s_host_ns_attr, "_host_ns")
    INTERN(s_anchor_max_age, "ANCHOR_MAX_AGE_NS")
    INTERN(s_host_ns_field, "host_ns")
    INTERN(s_resource, "resource")
    INTERN(s_span_id, "span_id")
    INTERN(s_timer, "timer")
    INTERN(s_code_name, "code_name")
    INTERN(s_dunder_name, "__name__")
    INTERN(s_pool, "pool")
    INTERN(s_free, "free")
    INTERN(s_gpu_timing_errors, "gpu_timing_errors")
    INTERN(s_device, "device")
    INTERN(s_handle, "handle")
    INTERN(s_hex16, "016x")
#undef INTERN
    if ((g_zero = PyLong_FromLong(0)) == NULL || (g_minus_one = PyLong_FromLong(-1)) == NULL) return NULL;
    if ((s_sixty_four = PyLong_FromLong(64)) == NULL || (g_empty_str = PyUnicode_FromString("")) == NULL ||
        (g_empty_tuple = PyTuple_New(0)) == NULL)
        return NULL;
    PyTypeObject *types[] = {&RecordType, &RecorderCoreType, &ScopeBaseType, &EntryType,
                             &FactoryType, &MarkerType, &FoldTableType, &SpanMakerType};
    const char *names[] = {"Record", "RecorderCore", "ScopeBase", "Entry", "FactoryState", "CudaMarker", "FoldTable",
                           "SpanMaker"};
    if (PyType_Ready(&FoldCellType) < 0) return NULL;
    for (int i = 0; i < 8; i++)
        if (PyType_Ready(types[i]) < 0) return NULL;
    PyObject *module = PyModule_Create(&hotpath_module);
    if (module == NULL) return NULL;
    for (int i = 0; i < 8; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(module, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            Py_DECREF(module);
            return NULL;
        }
    }
    return module;
}
