# SPDX-License-Identifier: Apache-2.0
"""OpenTelemetry spans as an OTLP ``ExportTraceServiceRequest``, written straight to protobuf bytes.

The official encoder (opentelemetry-exporter-otlp-proto-common) builds a protobuf message
object per span, attribute and value, then serialises the tree: ~29 µs a brickscope span
(12 attributes). The wire format needs none of those objects. This writes each span's
bytes directly and keeps the bytes of what repeats from span to span (an attribute whose
value is a string, a bool or a small integer; a span name; a key) in bounded caches, so
a brickscope span costs a few microseconds.

The output is the official encoder's, byte for byte (``encode_spans(spans)
.SerializePartialToString()`` of opentelemetry-exporter-otlp-proto-common 1.45 with the
upb runtime): the same grouping by resource and instrumentation scope in order of first
appearance, the same fields in field-number order, the same values left out as proto3
defaults, and an attribute the official encoder cannot encode (an unsupported type, an
integer beyond int64) left out and logged as it does. tests/test_encode.py holds it to
that on spans of every shape.

Example::

    body = encode_spans(spans)          # bytes, ready for POST /v1/traces
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

logger = logging.getLogger(__name__)

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
#: Distinct entries kept per cache before it is emptied: bounds memory whatever the
#: cardinality of attribute values, and fits every name and value a model repeats.
CACHE_LIMIT = 4096

_pack_fixed64 = struct.Struct("<Q").pack
_pack_double = struct.Struct("<d").pack
_pack_fixed32 = struct.Struct("<I").pack

# Field tags: (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
_SPAN_TRACE_ID = b"\x0a\x10"  # field 1, 16 bytes
_SPAN_SPAN_ID = b"\x12\x08"  # field 2, 8 bytes
_SPAN_TRACE_STATE = 0x1A
_SPAN_PARENT_SPAN_ID = b"\x22\x08"  # field 4, 8 bytes
_SPAN_NAME = 0x2A
_SPAN_KIND = b"\x30"
_SPAN_START = b"\x39"
_SPAN_END = b"\x41"
_SPAN_ATTRIBUTE = b"\x4a"
_SPAN_DROPPED_ATTRIBUTES = b"\x50"
_SPAN_EVENT = b"\x5a"
_SPAN_DROPPED_EVENTS = b"\x60"
_SPAN_LINK = b"\x6a"
_SPAN_DROPPED_LINKS = b"\x70"
_SPAN_STATUS = b"\x7a"
_SPAN_FLAGS = b"\x85\x01"  # field 16, fixed32
_FLAG_HAS_IS_REMOTE, _FLAG_IS_REMOTE = 0x100, 0x200
_FLAGS_LOCAL = _SPAN_FLAGS + _pack_fixed32(_FLAG_HAS_IS_REMOTE)
_FLAGS_REMOTE = _SPAN_FLAGS + _pack_fixed32(_FLAG_HAS_IS_REMOTE | _FLAG_IS_REMOTE)


_SMALL = [bytes((n,)) for n in range(0x80)]


def _varint(value: int) -> bytes:
    """A non-negative integer (or a negative int64, as its 64-bit two's complement) as a varint."""
    if value < 0x80:
        if value >= 0:
            return _SMALL[value]
        value &= 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    return bytes((tag,)) + _varint(len(payload)) + payload


def _miss(cache: dict[Any, bytes], key: Any, make: Callable[[Any], bytes]) -> bytes:
    """``cache[key]`` made by ``make`` and kept; a cache holding ``CACHE_LIMIT`` entries is
    emptied first, which bounds memory whatever the cardinality of the keys."""
    if len(cache) >= CACHE_LIMIT:
        cache.clear()
    value = cache[key] = make(key)
    return value


class _Caches:
    """Bytes of what repeats: a ``KeyValue`` per (key, value) for string, bool and small-int
    values (a cache per type: ``1``, ``True`` and ``1.0`` are equal keys), a key field per
    key, a name field per span name. Plain dictionaries, read with ``get``, filled by
    ``_miss``."""

    def __init__(self) -> None:
        self.strings: dict[tuple[str, str], bytes] = {}
        self.bools: dict[tuple[str, bool], bytes] = {}
        self.ints: dict[tuple[str, int], bytes] = {}
        self.keys: dict[str, bytes] = {}
        self.names: dict[str, bytes] = {}

    def key_value(self, item: tuple[str, Any]) -> bytes:
        """A ``KeyValue`` message, length-prefixed."""
        key, value = item
        return _length_prefixed(
            (self.keys.get(key) or _miss(self.keys, key, _key_field)) + _field(0x12, _any_value(value))
        )


def _key_field(key: str) -> bytes:
    """A ``KeyValue``'s key field (none for an empty key: a proto3 default)."""
    return _field(0x0A, key.encode()) if key else b""


def _name_field(name: str) -> bytes:
    """A ``Span``'s name field (none for an empty name)."""
    return _field(_SPAN_NAME, name.encode()) if name else b""


def _any_value(value: Any) -> bytes:
    """An ``AnyValue`` message body (every member of its oneof is written, defaults included)."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, str):
        return _field(0x0A, value.encode())
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise ValueError(f"Value out of range: {value}")
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _pack_double(value)
    if isinstance(value, bytes):
        return _field(0x3A, value)
    if isinstance(value, Sequence):
        return _field(0x2A, b"".join([_field(0x0A, _any_value(item)) for item in value]))
    if isinstance(value, Mapping):
        pairs = [_field(0x0A, _key_value(str(key), item)) for key, item in value.items()]
        return _field(0x32, b"".join(pairs))
    raise TypeError(f"Invalid type {type(value)} of value {value}")


def _key_value(key: str, value: Any) -> bytes:
    """A ``KeyValue`` message body."""
    return _key_field(key) + _field(0x12, _any_value(value))


def _attributes(tag: bytes, attributes: Mapping[str, Any] | None, caches: _Caches) -> list[bytes]:
    """Each attribute as a ``tag``-ged ``KeyValue`` field, in the mapping's order. The bytes
    of a string, bool or small-int value are cached per (key, value); an attribute the
    official encoder cannot encode is logged and left out, as it does."""
    if not attributes:
        return []
    fields = []
    strings, ints, bools, keys = caches.strings, caches.ints, caches.bools, caches.keys
    for key, value in attributes.items():
        kind = type(value)
        if kind is str:
            cache = strings
        elif kind is int and -1024 <= value <= 1024:
            cache = ints
        elif kind is bool:
            cache = bools
        else:
            cache = None
        try:
            if cache is not None:
                fields.append(tag + (cache.get((key, value)) or _miss(cache, (key, value), caches.key_value)))
            elif kind is int and _INT64_MIN <= value <= _INT64_MAX:  # a time, an id: not worth an entry
                key_field = keys.get(key) or _miss(keys, key, _key_field)
                number = _varint(value)  # the AnyValue: its int_value field, length-prefixed
                fields.append(tag + _length_prefixed(key_field + b"\x12" + _SMALL[len(number) + 1] + b"\x18" + number))
            else:
                fields.append(tag + _length_prefixed(_key_value(key, value)))
        except Exception as error:  # the official encoder's behaviour
            logger.exception("Failed to encode key %s: %s", key, error)
    return fields


def _trace_state(trace_state: Any) -> bytes:
    if not trace_state:
        return b""
    return _field(_SPAN_TRACE_STATE, ",".join(f"{key}={value}" for key, value in trace_state.items()).encode())


def _span(span: ReadableSpan, caches: _Caches) -> bytes:
    """A ``Span`` message body."""
    context = span.get_span_context()
    parent = span.parent
    parts = [
        _SPAN_TRACE_ID,
        context.trace_id.to_bytes(16, "big"),
        _SPAN_SPAN_ID,
        context.span_id.to_bytes(8, "big"),
    ]
    if context.trace_state:
        parts.append(_trace_state(context.trace_state))
    if parent:
        parts += (_SPAN_PARENT_SPAN_ID, parent.span_id.to_bytes(8, "big"))
    parts.append(caches.names.get(span.name) or _miss(caches.names, span.name, _name_field))
    kind = span.kind.value + 1  # SpanKind INTERNAL.. CONSUMER (0..4) -> SPAN_KIND_INTERNAL.. (1..5)
    parts += (_SPAN_KIND, _SMALL[kind])
    if span.start_time:
        parts += (_SPAN_START, _pack_fixed64(span.start_time))
    if span.end_time:
        parts += (_SPAN_END, _pack_fixed64(span.end_time))
    parts += _attributes(_SPAN_ATTRIBUTE, span.attributes, caches)
    if span.dropped_attributes:
        parts += (_SPAN_DROPPED_ATTRIBUTES, _varint(span.dropped_attributes))
    for event in span.events:
        parts.append(_SPAN_EVENT + _length_prefixed(_event(event, caches)))
    if span.dropped_events:
        parts += (_SPAN_DROPPED_EVENTS, _varint(span.dropped_events))
    for link in span.links:
        parts.append(_SPAN_LINK + _length_prefixed(_link(link, caches)))
    if span.dropped_links:
        parts += (_SPAN_DROPPED_LINKS, _varint(span.dropped_links))
    status = span.status
    if status is not None:
        parts += (_SPAN_STATUS, _length_prefixed(_status(status)))
    parts.append(_FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS_LOCAL)
    return b"".join(parts)


def _length_prefixed(body: bytes) -> bytes:
    return _varint(len(body)) + body


def _event(event: Any, caches: _Caches) -> bytes:
    parts = []
    if event.timestamp:
        parts += (b"\x09", _pack_fixed64(event.timestamp))
    if event.name:
        parts.append(_field(0x12, event.name.encode()))
    parts += _attributes(b"\x1a", event.attributes, caches)
    if event.dropped_attributes:
        parts += (b"\x20", _varint(event.dropped_attributes))
    return b"".join(parts)


def _link(link: Any, caches: _Caches) -> bytes:
    context = link.context
    parts = [b"\x0a\x10", context.trace_id.to_bytes(16, "big"), b"\x12\x08", context.span_id.to_bytes(8, "big")]
    parts += _attributes(b"\x22", link.attributes, caches)
    if link.dropped_attributes:
        parts += (b"\x28", _varint(link.dropped_attributes))
    flags = _FLAG_HAS_IS_REMOTE | (_FLAG_IS_REMOTE if context.is_remote else 0)
    parts += (b"\x35", _pack_fixed32(flags))
    return b"".join(parts)


def _status(status: Any) -> bytes:
    parts = []
    if status.description:
        parts.append(_field(0x12, status.description.encode()))
    if status.status_code.value:
        parts += (b"\x18", _varint(status.status_code.value))
    return b"".join(parts)


def _resource(resource: Any, caches: _Caches) -> bytes:
    """A ``Resource`` message body (dropped_attributes_count is never set by the official encoder)."""
    return b"".join(_attributes(b"\x0a", resource.attributes, caches))


def _scope(scope: Any, caches: _Caches) -> bytes:
    """An ``InstrumentationScope`` message body; empty for a span without one."""
    if scope is None:
        return b""
    parts = []
    if scope.name:
        parts.append(_field(0x0A, scope.name.encode()))
    if scope.version:
        parts.append(_field(0x12, scope.version.encode()))
    parts += _attributes(b"\x1a", scope.attributes, caches)
    return b"".join(parts)


class SpanEncoder:
    """Encodes batches of spans; keeps the caches of what repeats between batches.

    Safe to share between threads (a ``SimpleSpanProcessor`` exports from whichever thread
    ends a span): every cache entry is a function of its key alone, and a race between
    two threads costs at most an entry encoded twice or a cache emptied early.
    """

    def __init__(self) -> None:
        self._caches = _Caches()
        self._resources: dict[int, tuple[Any, bytes]] = {}

    def encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        """The ``ExportTraceServiceRequest`` of ``spans``, serialised."""
        caches = self._caches
        grouped: dict[Any, dict[Any, list[bytes]]] = {}
        last_resource = last_scope = None
        scope_spans: list[bytes] = []
        for span in spans:
            resource = span.resource
            scope = span.instrumentation_scope or None
            if resource is not last_resource or scope is not last_scope:
                # Grouped by equality, as the official encoder's dictionaries do; the
                # identity check above skips the hashing (a Resource hashes as JSON).
                scope_spans = grouped.setdefault(resource, {}).setdefault(scope, [])
                last_resource, last_scope = resource, scope
            scope_spans.append(_span(span, caches))
        out = []
        for resource, scopes in grouped.items():
            body = [b"\x0a", _length_prefixed(self._resource_body(resource))]
            for scope, encoded_spans in scopes.items():
                scope_body = [b"\x0a", _length_prefixed(_scope(scope, caches))]
                for encoded in encoded_spans:
                    scope_body += (b"\x12", _varint(len(encoded)), encoded)
                if scope is not None and scope.schema_url:
                    scope_body.append(_field(0x1A, scope.schema_url.encode()))
                body.append(b"\x12" + _length_prefixed(b"".join(scope_body)))
            if resource.schema_url:
                body.append(_field(0x1A, resource.schema_url.encode()))
            out.append(b"\x0a" + _length_prefixed(b"".join(body)))
        return b"".join(out)

    def _resource_body(self, resource: Any) -> bytes:
        known = self._resources.get(id(resource))
        if known is not None and known[0] is resource:
            return known[1]
        if len(self._resources) >= 64:
            self._resources.clear()
        body = _resource(resource, self._caches)
        self._resources[id(resource)] = (resource, body)
        return body


def encode_spans(spans: Sequence[ReadableSpan]) -> bytes:
    """The ``ExportTraceServiceRequest`` of ``spans``, serialised (a fresh encoder: no caches kept)."""
    return SpanEncoder().encode(spans)
