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
  span's track (a GPU-timed span's on its launch slice's thread track: event times
  are host times) and span links are flows.

Clock: timestamps are Unix-epoch nanoseconds, as OpenTelemetry's, declared on
``CLOCK_REALTIME``, which every ClockSnapshot names the trace's primary clock
(so per-rank files line up when merged and the UI can show wall time).
Packets use sequence-scoped incremental clocks (deltas of REALTIME) so most
timestamps take one to three bytes. An incremental clock cannot go backwards and
batches arrive in any order, so a batch that starts earlier than what was written
continues on a second (third...) incremental clock, see ``_stamp``. The trace
opens with a snapshot of the machine's real clocks (BOOTTIME, MONOTONIC...,
``_clocks``), which the trace processor needs to relate its default BOOTTIME
domain to REALTIME.

Flows: a GPU span's flow starts on its launch slice and ends on its GPU slice.
The trace processor draws a flow only if it sees the start first (events sorted
by timestamp, file order for ties), so the end goes on the GPU slice's BEGIN
when that is later than the launch's, else on its END; a GPU slice that ends
before its launch begins (impossible but for bad clocks) gets no flow, counted in
``flows_without_arrow``.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from opentelemetry.trace.status import StatusCode

from brickscope.trace import attributes as A

from ._clocks import clock_readings
from ._interning import Interner, sanitize
from ._lanes import MAX_TIME_NS, LaneSet
from ._schema import (
    CLOCK_INCREMENTAL,
    CLOCK_REALTIME,
    IMPLIED_GPU_DURATION,
    IMPLIED_HOST_DURATION,
    IMPLIED_HOST_START,
    META,
    META_EVENT_OF,
    META_IMPLIED,
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
    pb,
)
from ._wire import A_ARRAY, A_DICT, AnnotationEncoder, EventEncoder, field, frame, varint

_UUID_MASK = (1 << 63) - 1
# Linux pids and tids stay below 2**22 (pid_max); synthetic ones are drawn above it.
_SYNTHETIC_ID_BASE = 1 << 22
_MAX_REMEMBERED_SPANS = 1 << 16  # span id -> where its slice went, for links
_MIX = 0x9E3779B97F4A7C15
_UINT_TAG = varint(3 << 3)  # DebugAnnotation.uint_value
_MAX_CLOCKS = 63  # sequence-scoped clock ids 64..126 are incremental clocks
# Sequence-scoped, non-incremental: only in the opening snapshot (see _clock_snapshot).
_CLOCK_FILE_ANCHOR = 127


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

    __slots__ = (
        "start", "end", "track", "uuid", "order", "span", "category", "main",
        "flows_out", "flows_in", "flows_in_at_end", "launch", "gpu",
    )  # fmt: skip

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
        # The flows end on this slice's END event: its BEGIN is not after the launch's.
        self.flows_in_at_end = False
        self.launch: _Slice | None = None  # a GPU span's host launch slice
        self.gpu = False  # a GPU-timed span's own slice (on a stream track)


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
        pace: Callable[[], None] | None = None,
    ) -> None:
        rng = random.SystemRandom()
        # 2..16383: a two-byte varint; 1 is the tracing service's own sequence.
        self.sequence_id = sequence_id if sequence_id is not None else rng.randrange(2, 1 << 14)
        # Track uuids: a random 16-bit salt above a counter keeps them short
        # varints (they are on every event); `brickscope merge` renames any that
        # collide with another file's.
        self._uuid_salt = rng.getrandbits(16) << 20
        self._next_uuid = 0
        self._next_synthetic = _SYNTHETIC_ID_BASE + rng.randrange(1 << 30)
        self._max_tracked = max_tracked_slices
        # Called between units of work (a span, a slice, an event): the exporter's pacer.
        self._pace = pace if pace is not None else _no_pause
        self._interner = Interner(max_interned)
        self._annotations = AnnotationEncoder(self._interner)
        self._correlations: dict[int, int] = {}  # trace id -> interned correlation id
        self._events = EventEncoder(self.sequence_id)
        self._processes: dict[Any, _Process] = {}
        self._resource_keys: dict[int, tuple[Any, Any]] = {}
        self._used_pids: set[int] = set()
        self._descriptors: dict[int, pb.TrackDescriptor] = {}
        self._described: set[int] = set()
        self._tracks: list[_Track] = []
        self._thread_process: dict[int, int] = {}  # thread track uuid -> process track uuid
        # Incremental clock id -> the last timestamp written on it.
        self._clocks: dict[int, int] = {}
        self._good_clocks: dict[int, int] = {}  # as of the last committed batch
        self._needs_reset = False
        # span id -> (lane uuid, start), the oldest forgotten first. An OrderedDict: in a plain
        # dict the first key is found by stepping over every entry deleted before it, a scan
        # thousands of entries long at each eviction once the window is full.
        self._written: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self._batches = 0  # batches encoded: the lane rules treat earlier batches' slices apart
        self._awaited: OrderedDict[int, list[int]] = OrderedDict()  # span id -> link flow ids waiting for it
        #: spans left out: no start or end time, an end before the start, or a time
        #: outside 0..2**64-1 ns (a Perfetto slice can say none of these)
        self.skipped_spans = 0
        #: GPU spans whose GPU interval ends before their launch starts (bad clocks or
        #: data): written with their launch slice but no flow, attributes kept explicit
        self.flows_without_arrow = 0

    # --- public ---------------------------------------------------------------------

    def header(self) -> bytes:
        """The first packets of the sequence: clears incremental state, sets defaults, relates the clocks."""
        return frame(self._reset_packet(first=True).SerializeToString()) + frame(
            self._clock_snapshot().SerializeToString()
        )

    def encode(self, spans: Sequence[ReadableSpan]) -> bytes:
        """Complete packets for one batch; appended to a trace, it stays a valid trace."""
        out: list[bytes] = []
        if self._needs_reset:
            self._clear_interning()
            self._described.clear()
            out.append(frame(self._reset_packet(first=False).SerializeToString()))
            self._needs_reset = False
        pace = self._pace
        slices: list[_Slice] = []
        for span in spans:
            self._collect(span, slices)
            pace()
        slices.sort(key=lambda s: (s.start, -s.end))
        self._batches += 1
        for order, piece in enumerate(slices):
            piece.order = order
            piece.uuid = self._place(piece.track, piece.start, piece.end)
            pace()
        self._budget()
        # (ts, order, phase, tiebreak, item): at one timestamp, events keep the order
        # their slices were placed in, which is what the lane rules assume, except the
        # ENDs of slices that began earlier: they come first, innermost (latest placed)
        # first, because an END closes whatever slice is open on top of its track and
        # a flow ending there must land on its own slice. The first four members never
        # repeat, so sorting never compares the items.
        events: list[tuple[int, int, int, int, Any]] = []
        mains = {p.span.context.span_id: p for p in slices if p.main}
        extra = len(slices)
        for piece in slices:
            order = piece.order
            events.append((piece.start, order, 0, 0, piece))
            events.append((piece.end, order if piece.end == piece.start else -1 - order, 1, 0, piece))
            if piece.main:
                # Events are host-clock instants: a GPU span's go on its launch slice's thread track.
                where = piece.launch if piece.launch is not None else piece
                for event in piece.span.events:
                    extra += 1
                    events.append((event.timestamp, extra, 0, 0, ("event", where, event)))
                self._link(piece, mains, events)
            pace()
        events.sort()
        for piece in slices:
            self._describe(piece.uuid, out)
        for ts, _, phase, _, item in events:
            pace()
            if self._interner.full:
                self._clear_interning()
                out.append(frame(self._reset_packet(first=False).SerializeToString()))
            if type(item) is tuple:
                event = self._instant(*item)
            elif phase == 0:
                event = self._begin(ts, item)
            else:
                event = self._events.end(item.uuid, item.flows_in if item.flows_in_at_end else ())
            timestamp = self._stamp(ts, out)
            interned = self._interner.take()
            out.append(self._events.packet(timestamp, event, interned.SerializeToString() if interned else None))
        return b"".join(out)

    def commit(self) -> None:
        """The last batch reached the file: remember its clock state as good."""
        self._good_clocks = dict(self._clocks)

    def rollback(self) -> None:
        """The last batch did not reach the file (it was cut off): resynchronise.

        The next batch starts a new incremental-state generation and describes
        its tracks again, and the clock resumes from the last committed batch.
        """
        self._clocks = dict(self._good_clocks)
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

    def _clock_snapshot(self) -> pb.TracePacket:
        """Real readings of the machine's clocks, REALTIME named the trace time (see ``_clocks``).

        The sequence's own anchor clock (127, equal to the REALTIME reading) makes the
        set of clocks of this snapshot unique to the file: the trace processor checks
        that each clock moves forward between snapshots of the same set, and two files
        merged into one, from two machines, need not have ordered readings.
        """
        packet = pb.TracePacket(trusted_packet_sequence_id=self.sequence_id)
        snapshot = packet.clock_snapshot
        snapshot.primary_trace_clock = CLOCK_REALTIME
        readings = clock_readings()
        for clock_id, timestamp in readings:
            snapshot.clocks.add(clock_id=clock_id, timestamp=timestamp)
        realtime = dict(readings)[CLOCK_REALTIME]
        snapshot.clocks.add(clock_id=_CLOCK_FILE_ANCHOR, timestamp=realtime)
        return packet

    def _stamp(self, ts: int, out: list[bytes]) -> bytes:
        """Timestamp fields for an event at ``ts``, as a delta on an incremental clock.

        An incremental clock cannot go backwards, and batches arrive in any order,
        so the sequence keeps up to 63 of them (ids 64..126, each started by its own
        ClockSnapshot): an event uses the default clock (64) if it can, else the
        clock whose last timestamp is closest below it (three bytes more for the
        clock id), else a new clock; with all 63 in use it falls back to an
        absolute REALTIME timestamp.
        """
        clocks = self._clocks
        last = clocks.get(CLOCK_INCREMENTAL)
        if last is not None and ts >= last:
            clocks[CLOCK_INCREMENTAL] = ts
            return self._events.timestamp(ts - last, None)
        best = None
        for clock, at in clocks.items():
            if at <= ts and (best is None or at > clocks[best]):
                best = clock
        if best is None and len(clocks) < _MAX_CLOCKS:
            best = CLOCK_INCREMENTAL + len(clocks)
            # REALTIME is declared the trace clock; this clock starts at ts.
            snapshot = pb.TracePacket(trusted_packet_sequence_id=self.sequence_id)
            snapshot.clock_snapshot.primary_trace_clock = CLOCK_REALTIME
            snapshot.clock_snapshot.clocks.add(clock_id=best, timestamp=ts, is_incremental=True)
            snapshot.clock_snapshot.clocks.add(clock_id=CLOCK_REALTIME, timestamp=ts)
            out.append(frame(snapshot.SerializeToString()))
            clocks[best] = ts
        if best is None:
            return self._events.timestamp(ts, CLOCK_REALTIME)
        delta = ts - clocks[best]
        clocks[best] = ts
        return self._events.timestamp(delta, None if best == CLOCK_INCREMENTAL else best)

    def _clear_interning(self) -> None:
        self._interner.clear()
        self._annotations.clear()
        self._correlations.clear()

    def _begin(self, ts: int, piece: _Slice) -> bytes:
        interner = self._interner
        # Interned here, not earlier: a full table may start a new generation mid-batch.
        categories = (interner.category(piece.category),) if piece.category is not None else ()
        span = piece.span
        if not piece.main:
            return self._events.event(
                TYPE_SLICE_BEGIN, piece.uuid, interner.event_name(span.name), categories, piece.flows_out or ()
            )
        context = span.context
        name_iid = interner.event_name(span.name)
        correlation = self._correlations.get(context.trace_id)
        if correlation is None:
            correlation = self._correlations[context.trace_id] = interner.correlation(f"{context.trace_id:032x}")
        attributes = span.attributes
        implied = 0
        if attributes:
            if A.HOST_START_NS in attributes:
                attributes, implied = _elide(piece, attributes)
            annotations = self._annotations.attributes(attributes)
        else:
            annotations = b""
        self._remember(context.span_id, piece, ts)
        return self._events.event(
            TYPE_SLICE_BEGIN,
            piece.uuid,
            name_iid,
            categories,
            piece.flows_out or (),
            () if piece.flows_in_at_end else piece.flows_in or (),
            correlation,
            annotations + self._meta(span, implied),
        )

    def _instant(self, kind: str, where: Any, what: Any) -> bytes:
        interner = self._interner
        if kind == "link":
            # Marks the start of an already written span that a later span links to.
            return self._events.event(TYPE_INSTANT, where, interner.event_name("link"), flow_ids=(what,))
        name_iid = interner.event_name(what.name)
        annotations = self._annotations.attributes(what.attributes) if what.attributes else b""
        meta = self._annotations.dictionary(
            META, self._annotations.raw_entry(META_EVENT_OF, _uint(where.span.context.span_id))
        )
        return self._events.event(TYPE_INSTANT, where.uuid, name_iid, annotations=annotations + meta)

    def _meta(self, span: ReadableSpan, implied: int) -> bytes:
        """The ``otel`` dictionary: span id, parent, kind, status, scope, links, elided attributes."""
        encoder = self._annotations
        entries = [encoder.raw_entry(META_SPAN_ID, _uint(span.context.span_id))]
        if implied:
            entries.append(encoder.entry(META_IMPLIED, implied))
        parent = span.parent
        if parent is not None:
            entries.append(encoder.raw_entry(META_PARENT_SPAN_ID, _uint(parent.span_id)))
            if parent.is_remote:
                entries.append(encoder.entry(META_PARENT_REMOTE, True))
        if span.kind is not SpanKind.INTERNAL:
            entries.append(encoder.entry(META_KIND, span.kind.value))
        status = span.status
        if status.status_code is not StatusCode.UNSET:
            entries.append(encoder.entry(META_STATUS_CODE, status.status_code.value))
            if status.description:
                entries.append(encoder.entry(META_STATUS_DESCRIPTION, status.description))
        scope = span.instrumentation_scope
        if scope is not None:
            entries.append(encoder.entry(META_SCOPE, scope.name))
            if scope.version:
                entries.append(encoder.entry(META_SCOPE_VERSION, scope.version))
        if span.links:
            items = []
            for link in span.links:
                context = link.context
                item = [
                    encoder.entry(META_LINK_TRACE_ID, f"{context.trace_id:032x}"),
                    encoder.raw_entry(META_LINK_SPAN_ID, _uint(context.span_id)),
                ]
                if context.is_remote:
                    item.append(encoder.entry(META_LINK_REMOTE, True))
                if link.attributes:
                    item.append(encoder.raw_entry(META_LINK_ATTRIBUTES, encoder.attributes(link.attributes, A_DICT)))
                items.append(field(A_ARRAY, b"".join(item)))
            entries.append(encoder.raw_entry(META_LINKS, b"".join(items)))
        return encoder.dictionary(META, b"".join(entries))

    # --- spans to slices ----------------------------------------------------------------

    def _collect(self, span: ReadableSpan, slices: list[_Slice]) -> None:
        start, end = span.start_time, span.end_time
        if start is None or end is None or span.context is None or not 0 <= start <= end <= MAX_TIME_NS:
            # A slice cannot end before it begins: written as a zero-length slice, an end
            # before the start would read back as a plausible span. Left out and counted.
            self.skipped_spans += 1
            return
        attributes = span.attributes or {}
        process = self._process(span.resource)
        category = _category(span, attributes)
        device = attributes.get(A.GPU_DEVICE_ID)
        if attributes.get(A.CLOCK) in A.GPU_CLOCKS and device is not None:
            track = self._stream_track(process, device, attributes.get(A.GPU_STREAM_ID))
            main = _Slice(start, end, track, span, True)
            host_start = attributes.get(A.HOST_START_NS)
            host_duration = attributes.get(A.HOST_DURATION_NS)
            if _is_int(host_start) and _is_int(host_duration) and 0 <= host_start <= MAX_TIME_NS - max(host_duration, 0):
                launch = _Slice(host_start, host_start + max(host_duration, 0), self._host_track(process, attributes), span, False)
                launch.category = category
                if end > host_start:
                    launch.flows_out = [span.context.span_id]
                    main.flows_in = [span.context.span_id]
                    main.flows_in_at_end = start <= host_start
                    main.launch = launch
                else:  # GPU work that ended before its launch began: no arrow can point forward
                    self.flows_without_arrow += 1
                slices.append(launch)
            main.gpu = True
        else:
            main = _Slice(start, end, self._host_track(process, attributes), span, True)
        main.category = category
        slices.append(main)

    def _place(self, track: _Track, start: int, end: int) -> int:
        lane = track.lanes.place(start, end, self._batches)
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
                track.lanes.shrink(self._pace)

    def _link(self, piece: _Slice, batch: Mapping[int, _Slice], events: list[tuple[int, int, int, int, Any]]) -> None:
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
                events.append((start, piece.order, 0, flow, ("link", uuid, flow)))
            else:
                _bounded_put(self._awaited, target_id, flow)

    def _remember(self, span_id: int, piece: _Slice, ts: int) -> None:
        if len(self._written) >= _MAX_REMEMBERED_SPANS:
            self._written.popitem(last=False)
        self._written[span_id] = (piece.uuid, ts)

    # --- tracks ------------------------------------------------------------------------

    def _uuid(self) -> int:
        self._next_uuid += 1
        return (self._uuid_salt + self._next_uuid) & _UUID_MASK

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


def _elide(piece: _Slice, attributes: Mapping[str, Any]) -> tuple[Mapping[str, Any], int]:
    """Drop the attributes the slices already say exactly; returns them and their IMPLIED_* bits.

    The host interval is the launch slice of a GPU span, or the slice itself of a
    host-timed one; a GPU span's GPU duration is its slice's duration. Dropping
    them saves about 30 bytes per span; ``read_spans`` puts them back.
    """
    if piece.gpu:
        host = piece.launch
        if host is None:
            return attributes, 0
    else:
        host = piece
    bits = 0
    value = attributes.get(A.HOST_START_NS)
    if type(value) is int and value == host.start:
        bits |= IMPLIED_HOST_START
    value = attributes.get(A.HOST_DURATION_NS)
    if type(value) is int and value == host.end - host.start:
        bits |= IMPLIED_HOST_DURATION
    if piece.gpu:
        value = attributes.get(A.GPU_DURATION_NS)
        if type(value) is int and value == piece.end - piece.start:
            bits |= IMPLIED_GPU_DURATION
    if not bits:
        return attributes, 0
    dropped = _IMPLIED_KEYS[bits]
    return {k: v for k, v in attributes.items() if k not in dropped}, bits


# IMPLIED_* bits -> the attribute keys they stand for.
_IMPLIED_KEYS = {
    bits: frozenset(
        key
        for key, bit in (
            (A.HOST_START_NS, IMPLIED_HOST_START),
            (A.HOST_DURATION_NS, IMPLIED_HOST_DURATION),
            (A.GPU_DURATION_NS, IMPLIED_GPU_DURATION),
        )
        if bits & bit
    )
    for bits in range(1, (IMPLIED_HOST_START | IMPLIED_HOST_DURATION | IMPLIED_GPU_DURATION) + 1)
}


def _no_pause() -> None:
    """The pace of a writer nobody waits for (offline conversion, merge)."""


def _uint(value: int) -> bytes:
    """``uint_value`` field bytes (span ids are unsigned 64-bit)."""
    return _UINT_TAG + varint(value)


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


def _bounded_put(table: OrderedDict[int, list[int]], key: int, flow: int) -> None:
    if key not in table and len(table) >= _MAX_REMEMBERED_SPANS:
        table.popitem(last=False)
    table.setdefault(key, []).append(flow)
