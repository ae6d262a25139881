# SPDX-License-Identifier: Apache-2.0
"""Span attributes as typed Perfetto debug annotations, and back.

Example::

    attribute_tree({"brickscope.gpu.device.id": 0, "a..b": 1})
    # -> ({"brickscope": {"gpu": {"device": {"id": (0,)}}}}, [("a..b", 1)])
    decode_annotations(track_event.debug_annotations, lookup)  # -> (attributes, otel dict)

Dotted OpenTelemetry keys become nested dictionaries (the trace processor would
otherwise turn the dots of a flat name into ``_``), so the UI shows them as
``debug.brickscope.gpu.device.id``. A key that cannot nest (an empty segment, a
clash such as ``a`` and ``a.b`` both present, or the reserved ``otel.`` prefix)
is written flat under its full name. Decoding joins the path of every leaf with
dots, which gives back the original key either way: a leaf's name contains a dot
only when it was written flat at the top level.

Types are kept: ``bool``, ``int`` (int64; uint64 above that), ``float``, ``str``
and homogeneous arrays of them. An empty array is a leaf with no value. Values no
OpenTelemetry attribute can hold (bytes, dictionaries from OTLP ``kvlistValue``,
integers beyond 64 bits) are written as their ``str()``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from brickscope import native

from ._schema import META

#: The ``ABI_VERSION`` of ``_fastread`` this package's Python was written for.
FASTREAD_ABI = 4
#: The C decoder of a packet's annotations (_fastread.c), or None: the Python code below.
_fast = native.load("brickscope.exporter.perfetto._fastread", abi=FASTREAD_ABI)

_RESERVED_PREFIX = META + "."


def attribute_tree(attributes: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """Split attributes into a nested tree (leaves are 1-tuples) and flat leftovers."""
    root: dict[str, Any] = {}
    flat: list[tuple[str, Any]] = []
    for key, value in attributes.items():
        if "." not in key:
            if key in root:
                flat.append((key, value))  # clashes with a branch of the same name
            else:
                root[key] = (value,)
            continue
        parts = key.split(".")
        if "" in parts or key.startswith(_RESERVED_PREFIX):
            flat.append((key, value))
            continue
        node: Any = root
        for part in parts[:-1]:
            node = node.get(part)
            if node is None:
                break
            if not isinstance(node, dict):
                node = False
                break
        if node is False or (isinstance(node, dict) and parts[-1] in node):
            flat.append((key, value))
            continue
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = (value,)
    return root, flat


#: Resolves an interned id: ``lookup(table, iid) -> str``; tables are
#: ``"names"`` (debug-annotation names) and ``"values"`` (string values).
Lookup = Callable[[str, int], str]


def decode_annotations(
    annotations: Iterable[Any], lookup: Lookup, cache: dict[Any, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Attributes and the META dictionary (as a plain dict) from DebugAnnotations.

    With ``cache`` (a dict the caller empties whenever ``lookup``'s tables are cleared
    or an id is redefined), each annotation is decoded from its serialized bytes by
    :func:`_decode_serialized`, and the decoded entries of a top-level dictionary are
    remembered by their bytes: a trace repeats most of them (device, stream, step,
    category), so most spans decode a few leaves, not a few dozen protobuf objects.
    The result is the same either way (tested).
    """
    if cache is not None:
        try:
            return _decode_serialized([a.SerializeToString() for a in annotations], lookup, cache)
        except _Unusual:
            pass  # a field this decoder does not read: the general walk below
    return _decode_messages(annotations, lookup)


def decode_event_annotations(
    event: Any,
    packet: bytes,
    tables: Mapping[str, dict[int, str]],
    lookup: Lookup,
    cache: dict[Any, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`decode_annotations` of a track ``event``'s ``debug_annotations``, straight from
    the bytes of its ``packet`` by the C accelerator when it is built (it reads the
    ``"names"`` and ``"values"`` interned ``tables``); the result is the same either way
    (tested), and the C hands back to the Python code anything unusual (only then is
    ``event.debug_annotations`` read)."""
    if _fast is not None:
        decoded = _fast.annotations(
            packet, tables.get("names"), tables.get("values"), lookup, cache, _CACHE_ENTRIES, META
        )
        if decoded is not None:
            return decoded
    return decode_annotations(event.debug_annotations, lookup, cache)


def _decode_messages(annotations: Iterable[Any], lookup: Lookup) -> tuple[dict[str, Any], dict[str, Any]]:
    attributes: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    for annotation in annotations:
        name = annotation_name(annotation, lookup)
        if annotation.dict_entries:
            if name == META:
                meta = decode_dict(annotation, lookup)
            else:
                _collect(annotation.dict_entries, name + ".", attributes, lookup)
        else:
            attributes[name] = decode_value(annotation, lookup)
    return attributes, meta


def _collect(entries: Iterable[Any], prefix: str, out: dict[str, Any], lookup: Lookup) -> None:
    for annotation in entries:
        name = prefix + annotation_name(annotation, lookup)
        if annotation.dict_entries:
            _collect(annotation.dict_entries, name + ".", out, lookup)
        else:
            out[name] = decode_value(annotation, lookup)


def decode_dict(annotation: Any, lookup: Lookup) -> dict[str, Any]:
    """A dictionary annotation as a Python dict (nested dictionaries stay nested)."""
    out: dict[str, Any] = {}
    for entry in annotation.dict_entries:
        name = annotation_name(entry, lookup)
        out[name] = decode_dict(entry, lookup) if entry.dict_entries else decode_value(entry, lookup)
    return out


def annotation_name(annotation: Any, lookup: Lookup) -> str:
    """The annotation's name, interned or inline."""
    if annotation.HasField("name_iid"):
        return lookup("names", annotation.name_iid)
    return annotation.name


def decode_value(annotation: Any, lookup: Lookup) -> Any:
    """The typed Python value of an annotation (``()`` for an empty array, dicts as dicts)."""
    which = annotation.WhichOneof("value")
    if which is None:
        if annotation.dict_entries:
            return decode_dict(annotation, lookup)
        if annotation.array_values:
            return tuple(decode_value(item, lookup) for item in annotation.array_values)
        return ()
    if which == "string_value_iid":
        return lookup("values", annotation.string_value_iid)
    return getattr(annotation, which)


# -- Decoding from serialized DebugAnnotations (what protobuf itself writes back) --------
#
# Field numbers of perfetto's DebugAnnotation: name_iid 1, bool 2, uint 3, int 4,
# double 5, string 6, pointer 7, name 10, dict_entries 11, array_values 12,
# string_value_iid 17. Anything else (nested or proto values, legacy JSON, unknown
# fields) raises _Unusual and the message walk decodes the event instead.

_INT64_SIGN = 1 << 63
_UINT64 = 1 << 64
_DOUBLE = struct.Struct("<d").unpack_from
#: Cached top-level dictionary entries, at most (then the cache starts over).
_CACHE_ENTRIES = 1 << 16


class _Unusual(Exception):
    """A serialized annotation holds a field the fast decoder does not read."""


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7


def _parse(data: bytes, start: int, end: int) -> tuple[Any, Any, int, Any, list[tuple[int, int]], list[tuple[int, int]]]:
    """One DebugAnnotation's fields: (name iid, inline name, value field number or 0, raw
    value, dict entry ranges, array value ranges). Last one wins, as protobuf parses."""
    iid = name = value = None
    number = 0
    entries: list[tuple[int, int]] = []
    array: list[tuple[int, int]] = []
    position = start
    while position < end:
        tag = data[position]
        position += 1
        if tag == 0x08:  # name_iid (a oneof with name: the last one wins)
            iid = data[position]
            if iid < 0x80:  # one-byte varints (most ids) inline
                position += 1
            else:
                iid, position = _varint(data, position)
            name = None
        elif tag == 0x20:  # int_value (int64, two's complement)
            value, position = _varint(data, position)
            if value >= _INT64_SIGN:
                value -= _UINT64
            number = 4
        elif tag == 0x18 or tag == 0x38:  # uint_value, pointer_value
            value, position = _varint(data, position)
            number = 3
        elif tag == 0x10:  # bool_value
            value, position = _varint(data, position)
            value = bool(value)
            number = 2
        elif tag == 0x29:  # double_value
            value = _DOUBLE(data, position)[0]
            position += 8
            number = 5
        elif tag == 0x32 or tag == 0x52 or tag == 0x5A or tag == 0x62:  # string, name, dict, array
            length = data[position]
            if length < 0x80:
                position += 1
            else:
                length, position = _varint(data, position)
            stop = position + length
            if tag == 0x5A:
                entries.append((position, stop))
            elif tag == 0x62:
                array.append((position, stop))
            else:
                try:
                    text = data[position:stop].decode("utf-8")
                except UnicodeDecodeError:
                    raise _Unusual from None
                if tag == 0x52:
                    name = text
                    iid = None
                else:
                    value, number = text, 6
            position = stop
        elif tag == 0x88 and data[position] == 0x01:  # string_value_iid (field 17)
            value, position = _varint(data, position + 1)
            number = 17
        else:
            raise _Unusual
    return iid, name, number, value, entries, array


def _name(iid: Any, name: Any, lookup: Lookup) -> str:
    if iid is not None:
        return lookup("names", iid)
    return "" if name is None else name


def _value(data: bytes, number: int, value: Any, entries: Any, array: Any, lookup: Lookup) -> Any:
    """As :func:`decode_value`."""
    if number == 17:
        return lookup("values", value)
    if number:
        return value
    if entries:
        return _dict(data, entries, lookup)
    if array:
        return tuple(_value(data, *_parse(data, s, e)[2:], lookup) for s, e in array)
    return ()


def _dict(data: bytes, entries: list[tuple[int, int]], lookup: Lookup) -> dict[str, Any]:
    """As :func:`decode_dict`."""
    out: dict[str, Any] = {}
    for start, end in entries:
        iid, name, number, value, children, array = _parse(data, start, end)
        key = _name(iid, name, lookup)
        out[key] = _dict(data, children, lookup) if children else _value(data, number, value, children, array, lookup)
    return out


def _flat(data: bytes, entries: list[tuple[int, int]], prefix: str, out: list[tuple[str, Any]], lookup: Lookup) -> None:
    """As :func:`_collect`, into a list of (key, value)."""
    for start, end in entries:
        iid, name, number, value, children, array = _parse(data, start, end)
        key = prefix + _name(iid, name, lookup)
        if children:
            _flat(data, children, key + ".", out, lookup)
        else:
            out.append((key, _value(data, number, value, children, array, lookup)))


def _decode_serialized(
    serialized: list[bytes], lookup: Lookup, cache: dict[Any, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    attributes: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    for data in serialized:
        iid, name, number, value, entries, array = _parse(data, 0, len(data))
        key = _name(iid, name, lookup)
        if not entries:
            attributes[key] = _value(data, number, value, entries, array, lookup)
        elif key == META:
            meta = _dict(data, entries, lookup)
        else:
            prefix = key + "."
            for start, end in entries:
                entry = (prefix, data[start:end])
                items = cache.get(entry)
                if items is None:
                    items = []
                    _flat(data, [(start, end)], prefix, items, lookup)
                    if len(cache) >= _CACHE_ENTRIES:
                        cache.clear()
                    cache[entry] = items
                attributes.update(items)
    return attributes, meta
