/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope._hotpath, the Record type (C layout of brickscope._record.Record) and its free list.
 * (The layout of these files: docs/native.md.)
 */
#include "hotpath.h"

static PyMemberDef record_members[] = {
#define X(f) {#f, T_OBJECT_EX, offsetof(RecordObject, f), 0, NULL},
    RECORD_MEMBER_FIELDS(X)
#undef X
    {NULL}};

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
FreeList record_free; /* freed records (recorder.c takes them) */

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

PyTypeObject RecordType = {
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
