/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope._hotpath, CudaMarker: CudaTimer.mark / is_complete / interval through the driver's entry points.
 * (The layout of these files: docs/native.md.)
 */
#include "hotpath.h"


/* cuEventRecord and cuCtxGetCurrent, as the driver's cuGetProcAddress gave them. */


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
PyObject *marker_mark(MarkerObject *self, PyObject *ref) {
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

static PyObject *g_clock_host_ns, *g_clock_module_dict; /* brickscope._clock: host_ns, its globals */

/* CudaMarker(*, timer, marks, ids, timer_globals, host_ns, clock_globals, and the six entry points
 * by their driver names): the entry points as cuGetProcAddress gave them at CUDA_API_VERSION. */
static PyObject *marker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static const char *const names[] = {"timer", "marks", "ids", "timer_globals", "host_ns", "clock_globals",
                                        "cuEventRecord", "cuCtxGetCurrent", "cuEventQuery", "cuEventElapsedTime",
                                        "cuCtxPushCurrent", "cuCtxPopCurrent"};
    PyObject *v[12];
    if (take_fields("CudaMarker", args, kwargs, names, 12, v) < 0) return NULL;
    PyObject *timer = v[0], *marks = v[1], *ids = v[2], *timer_globals = v[3];
    unsigned long long fn[6];
    for (int i = 0; i < 6; i++) {
        fn[i] = PyLong_Check(v[6 + i]) ? PyLong_AsUnsignedLongLong(v[6 + i]) : 0;
        if (PyErr_Occurred()) return NULL;
    }
    if (!PyDict_Check(marks) || !PyDict_Check(timer_globals) || !PyDict_Check(v[5]) || !PyIter_Check(ids)) {
        PyErr_SetString(PyExc_TypeError, "CudaMarker: marks, timer_globals and clock_globals are dicts, ids an iterator");
        return NULL;
    }
    unsigned long long record = fn[0], get_current = fn[1], query = fn[2], elapsed = fn[3], push = fn[4], pop = fn[5];
    if (!record || !get_current || !query || !elapsed || !push || !pop) {
        PyErr_SetString(PyExc_ValueError, "CudaMarker: every entry point must be a non-null address");
        return NULL;
    }
    Py_XSETREF(g_clock_host_ns, Py_NewRef(v[4]));
    Py_XSETREF(g_clock_module_dict, Py_NewRef(v[5]));
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

static void interval_cache_forget_context(IntervalCache *cache) {
    Py_CLEAR(cache->context);
    Py_CLEAR(cache->acquire);
    Py_CLEAR(cache->release);
    Py_CLEAR(cache->free_list);
    Py_CLEAR(cache->anchor);
}

void interval_cache_clear(IntervalCache *cache) {
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
int marker_complete_cached(MarkerObject *self, PyObject *mark, IntervalCache *cache) {
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
 * either). 1: *value set; 0: call fn; -1: error. Both registered by CudaMarker(host_ns=...,
 * clock_globals=...). */
static int host_ns_in_c(PyObject *fn, long long *value) {
    if (g_clock_host_ns == NULL) return 0;
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
int marker_interval_ns(MarkerObject *self, PyObject *start_mark, PyObject *end_mark, IntervalCache *cache,
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

PyTypeObject MarkerType = {
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
