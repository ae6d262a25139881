/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope._hotpath, the module: ABI_VERSION, the registration calls (init_stack, init_recorder,
 * init_scopes) and the definitions of the globals they fill, the module table, PyInit__hotpath.
 * (The layout of these files: docs/native.md.)
 */
#include "hotpath.h"

/* ---- what the Python side registers (init_stack / init_recorder / init_scopes) ---- */

PyObject *g_top_var;             /* brickscope._record.TOP */
PyObject *g_kind_names;          /* ("step", "layer", "brick", "kernel") */
PyObject *g_otel_var;            /* OTel's runtime ContextVar, or NULL */
PyObject *g_otel_current;        /* _otel_context.current (used without the var) */
PyObject *g_clock_dict;          /* trace._recorder's globals: "perf_counter_ns" */
PyObject *g_perf_counter_ns;     /* time.perf_counter_ns */
int g_clock_is_monotonic;        /* perf_counter_ns is clock_gettime(CLOCK_MONOTONIC) */
PyObject *g_release_context;     /* trace._recorder._release_context(rec) */
PyObject *g_repair_stack;        /* trace._recorder._repair_stack(rec) */
PyObject *g_describe;            /* trace._recorder._describe(error) */
PyObject *g_state_dict;          /* brickscope._state.__dict__ */
PyObject *g_enter_failed;        /* _scope._enter_failed(recorder, exc) */
PyObject *g_exit_failed;         /* _scope._exit_failed(rec, exc) */
PyObject *g_exit_out_of_order;   /* _scope._exit_out_of_order(scope, top, error) */
PyObject *g_exit_entry_ooo;      /* _scope._exit_entry_out_of_order(entry, rec, error) */
PyObject *g_inert;               /* _scope._INERT: the token of a scope that recorded nothing */
PyObject *g_enter_scope_py;      /* _scope.enter_scope in Python: every unusual case */
PyObject *g_open_scope_py;       /* _scope.open_scope in Python: every unusual case */
PyObject *g_exit_scope_py;       /* _scope.exit_scope in Python: every unusual case */

PyObject *s_recorder, *s_compiling, *s_perf_counter_ns, *s_kind, *s_open_root, *s_open_gpu,
    *s_mark_end, *s_name_thread, *s_act, *s_overflow, *s_poll, *s_scope_repairs, *s_scopes_unsampled,
    *s_append, *s_open, *s_close, *s_name;
PyObject *g_zero, *g_minus_one;

PyObject *s_cuda_error, *s_anchor, *s_ctx, *s_lock, *s_acquire, *s_release, *s_host_ns_attr, *s_anchor_max_age, *s_host_ns_field;
PyObject *s_mark, *s_marker_entry, *s_record_failed, *s_marker, *s_host_only, *s_mark_failed, *s_stream;
GlobalCache g_recorder_cache, g_compiling_cache; /* _state.recorder, _state.compiling */
PyObject *s_external, *s_self_time_clamped;
PyObject *s_category, *s_elements;
PyObject *g_empty_str, *g_empty_tuple;
PyObject *s_timer, *s_pool, *s_free, *s_code_name, *s_dunder_name;
PyObject *s_span_id, *s_resource, *s_gpu_timing_errors, *s_device, *s_handle, *s_hex16, *s_sixty_four;
GlobalCache g_clock_cache; /* g_clock_dict["perf_counter_ns"] */
int g_dict_watcher = -1; /* -1: none added yet; -2: none to be had */
uint64_t g_watched_generation = 1;

/* ---- registration ------------------------------------------------------------------- */

static void set_global(PyObject **slot, PyObject *value) {
    Py_XINCREF(value);
    Py_XSETREF(*slot, value);
}

/* given is a tuple of the n names in names, in that order (a key table checked by name): 0.
 * -1 with a ValueError naming the first difference. */
int check_names(const char *call, const char *what, PyObject *given, const char *const *names, Py_ssize_t n) {
    if (!PyTuple_Check(given)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a tuple of str", call, what);
        return -1;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(given);
    for (Py_ssize_t i = 0; i < n || i < count; i++) {
        const char *mine = i < n ? names[i] : "(nothing)";
        PyObject *name = i < count ? PyTuple_GET_ITEM(given, i) : NULL;
        const char *theirs = name == NULL ? "(nothing)" : PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        if (theirs == NULL) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "%s: %s must be a tuple of str", call, what);
            return -1;
        }
        if (strcmp(mine, theirs) != 0) {
            PyErr_Format(PyExc_ValueError, "%s: %s[%zd] is %s, the C table has %s there", call, what, i, theirs, mine);
            return -1;
        }
    }
    return 0;
}

/* init_stack(*, top, kind_names): the scope stack (brickscope._record). */
static PyObject *init_stack(PyObject *module, PyObject *args, PyObject *kwargs) {
    static const char *const names[] = {"top", "kind_names"};
    PyObject *v[2];
    if (take_fields("init_stack", args, kwargs, names, 2, v) < 0) return NULL;
    if (!PyContextVar_CheckExact(v[0]) || !PyTuple_CheckExact(v[1]) || PyTuple_GET_SIZE(v[1]) != 4) {
        PyErr_SetString(PyExc_TypeError, "init_stack: top is a ContextVar, kind_names four names");
        return NULL;
    }
    set_global(&g_top_var, v[0]);
    set_global(&g_kind_names, v[1]);
    Py_RETURN_NONE;
}

/* init_recorder(*, ...): what Recorder.open/close call (brickscope.sdk.trace._recorder). */
static PyObject *init_recorder(PyObject *module, PyObject *args, PyObject *kwargs) {
    static const char *const names[] = {"otel_var",        "otel_current", "clock_globals", "perf_counter_ns",
                                        "clock_is_monotonic", "release_context", "repair_stack", "describe"};
    PyObject *v[8];
    if (take_fields("init_recorder", args, kwargs, names, 8, v) < 0) return NULL;
    if (v[0] != Py_None && !PyContextVar_CheckExact(v[0])) {
        PyErr_SetString(PyExc_TypeError, "init_recorder: otel_var must be a ContextVar or None");
        return NULL;
    }
    if (!PyDict_Check(v[2])) {
        PyErr_SetString(PyExc_TypeError, "init_recorder: clock_globals must be a dict");
        return NULL;
    }
    int monotonic = PyObject_IsTrue(v[4]);
    if (monotonic < 0) return NULL;
    set_global(&g_otel_var, v[0] == Py_None ? NULL : v[0]);
    set_global(&g_otel_current, v[1]);
    set_global(&g_clock_dict, v[2]);
    global_cache_watch(v[2]);
    set_global(&g_perf_counter_ns, v[3]);
    g_clock_is_monotonic = monotonic;
    set_global(&g_release_context, v[5]);
    set_global(&g_repair_stack, v[6]);
    set_global(&g_describe, v[7]);
    Py_RETURN_NONE;
}

/* torch.compiler.is_compiling()'s flag, read in C (init_torch_compiling / torch_compiling):
 * the module globals holding it, its name, and is_compiling itself for when it is gone. */
static PyObject *g_torch_compiler_globals, *g_torch_flag_name, *g_torch_is_compiling;
static GlobalCache g_torch_flag_cache;

/* init_torch_compiling(compiler_globals, flag_name, is_compiling). */
static PyObject *init_torch_compiling(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyDict_Check(args[0]) || !PyUnicode_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "init_torch_compiling(compiler_globals: dict, flag_name: str, is_compiling)");
        return NULL;
    }
    set_global(&g_torch_compiler_globals, args[0]);
    global_cache_watch(args[0]);
    set_global(&g_torch_flag_name, args[1]);
    set_global(&g_torch_is_compiling, args[2]);
    Py_RETURN_NONE;
}

/* torch_compiling(): what torch.compiler.is_compiling() answers when it runs as Python
 * (outside TorchScript, where is_scripting() is False: the flag), without its two Python
 * calls; torch.compile's tracing calls a substitute instead (brickscope._scope._compile). */
int torch_compiling_now(void) {
    if (g_torch_compiler_globals == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "torch_compiling: init_torch_compiling was not called");
        return -1;
    }
    PyObject *flag = global_get(&g_torch_flag_cache, g_torch_compiler_globals, g_torch_flag_name);
    if (flag == NULL) {
        if (PyErr_Occurred()) return -1;
        PyObject *answer = PyObject_CallNoArgs(g_torch_is_compiling); /* the flag is gone: ask torch */
        int set = answer == NULL ? -1 : PyObject_IsTrue(answer);
        Py_XDECREF(answer);
        return set;
    }
    return PyObject_IsTrue(flag);
}

PyObject *torch_compiling(PyObject *module, PyObject *unused) {
    int set = torch_compiling_now();
    if (set < 0) return NULL;
    return PyBool_FromLong(set);
}

/* init_scopes(*, ...): the scope side (brickscope._scope). */
static PyObject *init_scopes(PyObject *module, PyObject *args, PyObject *kwargs) {
    static const char *const names[] = {"state_globals", "enter_failed", "exit_failed", "exit_out_of_order",
                                        "exit_entry_out_of_order", "inert", "enter_scope", "exit_scope",
                                        "open_scope"};
    PyObject *v[9];
    if (take_fields("init_scopes", args, kwargs, names, 9, v) < 0) return NULL;
    if (!PyDict_Check(v[0]) || !Record_Check(v[5])) {
        PyErr_SetString(PyExc_TypeError, "init_scopes: state_globals must be a dict, inert a Record");
        return NULL;
    }
    set_global(&g_inert, v[5]);
    set_global(&g_enter_scope_py, v[6]);
    set_global(&g_exit_scope_py, v[7]);
    set_global(&g_open_scope_py, v[8]);
    set_global(&g_state_dict, v[0]);
    global_cache_watch(v[0]);
    set_global(&g_enter_failed, v[1]);
    set_global(&g_exit_failed, v[2]);
    set_global(&g_exit_out_of_order, v[3]);
    set_global(&g_exit_entry_ooo, v[4]);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"factory", make_factory, METH_VARARGS,
     "factory(name, cache, slow, exact_int): the scope factory `name` (brick, kernel, layer, step) whose "
     "one-argument form is a lookup in cache (exact ints only if exact_int); every other call runs slow."},
    {"init_stack", (PyCFunction)(void (*)(void))init_stack, METH_VARARGS | METH_KEYWORDS,
     "init_stack(*, top, kind_names): the scope stack (brickscope._record)."},
    {"init_recorder", (PyCFunction)(void (*)(void))init_recorder, METH_VARARGS | METH_KEYWORDS,
     "init_recorder(*, otel_var, otel_current, clock_globals, perf_counter_ns, clock_is_monotonic, "
     "release_context, repair_stack, describe): what Recorder.open/close call (brickscope.sdk.trace._recorder)."},
    {"init_scopes", (PyCFunction)(void (*)(void))init_scopes, METH_VARARGS | METH_KEYWORDS,
     "init_scopes(*, state_globals, enter_failed, exit_failed, exit_out_of_order, exit_entry_out_of_order, inert, "
     "enter_scope, exit_scope, open_scope) (brickscope._scope)."},
    {"fold_sums", (PyCFunction)(void (*)(void))fold_sums, METH_FASTCALL,
     "fold_sums(spans, attributes, keys, sums, values) -> bool: CategoryAggregator.fold_batch's sums per "
     "(brick, category) in C; False: nothing changed, the Python loop folds the batch."},
    {"enter_scope", (PyCFunction)(void (*)(void))hot_enter_scope, METH_FASTCALL | METH_KEYWORDS,
     "enter_scope(scope)\n--\n\nOpen scope without a with block; returns the token for exit_scope "
     "(see brickscope.enter_scope)."},
    {"init_torch_compiling", (PyCFunction)(void (*)(void))init_torch_compiling, METH_FASTCALL,
     "init_torch_compiling(compiler_globals, flag_name, is_compiling) (brickscope.torch)."},
    {"torch_compiling", (PyCFunction)torch_compiling, METH_NOARGS,
     "torch_compiling()\n--\n\ntorch.compiler.is_compiling()'s answer outside TorchScript and torch.compile's "
     "tracing, read from its flag (see brickscope.torch._calls)."},
    {"init_module_calls", (PyCFunction)(void (*)(void))init_module_calls, METH_VARARGS | METH_KEYWORDS,
     "init_module_calls(*, calls_globals, compiling_name, tensor) (brickscope.torch._calls)."},
    {"module_call", (PyCFunction)(void (*)(void))module_call, METH_FASTCALL | METH_KEYWORDS,
     "module_call(forward, state, *args, **kwargs)\n--\n\nAn instrumented module's forward: its scope "
     "around the call (see brickscope.torch._calls)."},
    {"open_scope", (PyCFunction)(void (*)(void))hot_open_scope, METH_FASTCALL | METH_KEYWORDS,
     "open_scope(scope)\n--\n\nenter_scope for a caller that has just found torch.compiler.is_compiling() "
     "false (see brickscope._scope.open_scope)."},
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
                             &FactoryType, &MarkerType, &FoldTableType, &SpanMakerType, &IdLockType,
                             &ModuleCallType};
    const char *names[] = {"Record", "RecorderCore", "ScopeBase", "Entry", "FactoryState", "CudaMarker", "FoldTable",
                           "SpanMaker", "IdLock", "ModuleCall"};
    const int n_types = (int)(sizeof(types) / sizeof(types[0]));
    if (PyType_Ready(&FoldCellType) < 0) return NULL;
    for (int i = 0; i < n_types; i++)
        if (PyType_Ready(types[i]) < 0) return NULL;
    if (init_scope_with_methods() < 0) return NULL;
    PyObject *module = PyModule_Create(&hotpath_module);
    if (module == NULL) return NULL;
    for (int i = 0; i < n_types; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(module, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            Py_DECREF(module);
            return NULL;
        }
    }
    PyObject *span_keys = span_keys_tuple();
    if (span_keys == NULL || PyModule_AddObject(module, "SPAN_KEYS", span_keys) < 0 ||
        PyModule_AddIntConstant(module, "ABI_VERSION", HOTPATH_ABI_VERSION) < 0 ||
        PyModule_AddIntConstant(module, "CUDA_VERSION", CUDA_API_VERSION) < 0) {
        Py_XDECREF(span_keys);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
