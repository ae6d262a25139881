# SPDX-License-Identifier: Apache-2.0
"""Spans to Perfetto TracePackets: one trusted packet sequence, streamed batch by batch.

Example::

    writer = TraceWriter()
    with open("trace.pftrace", "wb") as f:
        f.write(writer.header())
        f.write(writer.encode(spans))   # complete packets: the file is valid here
        writer.commit()

Layout of the trace (what ui.perfetto.dev shows):

- one process track per OpenTelemetry resource (``service.name``, ``process.pid``);
- one thread track per ``thread.id`` carrying host-timed spans, and for each
  GPU-timed span its host "launch" slice (the ``brickscope.host.*`` interval);
  spans without ``thread.id`` go on one "spans" track of their process;
- per CUDA device a "GPU n" group with one track per stream, carrying GPU-timed
  spans at their GPU times, each with a flow arrow from its launch slice;
- a slice that would break the per-track nesting Perfetto requires goes on an
  overflow child track (see ``_lanes``); span events are instant events on the
  span's track and span links are flows.

Clock: timestamps are Unix-epoch nanoseconds, as OpenTelemetry's, declared on
``CLOCK_REALTIME``, which every ClockSnapshot names the trace's primary clock
(so per-rank files line up when merged and the UI can show wall time).
Packets use a sequence-scoped incremental clock (id 64, deltas of REALTIME)
so most timestamps take one to three bytes; an event earlier than the previous
one on the sequence (batches arrive in any order) carries an absolute REALTIME
timestamp instead, because an incremental clock cannot go backwards.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from opentelemetry.trace.status import StatusCode

from brickscope.trace import attributes as A

from ._annotations import add_attributes, set_value
from ._interning import Interner, sanitize
from ._lanes import LaneSet
from ._schema import (
    CLOCK_INCREMENTAL,
    CLOCK_REALTIME,
    META,
    META_EVENT_OF,
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
    SEQ_NEEDS_INCREMENTAL_STATE,
    TYPE_INSTANT,
    TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
    frame,
    pb,
)

_UUID_MASK = (1 << 63) - 1
# Linux pids and tids stay below 2**22 (pid_max); synthetic ones are drawn above it.
_SYNTHETIC_ID_BASE = 1 << 22
_MAX_REMEMBERED_SPANS = 1 << 16  # span id -> where its slice went, for links
_MIX = 0x9E3779B97F4A7C15


class _Track:
    """A logical track (thread, process fallback, GPU stream) and its lanes."""

    __slots__ = ("uuid", "name", "lanes", "lane_uuids")

    def __init__(self, uuid: int, name: str) -> None:
        self.uuid = uuid
        self.name = name
        self.lanes = LaneSet()
        self.lane_uuids = [uuid]


class _Process:
    """One process track, and the ids allocated under it."""

    __slots__ = ("uuid", "pid", "threads", "fallback", "devices", "streams", "device_names")

    def __init__(self, uuid: int, pid: int, device_names: Sequence[str]) -> None:
        self.uuid = uuid
        self.pid = pid
        self.threads: dict[int, _Track] = {}
        self.fallback: _Track | None = None
        self.devices: dict[Any, int] = {}
        self.streams: dict[tuple[Any, Any], _Track] = {}
        self.device_names = device_names


class _Slice:
    """One slice to write: a span's own slice or the host launch side of a GPU span."""

    __slots__ = ("start", "end", "track", "uuid", "order", "span", "category", "main", "flows_out", "flows_in")

    def __init__(self, start: int, end: int, track: _Track, span: ReadableSpan, main: bool) -> None:
        self.start = start
        self.end = end
        self.track = track
        self.span = span
        self.main = main
        self.uuid = 0
        self.order = 0
        self.category: str | None = None
        self.flows_out: list[int] | None = None
        self.flows_in: list[int] | None = None


class TraceWriter:
    """Turns batches of ended spans into complete, appendable Perfetto packets.

    Not thread-safe: the exporter serialises calls. Memory is bounded: lane
    bookkeeping by ``max_tracked_slices``, interning tables by ``max_interned``
    (a full table starts a new incremental-state generation), link bookkeeping
    by a fixed cap; what remains grows only with the number of tracks.
    """

    def __init__(
        self,
        *,
        sequence_id: int | None = None,
        max_tracked_slices: int = 200_000,
        max_interned: int = 20_000,
    ) -> None:
        rng = random.SystemRandom()
        # 2..16383: a two-byte varint; 1 is the tracing service's own sequence.
        self.sequence_id = sequence_id if sequence_id is not None else rng.randrange(2, 1 << 14)
        self._uuid_salt = rng.getrandbits(63)
        self._next_uuid = 0
        self._next_synthetic = _SYNTHETIC_ID_BASE + rng.randrange(1 << 30)
        self._max_tracked = max_tracked_slices
        self._interner = Interner(max_interned)
        self._processes: dict[Any, _Process] = {}
        self._resource_keys: dict[int, tuple[Any, Any]] = {}
        self._used_pids: set[int] = set()
        self._descriptors: dict[int, pb.TrackDescriptor] = {}
        self._described: set[int] = set()
        self._tracks: list[_Track] = []
        self._thread_process: dict[int, int] = {}  # thread track uuid -> process track uuid
        self._cursor: int | None = None  # last timestamp on the incremental clock
        self._snapshot_at: int | None = None
        self._good = (None, None)  # (cursor, snapshot_at) after the last committed batch
        self._needs_reset = False
        self._written: dict[int, tuple[int, int]] = {}  # span id -> (lane uuid, start)
        self._awaited: dict[int, list[int]] = {}  # span id -> link flow ids waiting for it
        self.skipped_spans = 0

    # --- public ---------------------------------------------------------------------

    def header(self) -> bytes:
        """The first packet of the sequence: clears incremental state, sets defaults."""
        return frame(self._reset_packet(first=True).SerializeToString())

    def encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        """Complete packets for one batch; appended to a trace, it stays a valid trace."""
        out: list[bytes] = []
        if self._needs_reset:
            self._interner.clear()
            self._described.clear()
            out.append(frame(self._reset_packet(first=False).SerializeToString()))
            self._needs_reset = False
        slices: list[_Slice] = []
        for span in spans:
            self._collect(span, slices)
        slices.sort(key=lambda s: (s.start, -s.end))
        for order, piece in enumerate(slices):
            piece.order = order
            piece.uuid = self._place(piece.track, piece.start, piece.end)
        self._budget()
        # (ts, order, phase, item): at one timestamp, events keep the order their
        # slices were placed in, which is what the lane rules assume.
        events: list[tuple[int, int, int, Any]] = []
        mains = {p.span.context.span_id: p for p in slices if p.main}
        for piece in slices:
            events.append((piece.start, piece.order, 0, piece))
            events.append((piece.end, piece.order, 1, piece))
            if piece.main:
                for event in piece.span.events:
                    events.append((event.timestamp, len(slices), 0, ("event", piece, event)))
                self._link(piece, mains, events)
        events.sort(key=lambda e: (e[0], e[1], e[2]))
        for piece in slices:
            self._describe(piece.uuid, out)
        for ts, _, phase, item in events:
            if self._interner.full:
                self._interner.clear()
                out.append(frame(self._reset_packet(first=False).SerializeToString()))
            if type(item) is tuple:
                packet = self._instant(*item)
            elif phase == 0:
                packet = self._begin(ts, item)
            else:
                packet = self._event(TYPE_SLICE_END, item.uuid)
            self._stamp(packet, ts, out)
            interned = self._interner.take()
            if interned is not None:
                packet.interned_data.CopyFrom(interned)
            out.append(frame(packet.SerializeToString()))
        return b"".join(out)

    def commit(self) -> None:
        """The last batch reached the file: remember its clock state as good."""
        self._good = (self._cursor, self._snapshot_at)

    def rollback(self) -> None:
        """The last batch did not reach the file (it was cut off): resynchronise.

        The next batch starts a new incremental-state generation and describes
        its tracks again, and the clock resumes from the last committed batch.
        """
        self._cursor, self._snapshot_at = self._good
        self._needs_reset = True

    # --- packets ----------------------------------------------------------------------

    def _reset_packet(self, *, first: bool) -> pb.TracePacket:
        packet = pb.TracePacket(
            trusted_packet_sequence_id=self.sequence_id,
            sequence_flags=SEQ_INCREMENTAL_STATE_CLEARED | SEQ_NEEDS_INCREMENTAL_STATE,
        )
        packet.trace_packet_defaults.timestamp_clock_id = CLOCK_INCREMENTAL
        if first:
            packet.first_packet_on_sequence = True
        return packet

    def _stamp(self, packet: pb.TracePacket, ts: int, out: list[bytes]) -> None:
        if self._cursor is None:
            # The incremental clock starts here; REALTIME is declared the trace clock.
            snapshot = pb.TracePacket(trusted_packet_sequence_id=self.sequence_id)
            clocks = snapshot.clock_snapshot
            clocks.primary_trace_clock = CLOCK_REALTIME
            clocks.clocks.add(clock_id=CLOCK_INCREMENTAL, timestamp=ts, is_incremental=True)
            clocks.clocks.add(clock_id=CLOCK_REALTIME, timestamp=ts)
            out.append(frame(snapshot.SerializeToString()))
            self._cursor = self._snapshot_at = ts
        if ts >= self._cursor:
            packet.timestamp = ts - self._cursor
            self._cursor = ts
        else:
            packet.timestamp = ts
            packet.timestamp_clock_id = CLOCK_REALTIME

    def _event(self, kind: int, uuid: int) -> pb.TracePacket:
        packet = pb.TracePacket(
            trusted_packet_sequence_id=self.sequence_id,
            sequence_flags=SEQ_NEEDS_INCREMENTAL_STATE,
        )
        event = packet.track_event
        event.type = kind
        event.track_uuid = uuid
        return packet

    def _begin(self, ts: int, piece: _Slice) -> pb.TracePacket:
        packet = self._event(TYPE_SLICE_BEGIN, piece.uuid)
        event = packet.track_event
        # Interned here, not earlier: a full table may start a new generation mid-batch.
        event.name_iid = self._interner.event_name(piece.span.name)
        if piece.category is not None:
            event.category_iids.append(self._interner.category(piece.category))
        if piece.flows_out:
            event.flow_ids.extend(piece.flows_out)
        if piece.flows_in:
            event.terminating_flow_ids.extend(piece.flows_in)
        if piece.main:
            span = piece.span
            context = span.context
            event.correlation_id_str_iid = self._interner.correlation(f"{context.trace_id:032x}")
            attributes = span.attributes
            if attributes:
                add_attributes(event.debug_annotations, attributes, self._interner)
            self._add_meta(event.debug_annotations, span)
            self._remember(context.span_id, piece, ts)
        return packet

    def _instant(self, kind: str, where: Any, what: Any) -> pb.TracePacket:
        if kind == "link":
            # Marks the start of an already written span that a later span links to.
            packet = self._event(TYPE_INSTANT, where)
            packet.track_event.name_iid = self._interner.event_name("link")
            packet.track_event.flow_ids.append(what)
            return packet
        packet = self._event(TYPE_INSTANT, where.uuid)
        track_event = packet.track_event
        track_event.name_iid = self._interner.event_name(what.name)
        if what.attributes:
            add_attributes(track_event.debug_annotations, what.attributes, self._interner)
        meta = track_event.debug_annotations.add(name_iid=self._interner.annotation_name(META))
        meta.dict_entries.add(
            name_iid=self._interner.annotation_name(META_EVENT_OF), uint_value=where.span.context.span_id
        )
        return packet

    def _add_meta(self, field: Any, span: ReadableSpan) -> None:
        intern = self._interner.annotation_name
        meta = field.add(name_iid=intern(META))
        entries = meta.dict_entries
        entries.add(name_iid=intern(META_SPAN_ID), uint_value=span.context.span_id)
        parent = span.parent
        if parent is not None:
            entries.add(name_iid=intern(META_PARENT_SPAN_ID), uint_value=parent.span_id)
            if parent.is_remote:
                entries.add(name_iid=intern(META_PARENT_REMOTE), bool_value=True)
        if span.kind is not SpanKind.INTERNAL:
            entries.add(name_iid=intern(META_KIND), int_value=span.kind.value)
        status = span.status
        if status.status_code is not StatusCode.UNSET:
            entries.add(name_iid=intern(META_STATUS_CODE), int_value=status.status_code.value)
            if status.description:
                entries.add(name_iid=intern(META_STATUS_DESCRIPTION), string_value=sanitize(status.description))
        scope = span.instrumentation_scope
        if scope is not None:
            set_value(entries.add(name_iid=intern(META_SCOPE)), scope.name, self._interner)
            if scope.version:
                set_value(entries.add(name_iid=intern(META_SCOPE_VERSION)), scope.version, self._interner)
        if span.links:
            links = entries.add(name_iid=intern(META_LINKS))
            for link in span.links:
                item = links.array_values.add()
                item.dict_entries.add(
                    name_iid=intern(META_LINK_TRACE_ID), string_value=f"{link.context.trace_id:032x}"
                )
                item.dict_entries.add(name_iid=intern(META_LINK_SPAN_ID), uint_value=link.context.span_id)
                if link.context.is_remote:
                    item.dict_entries.add(name_iid=intern(META_LINK_REMOTE), bool_value=True)
                if link.attributes:
                    nested = item.dict_entries.add(name_iid=intern(META_LINK_ATTRIBUTES))
                    add_attributes(nested.dict_entries, link.attributes, self._interner)

    # --- spans to slices ----------------------------------------------------------------

    def _collect(self, span: ReadableSpan, slices: list[_Slice]) -> None:
        start = span.start_time
        if start is None or span.context is None:
            self.skipped_spans += 1
            return
        end = span.end_time if span.end_time is not None and span.end_time >= start else start
        attributes = span.attributes or {}
        process = self._process(span.resource)
        category = _category(span, attributes)
        device = attributes.get(A.GPU_DEVICE_ID)
        if attributes.get(A.CLOCK) == A.CLOCK_CUDA and device is not None:
            track = self._stream_track(process, device, attributes.get(A.GPU_STREAM_ID))
            main = _Slice(start, end, track, span, True)
            host_start = attributes.get(A.HOST_START_NS)
            host_duration = attributes.get(A.HOST_DURATION_NS)
            if _is_int(host_start) and _is_int(host_duration) and host_start >= 0:
                launch = _Slice(host_start, host_start + max(host_duration, 0), self._host_track(process, attributes), span, False)
                launch.category = category
                launch.flows_out = [span.context.span_id]
                main.flows_in = [span.context.span_id]
                slices.append(launch)
        else:
            main = _Slice(start, end, self._host_track(process, attributes), span, True)
        main.category = category
        slices.append(main)

    def _place(self, track: _Track, start: int, end: int) -> int:
        lane = track.lanes.place(start, end)
        while lane >= len(track.lane_uuids):
            index = len(track.lane_uuids)
            uuid = self._uuid()
            self._descriptors[uuid] = pb.TrackDescriptor(
                uuid=uuid,
                parent_uuid=track.uuid,
                name=sanitize(f"{track.name} (overlap {index})"),
                description=(
                    "Slices that overlap others on their track without nesting (for example "
                    "async work that outlives its parent): Perfetto needs proper nesting per track."
                ),
                sibling_merge_behavior=pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE,
            )
            track.lane_uuids.append(uuid)
        return track.lane_uuids[lane]

    def _budget(self) -> None:
        if sum(t.lanes.size for t in self._tracks) > self._max_tracked:
            for track in self._tracks:
                track.lanes.shrink()

    def _link(self, piece: _Slice, batch: Mapping[int, _Slice], events: list[tuple[int, int, int, Any]]) -> None:
        """Flows for span links: the same flow id on the linked span's slice and on this one."""
        span = piece.span
        span_id = span.context.span_id
        waiting = self._awaited.pop(span_id, None)
        if waiting:
            piece.flows_out = (piece.flows_out or []) + waiting
        for index, link in enumerate(span.links):
            flow = ((span_id * _MIX + index + 1) & ((1 << 64) - 1)) or 1
            piece.flows_out = (piece.flows_out or []) + [flow]
            target_id = link.context.span_id
            target = batch.get(target_id)
            if target is not None:
                target.flows_out = (target.flows_out or []) + [flow]
            elif target_id in self._written:
                uuid, start = self._written[target_id]
                events.append((start, piece.order, 0, ("link", uuid, flow)))
            else:
                _bounded_put(self._awaited, target_id, flow)

    def _remember(self, span_id: int, piece: _Slice, ts: int) -> None:
        if len(self._written) >= _MAX_REMEMBERED_SPANS:
            del self._written[next(iter(self._written))]
        self._written[span_id] = (piece.uuid, ts)

    # --- tracks ------------------------------------------------------------------------

    def _uuid(self) -> int:
        self._next_uuid += 1
        return ((self._uuid_salt + self._next_uuid * _MIX) & _UUID_MASK) or 1

    def _synthetic_id(self) -> int:
        self._next_synthetic += 1
        return self._next_synthetic

    def _process(self, resource: Any) -> _Process:
        cached = self._resource_keys.get(id(resource))
        if cached is None or cached[0] is not resource:
            if len(self._resource_keys) > 1024:
                self._resource_keys.clear()
            attributes = dict(resource.attributes) if resource is not None else {}
            key = tuple(sorted((k, _hashable(v)) for k, v in attributes.items()))
            cached = self._resource_keys[id(resource)] = (resource, key)
        key = cached[1]
        process = self._processes.get(key)
        if process is not None:
            return process
        attributes = dict(resource.attributes) if resource is not None else {}
        pid = attributes.get("process.pid")
        if not _is_int(pid) or not 0 < pid < (1 << 31) or pid in self._used_pids:
            pid = self._synthetic_id()
        self._used_pids.add(pid)
        names = attributes.get(A.GPU_DEVICE_NAMES)
        process = _Process(self._uuid(), pid, tuple(names) if isinstance(names, (tuple, list)) else ())
        name = str(attributes.get("service.name", "unknown_service"))
        labels = [
            sanitize(f"{k}={_label(v)}") for k, v in attributes.items() if k not in ("service.name", "process.pid")
        ]
        descriptor = pb.TrackDescriptor(uuid=process.uuid)
        descriptor.process.pid = pid
        descriptor.process.process_name = sanitize(name)
        descriptor.process.process_labels.extend(labels)
        self._descriptors[process.uuid] = descriptor
        self._processes[key] = process
        return process

    def _host_track(self, process: _Process, attributes: Mapping[str, Any]) -> _Track:
        thread_id = attributes.get(A.THREAD_ID)
        if not _is_int(thread_id):
            if process.fallback is None:
                track = process.fallback = self._new_track("spans")
                self._descriptors[track.uuid] = pb.TrackDescriptor(
                    uuid=track.uuid,
                    parent_uuid=process.uuid,
                    name="spans",
                    description="Spans of this process that carry no thread.id attribute.",
                )
            return process.fallback
        track = process.threads.get(thread_id)
        if track is None:
            name = attributes.get(A.THREAD_NAME)
            name = str(name) if name is not None else f"thread {thread_id}"
            tid = thread_id if 0 < thread_id < (1 << 31) else self._synthetic_id()
            track = process.threads[thread_id] = self._new_track(name)
            descriptor = pb.TrackDescriptor(uuid=track.uuid)
            descriptor.thread.pid = process.pid
            descriptor.thread.tid = tid
            descriptor.thread.thread_name = sanitize(name)
            self._thread_process[track.uuid] = process.uuid
            self._descriptors[track.uuid] = descriptor
        return track

    def _stream_track(self, process: _Process, device: Any, stream: Any) -> _Track:
        key = (_hashable(device), _hashable(stream))
        track = process.streams.get(key)
        if track is not None:
            return track
        group = process.devices.get(key[0])
        if group is None:
            group = process.devices[key[0]] = self._uuid()
            name = f"GPU {device}"
            if _is_int(device) and 0 <= device < len(process.device_names):
                name += f" ({process.device_names[device]})"
            self._descriptors[group] = pb.TrackDescriptor(
                uuid=group,
                parent_uuid=process.uuid,
                name=sanitize(name),
                description="GPU-timed spans, one track per CUDA stream, at their measured GPU times.",
                child_ordering=pb.TrackDescriptor.LEXICOGRAPHIC,
            )
        if stream is None:
            label = "stream ?"
        elif _is_int(stream):
            label = "stream 0 (legacy default)" if stream == 0 else f"stream {stream:#x}"
        else:
            label = f"stream {stream}"
        track = process.streams[key] = self._new_track(label)
        self._descriptors[track.uuid] = pb.TrackDescriptor(
            uuid=track.uuid,
            parent_uuid=group,
            name=sanitize(label),
            description=(
                f"Work on CUDA stream {stream} of device {device}, timed with CUDA events and "
                "mapped onto the host clock. Flow arrows lead from each launch on a thread."
            ),
        )
        return track

    def _new_track(self, name: str) -> _Track:
        track = _Track(self._uuid(), name)
        self._tracks.append(track)
        return track

    def _describe(self, uuid: int, out: list[bytes]) -> None:
        if uuid in self._described:
            return
        descriptor = self._descriptors[uuid]
        if descriptor.parent_uuid:
            self._describe(descriptor.parent_uuid, out)
        elif uuid in self._thread_process:
            self._describe(self._thread_process[uuid], out)
        packet = pb.TracePacket(trusted_packet_sequence_id=self.sequence_id)
        packet.track_descriptor.CopyFrom(descriptor)
        out.append(frame(packet.SerializeToString()))
        self._described.add(uuid)


def _category(span: ReadableSpan, attributes: Mapping[str, Any]) -> str | None:
    """Brick category, else scope kind (step, layer), else the instrumentation scope."""
    category = attributes.get(A.BRICK_CATEGORY)
    if category is None:
        category = attributes.get(A.SCOPE_KIND)
    if category is None and span.instrumentation_scope is not None:
        category = span.instrumentation_scope.name
    return str(category) if category is not None else None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _label(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def _bounded_put(table: dict[int, list[int]], key: int, flow: int) -> None:
    if key not in table and len(table) >= _MAX_REMEMBERED_SPANS:
        del table[next(iter(table))]
    table.setdefault(key, []).append(flow)
