# SPDX-License-Identifier: Apache-2.0
"""Read a ``.pftrace`` written by this package back into OpenTelemetry spans.

Example::

    from brickscope.exporter.perfetto import read_spans

    for span in read_spans("trace.pftrace"):
        print(span.name, span.end_time - span.start_time, span.attributes)

Decoding follows the trace processor's rules: interned data per packet sequence
(cleared by ``SEQ_INCREMENTAL_STATE_CLEARED``), timestamps on the sequence's
incremental clock or absolute, and per track the events sorted by timestamp
(file order for equal ones), an END closing the most recent open slice. Each
slice that carries the span's identity (the ``otel`` annotation dictionary)
becomes one span; launch slices, link markers and slices of other producers are
skipped. What comes back: name, trace/span/parent ids, start and end (the GPU
interval for GPU-timed spans), attributes with their types, kind, status,
events, links, the instrumentation scope and a resource holding ``service.name``
(plus ``process.pid`` when it was real, and the other resource attributes as
strings, from the process labels).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import IO, Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from brickscope.trace.attributes import GPU_DURATION_NS, HOST_DURATION_NS, HOST_START_NS

from ._annotations import decode_annotations
from ._schema import (
    CLOCK_REALTIME,
    META_EVENT_OF,
    META_IMPLIED,
    IMPLIED_GPU_DURATION,
    IMPLIED_HOST_DURATION,
    IMPLIED_HOST_START,
    META_KIND,
    META_LINK_ATTRIBUTES,
    META_LINK_REMOTE,
    META_LINK_SPAN_ID,
    META_LINK_TRACE_ID,
    META_LINKS,
    META_PARENT_REMOTE,
    META_PARENT_SPAN_ID,
    META_SCOPE,
    META_SCOPE_VERSION,
    META_SPAN_ID,
    META_STATUS_CODE,
    META_STATUS_DESCRIPTION,
    SEQ_INCREMENTAL_STATE_CLEARED,
    TRACE_PACKET_TAG,
    TYPE_INSTANT,
    TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
    pb,
)

_SYNTHETIC_ID_BASE = 1 << 22
_CHUNK = 1 << 20

#: Called as ``progress(bytes_read, total_bytes)`` while a file is read.
ProgressCallback = Callable[[int, int], None]


def iter_packets(stream: IO[bytes]) -> Iterator[bytes]:
    """Yield each serialized TracePacket of a trace, reading the stream in chunks.

    A truncated last packet (a file cut while it was written) ends the iteration.
    """
    buffer = b""
    offset = 0
    while True:
        chunk = stream.read(_CHUNK)
        if chunk:
            buffer = buffer[offset:] + chunk
            offset = 0
        while True:
            parsed = _field(buffer, offset)
            if parsed is None:
                break
            tag, start, end = parsed
            offset = end
            if tag == TRACE_PACKET_TAG:
                yield buffer[start:end]
        if not chunk:
            return


def _field(buffer: bytes, offset: int) -> tuple[int, int, int] | None:
    """(tag, payload start, payload end) of the length-delimited field at offset, if complete."""
    size = len(buffer)
    if offset >= size:
        return None
    tag = buffer[offset]
    if tag & 0x07 != 2:
        raise ValueError(f"not a Perfetto trace: unexpected field tag {tag:#x}")
    position = offset + 1
    length = shift = 0
    while True:
        if position >= size:
            return None
        byte = buffer[position]
        position += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if position + length > size:
        return None
    return tag, position, position + length


class _Sequence:
    """Incremental state of one trusted packet sequence."""

    __slots__ = ("tables", "default_clock", "clocks")

    def __init__(self) -> None:
        self.tables: dict[str, dict[int, str]] = {}
        self.default_clock = 0
        self.clocks: dict[int, int] = {}  # incremental clock id -> last absolute value

    def lookup(self, table: str, iid: int) -> str:
        try:
            return self.tables[table][iid]
        except KeyError:
            raise ValueError(f"interned id {iid} of table {table!r} used before it was defined") from None


def read_spans(path: str | os.PathLike[str], *, progress: ProgressCallback | None = None) -> list[ReadableSpan]:
    """Decode every span of a ``.pftrace`` written by :class:`PerfettoSpanExporter`.

    Args:
        path: the trace file (a merged one works too).
        progress: called as ``progress(bytes_read, total_bytes)`` while reading.

    Returns:
        Ended spans, ordered by start time.

    Raises:
        ValueError: the file is not a Perfetto protobuf trace, or uses an
            interned id it never defined.
        OSError: the file cannot be read.
    """
    path = os.fspath(path)
    total = os.path.getsize(path)
    sequences: dict[int, _Sequence] = {}
    descriptors: dict[int, Any] = {}
    tracks: dict[int, list[tuple[int, int, int, Any]]] = {}
    index = 0
    with open(path, "rb") as stream:
        for data in iter_packets(stream):
            packet = pb.TracePacket.FromString(data)
            index += 1
            sequence = sequences.setdefault(packet.trusted_packet_sequence_id, _Sequence())
            if packet.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED or packet.incremental_state_cleared:
                sequence.tables.clear()
                sequence.default_clock = 0
            if packet.HasField("trace_packet_defaults"):
                sequence.default_clock = packet.trace_packet_defaults.timestamp_clock_id
            if packet.HasField("interned_data"):
                _intern(sequence, packet.interned_data)
            if packet.HasField("clock_snapshot"):
                for clock in packet.clock_snapshot.clocks:
                    if clock.is_incremental:
                        sequence.clocks[clock.clock_id] = clock.timestamp
            if packet.HasField("track_descriptor"):
                descriptors[packet.track_descriptor.uuid] = packet.track_descriptor
            if packet.HasField("track_event"):
                ts = _timestamp(packet, sequence)
                event = packet.track_event
                tracks.setdefault(event.track_uuid, []).append((ts, index, event.type, (event, sequence)))
            if progress is not None and index % 4096 == 0:
                progress(stream.tell(), total)
    if progress is not None:
        progress(total, total)
    return _spans(tracks, descriptors)


def _intern(sequence: _Sequence, interned: Any) -> None:
    tables = sequence.tables
    for table, entries, attribute in (
        ("event_names", interned.event_names, "name"),
        ("categories", interned.event_categories, "name"),
        ("names", interned.debug_annotation_names, "name"),
    ):
        if entries:
            target = tables.setdefault(table, {})
            for entry in entries:
                target[entry.iid] = getattr(entry, attribute)
    for table, entries in (
        ("values", interned.debug_annotation_string_values),
        ("correlations", interned.correlation_id_str),
    ):
        if entries:
            target = tables.setdefault(table, {})
            for entry in entries:
                target[entry.iid] = entry.str.decode("utf-8", "replace")


def _timestamp(packet: Any, sequence: _Sequence) -> int:
    clock = packet.timestamp_clock_id if packet.HasField("timestamp_clock_id") else sequence.default_clock
    ts = packet.timestamp
    if clock in sequence.clocks:
        ts = sequence.clocks[clock] = sequence.clocks[clock] + ts
    elif clock not in (0, CLOCK_REALTIME) and 64 <= clock < 128:
        raise ValueError(f"timestamp on sequence clock {clock} before its ClockSnapshot")
    return ts


def _spans(tracks: dict[int, list[tuple[int, int, int, Any]]], descriptors: dict[int, Any]) -> list[ReadableSpan]:
    spans: list[tuple[Any, ...]] = []
    launches: dict[int, tuple[int, int]] = {}  # flow id -> host launch slice (start, end)
    events: dict[int, list[Event]] = {}
    resources: dict[int, Resource] = {}
    for uuid, items in tracks.items():
        items.sort(key=lambda item: (item[0], item[1]))
        stack: list[tuple[int, Any]] = []
        for ts, _, kind, payload in items:
            if kind == TYPE_SLICE_BEGIN:
                stack.append((ts, payload))
            elif kind == TYPE_SLICE_END:
                if stack:
                    start, (event, sequence) = stack.pop()
                    _slice(spans, launches, uuid, start, ts, event, sequence)
            elif kind == TYPE_INSTANT:
                event, sequence = payload
                attributes, meta = decode_annotations(event.debug_annotations, sequence.lookup)
                owner = meta.get(META_EVENT_OF)
                if owner is not None:
                    name = sequence.lookup("event_names", event.name_iid) if event.HasField("name_iid") else event.name
                    events.setdefault(owner, []).append(Event(name, attributes, timestamp=ts))
    out = []
    for uuid, start, end, name, trace_id, attributes, meta in spans:
        implied = meta.get(META_IMPLIED, 0)
        if implied:
            span_id = meta[META_SPAN_ID]
            host_start, host_end = launches.get(span_id, (start, end)) if meta.get("_gpu") else (start, end)
            if implied & IMPLIED_HOST_START:
                attributes[HOST_START_NS] = host_start
            if implied & IMPLIED_HOST_DURATION:
                attributes[HOST_DURATION_NS] = host_end - host_start
            if implied & IMPLIED_GPU_DURATION:
                attributes[GPU_DURATION_NS] = end - start
        resource = resources.get(uuid)
        if resource is None:
            resource = resources[uuid] = _resource(uuid, descriptors)
        out.append(_span(name, trace_id, start, end, attributes, meta, events, resource))
    out.sort(key=lambda span: (span.start_time, span.end_time))
    return out


def _slice(
    spans: list[tuple[Any, ...]],
    launches: dict[int, tuple[int, int]],
    uuid: int,
    start: int,
    end: int,
    event: Any,
    sequence: _Sequence,
) -> None:
    attributes, meta = decode_annotations(event.debug_annotations, sequence.lookup)
    if META_SPAN_ID not in meta:
        for flow in event.flow_ids:  # a GPU span's launch slice (or another producer's)
            launches[flow] = (start, end)
        return
    # A GPU span's slice ends the flow from its launch, whose id is the span id.
    meta["_gpu"] = meta[META_SPAN_ID] in event.terminating_flow_ids
    name = sequence.lookup("event_names", event.name_iid) if event.HasField("name_iid") else event.name
    trace_id = 0
    if event.HasField("correlation_id_str_iid"):
        trace_id = int(sequence.lookup("correlations", event.correlation_id_str_iid), 16)
    elif event.HasField("correlation_id_str"):
        trace_id = int(event.correlation_id_str, 16)
    spans.append((uuid, start, end, name, trace_id, attributes, meta))


def _span(
    name: str,
    trace_id: int,
    start: int,
    end: int,
    attributes: dict[str, Any],
    meta: dict[str, Any],
    events: dict[int, list[Event]],
    resource: Resource,
) -> ReadableSpan:
    span_id = meta[META_SPAN_ID]
    parent = None
    if META_PARENT_SPAN_ID in meta:
        parent = SpanContext(
            trace_id, meta[META_PARENT_SPAN_ID], bool(meta.get(META_PARENT_REMOTE)), TraceFlags(TraceFlags.SAMPLED)
        )
    status = Status(StatusCode(meta.get(META_STATUS_CODE, 0)), meta.get(META_STATUS_DESCRIPTION))
    scope = None
    if META_SCOPE in meta:
        scope = InstrumentationScope(meta[META_SCOPE], meta.get(META_SCOPE_VERSION))
    links = []
    for link in meta.get(META_LINKS, ()):
        context = SpanContext(
            int(link[META_LINK_TRACE_ID], 16),
            link[META_LINK_SPAN_ID],
            bool(link.get(META_LINK_REMOTE)),
            TraceFlags(TraceFlags.SAMPLED),
        )
        links.append(Link(context, _flatten(link.get(META_LINK_ATTRIBUTES, {}))))
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, False, TraceFlags(TraceFlags.SAMPLED)),
        parent=parent,
        resource=resource,
        attributes=attributes,
        events=sorted(events.get(span_id, ()), key=lambda e: e.timestamp),
        links=links,
        kind=SpanKind(meta.get(META_KIND, SpanKind.INTERNAL.value)),
        status=status,
        start_time=start,
        end_time=end,
        instrumentation_scope=scope,
    )


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flatten(value, prefix + key + "."))
        else:
            out[prefix + key] = value
    return out


def _resource(uuid: int, descriptors: dict[int, Any]) -> Resource:
    """The resource of the process a track belongs to (parent chain, or the thread's pid)."""
    seen = set()
    descriptor = descriptors.get(uuid)
    while descriptor is not None and uuid not in seen:
        seen.add(uuid)
        if descriptor.HasField("process"):
            return _process_resource(descriptor.process)
        if descriptor.HasField("thread"):
            pid = descriptor.thread.pid
            for other in descriptors.values():
                if other.HasField("process") and other.process.pid == pid:
                    return _process_resource(other.process)
            return Resource({"process.pid": pid}) if pid < _SYNTHETIC_ID_BASE else Resource({})
        uuid = descriptor.parent_uuid
        descriptor = descriptors.get(uuid)
    return Resource({})


def _process_resource(process: Any) -> Resource:
    attributes: dict[str, Any] = {}
    for label in process.process_labels:
        key, _, value = label.partition("=")
        attributes[key] = value
    if process.process_name:
        attributes["service.name"] = process.process_name
    if 0 < process.pid < _SYNTHETIC_ID_BASE:
        attributes["process.pid"] = process.pid
    return Resource(attributes)
