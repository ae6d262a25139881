# SPDX-License-Identifier: Apache-2.0
"""Read a ``.pftrace`` written by this package back into OpenTelemetry spans, streaming.

Example::

    from brickscope.offline import open_spans

    for span in open_spans("trace.pftrace"):   # this module, through brickscope.readers
        print(span.name, span.end_time - span.start_time, span.attributes)

Registered as the ``pftrace`` format of :func:`brickscope.offline.open_spans`
(entry-point group ``brickscope.readers``); :func:`read_spans` is the older list
API. Decoding follows the trace processor's rules: interned data per packet
sequence (cleared by ``SEQ_INCREMENTAL_STATE_CLEARED``), timestamps on the
sequence's incremental clock or absolute, an END closing the most recent open
slice of its track. Each slice that carries the span's identity (the ``otel``
annotation dictionary) becomes one span; launch slices and link markers are
skipped. Slices of other producers (a sequence with no ``otel`` slice) become spans
of no brickscope kind, named by their slice (:mod:`._foreign`). What comes back:
name, trace/span/parent ids, start and end (the GPU interval for GPU-timed spans),
attributes with their types, kind, status, events, links, the instrumentation scope
and a resource holding ``service.name`` (plus ``process.pid`` when it was real, and the other
resource attributes as strings, from the process labels).

Memory is bounded: packets are read one at a time, and a span is held only
until :data:`_HOLD_SPANS` later spans have ended. The writer writes each export
batch as complete, properly nested slices with the span's events and its launch
slice in the same batch, so a held span has all of them once two batches of up
to 4096 spans have passed; an event that turns up later (or never finds its
span) is counted and logged, not silently lost. A span whose times cannot be true
(:func:`brickscope.offline.impossible`: an end before its start, a duration attribute
that disagrees) is left out and counted in ``source.dropped``. A file that ends inside a
packet, or with slices begun and never ended, was cut short: an error, or with
``allow_truncated`` the spans completed before the cut.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Iterator
from typing import IO, Any

from google.protobuf.message import DecodeError
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from brickscope.offline import (
    GPU_DURATION_TOLERANCE_NS,
    NONNEGATIVE_KEYS,
    ProgressCallback,
    SpanRecord,
    TraceFormat,
    TraceSource,
    impossible,
)
from brickscope.trace.attributes import (
    BRICK_SELF_DURATION_NS,
    GPU_DURATION_NS,
    HOST_DURATION_NS,
    HOST_START_NS,
)

from ._annotations import _CACHE_ENTRIES, _fast, decode_annotations, decode_event_annotations
from ._foreign import ForeignSlice, track_attributes
from ._schema import (
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
    TRACE_PACKET_TAG,
    TYPE_INSTANT,
    TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
    pb,
)

_logger = logging.getLogger(__name__)

_SYNTHETIC_ID_BASE = 1 << 22
_CHUNK = 1 << 20
#: A packet longer than this is a corrupt length, not a packet (ours are a few KiB).
MAX_PACKET_BYTES = 64 << 20
#: Ended spans held back for their late events (see the module docstring).
_HOLD_SPANS = 8192
#: Launch slices and events waiting for their span, at most.
_MAX_WAITING = 1 << 16
_PROGRESS_EVERY_PACKETS = 4096
#: brickscope.offline.impossible's reason for a span with a start and no end.
_NO_END_TIME = "no_end_time"

#: ``iter_packets``'s ``consume``: (buffer, offset) -> offset of the first packet not taken.
Consume = Callable[[bytes, int], int]


class PacketError(ValueError):
    """The packet stream is broken at ``offset``; ``truncated`` when the data just ends."""

    def __init__(self, offset: int, what: str, *, truncated: bool) -> None:
        super().__init__(what)
        self.offset = offset
        self.what = what
        self.truncated = truncated


def iter_packets(stream: IO[bytes], consume: Consume | None = None) -> Iterator[tuple[int, bytes | None]]:
    """Yield ``(offset, serialized TracePacket)`` for each packet, reading in chunks.

    ``consume(buffer, offset)``, when given, is offered the buffer before each packet and
    returns the offset of the first packet it did not take (``_fastread.feed``): only the
    packets it leaves are yielded, and ``(offset, None)`` after each run it took, so the
    caller can pass on what it made (memory stays bounded).

    Raises:
        PacketError: a field that is not a length-delimited one, a length beyond
            :data:`MAX_PACKET_BYTES`, or the data ending inside a field
            (``truncated``), with the offset where that field starts.
    """
    buffer = b""
    offset = 0  # into buffer
    base = 0  # stream offset of buffer[0]
    while True:
        chunk = stream.read(_CHUNK)
        if chunk:
            buffer = buffer[offset:] + chunk
            base += offset
            offset = 0
        while True:
            if consume is not None:
                taken = consume(buffer, offset)
                if taken != offset:
                    offset = taken
                    yield base + offset, None
            parsed = _field(buffer, offset, base)
            if parsed is None:
                break
            tag, start, end = parsed
            if tag == TRACE_PACKET_TAG:
                yield base + offset, buffer[start:end]
            offset = end
        if not chunk:
            if offset < len(buffer):
                have = len(buffer) - offset
                raise PacketError(
                    base + offset, f"truncated: the file ends inside a packet ({have} bytes of it)", truncated=True
                )
            return


def _field(buffer: bytes, offset: int, base: int) -> tuple[int, int, int] | None:
    """(tag, payload start, payload end) of the length-delimited field at offset, if complete."""
    size = len(buffer)
    if offset >= size:
        return None
    tag = buffer[offset]
    if tag & 0x07 != 2 or tag & 0x80:
        raise PacketError(base + offset, f"not a Perfetto trace packet: unexpected field tag {tag:#x}", truncated=False)
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
        if shift > 63:
            raise PacketError(base + offset, "corrupt packet length", truncated=False)
    if length > MAX_PACKET_BYTES:
        raise PacketError(base + offset, f"corrupt packet length {length} (over {MAX_PACKET_BYTES >> 20} MiB)", truncated=False)
    if position + length > size:
        return None
    return tag, position, position + length


class _Sequence:
    """Incremental state of one trusted packet sequence, and whether it is brickscope's.

    A sequence is *ours* from its first slice that carries the ``otel`` annotation, and
    *foreign* once it has ended :data:`_HOLD_SPANS` slices without one, or at the end of
    the file: until then its slices without it wait in ``pending`` (a brickscope GPU span's
    launch slice may end before the span's own slice begins).
    """

    __slots__ = (
        "tables", "default_clock", "clocks", "decoded", "multipliers", "default_track", "cleared", "ours", "foreign",
        "pending",
    )  # fmt: skip

    def __init__(self) -> None:
        self.tables: dict[str, dict[int, str]] = {}
        #: decode_annotations' cache: emptied whenever the tables change what an id means
        self.decoded: dict[Any, Any] = {}
        self.default_clock = 0
        self.clocks: dict[int, int] = {}  # incremental clock id -> last absolute value
        self.multipliers: dict[int, int] = {}  # incremental clock id -> ns per unit, when not 1
        #: TracePacketDefaults' track_event_defaults.track_uuid: the track of events that name none
        self.default_track: int | None = None
        self.cleared = False  # incremental state cleared at least once
        self.ours = False
        self.foreign = False
        self.pending: list[tuple[int, int, int, ForeignSlice]] = []

    def lookup(self, table: str, iid: int) -> str:
        try:
            return self.tables[table][iid]
        except KeyError:
            raise ValueError(f"interned id {iid} of table {table!r} used before it was defined") from None


class _Open:
    """A slice begun and not yet ended, decoded while its interning generation was current."""

    __slots__ = ("start", "name", "trace_id", "attributes", "meta", "flows", "ours")

    def __init__(self, start: int, event: Any, sequence: _Sequence, packet: bytes) -> None:
        self.start = start
        attributes, meta = decode_event_annotations(event, packet, sequence.tables, sequence.lookup, sequence.decoded)
        self.ours = META_SPAN_ID in meta
        self.attributes = attributes
        self.meta = meta
        self.flows = tuple(event.flow_ids)
        self.name = ""
        self.trace_id = 0
        if self.ours:
            # A GPU span's slice ends the flow from its launch, whose id is the span id.
            meta["_gpu"] = meta[META_SPAN_ID] in event.terminating_flow_ids
            self.name = _event_name(event, sequence)
            if event.HasField("correlation_id_str_iid"):
                self.trace_id = int(sequence.lookup("correlations", event.correlation_id_str_iid), 16)
            elif event.HasField("correlation_id_str"):
                self.trace_id = int(event.correlation_id_str, 16)


class _Decoder:
    """Packets in, ended spans out: the streaming state of one file."""

    def __init__(self, dropped: dict[str, int] | None = None) -> None:
        #: brickscope's sequences: the C decoder (``_fastread.feed``) reads these, never the others
        self.sequences: dict[int, _Sequence] = {}
        #: the other sequences: not yet known to be brickscope's, or another producer's
        self.others: dict[int, _Sequence] = {}
        self.foreign_ids = 0  # span ids given out to other producers' slices
        #: packets skipped because their sequence's incremental state was never set
        self.lost_state = 0
        self.unknown_categories = 0  # interned category ids other producers never defined
        self.descriptors: dict[int, Any] = {}
        self.resources: dict[int, Resource] = {}
        self.tracks: dict[int, dict[str, Any]] = {}  # track uuid -> a foreign slice's track attributes
        self.open: dict[int, list[_Open]] = {}  # track uuid -> stack of open slices
        self.ended: deque[tuple[int, int, int, _Open]] = deque()  # (uuid, start, end, slice)
        self.launches: dict[int, tuple[int, int]] = {}  # flow id -> host launch (start, end)
        self.events: dict[int, list[Event]] = {}  # span id -> events so far
        self.released: set[int] = set()
        self.lost_events = 0
        #: impossible spans left out, by reason (brickscope.offline.impossible)
        self.dropped: dict[str, int] = {} if dropped is None else dropped

    def packet(self, data: bytes) -> None:
        scanned = _fast.scan(data) if _fast is not None else None
        if scanned is not None and scanned[0] in self.sequences:  # a plain track-event packet, read in C
            self._scanned(data, *scanned)
            return
        packet = pb.TracePacket.FromString(data)
        sequence_id = packet.trusted_packet_sequence_id
        sequence = self.sequences.get(sequence_id) or self.others.get(sequence_id)
        if sequence is None:
            sequence = self.others[sequence_id] = _Sequence()
        if packet.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED or packet.incremental_state_cleared:
            sequence.tables.clear()
            sequence.decoded.clear()
            sequence.default_clock = 0
            sequence.default_track = None
            sequence.cleared = True
        elif packet.sequence_flags & SEQ_NEEDS_INCREMENTAL_STATE and not (sequence.cleared or sequence.ours):
            # As the trace processor: data written before the sequence's state was (re)set
            # (a ring buffer that wrapped) cannot be read; skipped and counted.
            self.lost_state += 1
            return
        if packet.HasField("trace_packet_defaults"):
            defaults = packet.trace_packet_defaults
            sequence.default_clock = defaults.timestamp_clock_id
            if defaults.track_event_defaults.HasField("track_uuid"):
                sequence.default_track = defaults.track_event_defaults.track_uuid
        if packet.HasField("interned_data"):
            _intern(sequence, packet.interned_data)
        if packet.HasField("clock_snapshot"):
            for clock in packet.clock_snapshot.clocks:
                if clock.is_incremental:
                    multiplier = clock.unit_multiplier_ns or 1
                    sequence.clocks[clock.clock_id] = clock.timestamp * multiplier
                    if multiplier != 1:
                        sequence.multipliers[clock.clock_id] = multiplier
        if packet.HasField("track_descriptor"):
            self.descriptors[packet.track_descriptor.uuid] = packet.track_descriptor
            self.resources.pop(packet.track_descriptor.uuid, None)
            self.tracks.pop(packet.track_descriptor.uuid, None)
        if packet.HasField("track_event"):
            self._event(_timestamp(packet, sequence), packet.track_event, sequence, data)

    def _scanned(
        self, data: bytes, sequence_id: int, flags: int, ts: int, clock: int | None, kind: int, uuid: int, *event: Any
    ) -> None:
        """:meth:`packet` of a packet ``_fastread.scan`` read: the same steps, on its fields
        (an END needs only its track and flows: no event object is made for it)."""
        sequence = self.sequences.get(sequence_id)
        if sequence is None:
            sequence = self.sequences[sequence_id] = _Sequence()
        if flags & SEQ_INCREMENTAL_STATE_CLEARED:
            sequence.tables.clear()
            sequence.decoded.clear()
            sequence.default_clock = 0
        ts = _on_clock(sequence.default_clock if clock is None else clock, ts, sequence)
        if kind == TYPE_SLICE_END:
            self._end(uuid, ts, event[3])
        else:
            self._event(ts, _Scanned(data, kind, uuid, *event), sequence, data)

    def _event(self, ts: int, event: Any, sequence: _Sequence, data: bytes) -> None:
        kind = event.type
        uuid = event.track_uuid
        if sequence.default_track is not None and not event.HasField("track_uuid"):
            uuid = sequence.default_track
        if kind == TYPE_SLICE_BEGIN:
            stack = self.open.setdefault(uuid, [])
            piece = _Open(ts, event, sequence, data)
            if piece.ours or sequence.ours:
                if not sequence.ours:
                    self._own(sequence)
                stack.append(piece)
            else:
                stack.append(self._foreign(ts, event, sequence, uuid, piece.attributes, stack))
        elif kind == TYPE_SLICE_END:
            self._end(uuid, ts, event.terminating_flow_ids)
        elif kind == TYPE_INSTANT:
            attributes, meta = decode_annotations(event.debug_annotations, sequence.lookup)
            owner = meta.get(META_EVENT_OF)
            if owner is None and not sequence.ours:  # another producer's instant: a zero-length slice
                stack = self.open.setdefault(uuid, [])
                self._foreign_end(self._foreign(ts, event, sequence, uuid, attributes, stack), ts)
            if owner is not None:
                if owner in self.released:
                    self.lost_events += 1
                    return
                if owner not in self.events and len(self.events) >= _MAX_WAITING:
                    self.lost_events += len(self.events.pop(next(iter(self.events))))
                self.events.setdefault(owner, []).append(Event(_event_name(event, sequence), attributes, timestamp=ts))

    def _end(self, uuid: int, ts: int, terminating_flow_ids: Any) -> None:
        """An END: closes the most recent open slice of its track."""
        stack = self.open.get(uuid)
        if stack:
            piece = stack.pop()
            if piece.ours:
                if terminating_flow_ids and piece.meta[META_SPAN_ID] in terminating_flow_ids:
                    piece.meta["_gpu"] = True  # the launch flow ends here when the GPU began first
                self.ended.append((uuid, piece.start, ts, piece))
            elif type(piece) is ForeignSlice and not piece.sequence.ours:
                self._foreign_end(piece, ts)
            else:  # a GPU span's launch slice
                for flow in piece.flows:
                    _bounded_put(self.launches, flow, (piece.start, ts))

    def _foreign(
        self, ts: int, event: Any, sequence: _Sequence, uuid: int, attributes: dict[str, Any], stack: list[Any]
    ) -> ForeignSlice:
        """Another producer's slice (perhaps: see :class:`_Sequence`) begun at ``ts``."""
        known = sequence.tables.get("categories", {})
        categories = tuple(known[iid] for iid in event.category_iids if iid in known)
        # As the trace processor, a category id never defined is left out (some writers
        # refer to one they never intern), counted; an undefined name is still an error.
        self.unknown_categories += len(event.category_iids) - len(categories)
        self.foreign_ids += 1
        parent = stack[-1] if stack and type(stack[-1]) is ForeignSlice else None
        name = _event_name(event, sequence)
        flows = tuple(event.flow_ids)
        return ForeignSlice(
            ts, name, categories + tuple(event.categories), attributes, flows, sequence, uuid, self.foreign_ids, parent
        )

    def _foreign_end(self, piece: ForeignSlice, ts: int) -> None:
        """A slice without the ``otel`` annotation ended: a span of another producer, or, on a
        sequence not yet known, held (and a launch slice if the sequence turns out ours)."""
        sequence = piece.sequence
        if sequence.foreign:
            self.ended.append((piece.uuid, piece.start, ts, piece))
            return
        for flow in piece.flows:
            _bounded_put(self.launches, flow, (piece.start, ts))
        sequence.pending.append((piece.uuid, piece.start, ts, piece))
        if len(sequence.pending) > _HOLD_SPANS:
            self._disown(sequence)

    def _own(self, sequence: _Sequence) -> None:
        """The sequence is brickscope's: its waiting slices were launch slices, and from now
        on the C decoder may read it (unless its clocks have units it does not apply). A
        sequence already found foreign stays so: its slices so far were spans already."""
        if sequence.foreign:
            return
        sequence.ours = True
        sequence.pending.clear()
        for sequence_id, other in self.others.items():
            if other is sequence and not sequence.multipliers:
                self.sequences[sequence_id] = self.others.pop(sequence_id)
                break

    def _disown(self, sequence: _Sequence) -> None:
        """The sequence is another producer's: its waiting slices are spans."""
        sequence.foreign = True
        self.ended.extend(sequence.pending)
        sequence.pending.clear()

    def finish(self) -> None:
        """The file ended: sequences still undecided are other producers'; their slices begun
        and never ended are counted (``no_end_time``) and left out, not given an end."""
        for sequence in self.others.values():
            if not sequence.ours and not sequence.foreign:
                self._disown(sequence)
        never_ended = sum(
            1 for stack in self.open.values() for piece in stack if type(piece) is ForeignSlice and piece.sequence.foreign
        )
        if never_ended:
            self.dropped[_NO_END_TIME] = self.dropped.get(_NO_END_TIME, 0) + never_ended

    def ready(self, *, final: bool = False, records: bool = False) -> Iterator[Any]:
        """Spans held long enough (all of them when ``final``), as SpanRecords when ``records``."""
        ended = self.ended
        while len(ended) > _HOLD_SPANS or (final and ended):
            decoded = self._decoded(*ended.popleft())
            if decoded is not None:
                yield decoded[:7] if records else _span(*decoded)

    def unfinished(self) -> int:
        """Slices of ours begun and never ended."""
        return sum(1 for stack in self.open.values() for piece in stack if piece.ours)

    def _decoded(self, uuid: int, start: int, end: int, piece: _Open) -> tuple[Any, ...] | None:
        """The span's SpanRecord fields, then its trace id, META and events; None for an
        impossible span (counted in :attr:`dropped`)."""
        if type(piece) is ForeignSlice:
            return self._foreign_decoded(uuid, start, end, piece)
        meta = piece.meta
        attributes = piece.attributes
        span_id = meta[META_SPAN_ID]
        implied = meta.get(META_IMPLIED, 0)
        launch = self.launches.pop(span_id, None) if meta.get("_gpu") else None
        if implied:
            host_start, host_end = launch if launch is not None else (start, end)
            if implied & IMPLIED_HOST_START:
                attributes[HOST_START_NS] = host_start
            if implied & IMPLIED_HOST_DURATION:
                attributes[HOST_DURATION_NS] = host_end - host_start
            if implied & IMPLIED_GPU_DURATION:
                attributes[GPU_DURATION_NS] = end - start
        resource = self.resources.get(uuid)
        if resource is None:
            resource = self.resources[uuid] = _resource(uuid, self.descriptors)
        if len(self.released) >= _MAX_WAITING:
            self.released.clear()
        self.released.add(span_id)
        events = self.events.pop(span_id, ())
        reason = impossible(start, end, attributes)
        if reason is not None:
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
            return None
        parent = meta.get(META_PARENT_SPAN_ID, 0)
        return (piece.name, start, end, span_id, parent, resource, attributes, piece.trace_id, meta, events)

    def _foreign_decoded(self, uuid: int, start: int, end: int, piece: ForeignSlice) -> tuple[Any, ...] | None:
        """:meth:`_decoded` of another producer's slice (see :mod:`._foreign`)."""
        resource = self.resources.get(uuid)
        if resource is None:
            resource = self.resources[uuid] = _resource(uuid, self.descriptors)
        track = self.tracks.get(uuid)
        if track is None:
            track = self.tracks[uuid] = track_attributes(uuid, self.descriptors)
        attributes = {**piece.attributes, **track}
        reason = impossible(start, end, attributes)
        if reason is not None:
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
            return None
        meta = {META_PARENT_SPAN_ID: piece.parent_id} if piece.parent_id else {}
        return (piece.name, start, end, piece.span_id, piece.parent_id, resource, attributes, piece.trace_id, meta, ())


def read_pftrace(source: TraceSource, *, records: bool = False) -> Iterator[Any]:
    """Yield the spans of a ``.pftrace``, streaming (the ``pftrace`` format of ``open_spans``);
    their SpanRecords instead when ``records`` (``open_records``: no ReadableSpan made).

    With the C accelerator, ``_fastread.feed`` decodes the plain packets of each chunk (the
    great majority) with the decoder's own state; the packets it leaves come here, one by one.
    """
    decoder = _Decoder(source.dropped)
    fed: list[Any] = []  # what feed made ready: SpanRecords, or _decoded tuples
    consume: Consume | None = None
    if _fast is not None:

        def consume(buffer: bytes, offset: int) -> int:
            source.report_progress()
            return _fast.feed(decoder, buffer, offset, fed, records)

    def taken() -> Iterator[Any]:
        spans = fed if records else (_span(*decoded) for decoded in fed)
        yield from spans
        fed.clear()

    count = 0
    offset = 0
    try:
        for offset, data in iter_packets(source.stream, consume):
            if fed:
                yield from taken()
            if data is None:
                continue
            try:
                decoder.packet(data)
            except DecodeError as exc:
                raise source.error(f"corrupt packet: {exc}", offset=offset) from None
            except (ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
                raise source.error(f"bad packet: {exc}", offset=offset) from None
            count += 1
            if count % _PROGRESS_EVERY_PACKETS == 0:
                source.report_progress()
            yield from decoder.ready(records=records)
    except PacketError as exc:
        error = source.error(exc.what, offset=exc.offset)
        if not exc.truncated:
            raise error from None
        source.truncated(error)
    else:
        unfinished = decoder.unfinished()
        if unfinished:
            source.truncated(
                source.error(f"truncated: {unfinished} slices begun and never ended (the writer was cut off?)")
            )
    if fed:
        yield from taken()
    decoder.finish()
    yield from decoder.ready(final=True, records=records)
    if decoder.lost_state:
        source.note(f"{decoder.lost_state} packets written before their sequence's incremental state was set were skipped")
    if decoder.unknown_categories:
        source.note(f"{decoder.unknown_categories} interned category ids that were never defined were left out")
    if decoder.lost_events:
        source.note(f"{decoder.lost_events} span events whose span was not found nearby were skipped")


class PftraceFormat(TraceFormat):
    """``.pftrace`` files: registered under ``brickscope.readers`` as ``pftrace``."""

    name = "pftrace"

    def matches(self, head: bytes) -> bool:
        # Trace.packet (field 1, length-delimited), then a sane length varint.
        if len(head) < 2 or head[0] != TRACE_PACKET_TAG:
            return False
        try:
            _field(head, 0, 0)
        except PacketError:
            return False
        return True

    def read(self, source: TraceSource) -> Iterator[ReadableSpan]:
        return read_pftrace(source)

    def read_records(self, source: TraceSource) -> Iterator[SpanRecord]:
        return read_pftrace(source, records=True)


#: The instance the ``brickscope.readers`` entry point names.
PFTRACE = PftraceFormat()


def read_spans(path: str | os.PathLike[str], *, progress: ProgressCallback | None = None) -> list[ReadableSpan]:
    """Decode every span of a ``.pftrace`` written by :class:`PerfettoSpanExporter`.

    Kept for compatibility: :func:`brickscope.offline.open_spans` streams instead.

    Args:
        path: the trace file (a merged one works too).
        progress: called as ``progress(bytes_read, total_bytes)`` while reading.

    Returns:
        Ended spans, ordered by start time. Impossible spans are left out, and so is what
        the reader cannot place (packets before their sequence's state, undefined category
        ids), each with a warning naming the file and how many.

    Raises:
        TraceFileError: (a ValueError) the file is not a Perfetto protobuf
            trace, is corrupt or truncated, or uses an interned id it never defined.
        OSError: the file cannot be read.
    """
    source = TraceSource(os.fspath(path), progress=progress)
    try:
        if not PFTRACE.matches(source.stream.peek(64)[:64]):
            raise source.error("not a Perfetto trace (it does not start with a trace packet)")
        spans = list(read_pftrace(source))
        source.report_progress(final=True)
        if source.dropped:
            _logger.warning("%s", source.dropped_line())
        for note in source.notes:
            _logger.warning("%s: %s", source.path, note)
    finally:
        source.close()
    spans.sort(key=lambda span: (span.start_time, span.end_time))
    return spans


def _event_name(event: Any, sequence: _Sequence) -> str:
    return sequence.lookup("event_names", event.name_iid) if event.HasField("name_iid") else event.name


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
                _define(sequence, target, entry.iid, getattr(entry, attribute))
    for table, entries in (
        ("values", interned.debug_annotation_string_values),
        ("correlations", interned.correlation_id_str),
    ):
        if entries:
            target = tables.setdefault(table, {})
            for entry in entries:
                _define(sequence, target, entry.iid, entry.str.decode("utf-8", "replace"))


def _define(sequence: _Sequence, table: dict[int, str], iid: int, value: str) -> None:
    """Intern ``value`` as ``iid``; an id given a new meaning empties the decoded cache."""
    if table.get(iid, value) != value:
        sequence.decoded.clear()
    table[iid] = value


class _Scanned:
    """The TrackEvent fields ``_fastread.scan`` read, under the message's attribute names, so
    :meth:`_Decoder._event` reads either; the annotations are parsed only if asked for (the
    C decoder decodes them from the packet's bytes otherwise)."""

    __slots__ = (
        "data", "type", "track_uuid", "name_iid", "name", "flow_ids", "terminating_flow_ids",
        "correlation_id_str_iid", "correlation_id_str",
    )  # fmt: skip

    def __init__(self, data: bytes, *fields: Any) -> None:
        self.data = data
        (self.type, self.track_uuid, self.name_iid, self.name, self.flow_ids, self.terminating_flow_ids,
         self.correlation_id_str_iid, self.correlation_id_str) = fields  # fmt: skip
        if self.name is None and self.name_iid is None:
            self.name = ""

    def HasField(self, field: str) -> bool:  # the protobuf message's method
        return getattr(self, field) is not None

    @property
    def debug_annotations(self) -> Any:
        return pb.TracePacket.FromString(self.data).track_event.debug_annotations


def _timestamp(packet: Any, sequence: _Sequence) -> int:
    clock = packet.timestamp_clock_id if packet.HasField("timestamp_clock_id") else sequence.default_clock
    return _on_clock(clock, packet.timestamp, sequence)


def _on_clock(clock: int, ts: int, sequence: _Sequence) -> int:
    """The absolute time of ``ts`` given on ``clock`` (a sequence's incremental clock, or not)."""
    if clock in sequence.clocks:
        ts = sequence.clocks[clock] = sequence.clocks[clock] + ts * sequence.multipliers.get(clock, 1)
    elif clock not in (0, CLOCK_REALTIME) and 64 <= clock < 128:
        raise ValueError(f"timestamp on sequence clock {clock} before its ClockSnapshot")
    return ts


def _bounded_put(table: dict[int, Any], key: int, value: Any) -> None:
    if key not in table and len(table) >= _MAX_WAITING:
        del table[next(iter(table))]
    table[key] = value


def _span(
    name: str,
    start: int,
    end: int,
    span_id: int,
    parent_id: int,
    resource: Resource,
    attributes: dict[str, Any],
    trace_id: int,
    meta: dict[str, Any],
    events: Any,
) -> ReadableSpan:
    """The ReadableSpan of a decoded span (see :meth:`_Decoder._decoded`)."""
    parent = None
    if META_PARENT_SPAN_ID in meta:
        parent = SpanContext(trace_id, parent_id, bool(meta.get(META_PARENT_REMOTE)), TraceFlags(TraceFlags.SAMPLED))
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
        events=sorted(events, key=lambda e: e.timestamp),
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


def configure_accelerator(fast: Any) -> None:
    """Give the C decoder loop (``_fastread.feed``) the reader's constants and resource maker
    (at import; tests that import the C module directly call it too)."""
    fast.configure(
        resource=_resource,
        hold=_HOLD_SPANS,
        max_waiting=_MAX_WAITING,
        max_packet=MAX_PACKET_BYTES,
        cache_limit=_CACHE_ENTRIES,
        cleared_flag=SEQ_INCREMENTAL_STATE_CLEARED,
        clock_realtime=CLOCK_REALTIME,
        meta_name=META,
        host_start_key=HOST_START_NS,
        host_duration_key=HOST_DURATION_NS,
        gpu_duration_key=GPU_DURATION_NS,
        self_duration_key=BRICK_SELF_DURATION_NS,
        nonnegative_keys=NONNEGATIVE_KEYS,
        impossible=impossible,
        gpu_duration_tolerance=GPU_DURATION_TOLERANCE_NS,
    )


if _fast is not None:
    configure_accelerator(_fast)
