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
 * failure logging. The pure-Python code in _record.py, _scope/ and
 * sdk/trace/_recorder.py is the reference; these files mirror it line for line and
 * tests/unit/test_native.py checks that both give the same spans.
 *
 * Records are GC-tracked objects with the same attributes as the Python Record
 * (unset ones raise AttributeError), so resolution reads them unchanged.
 *
 * This header: what the files of the extension share (setup.py compiles them as one
 * extension, brickscope._hotpath): the object layouts, the globals the registration calls
 * fill (defined in module.c), the functions one file calls in another, and the small
 * helpers every file inlines. The CPython-version tricks are in compat.h.
 */
#ifndef BRICKSCOPE_HOTPATH_H
#define BRICKSCOPE_HOTPATH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* Symbols shared between the files stay inside the extension. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

#include "compat.h"
#include "../_fields.h"

/* ---- what the Python side registers (init_stack / init_recorder / init_scopes) ---- */

extern PyObject *g_top_var;             /* brickscope._record.TOP */
extern PyObject *g_kind_names;          /* ("step", "layer", "brick", "kernel") */
extern PyObject *g_otel_var;            /* OTel's runtime ContextVar, or NULL */
extern PyObject *g_otel_current;        /* _otel_context.current (used without the var) */
extern PyObject *g_clock_dict;          /* trace._recorder's globals: "perf_counter_ns" */
extern PyObject *g_perf_counter_ns;     /* time.perf_counter_ns */
extern int g_clock_is_monotonic;        /* perf_counter_ns is clock_gettime(CLOCK_MONOTONIC) */
extern PyObject *g_release_context;     /* trace._recorder._release_context(rec) */
extern PyObject *g_repair_stack;        /* trace._recorder._repair_stack(rec) */
extern PyObject *g_describe;            /* trace._recorder._describe(error) */
extern PyObject *g_state_dict;          /* brickscope._state.__dict__ */
extern PyObject *g_enter_failed;        /* _scope._enter_failed(recorder, exc) */
extern PyObject *g_exit_failed;         /* _scope._exit_failed(rec, exc) */
extern PyObject *g_exit_out_of_order;   /* _scope._exit_out_of_order(scope, top, error) */
extern PyObject *g_exit_entry_ooo;      /* _scope._exit_entry_out_of_order(entry, rec, error) */
extern PyObject *g_inert;               /* _scope._INERT: the token of a scope that recorded nothing */
extern PyObject *g_enter_scope_py;      /* _scope.enter_scope in Python: every unusual case */
extern PyObject *g_open_scope_py;       /* _scope.open_scope in Python: every unusual case */
extern PyObject *g_exit_scope_py;       /* _scope.exit_scope in Python: every unusual case */

extern PyObject *s_recorder, *s_compiling, *s_perf_counter_ns, *s_kind, *s_open_root, *s_open_gpu,
    *s_mark_end, *s_name_thread, *s_act, *s_overflow, *s_poll, *s_scope_repairs, *s_scopes_unsampled,
    *s_append, *s_open, *s_close, *s_name;
extern PyObject *g_zero, *g_minus_one;

extern PyObject *s_cuda_error, *s_anchor, *s_ctx, *s_lock, *s_acquire, *s_release, *s_host_ns_attr, *s_anchor_max_age, *s_host_ns_field;
extern PyObject *s_mark, *s_marker_entry, *s_record_failed, *s_marker, *s_host_only, *s_mark_failed, *s_stream;
extern GlobalCache g_recorder_cache, g_compiling_cache; /* _state.recorder, _state.compiling */
extern PyObject *s_external, *s_self_time_clamped;
extern PyObject *s_category, *s_elements;
extern PyObject *g_empty_str, *g_empty_tuple;
extern PyObject *s_timer, *s_pool, *s_free, *s_code_name, *s_dunder_name;
extern PyObject *s_span_id, *s_resource, *s_gpu_timing_errors, *s_device, *s_handle, *s_hex16, *s_sixty_four;
extern GlobalCache g_clock_cache; /* g_clock_dict["perf_counter_ns"] */
extern int g_dict_watcher; /* -1: none added yet; -2: none to be had */
extern uint64_t g_watched_generation;

#define KIND_BRICK 2

extern PyTypeObject RecordType, RecorderCoreType, ScopeBaseType, EntryType, FactoryType, MarkerType, FoldCellType,
    FoldTableType, SpanMakerType, IdLockType, ModuleCallType;

/* ---- Record ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *owner, *opener, *recorder, *link, *parent, *otel_parent, *otel_context, *trace_id, *span_id,
        *span_context, *sampled, *thread_id, *thread_name, *host_start, *host_end, *stream, *start_mark, *end_mark,
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
    X(span_id) X(span_context) X(sampled) X(thread_id) X(thread_name) X(host_start) X(host_end) X(stream) \
    X(start_mark) X(end_mark) X(gpu_error) X(error) X(ended) X(context_token) X(nested_ns)          \
    X(gpu_first) X(gpu_last) X(enclosing) X(notes) X(stack_token)

#define Record_Check(o) (Py_TYPE(o) == &RecordType)

#define RECORD_MEMBER_FIELDS(X)                                                                       \
    X(owner) X(opener) X(recorder) X(link) X(parent) X(otel_parent) X(otel_context) X(trace_id)       \
    X(span_id) X(span_context) X(sampled) X(thread_id) X(thread_name) X(stream)                         \
    X(start_mark) X(end_mark) X(gpu_error) X(error) X(ended) X(context_token) X(nested_ns)          \
    X(gpu_first) X(gpu_last) X(enclosing) X(notes)


/* An exact int that fits a long long: 1 with *out set, 0 otherwise (never an error). */
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
typedef struct {
    PyObject *context, *acquire, *release, *free_list, *anchor;
    void *ctx, *anchor_event;
    long long anchor_ns, now_ns;
    int have_now;
    MarkerObject *pusher; /* a context pushed by a query and left current for the next ones: */
    void *pushed;         /* popped by interval_cache_clear (pusher: borrowed, alive meanwhile) */
} IntervalCache;
typedef struct {
    PyObject_HEAD
    PyObject *timer, *pending, *pending_append, *close_actions, *counts, *thread_names, *aggregate_unsampled;
    PyObject *fold_closed;
    PyObject *gpu_timed, *stream_refs;
    MarkerObject *marker; /* the timer's CudaMarker, or NULL */
    PyObject *last_thread; /* the thread id of the last open, known to be in thread_names ... */
    PyObject *last_names;  /* ... of this dict ... */
    PyObject *last_name;   /* ... under this name (forget_thread clears the three when the thread ends) */
    long long pending_limit, next_poll_ns, max_delay_ns;
    /* scopes_unsampled counted here and added to counts by flush_counts (stats() calls it):
     * a dict update per unsampled scope was ~7 % of a brick's record */
    long long unsampled;
    char poll_without_pending; /* the time-based poll runs with nothing pending too */
} RecorderCore;
/* The kind of a scope object (0 step .. 3 kernel); cached on the C scope base. */
typedef struct {
    PyObject_HEAD
    PyObject *name, *category, *elements, *stream, *index, *attributes;
    int kind1;      /* kind + 1; 0: not looked up yet */
    int host_only1; /* _host_only + 1; 0: not looked up yet */
    int external1;  /* _external + 1; 0: not looked up yet */
} ScopeObject;
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

/* The version of what this extension expects from the Python beside it (the registration
 * calls' fields, the key tables, the types' layouts): brickscope._record states the one it
 * was written for, and brickscope.native.load refuses another. Raise it with any such change. */
#define HOTPATH_ABI_VERSION 4

/* The CUDA version the driver entry points' typedefs (cuda.c) were written for: the
 * Python side asks cuGetProcAddress for them at this version (module constant CUDA_VERSION),
 * not at the driver's, which may give a later variant with another ABI. */
#define CUDA_API_VERSION 12000

/* ---- defined in one file, called from another ---- */

/* module.c: the registration's name check (take_fields: ../_fields.h) */
int check_names(const char *call, const char *what, PyObject *given, const char *const *names, Py_ssize_t n);
/* spans.c */
PyObject *span_keys_tuple(void);

/* record.c */
extern FreeList record_free;

/* cuda.c */
PyObject *marker_mark(MarkerObject *self, PyObject *ref);
void interval_cache_clear(IntervalCache *cache);
int marker_complete_cached(MarkerObject *self, PyObject *mark, IntervalCache *cache);
int marker_interval_ns(MarkerObject *self, PyObject *start_mark, PyObject *end_mark, IntervalCache *cache,
                              long long *start_ns, long long *end_ns);
/* recorder.c */
int owner_flag(PyObject *owner, PyObject *attribute, int *cache);
long owner_kind(PyObject *owner);
PyObject *rc_open(RecorderCore *self, PyObject *owner, PyObject *opener);
int release_context(RecordObject *rec);
int rc_close(RecorderCore *self, RecordObject *rec, PyObject *error, int read_as_top);
/* fold.c */
int fold_table_fold(FoldTableObject *table, PyObject *rec);
PyObject *fold_sums(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
/* module.c: torch.compiler.is_compiling()'s flag (1, 0; -1 on error), and the builtin reading it */
int torch_compiling_now(void);
PyObject *torch_compiling(PyObject *module, PyObject *unused);
/* forward.c */
PyObject *init_module_calls(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *module_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
/* withmethod.c: __enter__ and __exit__ of a ready static type, each fn(self, args, nargs)
 * as a METH_FASTCALL method, bound by `with` without a new builtin method */
typedef PyObject *(*WithFn)(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
int add_with_methods(PyTypeObject *type, WithFn enter, WithFn exit);
/* scope.c */
int init_scope_with_methods(void);
PyObject *make_factory(PyObject *module, PyObject *args);
PyObject *hot_enter_scope(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *hot_open_scope(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *hot_exit_scope(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* ---- small helpers, inlined where used ---- */
static inline int small_int(PyObject *value, long long *out) {
    if (value == NULL || !PyLong_CheckExact(value)) return 0;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return !overflow;
}

static inline PyObject **record_time_slot(RecordObject *rec, int which) {
    return which == TIME_START ? &rec->host_start : &rec->host_end;
}

/* The C integer of a time (meaningful while its bit is set in rec->in_c). */
static inline long long *record_ns_slot(RecordObject *rec, int which) {
    return which == TIME_START ? &rec->host_start_ns : &rec->host_end_ns;
}

/* The AttributeError of an unset time (-1). */
static inline int record_time_missing(RecordObject *rec, int which) {
    PyErr_Format(PyExc_AttributeError, "'%.200s' object has no attribute '%s'", Py_TYPE(rec)->tp_name,
                 which == TIME_START ? "host_start" : "host_end");
    return -1;
}

/* rec.host_start / rec.host_end as an int (borrowed), made from the C integer if it is one;
 * NULL without an error: unset. */
static inline PyObject *record_time(RecordObject *rec, int which) {
    PyObject **slot = record_time_slot(rec, which);
    if (*slot == NULL && (rec->in_c & which)) {
        *slot = PyLong_FromLongLong(*record_ns_slot(rec, which));
        if (*slot == NULL) return NULL;
        rec->in_c &= ~which;
    }
    return *slot;
}

/* Both times as ints, for whatever reads the record's fields next (-1: error). */
static inline int record_times_as_ints(RecordObject *rec) {
    if ((rec->in_c & TIME_START) && record_time(rec, TIME_START) == NULL) return -1;
    if ((rec->in_c & TIME_END) && record_time(rec, TIME_END) == NULL) return -1;
    return 0;
}

/* A time read from the clock: the int the clock returned (stolen), or the C integer. */
static inline void record_set_time(RecordObject *rec, int which, long long value, PyObject *obj) {
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
static inline int record_time_value(RecordObject *rec, int which, long long *out) {
    if (rec->in_c & which) {
        *out = *record_ns_slot(rec, which);
        return 1;
    }
    return small_int(*record_time_slot(rec, which), out);
}

/* ---- small helpers ------------------------------------------------------------------ */

/* The scope stack's top: a new reference (None when empty). */
static inline PyObject *stack_top(void) {
    PyObject *top = NULL;
    if (PyContextVar_Get(g_top_var, Py_None, &top) < 0) return NULL;
    return top;
}

static inline int stack_set(PyObject *value) {
    PyObject *token = PyContextVar_Set(g_top_var, value);
    if (token == NULL) return -1;
    Py_DECREF(token);
    return 0;
}

/* A new record on top of `link`: the ContextVar set, and its token kept on the record when
 * the value it replaces is link (as it is unless code run since link was read changed it).
 * link_is_top: the caller read link as the top and no code has run since, so the stack is
 * not read again (a ContextVar read is a thread-state lookup, dearer on CPython 3.12+). */
static inline int stack_push(PyObject *rec, PyObject *link, int link_is_top, PyObject **token) {
    if (!link_is_top) {
        PyObject *current = stack_top();
        if (current == NULL) return -1;
        Py_DECREF(current); /* only compared */
        link_is_top = current == link;
    }
    PyObject *made = PyContextVar_Set(g_top_var, rec);
    if (made == NULL) return -1;
    if (link_is_top) {
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
static inline int stack_pop(PyObject *below, PyObject *link, PyObject **token) {
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

static inline PyObject *otel_current(void) {
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


/* perf_counter_ns() as the recorder module sees it (tests drive it by replacing it): 0 with
 * *value set, and *obj the int a Python clock returned (a new reference) or NULL when the
 * clock was read in C; -1 on error. */
static inline int clock_read(long long *value, PyObject **obj) {
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

static inline int counts_add(PyObject *counts, PyObject *key) {
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
static inline PyObject *take_exception(void) {
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
static inline int has_base(PyObject *obj, PyTypeObject *base) {
    PyTypeObject *type = Py_TYPE(obj);
    for (; type != NULL; type = type->tp_base)
        if (type == base) return 1;
    return PyType_IsSubtype(Py_TYPE(obj), base);
}

static inline int is_true(PyObject *value) {
    if (value == Py_True) return 1;
    if (value == Py_False || value == NULL) return 0;
    return PyObject_IsTrue(value);
}


#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif /* BRICKSCOPE_HOTPATH_H */
