/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope._hotpath, the scope side: ScopeBase (shared scope objects), Entry (one use of one), the
 * factories brick/kernel/layer/step, enter_scope/exit_scope tokens.
 * (The layout of these files: docs/native.md.)
 */
#include "hotpath.h"


/* The recorder to record into (new reference), or *out NULL: brickscope off, or (when
 * check_compiling) torch.compile tracing. */
static int active_recorder_of(PyObject **out, int check_compiling) {
    *out = NULL;
    PyObject *recorder = global_get(&g_recorder_cache, g_state_dict, s_recorder);
    if (recorder == NULL) return PyErr_Occurred() ? -1 : 0;
    if (recorder == Py_None) return 0;
    Py_INCREF(recorder);
    if (!check_compiling) {
        *out = recorder;
        return 0;
    }
    PyObject *compiling = global_get(&g_compiling_cache, g_state_dict, s_compiling);
    if (compiling == NULL && PyErr_Occurred()) {
        Py_DECREF(recorder);
        return -1;
    }
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

static int active_recorder(PyObject **out) { return active_recorder_of(out, 1); }

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

/* rec.recorder.close(rec, error), never raising an Exception (_scope._exit_failed).
 * read_as_top: rec was just read as the stack's top, with no code run since. */
static int close_record(PyObject *rec, PyObject *error, int read_as_top) {
    int rc;
    Py_INCREF(rec);
    PyObject *recorder = ((RecordObject *)rec)->recorder;
    if (recorder != NULL && has_base(recorder, &RecorderCoreType)) {
        Py_INCREF(recorder);
        rc = rc_close((RecorderCore *)recorder, (RecordObject *)rec, error, read_as_top);
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

static int check_enter_args(Py_ssize_t nargs) {
    if (nargs != 0) {
        PyErr_SetString(PyExc_TypeError, "__enter__() takes no arguments");
        return -1;
    }
    return 0;
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

static PyObject *scope_enter(ScopeObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_enter_args(nargs) < 0) return NULL;
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
        rc = close_record(top, args[1], 1);
    } else if (top != Py_None) {
        PyObject *res = PyObject_CallFunctionObjArgs(g_exit_out_of_order, (PyObject *)self, top, args[1], NULL);
        rc = res == NULL ? -1 : 0;
        Py_XDECREF(res);
    }
    Py_DECREF(top);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

PyTypeObject ScopeBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.ScopeBase",
    .tp_doc = "The C base of brickscope's scope objects: their fields and with-statement.",
    .tp_basicsize = sizeof(ScopeObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)scope_dealloc,
    .tp_traverse = (traverseproc)scope_traverse,
    .tp_clear = (inquiry)scope_clear,
    .tp_members = scope_members,
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

static PyObject *entry_enter(EntryObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (check_enter_args(nargs) < 0) return NULL;
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
        rc = close_record(rec, args[1], 1);
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

PyTypeObject EntryType = {
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
};

/* The with-statement's methods of ScopeBase and Entry (withmethod.c), once both are ready. */
int init_scope_with_methods(void) {
    if (add_with_methods(&ScopeBaseType, (WithFn)scope_enter, (WithFn)scope_exit) < 0) return -1;
    return add_with_methods(&EntryType, (WithFn)entry_enter, (WithFn)entry_exit);
}

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

PyTypeObject FactoryType = {
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

PyObject *make_factory(PyObject *module, PyObject *args) {
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
static PyObject *enter_token(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int check_compiling) {
    if (g_inert == NULL || nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)))
        return PyObject_Vectorcall(check_compiling ? g_enter_scope_py : g_open_scope_py, args, nargs, kwnames);
    PyObject *scope = args[0];
    if (Py_TYPE(scope) == &EntryType && ((EntryObject *)scope)->scope != NULL) scope = ((EntryObject *)scope)->scope;
    PyObject *recorder;
    if (active_recorder_of(&recorder, check_compiling) < 0) return NULL;
    if (recorder == NULL) {
        Py_INCREF(g_inert);
        return g_inert;
    }
    if (!has_base(scope, &ScopeBaseType)) { /* misuse: the Python function says so */
        Py_DECREF(recorder);
        return PyObject_Vectorcall(check_compiling ? g_enter_scope_py : g_open_scope_py, args, nargs, kwnames);
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

PyObject *hot_enter_scope(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return enter_token(args, nargs, kwnames, 1);
}

/* _scope.open_scope: enter_scope for a caller that has just asked torch.compiler.is_compiling()
 * itself (brickscope.torch's module call), which is not asked again. */
PyObject *hot_open_scope(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return enter_token(args, nargs, kwnames, 0);
}

/* _scope.exit_scope's common case in C (an open token); anything else is the Python function's. */
PyObject *hot_exit_scope(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    if (g_inert == NULL || nargs < 1 || nargs > 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) ||
        !Record_Check(args[0]) || args[0] == g_inert || ((RecordObject *)args[0])->ended != Py_False)
        return PyObject_Vectorcall(g_exit_scope_py, args, nargs, kwnames);
    if (close_record(args[0], nargs == 2 ? args[1] : Py_None, 0) < 0) return NULL;
    Py_RETURN_NONE;
}
