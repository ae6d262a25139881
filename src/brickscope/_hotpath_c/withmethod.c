/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope._hotpath, the with-statement's methods of the C scopes (ScopeBase, Entry): a
 * `with` on CPython 3.11-3.13 looks __enter__ and __exit__ up on the object and binds each
 * (BEFORE_WITH). A method of tp_methods binds into a new builtin method: an allocation and
 * a free per method per scope. These descriptors bind into an object kept on a free list,
 * called by vectorcall.
 * (The layout of these files: docs/native.md.)
 */
#include "hotpath.h"

typedef struct {
    PyObject_HEAD
    PyTypeObject *owner; /* the type whose instances it binds to (borrowed: a static type) */
    PyObject *name;
    WithFn fn;
} WithMethodObject;

/* One method bound to one scope or entry. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *self;
    WithMethodObject *method;
} BoundWithObject;

static FreeList bound_free;

static PyObject *bound_vectorcall(BoundWithObject *bound, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) {
        PyErr_Format(PyExc_TypeError, "%U() takes no keyword arguments", bound->method->name);
        return NULL;
    }
    return bound->method->fn(bound->self, args, PyVectorcall_NARGS(nargsf));
}

static int bound_traverse(BoundWithObject *bound, visitproc visit, void *arg) {
    Py_VISIT(bound->self);
    return 0;
}

static int bound_clear(BoundWithObject *bound) {
    Py_CLEAR(bound->self);
    Py_CLEAR(bound->method);
    return 0;
}

static void bound_dealloc(BoundWithObject *bound) {
    PyObject_GC_UnTrack(bound);
    bound_clear(bound);
    if (!free_list_keep(&bound_free, (PyObject *)bound)) PyObject_GC_Del(bound);
}

static PyObject *bound_repr(BoundWithObject *bound) {
    return PyUnicode_FromFormat("<built-in method %U of %s object at %p>", bound->method->name,
                                Py_TYPE(bound->self)->tp_name, bound->self);
}

static PyMemberDef bound_members[] = {
    {"__self__", T_OBJECT, offsetof(BoundWithObject, self), READONLY, NULL},
    {NULL}};

static PyObject *bound_get_name(BoundWithObject *bound, void *closure) {
    Py_INCREF(bound->method->name);
    return bound->method->name;
}

static PyGetSetDef bound_getset[] = {{"__name__", (getter)bound_get_name, NULL, NULL, NULL}, {NULL}};

static PyTypeObject BoundWithType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.BoundWithMethod",
    .tp_doc = "__enter__ or __exit__ of a brickscope scope, bound to it.",
    .tp_basicsize = sizeof(BoundWithObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_vectorcall_offset = offsetof(BoundWithObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_alloc = PyType_GenericAlloc,
    .tp_free = PyObject_GC_Del,
    .tp_dealloc = (destructor)bound_dealloc,
    .tp_traverse = (traverseproc)bound_traverse,
    .tp_clear = (inquiry)bound_clear,
    .tp_repr = (reprfunc)bound_repr,
    .tp_members = bound_members,
    .tp_getset = bound_getset,
};

/* The instance check of a method descriptor: a type's own instances only. */
static int check_self(WithMethodObject *method, PyObject *self) {
    if (has_base(self, method->owner)) return 0;
    PyErr_Format(PyExc_TypeError, "descriptor '%U' for '%s' objects doesn't apply to a '%s' object", method->name,
                 method->owner->tp_name, Py_TYPE(self)->tp_name);
    return -1;
}

static PyObject *with_method_get(WithMethodObject *method, PyObject *self, PyObject *type) {
    if (self == NULL) { /* looked up on the class */
        Py_INCREF(method);
        return (PyObject *)method;
    }
    if (check_self(method, self) < 0) return NULL;
    BoundWithObject *bound = (BoundWithObject *)free_list_take(&bound_free, &BoundWithType);
    if (bound == NULL) return NULL;
    bound->vectorcall = (vectorcallfunc)bound_vectorcall;
    Py_INCREF(self);
    bound->self = self;
    Py_INCREF(method);
    bound->method = method;
    return (PyObject *)bound;
}

/* Called on the class: Type.__exit__(scope, exc_type, exc, tb). */
static PyObject *with_method_call(WithMethodObject *method, PyObject *args, PyObject *kwargs) {
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n < 1 || (kwargs != NULL && PyDict_GET_SIZE(kwargs))) {
        PyErr_Format(PyExc_TypeError, "unbound %U() needs its object as the only positional argument first",
                     method->name);
        return NULL;
    }
    PyObject *self = PyTuple_GET_ITEM(args, 0);
    if (check_self(method, self) < 0) return NULL;
    return method->fn(self, &PyTuple_GET_ITEM(args, 1), n - 1);
}

static void with_method_dealloc(WithMethodObject *method) {
    Py_CLEAR(method->name);
    PyObject_Free(method);
}

static PyObject *with_method_repr(WithMethodObject *method) {
    return PyUnicode_FromFormat("<method '%U' of '%s' objects>", method->name, method->owner->tp_name);
}

static PyMemberDef with_method_members[] = {
    {"__name__", T_OBJECT, offsetof(WithMethodObject, name), READONLY, NULL},
    {"__objclass__", T_OBJECT, offsetof(WithMethodObject, owner), READONLY, NULL},
    {NULL}};

static PyTypeObject WithMethodType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope._hotpath.WithMethod",
    .tp_doc = "__enter__ or __exit__ of a brickscope scope type (binds without a GC allocation).",
    .tp_basicsize = sizeof(WithMethodObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)with_method_dealloc,
    .tp_descr_get = (descrgetfunc)with_method_get,
    .tp_call = (ternaryfunc)with_method_call,
    .tp_repr = (reprfunc)with_method_repr,
    .tp_members = with_method_members,
};

/* type.__dict__[name] = a WithMethod calling fn; the type is ready, and static. */
static int add_with_method(PyTypeObject *type, const char *name, WithFn fn) {
    WithMethodObject *method = PyObject_New(WithMethodObject, &WithMethodType);
    if (method == NULL) return -1;
    method->owner = type;
    method->fn = fn;
    method->name = PyUnicode_InternFromString(name);
    int rc = method->name == NULL ? -1 : PyDict_SetItem(type->tp_dict, method->name, (PyObject *)method);
    Py_DECREF(method);
    PyType_Modified(type);
    return rc;
}

int add_with_methods(PyTypeObject *type, WithFn enter, WithFn exit) {
    if (PyType_Ready(&WithMethodType) < 0 || PyType_Ready(&BoundWithType) < 0) return -1;
    if (add_with_method(type, "__enter__", enter) < 0) return -1;
    return add_with_method(type, "__exit__", exit);
}
