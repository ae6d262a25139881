/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope._hotpath, RecorderCore, the hot-path half of trace._recorder.Recorder: open/close of a
 * nested scope, GPU marks through the CudaMarker, the pending queue, the unsampled count.
 * (The layout of these files: docs/native.md.)
 */
#include "hotpath.h"

/* ---- RecorderCore: the hot-path half of trace._recorder.Recorder ------------------ */


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
    Py_VISIT(self->last_name);
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
    Py_CLEAR(self->last_name);
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


/* A class attribute of a C scope object as a flag (0/1), cached in *cache as value + 1. -1: error. */
int owner_flag(PyObject *owner, PyObject *attribute, int *cache) {
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

long owner_kind(PyObject *owner) {
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

PyObject *rc_open(RecorderCore *self, PyObject *owner, PyObject *opener) {
    if (!recorder_ready(self)) return NULL;
    /* The record first, as in Python (an allocation may run the cyclic GC, and any code). */
    RecordObject *rec = (RecordObject *)free_list_take(&record_free, &RecordType);
    if (rec == NULL) return NULL;
    PyObject *current = NULL, *top = stack_top();
    if (top == NULL) goto fail;
    /* Whether top is still the stack's top when the record is pushed: no code run since. */
    int top_fresh = g_otel_var != NULL; /* without the var, the current context is a Python call */
    current = otel_current();
    if (current == NULL) goto fail;
    if (top != Py_None && !Record_Check(top)) {
        PyErr_SetString(PyExc_TypeError, "brickscope: the scope stack holds a foreign object");
        goto fail;
    }
    if (top == Py_None || ((RecordObject *)top)->otel_context != current) {
        /* outermost scope, or a user span started since the scope below opened */
        top_fresh = 0;
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
    if (self->last_thread != NULL && self->last_names == self->thread_names &&
        PyLong_AsUnsignedLong(self->last_thread) == tid) { /* the same thread as last time: named */
        Py_INCREF(self->last_thread);
        rec->thread_id = self->last_thread;
    } else {
        top_fresh = 0; /* may name the thread in Python */
        rec->thread_id = PyLong_FromUnsignedLong(tid);
        if (rec->thread_id == NULL) goto fail;
        PyObject *name = PyDict_GetItemWithError(self->thread_names, rec->thread_id);
        if (name != NULL) {
            Py_INCREF(name);
        } else {
            if (PyErr_Occurred()) goto fail;
            PyObject *args[] = {(PyObject *)self, rec->thread_id};
            name = PyObject_VectorcallMethod(s_name_thread, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            if (name == NULL) goto fail;
        }
        Py_XSETREF(self->last_name, name);
        Py_INCREF(rec->thread_id);
        Py_XSETREF(self->last_thread, rec->thread_id);
        Py_INCREF(self->thread_names);
        Py_XSETREF(self->last_names, self->thread_names);
    }
    Py_INCREF(self->last_name);
    rec->thread_name = self->last_name;
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
    if (stack_push((PyObject *)rec, rec->link, top_fresh, &rec->stack_token) < 0) goto fail;
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
int release_context(RecordObject *rec) {
    if (rec->context_token == NULL || rec->context_token == Py_None) return 0;
    PyObject *res = PyObject_CallOneArg(g_release_context, (PyObject *)rec);
    if (res == NULL) return -1;
    Py_DECREF(res);
    return 0;
}


/* Recorder.close(rec, error): mirrors _recorder._PyRecording.close. read_as_top: the caller
 * has just read rec as the stack's top (rec's opener held by the caller), so it need not be
 * read again unless code runs meanwhile. */
int rc_close(RecorderCore *self, RecordObject *rec, PyObject *error, int read_as_top) {
    if (!recorder_ready(self)) return -1;
    long long end;
    PyObject *end_obj;
    if (clock_read(&end, &end_obj) < 0) return -1;
    long long start_mark = rec->start_mark ? PyLong_AsLongLong(rec->start_mark) : -1;
    if (start_mark == -1 && PyErr_Occurred()) goto fail;
    /* rec is still the top unless code ran since: a Python clock, a GPU mark */
    int innermost = read_as_top && end_obj == NULL && start_mark < 0;
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
    if (!innermost) {
        PyObject *top = stack_top();
        if (top == NULL) return -1;
        innermost = top == (PyObject *)rec;
        Py_DECREF(top);
    }
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
    if (rc_close(self, (RecordObject *)args[0], args[1], 0) < 0) return NULL;
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

/* forget_thread(tid): the thread with this id ended; the OS may give the id to a new thread,
 * which must not inherit the name (its next open names it afresh). */
static PyObject *recorder_forget_thread(RecorderCore *self, PyObject *tid) {
    if (!recorder_ready(self)) return NULL;
    if (PyDict_DelItem(self->thread_names, tid) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError)) return NULL;
        PyErr_Clear();
    }
    if (self->last_thread != NULL) {
        int same = PyObject_RichCompareBool(self->last_thread, tid, Py_EQ);
        if (same < 0) return NULL;
        if (same) {
            Py_CLEAR(self->last_thread);
            Py_CLEAR(self->last_name);
        }
    }
    Py_RETURN_NONE;
}

static PyMethodDef recorder_methods[] = {
    {"forget_thread", (PyCFunction)recorder_forget_thread, METH_O,
     "forget_thread(tid): the thread with this id ended: a new thread given the id is named afresh."},
    {"flush_counts", (PyCFunction)recorder_flush_counts, METH_NOARGS,
     "flush_counts(): add the counts kept in C (scopes_unsampled) to the counters' dict."},
    {"open", (PyCFunction)(void (*)(void))recorder_open, METH_FASTCALL,
     "open(owner, opener=None): push a new record for a scope entering on this thread/task."},
    {"close", (PyCFunction)(void (*)(void))recorder_close, METH_FASTCALL,
     "close(rec, error): pop rec and queue it for resolution; a sync point if the policy says so."},
    {NULL}};

PyTypeObject RecorderCoreType = {
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
