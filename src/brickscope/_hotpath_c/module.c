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
