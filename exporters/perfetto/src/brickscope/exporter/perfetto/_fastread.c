/* SPDX-License-Identifier: Apache-2.0
 *
 * brickscope.exporter.perfetto._fastread: the optional C accelerator of the .pftrace
 * reader's annotation decoding. The pure-Python reference is _annotations.py
 * (_decode_serialized, _parse, _dict, _flat, _value); this file decodes the same bytes to
 * the same Python values, and answers None whenever the Python code would have taken its
 * general message walk (an unusual field) or met anything malformed, so the caller falls
 * back and the result is the Python one, errors included.
 *
 * annotations(packet, names, values, lookup, cache, cache_limit, meta_name)
 *     packet: one serialized TracePacket holding exactly one track_event.
 *     names, values: the sequence's interned tables (dict int -> str, or None); an id
 *         missing from them is resolved by calling lookup(table, iid), which raises.
 *     cache: the sequence's decoded-entries cache (same keys and items as Python's).
 *     -> (attributes, meta) or None.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

typedef struct {
    const unsigned char *data;
    Py_ssize_t size;
} Buf;

/* Fields of one DebugAnnotation, as _annotations._parse returns them. */
typedef struct {
    int has_iid;
    unsigned long long iid;
    PyObject *name;   /* inline name (new reference) or NULL */
    int number;       /* value field: 0 none, 2 bool, 3 uint/pointer, 4 int, 5 double, 6 string, 17 string iid */
    unsigned long long raw;
    double dbl;
    PyObject *text;   /* string value (new reference) or NULL */
    Py_ssize_t entries[64][2];
    int n_entries;
    Py_ssize_t array[64][2];
    int n_array;
} Fields;

#define UNUSUAL 1 /* a field the fast decoder does not read: fall back (no Python error set) */

static int read_varint(const unsigned char *data, Py_ssize_t end, Py_ssize_t *pos, unsigned long long *out) {
    unsigned long long result = 0;
    int shift = 0;
    while (*pos < end) {
        unsigned char byte = data[(*pos)++];
        if (shift == 63 && byte > 1) return UNUSUAL; /* beyond 64 bits: Python would keep it */
        result |= (unsigned long long)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = result;
            return 0;
        }
        shift += 7;
        if (shift > 63) return UNUSUAL;
    }
    return UNUSUAL;
}

static void fields_release(Fields *f) {
    Py_CLEAR(f->name);
    Py_CLEAR(f->text);
}

/* Mirrors _parse: returns 0, UNUSUAL, or -1 with a Python error set. */
static int parse(const unsigned char *data, Py_ssize_t start, Py_ssize_t end, Fields *f) {
    f->has_iid = 0;
    f->name = NULL;
    f->text = NULL;
    f->number = 0;
    f->n_entries = 0;
    f->n_array = 0;
    Py_ssize_t pos = start;
    while (pos < end) {
        unsigned char tag = data[pos++];
        unsigned long long v;
        if (tag == 0x08) { /* name_iid */
            if (read_varint(data, end, &pos, &v)) return UNUSUAL;
            f->has_iid = 1; /* name_iid and name are a oneof: the last one wins */
            f->iid = v;
            Py_CLEAR(f->name);
        } else if (tag == 0x20 || tag == 0x18 || tag == 0x38 || tag == 0x10) {
            if (read_varint(data, end, &pos, &v)) return UNUSUAL;
            f->raw = v;
            f->number = tag == 0x20 ? 4 : tag == 0x10 ? 2 : 3;
            Py_CLEAR(f->text);
        } else if (tag == 0x29) { /* double */
            if (pos + 8 > end) return UNUSUAL;
            memcpy(&f->dbl, data + pos, 8); /* little-endian hosts only: checked at import */
            pos += 8;
            f->number = 5;
            Py_CLEAR(f->text);
        } else if (tag == 0x32 || tag == 0x52 || tag == 0x5A || tag == 0x62) {
            if (read_varint(data, end, &pos, &v)) return UNUSUAL;
            if (v > (unsigned long long)(end - pos)) return UNUSUAL;
            Py_ssize_t stop = pos + (Py_ssize_t)v;
            if (tag == 0x5A) {
                if (f->n_entries == 64) return UNUSUAL;
                f->entries[f->n_entries][0] = pos;
                f->entries[f->n_entries][1] = stop;
                f->n_entries++;
            } else if (tag == 0x62) {
                if (f->n_array == 64) return UNUSUAL;
                f->array[f->n_array][0] = pos;
                f->array[f->n_array][1] = stop;
                f->n_array++;
            } else {
                PyObject *text = PyUnicode_DecodeUTF8((const char *)data + pos, stop - pos, NULL);
                if (text == NULL) {
                    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
                    PyErr_Clear();
                    return UNUSUAL;
                }
                if (tag == 0x52) {
                    Py_XSETREF(f->name, text);
                    f->has_iid = 0;
                } else {
                    Py_XSETREF(f->text, text);
                    f->number = 6;
                }
            }
            pos = stop;
        } else if (tag == 0x88 && pos < end && data[pos] == 0x01) { /* string_value_iid (17) */
            pos++;
            if (read_varint(data, end, &pos, &v)) return UNUSUAL;
            f->raw = v;
            f->number = 17;
            Py_CLEAR(f->text);
        } else {
            return UNUSUAL;
        }
    }
    return 0;
}

typedef struct {
    const unsigned char *data;
    PyObject *names;
    PyObject *values;
    PyObject *lookup;
} Ctx;

static PyObject *s_names, *s_values;

/* table[iid], else lookup(table_name, iid) (which raises for an undefined id). */
static PyObject *interned(PyObject *table, PyObject *table_name, PyObject *lookup, unsigned long long iid) {
    PyObject *key = PyLong_FromUnsignedLongLong(iid);
    if (key == NULL) return NULL;
    PyObject *found = NULL;
    if (table != Py_None) {
        found = PyDict_GetItemWithError(table, key);
        if (found == NULL && PyErr_Occurred()) {
            Py_DECREF(key);
            return NULL;
        }
    }
    if (found != NULL) {
        Py_DECREF(key);
        if (!PyUnicode_CheckExact(found)) return NULL; /* not a str (a damaged file): Python's own error */
        Py_INCREF(found);
        return found;
    }
    if (lookup == NULL) { /* the caller hands the packet to Python, whose lookup raises */
        Py_DECREF(key);
        return NULL;
    }
    PyObject *result = PyObject_CallFunctionObjArgs(lookup, table_name, key, NULL);
    Py_DECREF(key);
    return result;
}

static PyObject *field_name(Ctx *c, Fields *f) {
    if (f->has_iid) return interned(c->names, s_names, c->lookup, f->iid);
    if (f->name != NULL) {
        Py_INCREF(f->name);
        return f->name;
    }
    return PyUnicode_FromStringAndSize("", 0);
}

static PyObject *decode_dict(Ctx *c, Fields *f, int *unusual);

/* Mirrors _value: the leaf's Python value. */
static PyObject *field_value(Ctx *c, Fields *f, int *unusual) {
    switch (f->number) {
    case 17: return interned(c->values, s_values, c->lookup, f->raw);
    case 2: return PyBool_FromLong(f->raw != 0);
    case 3: return PyLong_FromUnsignedLongLong(f->raw);
    case 4: return PyLong_FromLongLong((long long)f->raw);
    case 5: return PyFloat_FromDouble(f->dbl);
    case 6: Py_INCREF(f->text); return f->text;
    default: break;
    }
    if (f->n_entries) return decode_dict(c, f, unusual);
    PyObject *items = PyTuple_New(f->n_array);
    if (items == NULL) return NULL;
    for (int i = 0; i < f->n_array; i++) {
        Fields item;
        int rc = parse(c->data, f->array[i][0], f->array[i][1], &item);
        PyObject *value = NULL;
        if (rc == 0) value = field_value(c, &item, unusual);
        fields_release(&item);
        if (rc == UNUSUAL) *unusual = 1;
        if (value == NULL) {
            Py_DECREF(items);
            return NULL;
        }
        PyTuple_SET_ITEM(items, i, value);
    }
    return items;
}

/* Mirrors _dict. */
static PyObject *decode_dict(Ctx *c, Fields *f, int *unusual) {
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    for (int i = 0; i < f->n_entries; i++) {
        Fields entry;
        int rc = parse(c->data, f->entries[i][0], f->entries[i][1], &entry);
        PyObject *key = NULL, *value = NULL;
        if (rc == 0) {
            key = field_name(c, &entry);
            if (key != NULL) value = entry.n_entries ? decode_dict(c, &entry, unusual) : field_value(c, &entry, unusual);
        }
        fields_release(&entry);
        if (rc == UNUSUAL) *unusual = 1;
        if (value == NULL || PyDict_SetItem(out, key, value) < 0) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(key);
        Py_DECREF(value);
    }
    return out;
}

/* Mirrors _flat: (key, value) leaves of entries under prefix, appended to out. */
static int flatten(Ctx *c, Py_ssize_t (*ranges)[2], int n, PyObject *prefix, PyObject *out, int *unusual) {
    for (int i = 0; i < n; i++) {
        Fields f;
        int rc = parse(c->data, ranges[i][0], ranges[i][1], &f);
        if (rc != 0) {
            fields_release(&f);
            if (rc == UNUSUAL) *unusual = 1;
            return -1;
        }
        PyObject *name = field_name(c, &f);
        PyObject *key = name == NULL ? NULL : PyUnicode_Concat(prefix, name);
        Py_XDECREF(name);
        int failed = key == NULL;
        if (!failed && f.n_entries) {
            PyObject *dot = PyUnicode_FromString(".");
            PyObject *deeper = dot == NULL ? NULL : PyUnicode_Concat(key, dot);
            Py_XDECREF(dot);
            failed = deeper == NULL || flatten(c, f.entries, f.n_entries, deeper, out, unusual) < 0;
            Py_XDECREF(deeper);
        } else if (!failed) {
            PyObject *value = field_value(c, &f, unusual);
            PyObject *pair = value == NULL ? NULL : PyTuple_Pack(2, key, value);
            Py_XDECREF(value);
            failed = pair == NULL || PyList_Append(out, pair) < 0;
            Py_XDECREF(pair);
        }
        Py_XDECREF(key);
        fields_release(&f);
        if (failed) return -1;
    }
    return 0;
}

/* The decoded-entries cache is keyed as the Python code keys it: (prefix, entry bytes). Making
 * that key per entry (a bytes object, a tuple, SipHash over the bytes) cost more than the rest
 * of the lookup, so the keys themselves are remembered here, by a cheap hash of the bytes and
 * the identity of the top-level name (held, so its address is not reused): a remembered key is
 * the same object each time, and the cache's lookup finds it by identity. Bounded (direct
 * mapped, a newer key replaces an older one); a miss only makes the key afresh. */
#define KEY_MEMO_SLOTS 4096
typedef struct {
    PyObject *base;  /* the top-level annotation's name */
    PyObject *key;   /* (base + ".", entry bytes) */
    unsigned long long hash;
} KeyMemo;
static KeyMemo key_memo[KEY_MEMO_SLOTS];

static PyObject *entry_key(PyObject *base, const unsigned char *bytes, Py_ssize_t size) {
    unsigned long long hash = 1469598103934665603ULL ^ (unsigned long long)(uintptr_t)base;
    for (Py_ssize_t i = 0; i < size; i++) hash = (hash ^ bytes[i]) * 1099511628211ULL;
    hash ^= hash >> 29;
    KeyMemo *slot = &key_memo[hash & (KEY_MEMO_SLOTS - 1)];
    if (slot->base == base && slot->hash == hash) {
        PyObject *raw = PyTuple_GET_ITEM(slot->key, 1);
        if (PyBytes_GET_SIZE(raw) == size && memcmp(PyBytes_AS_STRING(raw), bytes, (size_t)size) == 0)
            return Py_NewRef(slot->key);
    }
    PyObject *dot = PyUnicode_FromString(".");
    PyObject *prefix = dot == NULL ? NULL : PyUnicode_Concat(base, dot);
    Py_XDECREF(dot);
    PyObject *raw = prefix == NULL ? NULL : PyBytes_FromStringAndSize((const char *)bytes, size);
    PyObject *key = raw == NULL ? NULL : PyTuple_Pack(2, prefix, raw);
    Py_XDECREF(prefix);
    Py_XDECREF(raw);
    if (key == NULL) return NULL;
    Py_XSETREF(slot->base, Py_NewRef(base));
    Py_XSETREF(slot->key, Py_NewRef(key));
    slot->hash = hash;
    return key;
}

/* One top-level annotation into attributes / meta (mirrors _decode_serialized's loop body). */
static int top_level(Ctx *c, Py_ssize_t start, Py_ssize_t end, PyObject *attributes, PyObject **meta,
                     PyObject *meta_name, PyObject *cache, Py_ssize_t cache_limit, int *unusual) {
    Fields f;
    int rc = parse(c->data, start, end, &f);
    if (rc != 0) {
        fields_release(&f);
        if (rc == UNUSUAL) *unusual = 1;
        return -1;
    }
    int result = -1;
    PyObject *key = field_name(c, &f);
    if (key == NULL) goto done;
    if (!f.n_entries) {
        PyObject *value = field_value(c, &f, unusual);
        if (value == NULL) goto done;
        result = PyDict_SetItem(attributes, key, value);
        Py_DECREF(value);
        goto done;
    }
    int is_meta = PyUnicode_Compare(key, meta_name);
    if (is_meta == -1 && PyErr_Occurred()) goto done;
    if (is_meta == 0) {
        PyObject *decoded = decode_dict(c, &f, unusual);
        if (decoded == NULL) goto done;
        Py_XSETREF(*meta, decoded);
        result = 0;
        goto done;
    }
    for (int i = 0; i < f.n_entries; i++) {
        Py_ssize_t s = f.entries[i][0], e = f.entries[i][1];
        PyObject *entry = entry_key(key, c->data + s, e - s);
        if (entry == NULL) goto done;
        PyObject *prefix = PyTuple_GET_ITEM(entry, 0);
        PyObject *items = PyDict_GetItemWithError(cache, entry);
        if (items != NULL) {
            Py_INCREF(items);
        } else {
            if (PyErr_Occurred()) {
                Py_DECREF(entry);
                goto loop_failed;
            }
            items = PyList_New(0);
            Py_ssize_t range[1][2] = {{s, e}};
            if (items == NULL || flatten(c, range, 1, prefix, items, unusual) < 0) {
                Py_XDECREF(items);
                Py_DECREF(entry);
                goto loop_failed;
            }
            if (PyDict_GET_SIZE(cache) >= cache_limit) PyDict_Clear(cache);
            if (PyDict_SetItem(cache, entry, items) < 0) {
                Py_DECREF(items);
                Py_DECREF(entry);
                goto loop_failed;
            }
        }
        Py_DECREF(entry);
        Py_ssize_t n = PyList_GET_SIZE(items);
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *pair = PyList_GET_ITEM(items, j);
            if (PyDict_SetItem(attributes, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)) < 0) {
                Py_DECREF(items);
                goto loop_failed;
            }
        }
        Py_DECREF(items);
    }
    result = 0;
    goto done;
loop_failed:
    result = -1;
done:
    Py_XDECREF(key);
    fields_release(&f);
    return result;
}

/* Skip one field of the given wire type at *pos; UNUSUAL for groups and anything broken. */
static int skip_field(const unsigned char *data, Py_ssize_t end, Py_ssize_t *pos, int wire, Py_ssize_t *len_start,
                      Py_ssize_t *len_stop) {
    unsigned long long v;
    switch (wire) {
    case 0: return read_varint(data, end, pos, &v);
    case 1: if (*pos + 8 > end) return UNUSUAL; *pos += 8; return 0;
    case 5: if (*pos + 4 > end) return UNUSUAL; *pos += 4; return 0;
    case 2:
        if (read_varint(data, end, pos, &v) || v > (unsigned long long)(end - *pos)) return UNUSUAL;
        *len_start = *pos;
        *pos += (Py_ssize_t)v;
        *len_stop = *pos;
        return 0;
    default: return UNUSUAL;
    }
}

/* Find the one length-delimited field `number` in data[start:end]; UNUSUAL if absent or repeated. */
static int only_field(const unsigned char *data, Py_ssize_t start, Py_ssize_t end, unsigned long long number,
                      Py_ssize_t *out_start, Py_ssize_t *out_stop) {
    Py_ssize_t pos = start;
    int found = 0;
    while (pos < end) {
        unsigned long long tag;
        if (read_varint(data, end, &pos, &tag)) return UNUSUAL;
        Py_ssize_t s = 0, e = 0;
        int wire = (int)(tag & 7);
        if (skip_field(data, end, &pos, wire, &s, &e)) return UNUSUAL;
        if ((tag >> 3) == number) {
            if (wire != 2 || found) return UNUSUAL; /* repeated embedded messages merge in protobuf */
            found = 1;
            *out_start = s;
            *out_stop = e;
        }
    }
    return found ? 0 : UNUSUAL;
}

/* The debug annotations of the one track_event in data[0:size] (a serialized TracePacket),
 * into *attributes and *meta (new references). Returns 0; or -1 with no Python error set when
 * the packet is unusual (the Python code decodes it), or with one set on a real error.
 * lookup NULL: an interned id missing from names/values is unusual too (no call into Python). */
static int decode_event(const unsigned char *data, Py_ssize_t size, PyObject *names, PyObject *values,
                        PyObject *lookup, PyObject *cache, Py_ssize_t cache_limit, PyObject *meta_name,
                        PyObject **attributes_out, PyObject **meta_out) {
    Ctx c = {data, names, values, lookup};
    Py_ssize_t event_start = 0, event_stop = 0;
    if (only_field(c.data, 0, size, 11, &event_start, &event_stop)) return -1; /* TracePacket.track_event */
#if PY_VERSION_HEX < 0x030D0000
    PyObject *attributes = _PyDict_NewPresized(16); /* a span has about a dozen: no resize on the way */
#else
    PyObject *attributes = PyDict_New();
#endif
    PyObject *meta = PyDict_New();
    if (attributes == NULL || meta == NULL) goto failed;
    int unusual = 0;
    Py_ssize_t pos = event_start;
    while (pos < event_stop) {
        unsigned long long tag;
        Py_ssize_t s = 0, e = 0;
        if (read_varint(c.data, event_stop, &pos, &tag) ||
            skip_field(c.data, event_stop, &pos, (int)(tag & 7), &s, &e)) {
            goto failed;
        }
        if (tag == ((4 << 3) | 2)) { /* TrackEvent.debug_annotations */
            if (top_level(&c, s, e, attributes, &meta, meta_name, cache, cache_limit, &unusual) < 0) goto failed;
        }
    }
    *attributes_out = attributes;
    *meta_out = meta;
    return 0;
failed:
    Py_XDECREF(attributes);
    Py_XDECREF(meta);
    return -1;
}

static PyObject *annotations(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "annotations(packet, names, values, lookup, cache, cache_limit, meta_name)");
        return NULL;
    }
    PyObject *packet = args[0], *cache = args[4], *meta_name = args[6];
    if (!PyBytes_Check(packet) || !PyDict_Check(cache) || !PyUnicode_Check(meta_name) ||
        (args[1] != Py_None && !PyDict_Check(args[1])) || (args[2] != Py_None && !PyDict_Check(args[2]))) {
        PyErr_SetString(PyExc_TypeError, "annotations: bytes, dict|None, dict|None, callable, dict, int, str expected");
        return NULL;
    }
    Py_ssize_t cache_limit = PyLong_AsSsize_t(args[5]);
    if (cache_limit == -1 && PyErr_Occurred()) return NULL;
    PyObject *attributes, *meta;
    if (decode_event((const unsigned char *)PyBytes_AS_STRING(packet), PyBytes_GET_SIZE(packet), args[1], args[2],
                     args[3], cache, cache_limit, meta_name, &attributes, &meta) < 0) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE; /* unusual: the Python code decodes this event */
    }
    PyObject *result = PyTuple_Pack(2, attributes, meta);
    Py_DECREF(attributes);
    Py_DECREF(meta);
    return result;
}


/* ---- scan(packet): the fields of a plain track-event packet, without a message object ----
 *
 * Mirrors what _reader._Decoder.packet reads of a TracePacket that holds only a timestamp,
 * a sequence id, sequence flags, a timestamp clock id and one track_event whose fields are
 * among type, track_uuid, name_iid/name, flow ids, correlation id, categories and debug
 * annotations. Anything else (interned data, descriptors, clock snapshots, defaults, any
 * other field, packed flow ids, a type protobuf would not accept, invalid UTF-8, a malformed
 * field) answers None and the caller parses the packet with protobuf as before.
 *
 * -> (sequence_id, sequence_flags, timestamp, timestamp_clock_id or None, type, track_uuid,
 *     name_iid or None, name or None, flow_ids, terminating_flow_ids,
 *     correlation_id_str_iid or None, correlation_id_str or None) or None
 */

#define MAX_FLOWS 32

static PyObject *u64_tuple(const unsigned long long *values, int n) {
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(values[i]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *optional_u64(int present, unsigned long long value) {
    if (!present) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(value);
}

/* The fields of a plain track-event packet (names and correlation strings as byte ranges). */
typedef struct {
    unsigned long long sequence_id, flags, timestamp, clock_id;
    int has_clock;
    unsigned long long type, track_uuid, name_iid, correlation_iid;
    int name_kind, correlation_kind; /* oneofs: 0 unset, 1 iid, 2 string (last one wins) */
    Py_ssize_t name_start, name_stop, correlation_start, correlation_stop;
    unsigned long long flows[MAX_FLOWS], terminating[MAX_FLOWS];
    int n_flows, n_terminating;
} Scan;

/* 0, or UNUSUAL: not a plain track-event packet (the caller parses it with protobuf). */
static int scan_packet(const unsigned char *data, Py_ssize_t size, Scan *p) {
    Py_ssize_t pos = 0, event_start = 0, event_stop = 0;
    int events = 0;
    unsigned long long v;
    p->sequence_id = p->flags = p->timestamp = p->clock_id = 0;
    p->has_clock = 0;
    while (pos < size) {
        unsigned long long tag;
        if (read_varint(data, size, &pos, &tag)) return UNUSUAL;
        switch (tag) {
        case (8 << 3) | 0: if (read_varint(data, size, &pos, &p->timestamp)) return UNUSUAL; break;
        case (10 << 3) | 0: if (read_varint(data, size, &pos, &v)) return UNUSUAL; p->sequence_id = v & 0xFFFFFFFFu; break;
        case (13 << 3) | 0: if (read_varint(data, size, &pos, &v)) return UNUSUAL; p->flags = v & 0xFFFFFFFFu; break;
        case (58 << 3) | 0:
            if (read_varint(data, size, &pos, &v)) return UNUSUAL;
            p->clock_id = v & 0xFFFFFFFFu;
            p->has_clock = 1;
            break;
        case (11 << 3) | 2:
            if (skip_field(data, size, &pos, 2, &event_start, &event_stop)) return UNUSUAL;
            events++;
            break;
        default: return UNUSUAL;
        }
    }
    if (events != 1) return UNUSUAL;
    p->type = p->track_uuid = p->name_iid = p->correlation_iid = 0;
    p->name_kind = p->correlation_kind = 0;
    p->name_start = p->name_stop = p->correlation_start = p->correlation_stop = 0;
    p->n_flows = p->n_terminating = 0;
    pos = event_start;
    while (pos < event_stop) {
        unsigned long long tag;
        Py_ssize_t s = 0, e = 0;
        if (read_varint(data, event_stop, &pos, &tag)) return UNUSUAL;
        switch (tag) {
        case (9 << 3) | 0:
            if (read_varint(data, event_stop, &pos, &p->type)) return UNUSUAL;
            if (p->type < 1 || p->type > 4) return UNUSUAL; /* protobuf keeps unknown enum values aside */
            break;
        case (11 << 3) | 0: if (read_varint(data, event_stop, &pos, &p->track_uuid)) return UNUSUAL; break;
        case (10 << 3) | 0:
            if (read_varint(data, event_stop, &pos, &p->name_iid)) return UNUSUAL;
            p->name_kind = 1;
            break;
        case (23 << 3) | 2:
            if (skip_field(data, event_stop, &pos, 2, &p->name_start, &p->name_stop)) return UNUSUAL;
            p->name_kind = 2;
            break;
        case (54 << 3) | 0:
            if (read_varint(data, event_stop, &pos, &p->correlation_iid)) return UNUSUAL;
            p->correlation_kind = 1;
            break;
        case (53 << 3) | 2:
            if (skip_field(data, event_stop, &pos, 2, &p->correlation_start, &p->correlation_stop)) return UNUSUAL;
            p->correlation_kind = 2;
            break;
        case (47 << 3) | 1:
        case (48 << 3) | 1:
            if (pos + 8 > event_stop) return UNUSUAL;
            memcpy(&v, data + pos, 8);
            pos += 8;
            if ((tag >> 3) == 47) {
                if (p->n_flows == MAX_FLOWS) return UNUSUAL;
                p->flows[p->n_flows++] = v;
            } else {
                if (p->n_terminating == MAX_FLOWS) return UNUSUAL;
                p->terminating[p->n_terminating++] = v;
            }
            break;
        case (4 << 3) | 2:  /* debug_annotations: decoded by annotations() */
        case (3 << 3) | 0:  /* category_iids: not read */
        case (3 << 3) | 2:
        case (22 << 3) | 2: /* categories: not read */
            if (skip_field(data, event_stop, &pos, (int)(tag & 7), &s, &e)) return UNUSUAL;
            break;
        default: return UNUSUAL;
        }
    }
    return 0;
}

/* A UTF-8 range of the packet as str; NULL with no error set when it is not valid UTF-8. */
static PyObject *utf8(const unsigned char *data, Py_ssize_t start, Py_ssize_t stop) {
    PyObject *text = PyUnicode_DecodeUTF8((const char *)data + start, stop - start, NULL);
    if (text == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
    return text;
}

static PyObject *scan(PyObject *module, PyObject *packet) {
    if (!PyBytes_Check(packet)) {
        PyErr_SetString(PyExc_TypeError, "scan(packet): bytes expected");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(packet);
    Scan p;
    if (scan_packet(data, PyBytes_GET_SIZE(packet), &p)) Py_RETURN_NONE;
    PyObject *name = NULL, *correlation = NULL;
    if (p.name_kind == 2 && (name = utf8(data, p.name_start, p.name_stop)) == NULL) goto undecodable;
    if (p.correlation_kind == 2 && (correlation = utf8(data, p.correlation_start, p.correlation_stop)) == NULL)
        goto undecodable;
    return Py_BuildValue(
        "(KKKNKKNNNNNN)", p.sequence_id, p.flags, p.timestamp, optional_u64(p.has_clock, p.clock_id), p.type,
        p.track_uuid, optional_u64(p.name_kind == 1, p.name_iid), name ? name : (Py_INCREF(Py_None), Py_None),
        u64_tuple(p.flows, p.n_flows), u64_tuple(p.terminating, p.n_terminating),
        optional_u64(p.correlation_kind == 1, p.correlation_iid),
        correlation ? correlation : (Py_INCREF(Py_None), Py_None));
undecodable:
    Py_XDECREF(name);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

/* ---- feed(): the reader's decoder loop (_reader._Decoder.packet + ready) over a buffer ----
 *
 * configure(*, resource, hold, max_waiting, max_packet, cache_limit, cleared_flag, clock_realtime,
 *           meta_name, host_start_key, host_duration_key, gpu_duration_key)
 *     once, at import, by keyword fields only: the reader's constants and its
 *     _resource(uuid, descriptors) function.
 * feed(decoder, buffer, offset, out, records) -> offset
 *     Decodes the packets of buffer (bytes of a Trace: length-delimited packet fields) from
 *     offset on, with the _Decoder's own state (its sequences, open slices, ended deque,
 *     launches, events, released ids, resources), for as long as each one is a complete,
 *     plain BEGIN/END/COUNTER packet on a known sequence whose names, ids and annotations it
 *     can read; appends each span the reference's ready() would give (a SpanRecord when
 *     records, else the _decoded tuple) to the list out, and returns the offset of the first
 *     packet it left alone: anything else (another field, a framing problem or the end of the
 *     data, an instant, a cleared or new sequence, an unknown interned id, a clock before its
 *     snapshot, an unusual annotation) is decoded by the Python code, which raises the
 *     reference's errors. It changes the state only for packets it decodes whole.
 * The open slices it makes are OpenSlice objects with _reader._Open's attributes; it reads
 * the Python _Open objects the reference makes too.
 */

#define OPEN_SLICE_FIELDS(X) X(start) X(name) X(trace_id) X(attributes) X(meta) X(flows)

typedef struct {
    PyObject_HEAD
#define X(f) PyObject *f;
    OPEN_SLICE_FIELDS(X)
#undef X
    char ours;
} OpenSlice;

static int open_slice_traverse(OpenSlice *self, visitproc visit, void *arg) {
#define X(f) Py_VISIT(self->f);
    OPEN_SLICE_FIELDS(X)
#undef X
    return 0;
}

static int open_slice_clear(OpenSlice *self) {
#define X(f) Py_CLEAR(self->f);
    OPEN_SLICE_FIELDS(X)
#undef X
    return 0;
}

static void open_slice_dealloc(OpenSlice *self) {
    PyObject_GC_UnTrack(self);
    open_slice_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef open_slice_members[] = {
#define X(f) {#f, T_OBJECT_EX, offsetof(OpenSlice, f), 0, NULL},
    OPEN_SLICE_FIELDS(X)
#undef X
    {"ours", T_BOOL, offsetof(OpenSlice, ours), 0, NULL},
    {NULL}};

static PyTypeObject OpenSliceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brickscope.exporter.perfetto._fastread.OpenSlice",
    .tp_basicsize = sizeof(OpenSlice),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A slice begun and not yet ended (the C form of _reader._Open).",
    .tp_traverse = (traverseproc)open_slice_traverse,
    .tp_clear = (inquiry)open_slice_clear,
    .tp_dealloc = (destructor)open_slice_dealloc,
    .tp_members = open_slice_members,
};

static struct {
    int ready;
    PyObject *resource; /* _reader._resource */
    Py_ssize_t hold, max_waiting, cache_limit;
    long long gpu_tolerance; /* brickscope.offline's GPU_DURATION_TOLERANCE_NS */
    unsigned long long max_packet, cleared_flag, clock_realtime;
    PyObject *meta_name, *host_start, *host_duration, *gpu_duration, *self_duration;
    PyObject *nonnegative_keys; /* a tuple of str: attributes never below zero (durations, amounts) */
    PyObject *impossible;     /* brickscope.offline.impossible */
} cfg;

static PyObject *s_span_id, *s_implied, *s_parent_span_id, *s_gpu_flag, *s_event_names, *s_correlations,
    *s_tables, *s_decoded, *s_clocks, *s_default_clock, *s_sequences, *s_open, *s_ended, *s_launches, *s_events,
    *s_released, *s_resources, *s_descriptors, *s_decoded_method, *s_append, *s_popleft, *s_empty_str, *s_zero,
    *s_empty_tuple, *s_one, *s_ours, *s_start, *s_meta, *s_flows, *s_dropped;

/* configure(*, resource, hold, ...): keyword fields only; a positional argument, a missing
 * field or an unknown one is a TypeError naming it (as the core's take_fields in
 * _hotpath_c/module.c). Nothing changes unless every field is accepted. */
static PyObject *configure(PyObject *module, PyObject *args, PyObject *kwargs) {
    static const char *const fields[] = {"resource",       "hold",          "max_waiting",    "max_packet",
                                         "cache_limit",    "cleared_flag",  "clock_realtime", "meta_name",
                                         "host_start_key", "host_duration_key", "gpu_duration_key",
                                         "self_duration_key", "nonnegative_keys", "impossible",
                                         "gpu_duration_tolerance"};
    enum { N_FIELDS = 15 };
    PyObject *v[N_FIELDS];
    if (args != NULL && PyTuple_GET_SIZE(args) != 0) {
        PyErr_SetString(PyExc_TypeError, "configure takes keyword arguments only");
        return NULL;
    }
    for (int i = 0; i < N_FIELDS; i++) {
        v[i] = kwargs == NULL ? NULL : PyDict_GetItemString(kwargs, fields[i]);
        if (v[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "configure: missing field '%s'", fields[i]);
            return NULL;
        }
    }
    if (PyDict_GET_SIZE(kwargs) != N_FIELDS) {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            const char *text = PyUnicode_AsUTF8(key);
            if (text == NULL) return NULL;
            int i = 0;
            while (i < N_FIELDS && strcmp(fields[i], text) != 0) i++;
            if (i == N_FIELDS) {
                PyErr_Format(PyExc_TypeError, "configure: unknown field '%s'", text);
                return NULL;
            }
        }
    }
    Py_ssize_t numbers[6];
    for (int i = 0; i < 6; i++) {
        numbers[i] = PyLong_AsSsize_t(v[i + 1]);
        if (numbers[i] == -1 && PyErr_Occurred()) return NULL;
        if (numbers[i] < 0) {
            PyErr_Format(PyExc_ValueError, "configure: %s is negative", fields[i + 1]);
            return NULL;
        }
    }
    if (!PyCallable_Check(v[0]) || !PyCallable_Check(v[13])) {
        PyErr_Format(PyExc_TypeError, "configure: %s must be callable", fields[PyCallable_Check(v[0]) ? 13 : 0]);
        return NULL;
    }
    long long tolerance = PyLong_AsLongLong(v[14]);
    if (tolerance == -1 && PyErr_Occurred()) return NULL;
    if (tolerance < 0) {
        PyErr_SetString(PyExc_ValueError, "configure: gpu_duration_tolerance is negative");
        return NULL;
    }
    if (!PyTuple_CheckExact(v[12])) {
        PyErr_SetString(PyExc_TypeError, "configure: nonnegative_keys must be a tuple of str");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v[12]); i++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(v[12], i))) {
            PyErr_SetString(PyExc_TypeError, "configure: nonnegative_keys must be a tuple of str");
            return NULL;
        }
    }
    for (int i = 7; i < 12; i++) {
        if (!PyUnicode_Check(v[i])) {
            PyErr_Format(PyExc_TypeError, "configure: %s must be a str", fields[i]);
            return NULL;
        }
    }
    Py_XSETREF(cfg.resource, Py_NewRef(v[0]));
    cfg.hold = numbers[0];
    cfg.max_waiting = numbers[1];
    cfg.max_packet = (unsigned long long)numbers[2];
    cfg.cache_limit = numbers[3];
    cfg.cleared_flag = (unsigned long long)numbers[4];
    cfg.clock_realtime = (unsigned long long)numbers[5];
    Py_XSETREF(cfg.meta_name, Py_NewRef(v[7]));
    Py_XSETREF(cfg.host_start, Py_NewRef(v[8]));
    Py_XSETREF(cfg.host_duration, Py_NewRef(v[9]));
    Py_XSETREF(cfg.gpu_duration, Py_NewRef(v[10]));
    Py_XSETREF(cfg.self_duration, Py_NewRef(v[11]));
    Py_XSETREF(cfg.nonnegative_keys, Py_NewRef(v[12]));
    Py_XSETREF(cfg.impossible, Py_NewRef(v[13]));
    cfg.gpu_tolerance = tolerance;
    cfg.ready = 1;
    Py_RETURN_NONE;
}

/* One call's view of the decoder's state (new references). */
typedef struct {
    PyObject *decoder, *out;
    int records;
    PyObject *sequences, *open, *ended, *launches, *events, *released, *resources, *descriptors, *dropped;
    PyObject *ended_append, *ended_popleft;
    /* the sequence of the last packet, cached for the call (only Python changes its tables) */
    int has_sequence;
    unsigned long long sequence_id;
    PyObject *tables, *decoded, *clocks, *default_clock, *names, *values, *event_names, *correlations;
    /* the last correlation string read and its trace id: a trace's spans come in runs */
    PyObject *correlation_text, *trace_id;
} Feed;

static void feed_forget_sequence(Feed *f) {
    f->has_sequence = 0;
    Py_CLEAR(f->tables);
    Py_CLEAR(f->decoded);
    Py_CLEAR(f->clocks);
    Py_CLEAR(f->default_clock);
    Py_CLEAR(f->names);
    Py_CLEAR(f->values);
    Py_CLEAR(f->event_names);
    Py_CLEAR(f->correlations);
}

static void feed_release(Feed *f) {
    feed_forget_sequence(f);
    Py_CLEAR(f->correlation_text);
    Py_CLEAR(f->trace_id);
    Py_CLEAR(f->sequences);
    Py_CLEAR(f->open);
    Py_CLEAR(f->ended);
    Py_CLEAR(f->launches);
    Py_CLEAR(f->events);
    Py_CLEAR(f->released);
    Py_CLEAR(f->resources);
    Py_CLEAR(f->descriptors);
    Py_CLEAR(f->dropped);
    Py_CLEAR(f->ended_append);
    Py_CLEAR(f->ended_popleft);
}

/* tables.get(name), or None (new reference). */
static PyObject *table_of(PyObject *tables, PyObject *name) {
    PyObject *table = PyDict_GetItemWithError(tables, name);
    if (table == NULL) {
        if (PyErr_Occurred()) return NULL;
        table = Py_None;
    }
    Py_INCREF(table);
    return table;
}

/* Make sequence_id's state current: 0, UNUSUAL (a sequence not seen yet), -1 on error. */
static int feed_use_sequence(Feed *f, unsigned long long sequence_id) {
    if (f->has_sequence && f->sequence_id == sequence_id) return 0;
    feed_forget_sequence(f);
    PyObject *key = PyLong_FromUnsignedLongLong(sequence_id);
    if (key == NULL) return -1;
    PyObject *sequence = PyDict_GetItemWithError(f->sequences, key);
    Py_DECREF(key);
    if (sequence == NULL) return PyErr_Occurred() ? -1 : UNUSUAL;
    Py_INCREF(sequence);
    f->tables = PyObject_GetAttr(sequence, s_tables);
    f->decoded = PyObject_GetAttr(sequence, s_decoded);
    f->clocks = PyObject_GetAttr(sequence, s_clocks);
    f->default_clock = PyObject_GetAttr(sequence, s_default_clock);
    Py_DECREF(sequence);
    if (f->tables == NULL || f->decoded == NULL || f->clocks == NULL || f->default_clock == NULL) return -1;
    if (!PyDict_Check(f->tables) || !PyDict_Check(f->decoded) || !PyDict_Check(f->clocks)) return UNUSUAL;
    f->names = table_of(f->tables, s_names);
    f->values = table_of(f->tables, s_values);
    f->event_names = table_of(f->tables, s_event_names);
    f->correlations = table_of(f->tables, s_correlations);
    if (f->names == NULL || f->values == NULL || f->event_names == NULL || f->correlations == NULL) return -1;
    if ((f->names != Py_None && !PyDict_Check(f->names)) || (f->values != Py_None && !PyDict_Check(f->values)))
        return UNUSUAL;
    f->has_sequence = 1;
    f->sequence_id = sequence_id;
    return 0;
}

/* The packet's clock (new reference): its own, else the sequence's default. */
static PyObject *feed_clock(Feed *f, Scan *p) {
    if (p->has_clock) return PyLong_FromUnsignedLongLong(p->clock_id);
    Py_INCREF(f->default_clock);
    return f->default_clock;
}

/* _on_clock without the update: *ts_out the absolute time (new reference); UNUSUAL for a
 * timestamp on an incremental clock before its snapshot (Python raises). */
static int feed_time(Feed *f, PyObject *clock, unsigned long long timestamp, PyObject **ts_out) {
    PyObject *ts = PyLong_FromUnsignedLongLong(timestamp);
    if (ts == NULL) return -1;
    PyObject *last = PyDict_GetItemWithError(f->clocks, clock);
    if (last != NULL) {
        *ts_out = PyNumber_Add(last, ts);
        Py_DECREF(ts);
        return *ts_out == NULL ? -1 : 0;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(ts);
        return -1;
    }
    if (!PyLong_CheckExact(clock)) {
        Py_DECREF(ts);
        return UNUSUAL;
    }
    unsigned long long id = PyLong_AsUnsignedLongLong(clock);
    if (id == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_DECREF(ts);
        return UNUSUAL;
    }
    if (id != 0 && id != cfg.clock_realtime && id >= 64 && id < 128) {
        Py_DECREF(ts);
        return UNUSUAL;
    }
    *ts_out = ts;
    return 0;
}

/* Apply the clock: sequence.clocks[clock] = ts when the clock is incremental. */
static int feed_advance(Feed *f, PyObject *clock, PyObject *ts) {
    int incremental = PyDict_Contains(f->clocks, clock);
    if (incremental < 0) return -1;
    return incremental ? PyDict_SetItem(f->clocks, clock, ts) : 0;
}

/* table[iid] (a new reference), NULL with no error when missing or the table is None. */
static PyObject *feed_interned(PyObject *table, unsigned long long iid) {
    if (table == Py_None) return NULL;
    PyObject *key = PyLong_FromUnsignedLongLong(iid);
    if (key == NULL) return NULL;
    PyObject *found = PyDict_GetItemWithError(table, key);
    Py_DECREF(key);
    Py_XINCREF(found);
    return found;
}

static int u64_in(PyObject *value, const unsigned long long *list, int n, int *found) {
    *found = 0;
    if (n == 0) return 0;
    if (!PyLong_CheckExact(value)) return UNUSUAL;
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or past 64 bits: equal to no flow id */
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (list[i] == v) *found = 1;
    return 0;
}

/* A BEGIN: _Open(ts, event, sequence, packet) pushed on its track's stack. */
static int feed_begin(Feed *f, const unsigned char *data, Py_ssize_t size, Scan *p) {
    PyObject *attributes = NULL, *meta = NULL, *name = NULL, *trace_id = NULL, *flows = NULL, *clock = NULL;
    PyObject *ts = NULL, *key = NULL;
    OpenSlice *piece = NULL;
    int rc = -1, gpu = 0;
    if (decode_event(data, size, f->names, f->values, NULL, f->decoded, cfg.cache_limit, cfg.meta_name, &attributes,
                     &meta) < 0) {
        return PyErr_Occurred() ? -1 : UNUSUAL;
    }
    int ours = PyDict_Contains(meta, s_span_id);
    if (ours < 0) goto done;
    if (ours) {
        if (p->name_kind == 1) {
            name = feed_interned(f->event_names, p->name_iid);
        } else if (p->name_kind == 2) {
            name = utf8(data, p->name_start, p->name_stop);
        } else {
            name = Py_NewRef(s_empty_str);
        }
        if (name == NULL) goto unusual_or_error;
        PyObject *text = NULL;
        if (p->correlation_kind == 1) {
            text = feed_interned(f->correlations, p->correlation_iid);
            if (text == NULL) goto unusual_or_error;
        } else if (p->correlation_kind == 2) {
            text = utf8(data, p->correlation_start, p->correlation_stop);
            if (text == NULL) goto unusual_or_error;
        }
        if (text != NULL && f->correlation_text != NULL && PyUnicode_Check(text) &&
            (text == f->correlation_text || PyUnicode_Compare(text, f->correlation_text) == 0)) {
            Py_DECREF(text);
            trace_id = Py_NewRef(f->trace_id);
        } else if (text != NULL) {
            trace_id = PyUnicode_Check(text) ? PyLong_FromUnicodeObject(text, 16) : NULL;
            if (trace_id == NULL) {
                Py_DECREF(text);
                PyErr_Clear(); /* not hex: the Python code raises the reference's error */
                goto unusual_or_error;
            }
            Py_XSETREF(f->correlation_text, text);
            Py_XSETREF(f->trace_id, Py_NewRef(trace_id));
        } else {
            trace_id = Py_NewRef(s_zero);
        }
        PyObject *span_id = PyDict_GetItemWithError(meta, s_span_id);
        if (span_id == NULL) goto done;
        int found;
        int in_rc = u64_in(span_id, p->terminating, p->n_terminating, &found);
        if (in_rc != 0) {
            rc = in_rc;
            goto done;
        }
        gpu = found;
    } else {
        name = Py_NewRef(s_empty_str);
        trace_id = Py_NewRef(s_zero);
    }
    clock = feed_clock(f, p);
    if (clock == NULL) goto done;
    rc = feed_time(f, clock, p->timestamp, &ts);
    if (rc != 0) goto done;
    rc = -1;
    /* from here on the packet is decoded whole: state changes */
    if (feed_advance(f, clock, ts) < 0) goto done;
    if (ours && PyDict_SetItem(meta, s_gpu_flag, gpu ? Py_True : Py_False) < 0) goto done;
    flows = u64_tuple(p->flows, p->n_flows);
    if (flows == NULL) goto done;
    piece = PyObject_GC_New(OpenSlice, &OpenSliceType);
    if (piece == NULL) goto done;
    piece->start = Py_NewRef(ts);
    piece->name = Py_NewRef(name);
    piece->trace_id = Py_NewRef(trace_id);
    piece->attributes = Py_NewRef(attributes);
    piece->meta = Py_NewRef(meta);
    piece->flows = Py_NewRef(flows);
    piece->ours = (char)ours;
    PyObject_GC_Track(piece);
    key = PyLong_FromUnsignedLongLong(p->track_uuid);
    if (key == NULL) goto done;
    PyObject *stack = PyDict_GetItemWithError(f->open, key);
    if (stack == NULL) {
        if (PyErr_Occurred()) goto done;
        stack = PyList_New(0);
        if (stack == NULL) goto done;
        int set = PyDict_SetItem(f->open, key, stack);
        Py_DECREF(stack);
        if (set < 0) goto done;
    }
    if (!PyList_Check(stack)) {
        PyErr_SetString(PyExc_TypeError, "_Decoder.open: a list per track expected");
        goto done;
    }
    rc = PyList_Append(stack, (PyObject *)piece);
    goto done;
unusual_or_error:
    rc = PyErr_Occurred() ? -1 : UNUSUAL;
done:
    Py_XDECREF(attributes);
    Py_XDECREF(meta);
    Py_XDECREF(name);
    Py_XDECREF(trace_id);
    Py_XDECREF(flows);
    Py_XDECREF(clock);
    Py_XDECREF(ts);
    Py_XDECREF(key);
    Py_XDECREF(piece);
    return rc;
}

/* _bounded_put(table, key, value). */
static int bounded_put(PyObject *table, PyObject *key, PyObject *value) {
    int present = PyDict_Contains(table, key);
    if (present < 0) return -1;
    if (!present && PyDict_GET_SIZE(table) >= cfg.max_waiting) {
        Py_ssize_t pos = 0;
        PyObject *first, *ignored;
        if (PyDict_Next(table, &pos, &first, &ignored)) {
            Py_INCREF(first);
            int deleted = PyDict_DelItem(table, first);
            Py_DECREF(first);
            if (deleted < 0) return -1;
        }
    }
    return PyDict_SetItem(table, key, value);
}

/* An END: _Decoder._end(uuid, ts, terminating_flow_ids). */
static int feed_end(Feed *f, Scan *p) {
    PyObject *clock = feed_clock(f, p), *ts = NULL, *key = NULL, *piece = NULL, *meta = NULL, *start = NULL;
    PyObject *flows = NULL;
    if (clock == NULL) return -1;
    int rc = feed_time(f, clock, p->timestamp, &ts);
    if (rc != 0) {
        Py_DECREF(clock);
        return rc;
    }
    rc = -1;
    key = PyLong_FromUnsignedLongLong(p->track_uuid);
    if (key == NULL) goto done;
    PyObject *stack = PyDict_GetItemWithError(f->open, key);
    if (stack == NULL && PyErr_Occurred()) goto done;
    if (stack != NULL && !PyList_Check(stack)) {
        PyErr_SetString(PyExc_TypeError, "_Decoder.open: a list per track expected");
        goto done;
    }
    if (feed_advance(f, clock, ts) < 0) goto done;
    Py_ssize_t depth = stack == NULL ? 0 : PyList_GET_SIZE(stack);
    if (depth == 0) {
        rc = 0;
        goto done;
    }
    piece = Py_NewRef(PyList_GET_ITEM(stack, depth - 1));
    if (PyList_SetSlice(stack, depth - 1, depth, NULL) < 0) goto done;
    /* an OpenSlice, or a Python _Open: the same attributes */
    PyObject *flag = PyObject_GetAttr(piece, s_ours);
    int ours = flag == NULL ? -1 : PyObject_IsTrue(flag);
    Py_XDECREF(flag);
    if (ours < 0) goto done;
    start = PyObject_GetAttr(piece, s_start);
    if (start == NULL) goto done;
    if (ours) {
        if (p->n_terminating) {
            meta = PyObject_GetAttr(piece, s_meta);
            if (meta == NULL) goto done;
            PyObject *span_id = PyObject_GetItem(meta, s_span_id);
            if (span_id == NULL) goto done;
            PyObject *terminating = u64_tuple(p->terminating, p->n_terminating);
            int found = terminating == NULL ? -1 : PySequence_Contains(terminating, span_id);
            Py_XDECREF(terminating);
            Py_DECREF(span_id);
            if (found < 0 || (found && PyObject_SetItem(meta, s_gpu_flag, Py_True) < 0)) goto done;
        }
        PyObject *ended = PyTuple_Pack(4, key, start, ts, piece);
        if (ended == NULL) goto done;
        PyObject *appended = PyObject_CallOneArg(f->ended_append, ended);
        Py_DECREF(ended);
        if (appended == NULL) goto done;
        Py_DECREF(appended);
    } else {
        flows = PyObject_GetAttr(piece, s_flows);
        if (flows == NULL) goto done;
        PyObject *launch = PyTuple_Pack(2, start, ts);
        if (launch == NULL) goto done;
        PyObject *iterator = PyObject_GetIter(flows);
        PyObject *flow;
        int failed = iterator == NULL;
        while (!failed && (flow = PyIter_Next(iterator)) != NULL) {
            failed = bounded_put(f->launches, flow, launch) < 0;
            Py_DECREF(flow);
        }
        Py_XDECREF(iterator);
        Py_DECREF(launch);
        if (failed || PyErr_Occurred()) goto done;
    }
    rc = 0;
done:
    Py_XDECREF(clock);
    Py_XDECREF(ts);
    Py_XDECREF(key);
    Py_XDECREF(piece);
    Py_XDECREF(meta);
    Py_XDECREF(start);
    Py_XDECREF(flows);
    return rc;
}

/* A COUNTER (or any other event type the reader ignores): only its clock. */
static int feed_other(Feed *f, Scan *p) {
    PyObject *clock = feed_clock(f, p), *ts = NULL;
    if (clock == NULL) return -1;
    int rc = feed_time(f, clock, p->timestamp, &ts);
    if (rc == 0) rc = feed_advance(f, clock, ts);
    Py_DECREF(clock);
    Py_XDECREF(ts);
    return rc;
}

/* 1 when attribute key is absent or an int within [low, high], 0 when it is anything else
 * (the Python rule decides), -1 on error. */
static int int_within(PyObject *attributes, PyObject *key, long long low, long long high) {
    PyObject *value = PyDict_GetItemWithError(attributes, key);
    if (value == NULL) return PyErr_Occurred() ? -1 : 1;
    if (!PyLong_CheckExact(value)) return 0;
    int overflow;
    long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (number == -1 && PyErr_Occurred()) return -1;
    return !overflow && low <= number && number <= high;
}

/* 1 when a span surely passes brickscope.offline.impossible (plain ints, every check met), 0
 * when the Python rule must judge it, -1 on error: the rule itself stays in one place. */
static int surely_possible(PyObject *start, PyObject *end, PyObject *attributes) {
    if (!PyLong_CheckExact(start) || !PyLong_CheckExact(end)) return 0;
    int overflow_start, overflow_end;
    long long s = PyLong_AsLongLongAndOverflow(start, &overflow_start);
    long long e = PyLong_AsLongLongAndOverflow(end, &overflow_end);
    if (PyErr_Occurred()) return -1;
    if (overflow_start || overflow_end || s <= 0 || e < s) return 0;
    long long duration = e - s;
    if (duration > LLONG_MAX - cfg.gpu_tolerance) return 0;
    /* A GPU duration is never below zero, however short the span (the tolerance is not a licence). */
    long long gpu_low = duration > cfg.gpu_tolerance ? duration - cfg.gpu_tolerance : 0;
    int fine = int_within(attributes, cfg.gpu_duration, gpu_low, duration + cfg.gpu_tolerance);
    if (fine == 1) fine = int_within(attributes, cfg.self_duration, 0, duration);
    if (fine == 1) fine = int_within(attributes, cfg.host_duration, 0, LLONG_MAX);
    for (Py_ssize_t i = 0; fine == 1 && i < PyTuple_GET_SIZE(cfg.nonnegative_keys); i++) {
        fine = int_within(attributes, PyTuple_GET_ITEM(cfg.nonnegative_keys, i), 0, LLONG_MAX);
    }
    return fine;
}

/* brickscope.offline.impossible on a span: 1 when it is impossible (counted by reason in the
 * decoder's dropped), 0 when it is not, -1 on error. */
static int count_impossible(Feed *f, PyObject *start, PyObject *end, PyObject *attributes) {
    PyObject *reason = PyObject_CallFunctionObjArgs(cfg.impossible, start, end, attributes, NULL);
    if (reason == NULL) return -1;
    if (reason == Py_None) {
        Py_DECREF(reason);
        return 0;
    }
    PyObject *count = PyDict_GetItemWithError(f->dropped, reason);
    PyObject *more = NULL;
    if (count != NULL) {
        more = PyNumber_Add(count, s_one);
    } else if (!PyErr_Occurred()) {
        more = Py_NewRef(s_one);
    }
    int rc = more == NULL ? -1 : PyDict_SetItem(f->dropped, reason, more);
    Py_XDECREF(more);
    Py_DECREF(reason);
    return rc < 0 ? -1 : 1;
}

/* _Decoder._decoded(uuid, start, end, piece) of one ended span, as a new reference to what
 * ready() yields (its first 7 fields when records); None for an impossible span. */
static PyObject *feed_decoded(Feed *f, PyObject *item) {
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 4) {
        PyErr_SetString(PyExc_TypeError, "_Decoder.ended: (uuid, start, end, slice) expected");
        return NULL;
    }
    PyObject *uuid = PyTuple_GET_ITEM(item, 0), *start = PyTuple_GET_ITEM(item, 1), *end = PyTuple_GET_ITEM(item, 2);
    PyObject *piece = PyTuple_GET_ITEM(item, 3);
    PyObject *decoded = NULL;
    if (!Py_IS_TYPE(piece, &OpenSliceType)) goto reference;
    OpenSlice *open = (OpenSlice *)piece;
    PyObject *meta = open->meta, *attributes = open->attributes;
    if (!PyDict_CheckExact(meta) || !PyDict_CheckExact(attributes)) goto reference;
    PyObject *span_id = PyDict_GetItemWithError(meta, s_span_id);
    if (span_id == NULL) {
        if (PyErr_Occurred()) return NULL;
        goto reference;
    }
    PyObject *implied_obj = PyDict_GetItemWithError(meta, s_implied);
    long implied = 0;
    if (implied_obj != NULL) {
        if (!PyLong_CheckExact(implied_obj)) goto reference;
        implied = PyLong_AsLong(implied_obj);
        if (implied == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto reference;
        }
    } else if (PyErr_Occurred()) {
        return NULL;
    }
    Py_INCREF(span_id); /* meta may change below */
    PyObject *launch = NULL, *resource = NULL, *events = NULL, *parent = NULL;
    PyObject *gpu = PyDict_GetItemWithError(meta, s_gpu_flag);
    int is_gpu = gpu == NULL ? 0 : PyObject_IsTrue(gpu);
    if (is_gpu < 0 || PyErr_Occurred()) goto failed;
    if (is_gpu) {
        launch = PyDict_GetItemWithError(f->launches, span_id);
        if (launch != NULL) {
            Py_INCREF(launch);
            if (PyDict_DelItem(f->launches, span_id) < 0) goto failed;
        } else if (PyErr_Occurred()) {
            goto failed;
        }
    }
    if (implied) {
        PyObject *host_start = start, *host_end = end;
        if (launch != NULL) {
            if (!PyTuple_Check(launch) || PyTuple_GET_SIZE(launch) != 2) {
                PyErr_SetString(PyExc_TypeError, "_Decoder.launches: (start, end) expected");
                goto failed;
            }
            host_start = PyTuple_GET_ITEM(launch, 0);
            host_end = PyTuple_GET_ITEM(launch, 1);
        }
        if ((implied & 1) && PyDict_SetItem(attributes, cfg.host_start, host_start) < 0) goto failed;
        if (implied & 2) {
            PyObject *duration = PyNumber_Subtract(host_end, host_start);
            int set = duration == NULL ? -1 : PyDict_SetItem(attributes, cfg.host_duration, duration);
            Py_XDECREF(duration);
            if (set < 0) goto failed;
        }
        if (implied & 4) {
            PyObject *duration = PyNumber_Subtract(end, start);
            int set = duration == NULL ? -1 : PyDict_SetItem(attributes, cfg.gpu_duration, duration);
            Py_XDECREF(duration);
            if (set < 0) goto failed;
        }
    }
    resource = PyDict_GetItemWithError(f->resources, uuid);
    if (resource != NULL) {
        Py_INCREF(resource);
    } else {
        if (PyErr_Occurred()) goto failed;
        resource = PyObject_CallFunctionObjArgs(cfg.resource, uuid, f->descriptors, NULL);
        if (resource == NULL || PyDict_SetItem(f->resources, uuid, resource) < 0) goto failed;
    }
    if (PySet_GET_SIZE(f->released) >= cfg.max_waiting && PySet_Clear(f->released) < 0) goto failed;
    if (PySet_Add(f->released, span_id) < 0) goto failed;
    if (PyDict_GET_SIZE(f->events)) {
        events = PyDict_GetItemWithError(f->events, span_id);
        if (events != NULL) {
            Py_INCREF(events);
            if (PyDict_DelItem(f->events, span_id) < 0) goto failed;
        } else if (PyErr_Occurred()) {
            goto failed;
        }
    }
    if (events == NULL) events = Py_NewRef(s_empty_tuple);
    int possible = surely_possible(start, end, attributes);
    if (possible < 0) goto failed;
    if (!possible) {
        int counted = count_impossible(f, start, end, attributes);
        if (counted < 0) goto failed;
        if (counted) {
            decoded = Py_NewRef(Py_None);
            goto failed; /* the common exit */
        }
    }
    parent = PyDict_GetItemWithError(meta, s_parent_span_id);
    if (parent == NULL && PyErr_Occurred()) goto failed;
    if (parent == NULL) parent = s_zero;
    if (f->records) {
        decoded = PyTuple_Pack(7, open->name, start, end, span_id, parent, resource, attributes);
    } else {
        decoded = PyTuple_Pack(10, open->name, start, end, span_id, parent, resource, attributes, open->trace_id, meta,
                               events);
    }
failed:
    Py_DECREF(span_id);
    Py_XDECREF(launch);
    Py_XDECREF(resource);
    Py_XDECREF(events);
    return decoded;
reference: /* anything unusual: the reference's own _decoded */
    decoded = PyObject_CallMethodObjArgs(f->decoder, s_decoded_method, uuid, start, end, piece, NULL);
    if (decoded != NULL && decoded != Py_None && f->records) {
        Py_SETREF(decoded, PySequence_GetSlice(decoded, 0, 7));
    }
    return decoded;
}

/* ready(): the spans held long enough, appended to out. */
static int feed_ready(Feed *f) {
    for (;;) {
        Py_ssize_t held = PyObject_Size(f->ended);
        if (held < 0) return -1;
        if (held <= cfg.hold) return 0;
        PyObject *item = PyObject_CallNoArgs(f->ended_popleft);
        if (item == NULL) return -1;
        PyObject *decoded = feed_decoded(f, item);
        Py_DECREF(item);
        if (decoded == NULL) return -1;
        int appended = decoded == Py_None ? 0 : PyList_Append(f->out, decoded); /* None: impossible, left out */
        Py_DECREF(decoded);
        if (appended < 0) return -1;
    }
}

/* One packet: 0 decoded, UNUSUAL left to Python (state unchanged), -1 error. */
static int feed_packet(Feed *f, const unsigned char *data, Py_ssize_t size) {
    Scan p;
    if (scan_packet(data, size, &p)) return UNUSUAL;
    if (p.type == 3 || (p.flags & cfg.cleared_flag)) return UNUSUAL; /* instants, cleared state: Python */
    int rc = feed_use_sequence(f, p.sequence_id);
    if (rc != 0) return rc;
    if (p.type == 1) return feed_begin(f, data, size, &p);
    if (p.type == 2) return feed_end(f, &p);
    return feed_other(f, &p);
}

static PyObject *get_attr_checked(PyObject *object, PyObject *name, int (*check)(PyObject *)) {
    PyObject *value = PyObject_GetAttr(object, name);
    if (value != NULL && check != NULL && !check(value)) {
        PyErr_Format(PyExc_TypeError, "_Decoder.%U has an unexpected type", name);
        Py_CLEAR(value);
    }
    return value;
}
static int is_dict(PyObject *o) { return PyDict_Check(o); }
static int is_set(PyObject *o) { return PySet_Check(o); }

static PyObject *feed(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyBytes_Check(args[1]) || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "feed(decoder, buffer: bytes, offset: int, out: list, records: bool)");
        return NULL;
    }
    if (!cfg.ready) {
        PyErr_SetString(PyExc_RuntimeError, "feed: configure() was not called");
        return NULL;
    }
    Py_ssize_t offset = PyLong_AsSsize_t(args[2]);
    if (offset == -1 && PyErr_Occurred()) return NULL;
    int records = PyObject_IsTrue(args[4]);
    if (records < 0) return NULL;
    const unsigned char *buffer = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[1]);
    if (offset < 0 || offset > size) {
        PyErr_SetString(PyExc_ValueError, "feed: offset out of range");
        return NULL;
    }
    Feed f;
    memset(&f, 0, sizeof f);
    f.decoder = args[0];
    f.out = args[3];
    f.records = records;
    if ((f.sequences = get_attr_checked(f.decoder, s_sequences, is_dict)) == NULL ||
        (f.open = get_attr_checked(f.decoder, s_open, is_dict)) == NULL ||
        (f.ended = get_attr_checked(f.decoder, s_ended, NULL)) == NULL ||
        (f.launches = get_attr_checked(f.decoder, s_launches, is_dict)) == NULL ||
        (f.events = get_attr_checked(f.decoder, s_events, is_dict)) == NULL ||
        (f.released = get_attr_checked(f.decoder, s_released, is_set)) == NULL ||
        (f.resources = get_attr_checked(f.decoder, s_resources, is_dict)) == NULL ||
        (f.descriptors = get_attr_checked(f.decoder, s_descriptors, NULL)) == NULL ||
        (f.dropped = get_attr_checked(f.decoder, s_dropped, is_dict)) == NULL ||
        (f.ended_append = PyObject_GetAttr(f.ended, s_append)) == NULL ||
        (f.ended_popleft = PyObject_GetAttr(f.ended, s_popleft)) == NULL) {
        feed_release(&f);
        return NULL;
    }
    Py_ssize_t pos = offset;
    while (pos < size) {
        if (buffer[pos] != 0x0A) break; /* Trace.packet; anything else: Python's framing */
        Py_ssize_t start = pos + 1;
        unsigned long long length;
        if (read_varint(buffer, size, &start, &length)) break;
        if (length > cfg.max_packet || length > (unsigned long long)(size - start)) break;
        int rc = feed_packet(&f, buffer + start, (Py_ssize_t)length);
        if (rc == UNUSUAL) break;
        if (rc < 0 || feed_ready(&f) < 0) {
            feed_release(&f);
            return NULL;
        }
        pos = start + (Py_ssize_t)length;
    }
    feed_release(&f);
    return PyLong_FromSsize_t(pos);
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)scan, METH_O,
     "scan(packet) -> the fields _reader reads of a plain track-event packet, or None (parse it with protobuf)."},
    {"annotations", (PyCFunction)(void (*)(void))annotations, METH_FASTCALL,
     "annotations(packet, names, values, lookup, cache, cache_limit, meta_name) -> (attributes, meta) or None:\n"
     "the track event's debug annotations decoded as _annotations._decode_serialized decodes them;\n"
     "None where the Python reader would take its general message walk."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(*, resource, hold, max_waiting, max_packet, cache_limit, cleared_flag, clock_realtime,\n"
     "meta_name, host_start_key, host_duration_key, gpu_duration_key, self_duration_key, nonnegative_keys,\n"
     "impossible, gpu_duration_tolerance): the reader's constants, once, by\n"
     "keyword fields only (a positional argument, a missing or an unknown field is a TypeError naming it)."},
    {"feed", (PyCFunction)(void (*)(void))feed, METH_FASTCALL,
     "feed(decoder, buffer, offset, out, records) -> offset: decode the plain packets of buffer from offset\n"
     "with the _Decoder's state, appending the spans ready() gives to out; stops at the first packet the\n"
     "Python code must decode."},
    {NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "brickscope.exporter.perfetto._fastread",
                                        "C accelerator of the .pftrace reader's annotation decoding.", -1, methods};

PyMODINIT_FUNC PyInit__fastread(void) {
    const unsigned int one = 1;
    if (*(const unsigned char *)&one != 1) {
        PyErr_SetString(PyExc_ImportError, "brickscope: _fastread reads doubles as little-endian; big-endian host");
        return NULL;
    }
    s_names = PyUnicode_InternFromString("names");
    s_values = PyUnicode_InternFromString("values");
    if (s_names == NULL || s_values == NULL) return NULL;
    const char *names[] = {"span_id", "implied", "parent_span_id", "_gpu", "event_names", "correlations", "tables",
                           "decoded", "clocks", "default_clock", "sequences", "open", "ended", "launches", "events",
                           "released", "resources", "descriptors", "_decoded", "append", "popleft", "",
                           "ours", "start", "meta", "flows", "dropped"};
    PyObject **slots[] = {&s_span_id, &s_implied, &s_parent_span_id, &s_gpu_flag, &s_event_names, &s_correlations,
                          &s_tables, &s_decoded, &s_clocks, &s_default_clock, &s_sequences, &s_open, &s_ended,
                          &s_launches, &s_events, &s_released, &s_resources, &s_descriptors, &s_decoded_method,
                          &s_append, &s_popleft, &s_empty_str, &s_ours, &s_start, &s_meta, &s_flows, &s_dropped};
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        *slots[i] = PyUnicode_InternFromString(names[i]);
        if (*slots[i] == NULL) return NULL;
    }
    s_zero = PyLong_FromLong(0);
    s_one = PyLong_FromLong(1);
    s_empty_tuple = PyTuple_New(0);
    if (s_zero == NULL || s_one == NULL || s_empty_tuple == NULL || PyType_Ready(&OpenSliceType) < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    /* The version of what this module expects from the reader's Python (configure's fields,
     * the decoder state it shares): _annotations.py states the one it was written for, and
     * brickscope.native.load refuses another. Raise it with any such change. */
    if (PyModule_AddObjectRef(module, "OpenSlice", (PyObject *)&OpenSliceType) < 0 ||
        PyModule_AddIntConstant(module, "ABI_VERSION", 4) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
