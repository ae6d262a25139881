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
#include <string.h>

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
            f->has_iid = 1;
            f->iid = v;
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
        Py_INCREF(found);
        Py_DECREF(key);
        return found;
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
    PyObject *dot = PyUnicode_FromString(".");
    PyObject *prefix = dot == NULL ? NULL : PyUnicode_Concat(key, dot);
    Py_XDECREF(dot);
    if (prefix == NULL) goto done;
    for (int i = 0; i < f.n_entries; i++) {
        Py_ssize_t s = f.entries[i][0], e = f.entries[i][1];
        PyObject *bytes = PyBytes_FromStringAndSize((const char *)c->data + s, e - s);
        PyObject *entry = bytes == NULL ? NULL : PyTuple_Pack(2, prefix, bytes);
        Py_XDECREF(bytes);
        if (entry == NULL) goto loop_failed;
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
loop_failed:
    Py_DECREF(prefix);
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
    Ctx c = {(const unsigned char *)PyBytes_AS_STRING(packet), args[1], args[2], args[3]};
    Py_ssize_t size = PyBytes_GET_SIZE(packet);
    Py_ssize_t event_start = 0, event_stop = 0;
    if (only_field(c.data, 0, size, 11, &event_start, &event_stop)) Py_RETURN_NONE; /* TracePacket.track_event */
    PyObject *attributes = PyDict_New();
    PyObject *meta = PyDict_New();
    if (attributes == NULL || meta == NULL) goto failed;
    int unusual = 0;
    Py_ssize_t pos = event_start;
    while (pos < event_stop) {
        unsigned long long tag;
        Py_ssize_t s = 0, e = 0;
        if (read_varint(c.data, event_stop, &pos, &tag) ||
            skip_field(c.data, event_stop, &pos, (int)(tag & 7), &s, &e)) {
            unusual = 1;
            goto failed;
        }
        if (tag == ((4 << 3) | 2)) { /* TrackEvent.debug_annotations */
            if (top_level(&c, s, e, attributes, &meta, meta_name, cache, cache_limit, &unusual) < 0) goto failed;
        }
    }
    PyObject *result = PyTuple_Pack(2, attributes, meta);
    Py_DECREF(attributes);
    Py_DECREF(meta);
    return result;
failed:
    Py_XDECREF(attributes);
    Py_XDECREF(meta);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE; /* unusual: the Python code decodes this event */
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

static PyObject *scan(PyObject *module, PyObject *packet) {
    if (!PyBytes_Check(packet)) {
        PyErr_SetString(PyExc_TypeError, "scan(packet): bytes expected");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(packet);
    Py_ssize_t size = PyBytes_GET_SIZE(packet), pos = 0;
    unsigned long long sequence_id = 0, flags = 0, timestamp = 0, clock_id = 0;
    int has_clock = 0, events = 0;
    Py_ssize_t event_start = 0, event_stop = 0;
    while (pos < size) {
        unsigned long long tag, v;
        if (read_varint(data, size, &pos, &tag)) Py_RETURN_NONE;
        switch (tag) {
        case (8 << 3) | 0: if (read_varint(data, size, &pos, &timestamp)) Py_RETURN_NONE; break;
        case (10 << 3) | 0: if (read_varint(data, size, &pos, &v)) Py_RETURN_NONE; sequence_id = v & 0xFFFFFFFFu; break;
        case (13 << 3) | 0: if (read_varint(data, size, &pos, &v)) Py_RETURN_NONE; flags = v & 0xFFFFFFFFu; break;
        case (58 << 3) | 0:
            if (read_varint(data, size, &pos, &v)) Py_RETURN_NONE;
            clock_id = v & 0xFFFFFFFFu;
            has_clock = 1;
            break;
        case (11 << 3) | 2:
            if (skip_field(data, size, &pos, 2, &event_start, &event_stop)) Py_RETURN_NONE;
            events++;
            break;
        default: Py_RETURN_NONE;
        }
    }
    if (events != 1) Py_RETURN_NONE;
    unsigned long long type = 0, track_uuid = 0, name_iid = 0, correlation_iid = 0;
    int name_kind = 0, correlation_kind = 0; /* oneofs: 0 unset, 1 iid, 2 string (last one wins) */
    Py_ssize_t name_start = 0, name_stop = 0, correlation_start = 0, correlation_stop = 0;
    unsigned long long flows[MAX_FLOWS], terminating[MAX_FLOWS];
    int n_flows = 0, n_terminating = 0;
    pos = event_start;
    while (pos < event_stop) {
        unsigned long long tag, v;
        Py_ssize_t s = 0, e = 0;
        if (read_varint(data, event_stop, &pos, &tag)) Py_RETURN_NONE;
        switch (tag) {
        case (9 << 3) | 0:
            if (read_varint(data, event_stop, &pos, &type)) Py_RETURN_NONE;
            if (type < 1 || type > 4) Py_RETURN_NONE; /* protobuf keeps unknown enum values aside */
            break;
        case (11 << 3) | 0: if (read_varint(data, event_stop, &pos, &track_uuid)) Py_RETURN_NONE; break;
        case (10 << 3) | 0:
            if (read_varint(data, event_stop, &pos, &name_iid)) Py_RETURN_NONE;
            name_kind = 1;
            break;
        case (23 << 3) | 2:
            if (skip_field(data, event_stop, &pos, 2, &name_start, &name_stop)) Py_RETURN_NONE;
            name_kind = 2;
            break;
        case (54 << 3) | 0:
            if (read_varint(data, event_stop, &pos, &correlation_iid)) Py_RETURN_NONE;
            correlation_kind = 1;
            break;
        case (53 << 3) | 2:
            if (skip_field(data, event_stop, &pos, 2, &correlation_start, &correlation_stop)) Py_RETURN_NONE;
            correlation_kind = 2;
            break;
        case (47 << 3) | 1:
        case (48 << 3) | 1:
            if (pos + 8 > event_stop) Py_RETURN_NONE;
            memcpy(&v, data + pos, 8);
            pos += 8;
            if ((tag >> 3) == 47) {
                if (n_flows == MAX_FLOWS) Py_RETURN_NONE;
                flows[n_flows++] = v;
            } else {
                if (n_terminating == MAX_FLOWS) Py_RETURN_NONE;
                terminating[n_terminating++] = v;
            }
            break;
        case (4 << 3) | 2:  /* debug_annotations: decoded by annotations() */
        case (3 << 3) | 0:  /* category_iids: not read */
        case (3 << 3) | 2:
        case (22 << 3) | 2: /* categories: not read */
            if (skip_field(data, event_stop, &pos, (int)(tag & 7), &s, &e)) Py_RETURN_NONE;
            break;
        default: Py_RETURN_NONE;
        }
    }
    PyObject *name = NULL, *correlation = NULL;
    if (name_kind == 2) {
        name = PyUnicode_DecodeUTF8((const char *)data + name_start, name_stop - name_start, NULL);
        if (name == NULL) goto undecodable;
    }
    if (correlation_kind == 2) {
        correlation = PyUnicode_DecodeUTF8((const char *)data + correlation_start, correlation_stop - correlation_start, NULL);
        if (correlation == NULL) goto undecodable;
    }
    PyObject *result = Py_BuildValue(
        "(KKKNKKNNNNNN)", sequence_id, flags, timestamp, optional_u64(has_clock, clock_id), type, track_uuid,
        optional_u64(name_kind == 1, name_iid), name ? name : (Py_INCREF(Py_None), Py_None), u64_tuple(flows, n_flows),
        u64_tuple(terminating, n_terminating), optional_u64(correlation_kind == 1, correlation_iid),
        correlation ? correlation : (Py_INCREF(Py_None), Py_None));
    return result;
undecodable:
    Py_XDECREF(name);
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
    PyErr_Clear();
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)scan, METH_O,
     "scan(packet) -> the fields _reader reads of a plain track-event packet, or None (parse it with protobuf)."},
    {"annotations", (PyCFunction)(void (*)(void))annotations, METH_FASTCALL,
     "annotations(packet, names, values, lookup, cache, cache_limit, meta_name) -> (attributes, meta) or None:\n"
     "the track event's debug annotations decoded as _annotations._decode_serialized decodes them;\n"
     "None where the Python reader would take its general message walk."},
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
    return PyModule_Create(&module_def);
}
