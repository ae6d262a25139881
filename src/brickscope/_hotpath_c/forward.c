/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope._hotpath, an instrumented module's call: ModuleCall (what one module's
 * instrumented forward decides at instrument() time) and module_call(forward, state, *args,
 * **kwargs), the function brickscope.torch's InstrumentedForward (a functools.partial) wraps.
 * It does what the Python `call` and its scope chooser do (brickscope/torch/_calls.py, the
 * reference), in the same order, without a Python frame of ours:
 *
 *   1. torch.compile tracing (the module global `_is_compiling` of _calls: the C twin of
 *      torch.compiler.is_compiling read in C, anything else called): the plain forward;
 *   2. brickscope off (`_state.recorder is None`): the plain forward;
 *   3. the scope: a layer's (or the plain brick), the brick cached by the first positional
 *      argument's (shape, dtype) (made by the Python `make` on a miss: it counts the elements
 *      and keeps at most 64), or a Python chooser's (CUDA stream following);
 *   4. open_scope, the timed forward, exit_scope with the exception on a BaseException
 *      (re-raised; the scope closed exactly once).
 *
 * While a PEP 523 frame evaluator is installed (torch.compile's, during a compiled call) it
 * runs the Python reference instead, so that Dynamo starts tracing at the same frame as it
 * does without the accelerator (frame_evaluator_installed).
 *
 * Dynamo cannot trace C: torch.compile is given a Python stand-in for module_call that calls
 * the plain forward (brickscope.torch._calls), so a compiled model records nothing inside and
 * its graph does not break.
 */
#include "hotpath.h"

/* What init_module_calls registers: _calls' globals (`_is_compiling` is read from them on
 * every call, so that a test or a user replacing it is honoured), and torch.Tensor. */
static PyObject *g_calls_globals, *g_compiling_name, *g_tensor_type;
static GlobalCache g_calls_compiling_cache;
static PyObject *s_shape, *s_dtype;

typedef struct {
    PyObject_HEAD
    PyObject *timed;  /* the forward run inside the scope (the module's, or losses' arming of it) */
    PyObject *plain;  /* a layer's scope; a brick's for a call without a readable tensor */
    PyObject *scopes; /* (shape, dtype) -> brick, or NULL: every call opens plain (a layer) */
    PyObject *make;   /* make((shape, dtype)) -> brick, for a key not in scopes; NULL with scopes */
    PyObject *choose; /* choose(args) -> scope in Python (CUDA stream following), or NULL */
    PyObject *reference; /* the Python call doing the same: run while a frame evaluator is installed */
    /* The key of the last call found in scopes, and its brick: a module is mostly called with
     * one shape, and comparing the new shape's ints with the last one's costs less than the
     * key tuple, its hash and the dict's comparison. Only entries of scopes (never removed)
     * are kept here, so the answer is the dict's. */
    PyObject *last_shape, *last_dtype, *last_scope;
} ModuleCallObject;

static int mc_traverse(ModuleCallObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->timed);
    Py_VISIT(self->plain);
    Py_VISIT(self->scopes);
    Py_VISIT(self->make);
    Py_VISIT(self->choose);
    Py_VISIT(self->reference);
    Py_VISIT(self->last_shape);
    Py_VISIT(self->last_dtype);
    Py_VISIT(self->last_scope);
    return 0;
}

static int mc_clear(ModuleCallObject *self) {
    Py_CLEAR(self->timed);
    Py_CLEAR(self->plain);
    Py_CLEAR(self->scopes);
    Py_CLEAR(self->make);
    Py_CLEAR(self->choose);
    Py_CLEAR(self->reference);
    Py_CLEAR(self->last_shape);
    Py_CLEAR(self->last_dtype);
    Py_CLEAR(self->last_scope);
    return 0;
}

static void mc_dealloc(ModuleCallObject *self) {
    PyObject_GC_UnTrack(self);
    mc_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ModuleCall(*, timed, plain, scopes, make, choose, reference): scopes a dict with make a
 * callable, or both None; choose a callable or None (then it is the one asked); reference the
 * Python call of the same module. */
static PyObject *mc_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static const char *const names[] = {"timed", "plain", "scopes", "make", "choose", "reference"};
    PyObject *v[6];
    if (take_fields("ModuleCall", args, kwargs, names, 6, v) < 0) return NULL;
    if (!PyCallable_Check(v[0]) || (v[2] != Py_None && !PyDict_CheckExact(v[2])) ||
        (v[2] == Py_None) != (v[3] == Py_None) || (v[3] != Py_None && !PyCallable_Check(v[3])) ||
        (v[4] != Py_None && !PyCallable_Check(v[4])) || !PyCallable_Check(v[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "ModuleCall: timed and reference are callable; scopes a dict and make callable, or both None; "
                        "choose callable or None");
        return NULL;
    }
    ModuleCallObject *self = (ModuleCallObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    PyObject **slots[] = {&self->timed, &self->plain, &self->scopes, &self->make, &self->choose, &self->reference};
    for (int i = 0; i < 6; i++) {
        if (v[i] != Py_None || i < 2 || i == 5) {
            Py_INCREF(v[i]);
            *slots[i] = v[i];
        }
    }
    return (PyObject *)self;
}

PyTypeObject ModuleCallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.ModuleCall",
    .tp_doc = "What one instrumented module's forward decided at instrument(): module_call's state.",
    .tp_basicsize = sizeof(ModuleCallObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = mc_new,
    .tp_dealloc = (destructor)mc_dealloc,
    .tp_traverse = (traverseproc)mc_traverse,
    .tp_clear = (inquiry)mc_clear,
};

/* init_module_calls(*, calls_globals, compiling_name, tensor). */
PyObject *init_module_calls(PyObject *module, PyObject *args, PyObject *kwargs) {
    static const char *const names[] = {"calls_globals", "compiling_name", "tensor"};
    PyObject *v[3];
    if (take_fields("init_module_calls", args, kwargs, names, 3, v) < 0) return NULL;
    if (!PyDict_Check(v[0]) || !PyUnicode_CheckExact(v[1]) || !PyType_Check(v[2])) {
        PyErr_SetString(PyExc_TypeError, "init_module_calls: calls_globals is a dict, compiling_name a str, tensor a type");
        return NULL;
    }
    if (s_shape == NULL && ((s_shape = PyUnicode_InternFromString("shape")) == NULL ||
                            (s_dtype = PyUnicode_InternFromString("dtype")) == NULL))
        return NULL;
    Py_INCREF(v[0]);
    Py_XSETREF(g_calls_globals, v[0]);
    global_cache_watch(v[0]);
    Py_INCREF(v[1]);
    Py_XSETREF(g_compiling_name, v[1]);
    Py_INCREF(v[2]);
    Py_XSETREF(g_tensor_type, v[2]);
    Py_RETURN_NONE;
}

/* Whether torch.compile is tracing, as _calls._is_compiling() answers: 1, 0, -1 on error. */
static int compiling(void) {
    PyObject *probe = global_get(&g_calls_compiling_cache, g_calls_globals, g_compiling_name);
    if (probe == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "brickscope.torch: _is_compiling is missing");
        return -1;
    }
    if (PyCFunction_Check(probe) && PyCFunction_GET_FUNCTION(probe) == (PyCFunction)torch_compiling)
        return torch_compiling_now();
    PyObject *answer = PyObject_CallNoArgs(probe);
    if (answer == NULL) return -1;
    int set = PyObject_IsTrue(answer);
    Py_DECREF(answer);
    return set;
}

/* Whether a frame evaluator other than CPython's own is installed (PEP 523): torch.compile's
 * while a compiled call runs (it compiles the first Python frame it is handed, outside torch's
 * own files), a debugger's. Dynamo must then find the Python reference's frame where it found
 * it before: at the top of a compiled model's call it traces that frame, which sees
 * is_compiling() true, instead of compiling the module's forward under a recorded brick. */
static int frame_evaluator_installed(void) {
    return _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) != _PyEval_EvalFrameDefault;
}

/* a and b hold equal exact ints, element by element (tuples: torch.Size is one). */
static int same_shape(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    Py_ssize_t n = PyTuple_GET_SIZE(a);
    if (n != PyTuple_GET_SIZE(b)) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(a, i), *y = PyTuple_GET_ITEM(b, i);
        if (x == y) continue; /* the small ints */
        if (!PyLong_CheckExact(x) || !PyLong_CheckExact(y)) return 0;
        int overflow_x, overflow_y;
        long long vx = PyLong_AsLongLongAndOverflow(x, &overflow_x);
        long long vy = PyLong_AsLongLongAndOverflow(y, &overflow_y);
        if (overflow_x || overflow_y || vx != vy) return 0;
    }
    return 1;
}

/* The Exception set (what `except Exception` catches) is cleared: 0; any other: -1, left set. */
static int swallow_exception(void) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
    return 0;
}

/* The brick of a call whose first argument is the tensor x, from scopes (new reference);
 * NULL without an error: an Exception reading it (the caller opens the plain brick). */
static PyObject *cached_brick(ModuleCallObject *self, PyObject *x) {
    PyObject *shape = PyObject_GetAttr(x, s_shape);
    if (shape == NULL) return NULL;
    PyObject *dtype = PyObject_GetAttr(x, s_dtype);
    if (dtype == NULL) {
        Py_DECREF(shape);
        return NULL;
    }
#ifndef Py_GIL_DISABLED
    if (self->last_scope != NULL && dtype == self->last_dtype && PyTuple_Check(shape) &&
        same_shape(shape, self->last_shape)) {
        Py_DECREF(shape);
        Py_DECREF(dtype);
        Py_INCREF(self->last_scope);
        return self->last_scope;
    }
#endif
    PyObject *key = PyTuple_Pack(2, shape, dtype);
    if (key == NULL) {
        Py_DECREF(shape);
        Py_DECREF(dtype);
        return NULL;
    }
    PyObject *scope = PyDict_GetItemWithError(self->scopes, key); /* borrowed */
    if (scope != NULL) {
        Py_INCREF(scope);
#ifndef Py_GIL_DISABLED
        if (PyTuple_Check(shape)) {
            Py_INCREF(scope);
            Py_XSETREF(self->last_scope, scope);
            Py_XSETREF(self->last_shape, shape);
            Py_XSETREF(self->last_dtype, dtype);
            shape = dtype = NULL;
        }
#endif
    } else if (!PyErr_Occurred()) {
        scope = PyObject_CallOneArg(self->make, key);
    }
    Py_DECREF(key);
    Py_XDECREF(shape);
    Py_XDECREF(dtype);
    return scope;
}

/* The scope this call opens (new reference), as the Python chooser picks it; NULL: a
 * BaseException that is not an Exception (an Exception reading the tensor opens plain). */
static PyObject *choose_scope(ModuleCallObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (self->choose != NULL) {
        PyObject *tuple = PyTuple_New(nargs);
        if (tuple == NULL) return NULL;
        for (Py_ssize_t i = 0; i < nargs; i++) {
            Py_INCREF(args[i]);
            PyTuple_SET_ITEM(tuple, i, args[i]);
        }
        PyObject *scope = PyObject_CallOneArg(self->choose, tuple);
        Py_DECREF(tuple);
        return scope;
    }
    if (self->scopes != NULL && nargs > 0) {
        int tensor = PyObject_IsInstance(args[0], g_tensor_type);
        if (tensor < 0) return NULL;
        if (tensor) {
            PyObject *scope = cached_brick(self, args[0]);
            if (scope != NULL) return scope;
            if (swallow_exception() < 0) return NULL;
        }
    }
    Py_INCREF(self->plain);
    return self->plain;
}

/* exit_scope(token, error) through the C token path (a new reference to its result). */
static PyObject *exit_token(PyObject *token, PyObject *error) {
    PyObject *args[2] = {token, error};
    return hot_exit_scope(NULL, args, error == NULL ? 1 : 2, NULL);
}

/* module_call(forward, state, *args, **kwargs): the instrumented forward (see the top). */
PyObject *module_call(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (nargs < 2 || Py_TYPE(args[1]) != &ModuleCallType || g_calls_globals == NULL || g_state_dict == NULL) {
        PyErr_SetString(PyExc_TypeError, "module_call(forward, state: ModuleCall, *args, **kwargs), after init_module_calls");
        return NULL;
    }
    PyObject *forward = args[0];
    ModuleCallObject *self = (ModuleCallObject *)args[1];
    PyObject *const *call_args = args + 2;
    Py_ssize_t call_nargs = nargs - 2;
    if (frame_evaluator_installed()) return PyObject_Vectorcall(self->reference, call_args, call_nargs, kwnames);
    /* is_compiling() first: while torch.compile traces, straight through (asked once a call:
     * open_scope does not ask again) */
    int tracing = compiling();
    if (tracing < 0) return NULL;
    PyObject *recorder = tracing ? NULL : global_get(&g_recorder_cache, g_state_dict, s_recorder);
    if (recorder == NULL && PyErr_Occurred()) return NULL;
    if (recorder == NULL || recorder == Py_None) return PyObject_Vectorcall(forward, call_args, call_nargs, kwnames);

    Py_INCREF(self); /* the call may drop the module's forward, and this with it */
    PyObject *result = NULL;
    PyObject *scope = choose_scope(self, call_args, call_nargs);
    if (scope == NULL) goto done;
    PyObject *token = hot_open_scope(NULL, &scope, 1, NULL);
    Py_DECREF(scope);
    if (token == NULL) goto done;
    result = PyObject_Vectorcall(self->timed, call_args, call_nargs, kwnames);
    if (result == NULL) { /* KeyboardInterrupt too: close exactly what was opened, and re-raise */
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyErr_NormalizeException(&type, &value, &traceback);
        if (traceback != NULL && value != NULL) PyException_SetTraceback(value, traceback);
        PyObject *closed = exit_token(token, value != NULL ? value : Py_None);
        if (closed != NULL) {
            Py_DECREF(closed);
            PyErr_Restore(type, value, traceback);
        } else { /* the close raised (a BaseException): that one propagates, from this one */
            PyObject *t2, *v2, *tb2;
            PyErr_Fetch(&t2, &v2, &tb2);
            PyErr_NormalizeException(&t2, &v2, &tb2);
            if (v2 != NULL && value != NULL) {
                PyException_SetContext(v2, value); /* steals value */
                value = NULL;
            }
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
            PyErr_Restore(t2, v2, tb2);
        }
    } else {
        PyObject *closed = exit_token(token, NULL);
        if (closed == NULL) {
            Py_CLEAR(result);
        } else {
            Py_DECREF(closed);
        }
    }
    Py_DECREF(token);
done:
    Py_DECREF(self);
    return result;
}
