/* SPDX-License-Identifier: Apache-2.0
 *
 * The registration check the core's C accelerators share (brickscope._hotpath's
 * init_* calls, SpanMaker and CudaMarker; brickscope._tablerows' setup): what Python hands
 * to C at registration is passed by name, and a call that does not name exactly the
 * fields this build expects is refused with a TypeError naming the field, so a Python
 * side and a build that disagree never meet silently (docs/native.md, "The boundary").
 * The Perfetto exporter's _fastread keeps its own copy: it is another distribution.
 */
#ifndef BRICKSCOPE_FIELDS_H
#define BRICKSCOPE_FIELDS_H

#include <Python.h>
#include <string.h>

/* kwargs holds exactly the fields named in names (n of them), and args nothing: out[i] the
 * value of names[i] (borrowed). A positional argument, a missing field or an unknown one is a
 * TypeError naming it ("<call> takes keyword arguments only", "<call>: missing field 'x'",
 * "<call>: unknown field 'x'"). */
static inline int take_fields(const char *call, PyObject *args, PyObject *kwargs, const char *const *names,
                              Py_ssize_t n, PyObject **out) {
    if (args != NULL && PyTuple_GET_SIZE(args) != 0) {
        PyErr_Format(PyExc_TypeError, "%s takes keyword arguments only", call);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = kwargs == NULL ? NULL : PyDict_GetItemString(kwargs, names[i]);
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s: missing field '%s'", call, names[i]);
            return -1;
        }
    }
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != n) {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            const char *text = PyUnicode_AsUTF8(key);
            if (text == NULL) return -1;
            Py_ssize_t i = 0;
            while (i < n && strcmp(names[i], text) != 0) i++;
            if (i == n) {
                PyErr_Format(PyExc_TypeError, "%s: unknown field '%s'", call, text);
                return -1;
            }
        }
    }
    return 0;
}

#endif
