/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope._hotpath: the CPython-version tricks, in one place. Free lists (how a kept object
 * is made live again differs on 3.13+; none on free-threaded or 3.13+ debug builds), the
 * cache of module globals (dict version tags before 3.12, dict watchers from 3.12), and the
 * presized attributes dict (a private API before 3.13). Included by hotpath.h.
 */
#ifndef BRICKSCOPE_HOTPATH_COMPAT_H
#define BRICKSCOPE_HOTPATH_COMPAT_H


/* Free lists: a scope's record, a with-statement's entry and the Brick of
 * brick(name, category, elements) are made and dropped on every use; their memory is kept
 * here instead of going back to the allocator. An object comes back cleared (every field
 * NULL: unset, as a new one), untracked by the GC, holding no reference; a type's dealloc
 * puts it here and its constructor takes it back (the way CPython's own free lists of
 * tuples and floats work). A kept object is made live again by free_list_revive. Not kept:
 * on a free-threaded build (per-thread reference counts), and on a debug build of 3.13+
 * (its reference total would drift). */
#if defined(Py_GIL_DISABLED) || (PY_VERSION_HEX >= 0x030D0000 && defined(Py_REF_DEBUG))
#define FREE_LIST_MAX 0
#else
#define FREE_LIST_MAX 256
#endif
typedef struct {
    PyObject *items[FREE_LIST_MAX > 0 ? FREE_LIST_MAX : 1];
    int size;
} FreeList;

/* Whether objects may be kept or taken now. 3.13+: not while a reference tracer
 * (PyRefTracer_SetTracer) watches objects: it must see a creation for each destruction. */
static inline int free_list_usable(void) {
#if PY_VERSION_HEX >= 0x030D0000
    void *data;
    return PyRefTracer_GetTracer(&data) == NULL;
#else
    return 1;
#endif
}

/* Keep a cleared, untracked object: 1 kept, 0 (full) the caller frees it. */
static inline int free_list_keep(FreeList *list, PyObject *op) {
    if (list->size >= FREE_LIST_MAX || !free_list_usable()) return 0;
    list->items[list->size++] = op;
    return 1;
}

#if FREE_LIST_MAX > 0
/* A kept object live again, with one reference: _Py_NewReference, which CPython exports up
 * to 3.12; from 3.13 what it does on a release build (sets the count; tracemalloc keeps the
 * block's first allocation site). */
static inline void free_list_revive(PyObject *op) {
#if PY_VERSION_HEX < 0x030D0000
    _Py_NewReference(op);
#else
    Py_SET_REFCNT(op, 1);
#endif
}
#endif

/* An object of a static type with every field unset and tracked by the GC, as
 * type->tp_alloc(type, 0) gives it (every object in the list is of that type). */
static inline PyObject *free_list_take(FreeList *list, PyTypeObject *type) {
#if FREE_LIST_MAX > 0
    if (list->size > 0 && free_list_usable()) {
        PyObject *op = list->items[--list->size];
        free_list_revive(op);
        PyObject_GC_Track(op);
        return op;
    }
#endif
    return type->tp_alloc(type, 0);
}


/* A module global read on every scope, re-read only when its module's dict changed. On
 * CPython < 3.12 a dict's version tag (a value no other dict or state of this one has) says
 * so. On later releases, where the tag is deprecated, a dict watcher (PyDict_AddWatcher) on
 * each dict read through a cache counts every change of those dicts, before it happens, in
 * g_watched_generation: an entry is fresh while the count it was read at is current. Where
 * no watcher can be had (an interpreter has 8), or on a free-threaded build, every read is a
 * lookup. The value is borrowed: the dict holds it as long as the entry is fresh. */
typedef struct {
    PyObject *dict;  /* borrowed: the dict the entry was read from (only compared) */
    uint64_t tag;
    PyObject *value; /* borrowed, or NULL: the key is missing */
} GlobalCache;

#if PY_VERSION_HEX >= 0x030C0000 && !defined(Py_GIL_DISABLED)
#define GLOBAL_CACHE_WATCHES 1
extern int g_dict_watcher; /* -1: none added yet; -2: none to be had */
extern uint64_t g_watched_generation;

static inline int on_watched_dict_change(PyDict_WatchEvent event, PyObject *dict, PyObject *key, PyObject *new_value) {
    g_watched_generation++;
    return 0;
}
#endif

/* Watch dict for changes, so that reads from it can be cached (3.12+); a dict that cannot
 * be watched is read afresh every time. Never fails. */
static inline void global_cache_watch(PyObject *dict) {
#ifdef GLOBAL_CACHE_WATCHES
    if (g_dict_watcher == -1) {
        g_dict_watcher = PyDict_AddWatcher(on_watched_dict_change);
        if (g_dict_watcher < 0) {
            PyErr_Clear();
            g_dict_watcher = -2;
        }
    }
    if (g_dict_watcher >= 0 && PyDict_Watch(g_dict_watcher, dict) < 0) {
        PyErr_Clear();
        g_dict_watcher = -2; /* a dict read unwatched: no entry can be trusted */
    }
    g_watched_generation++; /* entries read before the watch began are stale */
#endif
}

static inline int global_cache_fresh(GlobalCache *cache, PyObject *dict) {
#if PY_VERSION_HEX < 0x030C0000
    return cache->dict == dict && cache->tag == ((PyDictObject *)dict)->ma_version_tag;
#elif defined(GLOBAL_CACHE_WATCHES)
    return cache->dict == dict && cache->tag == g_watched_generation && g_dict_watcher >= 0;
#else
    return 0;
#endif
}

static inline void global_cache_keep(GlobalCache *cache, PyObject *dict, PyObject *value) {
#if PY_VERSION_HEX < 0x030C0000
    cache->dict = dict;
    cache->tag = ((PyDictObject *)dict)->ma_version_tag;
    cache->value = value;
#elif defined(GLOBAL_CACHE_WATCHES)
    cache->dict = dict; /* without a watcher it is never fresh (global_cache_fresh) */
    cache->tag = g_watched_generation;
    cache->value = value;
#endif
}

/* dict[key] through its cache: borrowed, NULL without an error when missing. */
static inline PyObject *global_get(GlobalCache *cache, PyObject *dict, PyObject *key) {
    if (global_cache_fresh(cache, dict)) return cache->value;
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value != NULL || !PyErr_Occurred()) global_cache_keep(cache, dict, value);
    return value;
}
/* A dict presized for n keys (a GPU brick's attributes: spans.c, GPU_BRICK_KEYS), so that
 * it is not resized while filled (from empty it would be at the 6th and the 11th key, ending
 * with the same 32-slot table); _PyDict_NewPresized is private, and gone from 3.13. */
static inline PyObject *new_attributes_dict(Py_ssize_t n) {
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_NewPresized(n);
#else
    (void)n;
    return PyDict_New();
#endif
}

#endif /* BRICKSCOPE_HOTPATH_COMPAT_H */
