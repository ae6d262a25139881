/* SPDX-License-Identifier: Apache-2.0 */
/* A deliberately broken extension for memcheck.py --self-test: it reads past the end of a
 * heap buffer and leaks that buffer, the two mistakes the check exists to catch in
 * brickscope's accelerators. Built by the self-test into a temporary directory; never
 * installed. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>

static PyObject *read_past_end(PyObject *self, PyObject *arg) {
    Py_ssize_t size = PyLong_AsSsize_t(arg);
    if (size < 0 && PyErr_Occurred()) return NULL;
    unsigned char *buffer = malloc((size_t)size);
    if (buffer == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < size; i++) buffer[i] = (unsigned char)i;
    unsigned char past = buffer[size]; /* invalid read: one byte past the block */
    buffer = NULL;                     /* leaked: the only pointer is gone */
    return PyLong_FromLong(past);
}

static PyMethodDef methods[] = {
    {"read_past_end", read_past_end, METH_O, "Read one byte past a fresh buffer of the given size, and leak it."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_memcheck_canary", NULL, -1, methods};

PyMODINIT_FUNC PyInit__memcheck_canary(void) { return PyModule_Create(&module); }
