/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope._hotpath, SpanMaker: SpanBuilder.build / Resolver._resolve's loop for ordinary records.
 * (The layout of these files: docs/native.md.)
 */
#include "hotpath.h"


/* The attribute keys SpanMaker writes, by the name of their constant in
 * brickscope/trace/attributes.py (the declaration), in the order of the K_* slots; 1 where a
 * GPU-timed brick's span has the key (the attributes dict is presized for those). The
 * registration (SpanMaker(key_names=..., keys=...)) checks the names, in this order, against
 * what sdk/trace/_spans.py passes, and this table is the module's SPAN_KEYS. */
#define SPAN_KEYS(X)                                                                                          \
    X(SCOPE_KIND, 1) X(HOST_START_NS, 1) X(HOST_DURATION_NS, 1) X(THREAD_ID, 1) X(THREAD_NAME, 1)            \
    X(GPU_DURATION_NS, 1) X(GPU_DEVICE_ID, 1) X(GPU_STREAM_ID, 1) X(GPU_TIMING_ERROR, 0) X(CLOCK, 1)         \
    X(BRICK_NAME, 1) X(BRICK_CATEGORY, 1) X(LAYER_INDEX, 1) X(STEP_NUMBER, 1) X(BRICK_SELF_DURATION_NS, 1)  \
    X(BRICK_ELEMENTS, 1) X(KERNEL_NAME, 0) X(KERNEL_SOURCE_HASH, 0)

enum {
#define X(name, gpu_brick) K_##name,
    SPAN_KEYS(X)
#undef X
    K_COUNT
};
/* the keys of a GPU-timed brick inside a layer and a step: new_attributes_dict's size */
enum {
#define X(name, gpu_brick) +gpu_brick
    GPU_BRICK_KEYS = 0 SPAN_KEYS(X)
#undef X
};
static const char *const span_key_names[K_COUNT] = {
#define X(name, gpu_brick) #name,
    SPAN_KEYS(X)
#undef X
};

/* the ReadableSpan's instance dict, in __init__'s order (checked against sdk/trace/_spans.py's
 * _SPAN_FIELDS, which a probe span checks against the SDK's __init__) */
#define SPAN_FIELDS(X)                                                                                         \
    X(NAME, _name) X(CONTEXT, _context) X(KIND, _kind) X(INFO, _instrumentation_info)                          \
    X(SCOPE, _instrumentation_scope) X(PARENT, _parent) X(START, _start_time) X(END, _end_time)                \
    X(ATTRIBUTES, _attributes) X(EVENTS, _events) X(LINKS, _links) X(RESOURCE, _resource) X(STATUS, _status)
enum {
#define X(slot, attribute) F_##slot,
    SPAN_FIELDS(X)
#undef X
    F_COUNT
};
static const char *const span_field_names[F_COUNT] = {
#define X(slot, attribute) #attribute,
    SPAN_FIELDS(X)
#undef X
};

typedef struct {
    PyObject_HEAD
    PyObject *span_type, *context_type, *key_names, *keys, *fields, *clock_host, *clock_cuda, *epoch, *counts,
        *gpu_interval, *resolved, *resolve, *hash_of, *sampled, *trace_state, *span_kind, *status, *scope,
        *getrandbits, *id_lock, *assign_span_id, *id_generator, *provider, *recorder;
    /* where span_type keeps each F_* field: the byte offset of its slot (a member descriptor) */
    Py_ssize_t field_offsets[F_COUNT];
} SpanMakerObject;

#define SPANMAKER_FIELDS(X)                                                                                     \
    X(span_type) X(context_type) X(key_names) X(keys) X(fields) X(clock_host) X(clock_cuda) X(epoch) X(counts) \
    X(gpu_interval) X(resolved) X(resolve) X(hash_of) X(sampled) X(trace_state) X(span_kind) X(status) X(scope)   \
    X(getrandbits) X(id_lock) X(assign_span_id) X(id_generator) X(provider) X(recorder)
#define X(f) #f,
static const char *const span_maker_field_names[] = {SPANMAKER_FIELDS(X)};
#undef X


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
           r->thread_id && r->thread_name && r->host_start && r->host_end && r->stream && r->start_mark && r->end_mark &&
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

/* ---- IdLock: the lock span ids are assigned under (_otel_context._id_lock) ------------
 *
 * A plain lock, as threading.Lock is, for assign_span_id's `with _id_lock:`; the span maker
 * takes it directly, without the two Python calls (acquire's argument parsing) a
 * threading.Lock costs per span. A blocking wait lets other threads run (they may hold it
 * in Python) and is interrupted by signals as a threading.Lock's is. */
typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    int held;
} IdLockObject;

/* 0, or -1 with an error set (a signal handler raised while waiting). */
static int id_lock_acquire(IdLockObject *self) {
    if (PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        self->held = 1;
        return 0;
    }
    for (;;) {
        PyLockStatus got;
        Py_BEGIN_ALLOW_THREADS
        got = PyThread_acquire_lock_timed(self->lock, -1, 1);
        Py_END_ALLOW_THREADS
        if (got == PY_LOCK_ACQUIRED) break;
        if (got == PY_LOCK_INTR && Py_MakePendingCalls() < 0) return -1;
    }
    self->held = 1;
    return 0;
}

static void id_lock_release(IdLockObject *self) {
    self->held = 0;
    PyThread_release_lock(self->lock);
}

static PyObject *id_lock_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "IdLock() takes no arguments");
        return NULL;
    }
    IdLockObject *self = (IdLockObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    if ((self->lock = PyThread_allocate_lock()) == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void id_lock_dealloc(IdLockObject *self) {
    if (self->lock != NULL) {
        if (self->held) PyThread_release_lock(self->lock);
        PyThread_free_lock(self->lock);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *id_lock_enter(IdLockObject *self, PyObject *unused) {
    if (id_lock_acquire(self) < 0) return NULL;
    Py_RETURN_TRUE;
}

static PyObject *id_lock_release_method(IdLockObject *self, PyObject *unused) {
    if (!self->held) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    id_lock_release(self);
    Py_RETURN_NONE;
}

static PyObject *id_lock_exit(IdLockObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return id_lock_release_method(self, NULL);
}

static PyObject *id_lock_locked(IdLockObject *self, PyObject *unused) { return PyBool_FromLong(self->held); }

/* In a forked child: a new, free lock (as threading.Lock._at_fork_reinit). The thread that may
 * have held the old one does not exist in the child; the old lock is left as it is (freeing a
 * lock in an unknown state is not safe), a few bytes once per fork. */
static PyObject *id_lock_at_fork_reinit(IdLockObject *self, PyObject *unused) {
    PyThread_type_lock fresh = PyThread_allocate_lock();
    if (fresh == NULL) return PyErr_NoMemory();
    self->lock = fresh;
    self->held = 0;
    Py_RETURN_NONE;
}

static PyMethodDef id_lock_methods[] = {
    {"acquire", (PyCFunction)id_lock_enter, METH_NOARGS, "acquire(): wait for the lock and take it; True."},
    {"release", (PyCFunction)id_lock_release_method, METH_NOARGS, "release(): give the lock back."},
    {"__enter__", (PyCFunction)id_lock_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))id_lock_exit, METH_FASTCALL, NULL},
    {"locked", (PyCFunction)id_lock_locked, METH_NOARGS, "locked(): whether the lock is held."},
    {"_at_fork_reinit", (PyCFunction)id_lock_at_fork_reinit, METH_NOARGS,
     "_at_fork_reinit(): in a forked child, a new free lock (as threading.Lock's)."},
    {NULL}};

PyTypeObject IdLockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.IdLock",
    .tp_doc = "IdLock(): the lock span ids are assigned under, as a threading.Lock (with, acquire, release, "
              "locked); the span maker takes it without Python calls.",
    .tp_basicsize = sizeof(IdLockObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = id_lock_new,
    .tp_dealloc = (destructor)id_lock_dealloc,
    .tp_methods = id_lock_methods,
};

/* Take or give back assign_span_id's lock: an IdLock directly, another lock through its
 * bound acquire/release (kept in the cache). 0, or -1 with an error set. */
static int span_id_lock(SpanMakerObject *m, BuildCache *cache, int take) {
    if (Py_TYPE(m->id_lock) == &IdLockType) {
        if (take) return id_lock_acquire((IdLockObject *)m->id_lock);
        id_lock_release((IdLockObject *)m->id_lock);
        return 0;
    }
    if (cache->id_acquire == NULL) {
        cache->id_acquire = PyObject_GetAttr(m->id_lock, s_acquire);
        if (cache->id_acquire == NULL) return -1;
        cache->id_release = PyObject_GetAttr(m->id_lock, s_release);
        if (cache->id_release == NULL) {
            Py_CLEAR(cache->id_acquire);
            return -1;
        }
    }
    PyObject *done = PyObject_CallNoArgs(take ? cache->id_acquire : cache->id_release);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
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
            if (span_id_lock(m, cache, 1) < 0) return NULL;
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
            if (span_id_lock(m, cache, 0) < 0) {
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(traceback);
                return NULL;
            }
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


/* A span's attributes dict: the keys vals[k] != NULL, in K_* order (the order the Python
 * builder inserts them in), with those values. (Copying a template dict of the same keys and
 * setting the values costs more: a value set on a present key costs about an insertion.) */
static PyObject *attributes_dict(SpanMakerObject *m, PyObject *const *vals) {
    PyObject *attributes = new_attributes_dict(GPU_BRICK_KEYS);
    if (attributes == NULL) return NULL;
    for (int k = 0; k < K_COUNT; k++) {
        if (vals[k] != NULL && PyDict_SetItem(attributes, KEY(m, k), vals[k]) < 0) {
            Py_DECREF(attributes);
            return NULL;
        }
    }
    return attributes;
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
    /* the attribute values by key (K_*; NULL: the span has no such key), borrowed or held in owned */
    PyObject *vals[K_COUNT] = {NULL}, *owned[K_COUNT] = {NULL};
    PyObject *attributes = NULL, *start = NULL, *end = NULL;
    PyObject *clock = m->clock_host, *parent_context = NULL, *context = NULL, *span = NULL;
    PyObject *resource = NULL;
    int out = -1;
#define OWN(k, value) (vals[k] = owned[k] = (value))
    vals[K_SCOPE_KIND] = PyTuple_GET_ITEM(g_kind_names, kind);
    if (OWN(K_HOST_START_NS, PyNumber_Add(rec->host_start, m->epoch)) == NULL) goto done;
    if (OWN(K_HOST_DURATION_NS, PyNumber_Subtract(rec->host_end, rec->host_start)) == NULL) goto done;
    vals[K_THREAD_ID] = rec->thread_id;
    vals[K_THREAD_NAME] = rec->thread_name;
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
            if (OWN(K_GPU_DURATION_NS, PyNumber_Subtract(end, start)) == NULL) goto done;
            vals[K_GPU_DEVICE_ID] = cache->device;
            vals[K_GPU_STREAM_ID] = cache->handle;
        }
    }
    if (start == NULL) {
        start = Py_NewRef(vals[K_HOST_START_NS]);
        if ((end = PyNumber_Add(vals[K_HOST_START_NS], vals[K_HOST_DURATION_NS])) == NULL) goto done;
    }
    if (start_mark < 0) {
        int gpu_timed = is_true(rec->gpu_first);
        if (gpu_timed < 0) goto done;
        if (gpu_timed) { /* a step or layer: the extent of the GPU work timed inside it */
            Py_SETREF(start, Py_NewRef(rec->gpu_first));
            Py_SETREF(end, Py_NewRef(rec->gpu_last));
            clock = m->clock_cuda;
            if (OWN(K_GPU_DURATION_NS, PyNumber_Subtract(end, start)) == NULL) goto done;
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
        vals[K_GPU_TIMING_ERROR] = rec->gpu_error;
        if (counts_add(m->counts, s_gpu_timing_errors) < 0) goto done;
    }
    vals[K_CLOCK] = clock;
    PyObject *brick = PyTuple_GET_ITEM(enclosing, 0), *layer = PyTuple_GET_ITEM(enclosing, 1),
             *step = PyTuple_GET_ITEM(enclosing, 2);
    if (brick != Py_None) {
        if (!PyTuple_Check(brick) || PyTuple_GET_SIZE(brick) < 2) {
            PyErr_SetString(PyExc_TypeError, "brickscope: a brick's info is (name, category, builtin)");
            goto done;
        }
        vals[K_BRICK_NAME] = PyTuple_GET_ITEM(brick, 0);
        vals[K_BRICK_CATEGORY] = PyTuple_GET_ITEM(brick, 1);
    }
    if (layer != Py_None) vals[K_LAYER_INDEX] = layer;
    if (step != Py_None) vals[K_STEP_NUMBER] = step;
    if (kind == KIND_BRICK) {
        PyObject *duration = PyNumber_Subtract(end, start);
        if (duration == NULL) goto done;
        OWN(K_BRICK_SELF_DURATION_NS, self_time_of(m, rec, duration));
        Py_DECREF(duration);
        if (vals[K_BRICK_SELF_DURATION_NS] == NULL) goto done;
        int has_elements = is_true(scope->elements);
        if (has_elements < 0) goto done;
        if (has_elements) vals[K_BRICK_ELEMENTS] = scope->elements;
    } else if (kind == 3) {
        vals[K_KERNEL_NAME] = scope->name;
        PyObject *source = PyObject_CallOneArg(m->hash_of, scope->name);
        if (source == NULL) goto done;
        if (source != Py_None && OWN(K_KERNEL_SOURCE_HASH, PyObject_Format(source, s_hex16)) == NULL) {
            Py_DECREF(source);
            goto done;
        }
        Py_DECREF(source);
    }
#undef OWN
    if ((attributes = attributes_dict(m, vals)) == NULL) goto done;
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
    /* what ReadableSpan.__init__ stores, written straight into span_type's slots (its fields are
     * all slots, checked at set-up: the instance dict is never made) */
    PyTypeObject *span_type = (PyTypeObject *)m->span_type;
    if ((span = span_type->tp_alloc(span_type, 0)) == NULL) goto done;
    PyObject *values[F_COUNT] = {scope->name, context, m->span_kind, Py_None, m->scope, parent_context, start, end,
                                 attributes, empty, empty, resource, m->status};
    for (int i = 0; i < F_COUNT; i++) *(PyObject **)((char *)span + m->field_offsets[i]) = Py_NewRef(values[i]);
    /* Left to reference counting, as the SpanContext: an ended span is read-only, and what it
     * holds (strings, ints, bools, the SpanContexts, a dict of attribute values, empty tuples)
     * or shares with every span (the kind, scope, resource and status) cannot refer back to
     * it. The cyclic GC would only walk it: each span kept in a batch queue until its export
     * counted towards the next collection and was moved to an older generation. */
    PyObject_GC_UnTrack(span);
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
    for (int k = 0; k < K_COUNT; k++) Py_XDECREF(owned[k]);
    Py_XDECREF(attributes);
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

/* The byte offset of each of `fields` in instances of `type`, into offsets: each must be a writable
 * object slot (a member descriptor of type or a base, as `__slots__` makes), so that a span is
 * made by tp_alloc and one pointer write a field. -1 with a TypeError naming the first that is not. */
static int slot_offsets(PyTypeObject *type, PyObject *fields, Py_ssize_t *offsets) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++) {
        PyObject *name = PyTuple_GET_ITEM(fields, i);
        PyObject *descr = PyObject_GetAttr((PyObject *)type, name); /* the class attribute: the descriptor */
        if (descr == NULL) PyErr_Clear();
        PyMemberDef *member = descr != NULL && Py_IS_TYPE(descr, &PyMemberDescr_Type)
                                  ? ((PyMemberDescrObject *)descr)->d_member
                                  : NULL;
        int usable = member != NULL && member->type == T_OBJECT_EX && !(member->flags & READONLY) &&
                     PyType_IsSubtype(type, PyDescr_TYPE(descr));
        if (usable) offsets[i] = member->offset;
        Py_XDECREF(descr);
        if (!usable) {
            PyErr_Format(PyExc_TypeError, "SpanMaker: span_type's field %R is not a writable slot", name);
            return -1;
        }
    }
    return 0;
}

/* SpanMaker(**fields): keyword arguments only, one per SPANMAKER_FIELDS (a missing or unknown
 * one is a TypeError naming it); key_names must be this build's SPAN_KEYS and fields its
 * SPAN_FIELDS, in order (a ValueError naming the first difference). */
static PyObject *span_maker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    enum { N = (int)(sizeof(span_maker_field_names) / sizeof(span_maker_field_names[0])) };
    PyObject *given[N];
    if (take_fields("SpanMaker", args, kwargs, span_maker_field_names, N, given) < 0) return NULL;
    if (check_names("SpanMaker", "key_names", given[2], span_key_names, K_COUNT) < 0 ||
        check_names("SpanMaker", "fields", given[4], span_field_names, F_COUNT) < 0)
        return NULL;
    SpanMakerObject *self = (SpanMakerObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    PyObject **slots[] = {
#define X(f) &self->f,
        SPANMAKER_FIELDS(X)
#undef X
    };
    for (Py_ssize_t i = 0; i < N; i++) *slots[i] = Py_NewRef(given[i]);
    if (!PyType_Check(self->span_type) || !PyType_Check(self->context_type) ||
        !PyType_IsSubtype((PyTypeObject *)self->context_type, &PyTuple_Type) || !PyTuple_CheckExact(self->keys) ||
        PyTuple_GET_SIZE(self->keys) != K_COUNT || !PyTuple_CheckExact(self->fields) ||
        PyTuple_GET_SIZE(self->fields) != F_COUNT ||
        !PyDict_CheckExact(self->counts) || !PyDict_CheckExact(self->resolved) || g_kind_names == NULL) {
        PyErr_SetString(PyExc_TypeError, "SpanMaker: unexpected arguments (see sdk/trace/_spans.py)");
        Py_DECREF(self);
        return NULL;
    }
    if (slot_offsets((PyTypeObject *)self->span_type, self->fields, self->field_offsets) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* SPAN_KEYS, the module constant: the key names in the K_* order. New reference. */
PyObject *span_keys_tuple(void) {
    PyObject *names = PyTuple_New(K_COUNT);
    for (Py_ssize_t i = 0; names != NULL && i < K_COUNT; i++) {
        PyObject *name = PyUnicode_FromString(span_key_names[i]);
        if (name == NULL) Py_CLEAR(names);
        else PyTuple_SET_ITEM(names, i, name);
    }
    return names;
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

PyTypeObject SpanMakerType = {
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
