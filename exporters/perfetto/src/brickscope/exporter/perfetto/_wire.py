# SPDX-License-Identifier: Apache-2.0
"""Hand-encoded TrackEvent packets: the one hot path that does not build pb2 objects.

Example::

    encoder = EventEncoder(sequence_id=7)
    event = encoder.event(TYPE_SLICE_BEGIN, uuid, name_iid, (cat_iid,), flows, (), corr_iid, annotations)
    data = encoder.packet(encoder.timestamp(delta, None), event, None)

Building each packet and each debug annotation as ``perfetto_trace_pb2`` objects
cost about 100 µs per span in the benchmark (``benchmarks/export.py``), slower
than the OTLP encoding it must beat. Here the wire format of the few fields a
slice needs is written directly (field numbers and types from Google's schema,
checked in ``_FIELDS`` against ``perfetto_trace_pb2`` at import), and the bytes
of each debug annotation leaf, a (name, value) pair that repeats across spans,
are cached per interning generation. Everything else (descriptors, interned
data, clock snapshots) is still built with ``perfetto_trace_pb2``; the tests
decode every file with Google's schema only.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from ._annotations import attribute_tree
from ._interning import MAX_INTERNED_VALUE_CHARS, Interner, sanitize
from ._schema import SEQ_NEEDS_INCREMENTAL_STATE, TRACE_PACKET_TAG, pb

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1
_MAX_CACHED_LEAVES = 1 << 16
_MAX_CACHED_PLANS = 1 << 12

# (message, field, number, type): every field encoded by hand below.
_FIELDS = (
    (pb.TracePacket, "timestamp", 8, FieldDescriptor.TYPE_UINT64),
    (pb.TracePacket, "timestamp_clock_id", 58, FieldDescriptor.TYPE_UINT32),
    (pb.TracePacket, "track_event", 11, FieldDescriptor.TYPE_MESSAGE),
    (pb.TracePacket, "trusted_packet_sequence_id", 10, FieldDescriptor.TYPE_UINT32),
    (pb.TracePacket, "interned_data", 12, FieldDescriptor.TYPE_MESSAGE),
    (pb.TracePacket, "sequence_flags", 13, FieldDescriptor.TYPE_UINT32),
    (pb.TrackEvent, "type", 9, FieldDescriptor.TYPE_ENUM),
    (pb.TrackEvent, "track_uuid", 11, FieldDescriptor.TYPE_UINT64),
    (pb.TrackEvent, "name_iid", 10, FieldDescriptor.TYPE_UINT64),
    (pb.TrackEvent, "category_iids", 3, FieldDescriptor.TYPE_UINT64),
    (pb.TrackEvent, "flow_ids", 47, FieldDescriptor.TYPE_FIXED64),
    (pb.TrackEvent, "terminating_flow_ids", 48, FieldDescriptor.TYPE_FIXED64),
    (pb.TrackEvent, "correlation_id_str_iid", 54, FieldDescriptor.TYPE_UINT64),
    (pb.TrackEvent, "debug_annotations", 4, FieldDescriptor.TYPE_MESSAGE),
    (pb.DebugAnnotation, "name_iid", 1, FieldDescriptor.TYPE_UINT64),
    (pb.DebugAnnotation, "bool_value", 2, FieldDescriptor.TYPE_BOOL),
    (pb.DebugAnnotation, "uint_value", 3, FieldDescriptor.TYPE_UINT64),
    (pb.DebugAnnotation, "int_value", 4, FieldDescriptor.TYPE_INT64),
    (pb.DebugAnnotation, "double_value", 5, FieldDescriptor.TYPE_DOUBLE),
    (pb.DebugAnnotation, "string_value", 6, FieldDescriptor.TYPE_STRING),
    (pb.DebugAnnotation, "string_value_iid", 17, FieldDescriptor.TYPE_UINT64),
    (pb.DebugAnnotation, "dict_entries", 11, FieldDescriptor.TYPE_MESSAGE),
    (pb.DebugAnnotation, "array_values", 12, FieldDescriptor.TYPE_MESSAGE),
)
for _message, _name, _number, _type in _FIELDS:
    _field = _message.DESCRIPTOR.fields_by_name[_name]
    if (_field.number, _field.type) != (_number, _type):  # pragma: no cover - schema drift
        raise ImportError(f"perfetto schema changed: {_message.__name__}.{_name}")

# The varint of every value below 2**14, and the two continued bytes of every 14-bit chunk:
# a span id (64 bits, ten bytes) is four lookups instead of ten turns of a loop.
_SMALL = [bytes((v,)) if v < 0x80 else bytes(((v & 0x7F) | 0x80, v >> 7)) for v in range(1 << 14)]
_CHUNK = [bytes(((v & 0x7F) | 0x80, (v >> 7) | 0x80)) for v in range(1 << 14)]


def varint(value: int) -> bytes:
    """Base-128 varint of a non-negative int below 2**64."""
    if value < 16384:
        return _SMALL[value]
    chunks = []
    while value >= 16384:
        chunks.append(_CHUNK[value & 0x3FFF])
        value >>= 14
    chunks.append(_SMALL[value])
    return b"".join(chunks)


_PACKET_TAG = bytes((TRACE_PACKET_TAG,))


def frame(packet_bytes: bytes) -> bytes:
    """Wrap one serialized TracePacket as a ``Trace.packet`` field."""
    return _PACKET_TAG + varint(len(packet_bytes)) + packet_bytes


def _tag(number: int, wire_type: int) -> bytes:
    return varint((number << 3) | wire_type)


# TracePacket
_TIMESTAMP = _tag(8, 0)
_CLOCK_ID = _tag(58, 0)
_TRACK_EVENT = _tag(11, 2)
_SEQUENCE_ID = _tag(10, 0)
_INTERNED = _tag(12, 2)
_FLAGS = _tag(13, 0)
# TrackEvent
_TYPE = _tag(9, 0)
_TRACK_UUID = _tag(11, 0)
_NAME_IID = _tag(10, 0)
_CATEGORY_IID = _tag(3, 0)
_FLOW_ID = _tag(47, 1)
_TERMINATING_FLOW_ID = _tag(48, 1)
_CORRELATION_IID = _tag(54, 0)
_ANNOTATION = _tag(4, 2)
# DebugAnnotation
_A_NAME_IID = _tag(1, 0)
_A_BOOL = _tag(2, 0)
_A_UINT = _tag(3, 0)
_A_INT = _tag(4, 0)
_A_DOUBLE = _tag(5, 1)
_A_STRING = _tag(6, 2)
_A_STRING_IID = _tag(17, 0)
A_DICT = _tag(11, 2)
A_ARRAY = _tag(12, 2)
_PACK_DOUBLE = struct.Struct("<d").pack
_PACK_FIXED64 = struct.Struct("<Q").pack


def field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    return tag + varint(len(payload)) + payload


def value_bytes(value: Any, interner: Interner | None) -> bytes:
    """The value fields of a DebugAnnotation (nothing for an empty array)."""
    kind = type(value)
    if kind is str:
        if interner is not None and len(value) <= MAX_INTERNED_VALUE_CHARS:
            return _A_STRING_IID + varint(interner.string_value(value))
        return field(_A_STRING, sanitize(value).encode("utf-8"))
    if kind is bool:
        return _A_BOOL + (b"\x01" if value else b"\x00")
    if kind is int:
        if 0 <= value <= _INT64_MAX:
            return _A_INT + varint(value)
        if _INT64_MIN <= value < 0:
            return _A_INT + varint(value + (1 << 64))
        if value <= _UINT64_MAX:
            return _A_UINT + varint(value)
        return field(_A_STRING, str(value).encode())
    if kind is float:
        return _A_DOUBLE + _PACK_DOUBLE(value)
    if isinstance(value, (tuple, list)):
        return b"".join(field(A_ARRAY, value_bytes(item, interner)) for item in value)
    if isinstance(value, bool):
        return value_bytes(bool(value), interner)
    if isinstance(value, str):
        return value_bytes(str(value), interner)
    if isinstance(value, int):
        return value_bytes(int(value), interner)
    if isinstance(value, float):
        return value_bytes(float(value), interner)
    return field(_A_STRING, sanitize(str(value)).encode("utf-8"))


class AnnotationEncoder:
    """Attributes to the bytes of repeated DebugAnnotation fields, with caches.

    The caches hold interned ids, so they belong to one interning generation:
    the writer calls :meth:`clear` whenever it clears the interner.
    """

    def __init__(self, interner: Interner) -> None:
        self._interner = interner
        self._names: dict[str, bytes] = {}
        self._leaves: dict[tuple[str, type, Any], bytes] = {}
        self._plans: dict[tuple[str, ...], Any] = {}
        # (dictionary node id, its leaf values, their types) -> encoded dict_entries
        self._subtrees: dict[tuple[int, tuple[Any, ...], tuple[type, ...]], bytes] = {}
        self._next_node = 0

    def clear(self) -> None:
        self._names.clear()
        self._leaves.clear()
        self._subtrees.clear()

    def name(self, name: str) -> bytes:
        """``name_iid`` field bytes of an annotation name."""
        encoded = self._names.get(name)
        if encoded is None:
            encoded = self._names[name] = _A_NAME_IID + varint(self._interner.annotation_name(name))
        return encoded

    def leaf(self, name: str, value: Any) -> bytes:
        """A whole leaf DebugAnnotation (name and value), cached when it may repeat."""
        kind = type(value)
        if kind is float or (kind is str and len(value) > MAX_INTERNED_VALUE_CHARS):
            # Not cached: long strings rarely repeat, and 0.0 == -0.0 would share bytes.
            return self.name(name) + value_bytes(value, self._interner)
        try:
            key = (name, kind, value)
            encoded = self._leaves.get(key)
        except TypeError:  # unhashable (a list)
            return self.name(name) + value_bytes(value, self._interner)
        if encoded is None:
            if len(self._leaves) >= _MAX_CACHED_LEAVES:
                self._leaves.clear()
            encoded = self._leaves[key] = self.name(name) + value_bytes(value, self._interner)
        return encoded

    def attributes(self, attributes: Mapping[str, Any], tag: bytes = _ANNOTATION) -> bytes:
        """Repeated annotation fields (``tag`` is the field's tag) for the attributes."""
        keys = tuple(attributes)
        plan = self._plans.get(keys)
        if plan is None:
            if len(self._plans) >= _MAX_CACHED_PLANS:
                self._plans.clear()
                self._subtrees.clear()  # node ids belong to the plans
            plan = self._plans[keys] = self._plan(attributes)
        return self._emit(plan, attributes, tag)

    def _emit(self, plan: Sequence[tuple[Any, ...]], attributes: Mapping[str, Any], tag: bytes) -> bytes:
        out = []
        for node in plan:
            if len(node) == 2:
                out.append(field(tag, self.leaf(node[0], attributes[node[1]])))
            else:
                out.append(field(tag, self.name(node[0]) + self._subtree(node, attributes)))
        return b"".join(out)

    def _subtree(self, node: tuple[Any, ...], attributes: Mapping[str, Any]) -> bytes:
        """A dictionary's entries; whole subtrees repeat (same category, device...), so cache them."""
        _, children, keys, ident = node
        values = tuple(map(attributes.__getitem__, keys))
        types = tuple(map(type, values))
        key = (ident, values, types)
        try:
            encoded = self._subtrees.get(key)
        except TypeError:  # an unhashable value
            return self._emit(children, attributes, A_DICT)
        if encoded is None:
            encoded = self._emit(children, attributes, A_DICT)
            if float not in types:  # 0.0 == -0.0: never let one stand for the other
                if len(self._subtrees) >= _MAX_CACHED_LEAVES:
                    self._subtrees.clear()
                self._subtrees[key] = encoded
        return encoded

    def _plan(self, attributes: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """The annotation layout for a set of keys.

        Leaves are ``(name, key)``; dictionaries ``(name, children, leaf keys, node id)``.
        """
        root, flat = attribute_tree(attributes)

        def walk(tree: dict[str, Any], prefix: str) -> tuple[list[tuple[Any, ...]], list[str]]:
            out: list[tuple[Any, ...]] = []
            keys: list[str] = []
            for name, node in tree.items():
                if isinstance(node, dict):
                    children, below = walk(node, prefix + name + ".")
                    self._next_node += 1
                    out.append((name, children, tuple(below), self._next_node))
                    keys += below
                else:
                    out.append((name, prefix + name))
                    keys.append(prefix + name)
            return out, keys

        return walk(root, "")[0] + [(key, key) for key, _ in flat]

    def dictionary(self, name: str, entries: bytes) -> bytes:
        """A dictionary annotation from the bytes of its ``dict_entries`` fields."""
        return field(_ANNOTATION, self.name(name) + entries)

    def entry(self, name: str, value: Any) -> bytes:
        """One ``dict_entries`` field holding a leaf."""
        return field(A_DICT, self.leaf(name, value))

    def raw_entry(self, name: str, value_fields: bytes) -> bytes:
        """One ``dict_entries`` field from already encoded value fields."""
        return field(A_DICT, self.name(name) + value_fields)


class EventEncoder:
    """TrackEvent packets as bytes, framed as ``Trace.packet`` fields."""

    def __init__(self, sequence_id: int) -> None:
        # Every event packet ends with the sequence id and SEQ_NEEDS_INCREMENTAL_STATE.
        self._tail = _SEQUENCE_ID + varint(sequence_id) + _FLAGS + varint(SEQ_NEEDS_INCREMENTAL_STATE)
        self._ends: dict[int, bytes] = {}
        # uuid * 16 + event type -> the event's type and track fields, which every event
        # of a kind on a track repeats (the types, enum values, are below 16).
        self._heads: dict[int, bytes] = {}

    @staticmethod
    def timestamp(delta_or_absolute: int, absolute_clock: int | None) -> bytes:
        """Timestamp fields: a delta on the default clock, or absolute on ``absolute_clock``."""
        if absolute_clock is None:
            return _TIMESTAMP + varint(delta_or_absolute)
        return _TIMESTAMP + varint(delta_or_absolute) + _CLOCK_ID + varint(absolute_clock)

    def packet(self, timestamp: bytes, event: bytes, interned: bytes | None) -> bytes:
        """A framed packet around an encoded TrackEvent."""
        body = b"".join((timestamp, _TRACK_EVENT, varint(len(event)), event, self._tail))
        if interned:
            body += field(_INTERNED, interned)
        return _PACKET_TAG + varint(len(body)) + body

    def event(
        self,
        kind: int,
        uuid: int,
        name_iid: int,
        category_iids: Sequence[int] = (),
        flow_ids: Sequence[int] = (),
        terminating_flow_ids: Sequence[int] = (),
        correlation_iid: int = 0,
        annotations: bytes = b"",
    ) -> bytes:
        """An encoded TrackEvent."""
        head = self._heads.get(uuid * 16 + kind)
        if head is None:
            head = self._heads[uuid * 16 + kind] = _TYPE + varint(kind) + _TRACK_UUID + varint(uuid)
        out = [head, _NAME_IID, varint(name_iid)]
        for iid in category_iids:
            out += (_CATEGORY_IID, varint(iid))
        for flow in flow_ids:
            out += (_FLOW_ID, _PACK_FIXED64(flow))
        for flow in terminating_flow_ids:
            out += (_TERMINATING_FLOW_ID, _PACK_FIXED64(flow))
        if correlation_iid:
            out += (_CORRELATION_IID, varint(correlation_iid))
        out.append(annotations)
        return b"".join(out)

    def end(self, uuid: int, terminating_flow_ids: Sequence[int] = ()) -> bytes:
        """An encoded TYPE_SLICE_END TrackEvent on a track (cached per track), ending flows if given."""
        encoded = self._ends.get(uuid)
        if encoded is None:
            encoded = self._ends[uuid] = _TYPE + varint(pb.TrackEvent.TYPE_SLICE_END) + _TRACK_UUID + varint(uuid)
        if terminating_flow_ids:
            encoded += b"".join(_TERMINATING_FLOW_ID + _PACK_FIXED64(flow) for flow in terminating_flow_ids)
        return encoded
