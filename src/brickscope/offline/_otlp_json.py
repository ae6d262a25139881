# SPDX-License-Identifier: Apache-2.0
"""The OTLP JSON format of :func:`brickscope.offline.open_spans` (``otlp-json``).

Example::

    from brickscope.offline import open_spans

    for span in open_spans("spans.jsonl"):
        print(span.name, span.end_time - span.start_time)

Two layouts are accepted, told apart by their first non-blank line:

- **JSON Lines**, as written by the OpenTelemetry Collector's ``file`` exporter:
  one ``ExportTraceServiceRequest`` object (``{"resourceSpans": [...]}``) per
  line. The file is streamed line by line, so a multi-gigabyte file never sits
  in memory whole. Lines of other signals (``resourceLogs``, ``resourceMetrics``)
  and blank lines are skipped.
- **One JSON document**: a single request object (possibly pretty-printed over
  many lines) or a JSON array of them. Such a document is parsed whole, so it
  needs memory for all of it (roughly ten times its size as Python objects):
  prefer JSON Lines for big traces.

A gzip-compressed file is read transparently (``_source`` bounds it); a
zstd-compressed one (the Collector file exporter's ``compression: zstd``) is
refused with a hint to decompress it first (``_formats``). A last line without
its newline that is not valid JSON is a truncated file.

The decoding follows the OTLP/JSON rules of the OTLP specification: trace and
span ids are hex strings (not base64, unlike the generic protobuf JSON mapping),
enums are integers (their proto names are accepted too), 64-bit integers may be
strings or numbers, keys are lowerCamelCase and unknown keys are ignored.
``AnyValue`` maps to Python as the SDK's extended attributes do: ``stringValue``
to ``str``, ``intValue`` to ``int``, ``doubleValue`` to ``float``, ``boolValue``
to ``bool``, ``arrayValue`` to ``tuple``, ``kvlistValue`` to ``dict``,
``bytesValue`` (base64) to ``bytes`` and an empty value to ``None`` (an
attribute whose value is empty is left out). Dropped-attribute, -event and -link
counts are kept (``span.dropped_attributes`` ...). The parent is remote when the
span's ``flags`` say so (``SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK``).

Malformed input raises ``TraceFileError`` naming the file, the line and the field. A span
whose times cannot be true (no end time, an end before its start: ``_integrity``) is left
out and counted in ``source.dropped``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode

from ._integrity import impossible
from ._source import TraceSource

_UTF8_BOM = b"\xef\xbb\xbf"
# One line (a request of a JSON Lines file) and one whole document are bounded,
# so garbage without newlines cannot take all memory.
_MAX_LINE_BYTES = 256 << 20
_MAX_DOCUMENT_BYTES = 1 << 30

# opentelemetry/proto/trace/v1/trace.proto: Span.SpanKind, Status.StatusCode, SpanFlags.
_SPAN_KINDS = {
    0: SpanKind.INTERNAL,  # SPAN_KIND_UNSPECIFIED: the SDK has no such kind
    1: SpanKind.INTERNAL,
    2: SpanKind.SERVER,
    3: SpanKind.CLIENT,
    4: SpanKind.PRODUCER,
    5: SpanKind.CONSUMER,
}
_SPAN_KIND_NAMES = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_STATUS_CODES = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR}
_STATUS_CODE_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_FLAGS_TRACE_FLAGS_MASK = 0xFF
_FLAGS_HAS_IS_REMOTE = 0x100
_FLAGS_IS_REMOTE = 0x200

# Status objects are read-only: the common ones are shared.
_UNSET = Status(StatusCode.UNSET)
_OK = Status(StatusCode.OK)

_HEX = re.compile(r"[0-9a-fA-F]*\Z")
_INT = re.compile(r"-?[0-9]+\Z")
_UINT64_MAX = (1 << 64) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


class _Bad(Exception):
    """A decoding error, with the JSON path of the offending field."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message

    def within(self, prefix: str) -> _Bad:
        return _Bad(f"{prefix}.{self.where}" if self.where else prefix, self.message)


def read_otlp_json(source: TraceSource) -> Iterator[ReadableSpan]:
    """Yield every span of an OTLP JSON file, in file order (the ``otlp-json`` format)."""
    first_line, first, consumed = _first_request(source)
    if first is not None:
        yield from _read_lines(source, first_line, first)
    elif first_line:  # one document, spread over several lines (or garbage)
        yield from _read_document(source, consumed + _read_rest(source))


def _readline(source: TraceSource, number: int) -> bytes:
    line = source.stream.readline(_MAX_LINE_BYTES + 1)
    if len(line) > _MAX_LINE_BYTES:
        raise source.error(f"line longer than {_MAX_LINE_BYTES >> 20} MiB", line=number)
    return line


def _first_request(source: TraceSource) -> tuple[int, Any, bytes]:
    """Line number and parsed value of the first non-blank line (value None if it is
    not a request object by itself), and the bytes read so far."""
    consumed = bytearray()
    number = 0
    while True:
        number += 1
        line = _readline(source, number)
        if not line:
            return 0, None, bytes(consumed)
        consumed += line
        if number == 1 and line.startswith(_UTF8_BOM):
            line = line[len(_UTF8_BOM) :]
        if len(consumed) > _MAX_LINE_BYTES:
            raise source.error(f"more than {_MAX_LINE_BYTES >> 20} MiB before the first request", line=number)
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:  # a document spread over several lines (or garbage)
            return number, None, bytes(consumed)
        except RecursionError:
            raise source.error("JSON nested too deeply to read", line=number) from None
        # A single-line array is a whole document, not a request per line.
        return number, (value if isinstance(value, dict) else None), bytes(consumed)


def _read_lines(source: TraceSource, first_line: int, first: Any) -> Iterator[ReadableSpan]:
    """Decode a JSON Lines file, one request per line, streaming."""
    yield from _spans_at(source, first_line, "", first)
    number = first_line
    while True:
        number += 1
        line = _readline(source, number)
        if not line:
            return
        if line.strip():
            try:
                request = json.loads(line)
            except ValueError as exc:
                error = source.error(f"not valid JSON: {exc}", line=number)
                if line.endswith(b"\n"):
                    raise error from None
                # The last line, without its newline: a file cut while it was written.
                source.truncated(source.error(f"truncated: the last line is incomplete ({exc})", line=number))
                return
            except RecursionError:
                raise source.error("JSON nested too deeply to read", line=number) from None
            yield from _spans_at(source, number, "", request)
        source.report_progress()


def _read_rest(source: TraceSource) -> bytes:
    data = source.stream.read(_MAX_DOCUMENT_BYTES + 1)
    if len(data) > _MAX_DOCUMENT_BYTES:
        raise source.error(
            f"a single JSON document over {_MAX_DOCUMENT_BYTES >> 20} MiB (it is parsed whole);"
            " write JSON Lines instead (one request per line, read streaming)"
        )
    return data


def _read_document(source: TraceSource, data: bytes) -> Iterator[ReadableSpan]:
    """Decode a single JSON document (parsed whole: it has no line structure to stream)."""
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM) :]
    try:
        document = json.loads(data)
    except ValueError as exc:
        if source.truncation is not None:  # the gzip stream was cut: no prefix of a document to read
            raise source.truncation from None
        line = getattr(exc, "lineno", None)
        if getattr(exc, "pos", 0) >= len(data.rstrip()):
            raise source.error("truncated: the JSON document ends early", line=line) from None
        raise source.error(f"not valid JSON: {exc}", line=line) from None
    except RecursionError:
        raise source.error("JSON nested too deeply to read") from None
    del data
    if isinstance(document, list):
        for index, request in enumerate(document):
            yield from _spans_at(source, None, f"[{index}]", request)
    else:
        yield from _spans_at(source, None, "", document)


def _spans_at(source: TraceSource, line: int | None, prefix: str, request: Any) -> Iterator[ReadableSpan]:
    """Spans of one request, errors located as ``path:line: field: message``; impossible
    spans left out and counted in ``source.dropped``."""
    try:
        spans = _request_spans(request)
    except _Bad as bad:
        if prefix:
            bad = bad.within(prefix)
        what = f"{bad.where}: {bad.message}" if bad.where else bad.message
        if line is None:
            what = f"(single JSON document) {what}"
        raise source.error(what, line=line) from None
    except RecursionError:
        raise source.error("attribute values nested too deeply to read", line=line) from None
    kept = []
    for span in spans:
        reason = impossible(span.start_time, span.end_time, span.attributes)
        if reason is None:
            kept.append(span)
        else:
            source.drop(reason)
    return iter(kept)


def _request_spans(request: Any) -> list[ReadableSpan]:
    if not isinstance(request, dict):
        raise _Bad("", f"expected an ExportTraceServiceRequest object, got {_kind(request)}")
    spans: list[ReadableSpan] = []
    for r, resource_spans in enumerate(_list(request, "resourceSpans")):
        try:
            _resource_spans(resource_spans, spans)
        except _Bad as bad:
            raise bad.within(f"resourceSpans[{r}]") from None
    return spans


def _resource_spans(entry: Any, out: list[ReadableSpan]) -> None:
    _object(entry, "")
    resource_json = entry.get("resource") or {}
    _object(resource_json, "resource")
    try:
        resource_attributes = _attributes(resource_json)
    except _Bad as bad:
        raise bad.within("resource") from None
    resource = Resource(resource_attributes, _string(entry, "schemaUrl") or None)
    for s, scope_spans in enumerate(_list(entry, "scopeSpans")):
        try:
            _scope_spans(scope_spans, resource, out)
        except _Bad as bad:
            raise bad.within(f"scopeSpans[{s}]") from None


def _scope_spans(entry: Any, resource: Resource, out: list[ReadableSpan]) -> None:
    _object(entry, "")
    scope_json = entry.get("scope") or {}
    _object(scope_json, "scope")
    try:
        scope = InstrumentationScope(
            _string(scope_json, "name"),
            _string(scope_json, "version") or None,
            _string(entry, "schemaUrl") or None,
            _attributes(scope_json) or None,
        )
    except _Bad as bad:
        raise bad.within("scope") from None
    for i, span_json in enumerate(_list(entry, "spans")):
        try:
            out.append(_span(span_json, resource, scope))
        except _Bad as bad:
            raise bad.within(f"spans[{i}]") from None


def _span(span: Any, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    _object(span, "")
    trace_id = _id(span, "traceId", 16)
    span_id = _id(span, "spanId", 8)
    if not trace_id or not span_id:
        raise _Bad("traceId" if not trace_id else "spanId", "missing or all zero")
    flags = _uint(span, "flags", 0xFFFFFFFF)
    trace_flags = TraceFlags(flags & _FLAGS_TRACE_FLAGS_MASK)
    context = SpanContext(
        trace_id, span_id, is_remote=False, trace_flags=trace_flags, trace_state=_trace_state(span)
    )
    parent_id = _id(span, "parentSpanId", 8)
    parent = None
    if parent_id:
        parent = SpanContext(
            trace_id, parent_id, is_remote=_is_remote(flags), trace_flags=trace_flags
        )
    events = [_event(e, i) for i, e in enumerate(_list(span, "events"))] if "events" in span else ()
    links = [_link(k, i) for i, k in enumerate(_list(span, "links"))] if "links" in span else ()
    return ReadableSpan(
        name=_string(span, "name"),
        context=context,
        parent=parent,
        resource=resource,
        attributes=_attributes(span),
        events=_bounded_list(events, _uint(span, "droppedEventsCount", 0xFFFFFFFF)),
        links=_bounded_list(links, _uint(span, "droppedLinksCount", 0xFFFFFFFF)),
        kind=_SPAN_KINDS[_enum(span, "kind", _SPAN_KIND_NAMES, _SPAN_KINDS)],
        status=_status(span),
        start_time=_uint(span, "startTimeUnixNano", _UINT64_MAX),
        end_time=_uint(span, "endTimeUnixNano", _UINT64_MAX),
        instrumentation_scope=scope,
    )


def _event(event: Any, index: int) -> Event:
    try:
        _object(event, "")
        return Event(
            _string(event, "name"), _attributes(event), _uint(event, "timeUnixNano", _UINT64_MAX)
        )
    except _Bad as bad:
        raise bad.within(f"events[{index}]") from None


def _link(link: Any, index: int) -> Link:
    try:
        _object(link, "")
        flags = _uint(link, "flags", 0xFFFFFFFF)
        context = SpanContext(
            _id(link, "traceId", 16),
            _id(link, "spanId", 8),
            is_remote=_is_remote(flags),
            trace_flags=TraceFlags(flags & _FLAGS_TRACE_FLAGS_MASK),
            trace_state=_trace_state(link),
        )
        return Link(context, _attributes(link))
    except _Bad as bad:
        raise bad.within(f"links[{index}]") from None


def _status(span: Mapping[str, Any]) -> Status:
    status = span.get("status")
    if not status:
        return _UNSET
    _object(status, "status")
    try:
        code = _STATUS_CODES[_enum(status, "code", _STATUS_CODE_NAMES, _STATUS_CODES)]
        message = _string(status, "message")
    except _Bad as bad:
        raise bad.within("status") from None
    # The SDK keeps (and accepts without a warning) a description on errors only.
    if code is StatusCode.ERROR:
        return Status(code, message or None)
    return _OK if code is StatusCode.OK else _UNSET


def _is_remote(flags: int) -> bool:
    return bool(flags & _FLAGS_HAS_IS_REMOTE and flags & _FLAGS_IS_REMOTE)


def _trace_state(owner: Mapping[str, Any]) -> TraceState | None:
    header = _string(owner, "traceState")
    return TraceState.from_header([header]) if header else None


def _bounded_list(items: Any, dropped: int) -> Any:
    """The items, as a BoundedList recording ``dropped`` when the sender dropped some."""
    if not dropped:
        return items
    bounded = BoundedList.from_seq(None, list(items))
    bounded.dropped = dropped
    return bounded


def _attributes(owner: Mapping[str, Any]) -> Any:
    """``owner["attributes"]`` as a dict (BoundedAttributes when some were dropped)."""
    values = _key_values(owner, "attributes", keep_empty=False)
    dropped = _uint(owner, "droppedAttributesCount", 0xFFFFFFFF)
    if not dropped:
        return values
    bounded = BoundedAttributes(attributes=values, immutable=True)
    bounded.dropped = dropped
    return bounded


def _key_values(owner: Mapping[str, Any], key: str, *, keep_empty: bool) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for i, pair in enumerate(_list(owner, key)):
        # Fast path: a string or a non-negative int (written as a decimal string of at
        # most 18 digits, so within int64). Anything else takes the checked path.
        if type(pair) is dict:
            name, value_json = pair.get("key"), pair.get("value")
            if type(name) is str and type(value_json) is dict and len(value_json) == 1:
                scalar = value_json.get("stringValue")
                if type(scalar) is str:
                    result[name] = scalar
                    continue
                scalar = value_json.get("intValue")
                if (
                    type(scalar) is str
                    and len(scalar) < 19
                    and scalar.isdigit()
                    and scalar.isascii()
                ):
                    result[name] = int(scalar)
                    continue
        try:
            name, value = _key_value(pair)
        except _Bad as bad:
            raise bad.within(f"{key}[{i}]") from None
        if value is not None or keep_empty:
            result[name] = value
    return result


def _key_value(pair: Any) -> tuple[str, Any]:
    _object(pair, "")
    name = pair.get("key")
    if type(name) is not str:
        raise _Bad("key", f"expected a string, got {_kind(name)}")
    try:
        return name, _any_value(pair.get("value"))
    except _Bad as bad:
        raise bad.within("value") from None


def _any_value(value: Any) -> Any:
    """One ``AnyValue`` object as a Python value (None for an empty value)."""
    if value is None:
        return None
    _object(value, "")
    if "stringValue" in value:
        return _string(value, "stringValue")
    if "intValue" in value:
        return _integer(value["intValue"], "intValue", _INT64_MIN, _INT64_MAX)
    if "boolValue" in value:
        flag = value["boolValue"]
        if not isinstance(flag, bool):
            raise _Bad("boolValue", f"expected true or false, got {_kind(flag)}")
        return flag
    if "doubleValue" in value:
        return _double(value["doubleValue"])
    if "arrayValue" in value:
        array = value["arrayValue"] or {}
        _object(array, "arrayValue")
        items = []
        for i, item in enumerate(_list(array, "values")):
            try:
                items.append(_any_value(item))
            except _Bad as bad:
                raise bad.within(f"arrayValue.values[{i}]") from None
        return tuple(items)
    if "kvlistValue" in value:
        kvlist = value["kvlistValue"] or {}
        _object(kvlist, "kvlistValue")
        try:
            return _key_values(kvlist, "values", keep_empty=True)
        except _Bad as bad:
            raise bad.within("kvlistValue") from None
    if "bytesValue" in value:
        return _bytes(value["bytesValue"])
    return None  # an empty AnyValue, or only keys unknown to this reader (ignored)


def _double(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        special = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
        if value in special:
            return special[value]
        try:
            return float(value)
        except ValueError:
            pass
    raise _Bad("doubleValue", f"expected a number, got {_kind(value)}")


def _bytes(value: Any) -> bytes:
    if not isinstance(value, str):
        raise _Bad("bytesValue", f"expected a base64 string, got {_kind(value)}")
    # Protobuf's JSON mapping accepts standard and URL-safe base64, padded or not.
    text = value.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error:
        raise _Bad("bytesValue", f"not base64: {value[:40]!r}") from None


def _id(owner: Mapping[str, Any], key: str, size: int) -> int:
    """A hex trace or span id as an int (0 when absent or empty)."""
    text = owner.get(key, "")
    if not isinstance(text, str):
        raise _Bad(key, f"expected a hex string, got {_kind(text)}")
    if not text:
        return 0
    if len(text) == 2 * size and _HEX.match(text):
        return int(text, 16)
    hint = ""
    try:
        if len(base64.b64decode(text, validate=True)) == size:
            hint = (
                " (this looks like base64, as protobuf's generic JSON mapping writes ids;"
                " OTLP JSON requires hex)"
            )
    except binascii.Error:
        pass
    raise _Bad(key, f"expected {2 * size} hex digits, got {text[:48]!r}{hint}")


def _enum(
    owner: Mapping[str, Any], key: str, names: Mapping[str, int], known: Mapping[int, Any]
) -> int:
    value = owner.get(key, 0)
    if isinstance(value, str) and value in names:
        return names[value]
    if isinstance(value, int) and not isinstance(value, bool) and value in known:
        return value
    raise _Bad(key, f"unknown value {value!r}")


def _uint(owner: Mapping[str, Any], key: str, maximum: int) -> int:
    if key not in owner:
        return 0
    return _integer(owner[key], key, 0, maximum)


def _integer(value: Any, key: str, minimum: int, maximum: int) -> int:
    """An integer written as a JSON number or a decimal string (64-bit values)."""
    kind = type(value)
    if kind is str and (value.isdigit() and value.isascii() or _INT.match(value)):
        number = int(value)
    elif kind is int:
        number = value
    elif kind is float and value.is_integer():
        number = int(value)
    else:
        raise _Bad(key, f"expected an integer, got {_kind(value)}")
    if not minimum <= number <= maximum:
        raise _Bad(key, f"{number} is out of range [{minimum}, {maximum}]")
    return number


def _string(owner: Mapping[str, Any], key: str) -> str:
    value = owner.get(key, "")
    if not isinstance(value, str):
        raise _Bad(key, f"expected a string, got {_kind(value)}")
    return value


def _list(owner: Mapping[str, Any], key: str) -> Iterable[Any]:
    value = owner.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _Bad(key, f"expected an array, got {_kind(value)}")
    return value


def _object(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise _Bad(where, f"expected an object, got {_kind(value)}")


def _kind(value: Any) -> str:
    """A short description of a JSON value, for error messages."""
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    return {dict: "an object", list: "an array", bool: "a boolean", type(None): "null"}.get(
        type(value), f"{type(value).__name__} {value!r}"
    )
