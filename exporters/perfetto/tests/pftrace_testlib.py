# SPDX-License-Identifier: Apache-2.0
"""Test library: build spans by hand, and decode traces the way Perfetto would.

``decode_trace`` reads a file with Google's ``perfetto_trace_pb2`` only (never
with the package's own reader) and applies the trace processor's import rules:
packets need a trusted sequence id; interned ids and defaults need the
sequence's incremental state cleared first and must be defined before use;
every track uuid needs a descriptor earlier in the file; timestamps on the
sequence-scoped incremental clock are deltas after its ClockSnapshot; per track
the events are sorted by timestamp (file order for ties) and an END closes the
most recent open slice. Every violation is collected in ``Decoded.errors``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from brickscope import testing
from brickscope.trace import attributes as A

T0 = 1_700_000_000_000_000_000
THREAD = testing.MAIN_THREAD
RESOURCE = Resource({"service.name": "decoder", "process.pid": 4242})
SCOPE = InstrumentationScope("brickscope", "0.1.0")
TRACE_ID = testing.TEST_TRACE_ID


#: brickscope.testing.make_span with this suite's resource and scope.
make_span = functools.partial(testing.make_span, resource=RESOURCE, scope=SCOPE)


def gpu_attributes(host_start: int, host_duration: int, gpu_duration: int, **options: Any) -> dict[str, Any]:
    """brickscope.testing.gpu_attributes on this suite's thread."""
    return testing.gpu_attributes(host_start, host_duration, gpu_duration, thread=THREAD, **options)


@dataclass
class Slice:
    """One slice as the trace processor would build it."""

    track: int
    ts: int
    dur: int
    name: str | None
    categories: list[str]
    args: dict[str, Any]
    flow_ids: list[int]
    terminating_flow_ids: list[int]
    correlation: str | None
    depth: int


@dataclass
class Decoded:
    """A decoded trace: descriptors, slices, instants, and every rule it broke."""

    packets: list[Any] = field(default_factory=list)
    descriptors: dict[int, Any] = field(default_factory=dict)
    slices: list[Slice] = field(default_factory=list)
    instants: list[Slice] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sequence_ids: set[int] = field(default_factory=set)
    primary_clocks: set[int] = field(default_factory=set)
    absolute_timestamps: int = 0
    resets: int = 0
    #: terminating flow ids seen, and the arrows the trace processor would draw
    flows_expected: int = 0
    flows_drawn: int = 0

    def track_kind(self, uuid: int) -> str:
        """``thread``, ``process``, ``gpu`` (a stream under a GPU group) or ``other``."""
        descriptor = self.descriptors[uuid]
        chain = [descriptor]
        while descriptor.HasField("parent_uuid"):
            descriptor = self.descriptors[descriptor.parent_uuid]
            chain.append(descriptor)
        if any(d.name.startswith("GPU ") and not d.HasField("process") for d in chain[1:]):
            return "gpu"
        if chain[-1].HasField("thread"):
            return "thread"
        if chain[-1].HasField("process"):
            return "process"
        return "other"

    def lane_root(self, uuid: int) -> int:
        """The logical track of a lane: itself, or the parent of an overflow lane."""
        name = self.descriptors[uuid].name
        if "(overlap " in name:
            return self.descriptors[uuid].parent_uuid
        return uuid


def _flatten(annotations: Any, names: dict[int, str], values: dict[int, str], errors: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def name_of(annotation: Any) -> str:
        if annotation.HasField("name_iid"):
            if annotation.name_iid not in names:
                errors.append(f"debug annotation name iid {annotation.name_iid} used before defined")
            return names.get(annotation.name_iid, "?")
        return annotation.name

    def value_of(annotation: Any) -> Any:
        which = annotation.WhichOneof("value")
        if which == "string_value_iid":
            if annotation.string_value_iid not in values:
                errors.append(f"string value iid {annotation.string_value_iid} used before defined")
            return values.get(annotation.string_value_iid)
        if which is not None:
            return getattr(annotation, which)
        if annotation.dict_entries:
            return {name_of(e): value_of(e) for e in annotation.dict_entries}
        return tuple(value_of(item) for item in annotation.array_values)

    def walk(entries: Any, prefix: str) -> None:
        for annotation in entries:
            name = prefix + name_of(annotation)
            if annotation.dict_entries and prefix + name_of(annotation) != "otel":
                walk(annotation.dict_entries, name + ".")
            else:
                out[name] = value_of(annotation)

    walk(annotations, "")
    return out


def decode_trace(path: str | os.PathLike[str], *, data: bytes | None = None) -> Decoded:
    """Decode a whole trace with Google's schema and the trace processor's rules."""
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    trace = pb.Trace.FromString(data)
    decoded = Decoded(packets=list(trace.packet))
    errors = decoded.errors
    state: dict[int, dict[str, Any]] = {}
    events: dict[int, list[tuple[int, int, Any, dict[str, Any]]]] = {}
    trace_clock = 0  # the first primary_trace_clock (BOOTTIME when none is given)
    boottime_related = clock_rule_reported = False
    snapshot_sets: dict[frozenset[tuple[int, int]], dict[tuple[int, int], int]] = {}
    for index, packet in enumerate(trace.packet):
        if not packet.HasField("trusted_packet_sequence_id") or packet.trusted_packet_sequence_id == 0:
            errors.append(f"packet {index} has no trusted_packet_sequence_id")
            continue
        seq = packet.trusted_packet_sequence_id
        decoded.sequence_ids.add(seq)
        s = state.setdefault(seq, {"valid": False, "tables": {}, "clock": 0, "incremental": {}})
        if packet.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            s["valid"] = True
            s["tables"] = {}
            s["clock"] = 0
            decoded.resets += 1
        if packet.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE and not s["valid"]:
            errors.append(f"packet {index} needs incremental state before it was cleared on sequence {seq}")
        if packet.HasField("trace_packet_defaults"):
            s["clock"] = packet.trace_packet_defaults.timestamp_clock_id
        tables = s["tables"]
        if packet.HasField("interned_data"):
            interned = packet.interned_data
            for table, entries in (
                ("names", interned.event_names),
                ("categories", interned.event_categories),
                ("annotation_names", interned.debug_annotation_names),
            ):
                for entry in entries:
                    tables.setdefault(table, {})[entry.iid] = entry.name
            for table, entries in (
                ("values", interned.debug_annotation_string_values),
                ("correlations", interned.correlation_id_str),
            ):
                for entry in entries:
                    tables.setdefault(table, {})[entry.iid] = entry.str.decode()
        if packet.HasField("clock_snapshot"):
            snapshot = packet.clock_snapshot
            if snapshot.HasField("primary_trace_clock"):
                decoded.primary_clocks.add(snapshot.primary_trace_clock)
                trace_clock = trace_clock or snapshot.primary_trace_clock
            builtins = {clock.clock_id for clock in snapshot.clocks if clock.clock_id < 64}
            # The trace processor keeps the readings of each set of clocks apart and needs
            # each clock to move forward within its set (invalid_clock_snapshots otherwise).
            qualified = [((seq if c.clock_id >= 64 else 0), c.clock_id, c.timestamp) for c in snapshot.clocks]
            last = snapshot_sets.setdefault(frozenset((q, c) for q, c, _ in qualified), {})
            for q, c, timestamp in qualified:
                if timestamp < last.get((q, c), timestamp):
                    errors.append(f"packet {index}: clock {c} goes backwards between snapshots of the same clocks")
                last[(q, c)] = timestamp
            if pb.BUILTIN_CLOCK_BOOTTIME in builtins and (trace_clock or pb.BUILTIN_CLOCK_BOOTTIME) in builtins:
                boottime_related = True
            for clock in snapshot.clocks:
                if clock.is_incremental:
                    s["incremental"][clock.clock_id] = clock.timestamp
        if packet.HasField("track_descriptor"):
            decoded.descriptors[packet.track_descriptor.uuid] = packet.track_descriptor
        if not packet.HasField("track_event"):
            continue
        if not boottime_related and not clock_rule_reported:
            # The trace processor bridges BOOTTIME, a protobuf trace's default domain, to the
            # trace clock at the first conversion; without a snapshot relating the two it
            # reports clock_sync_unrelatable_clock_domains (an import error).
            errors.append(f"packet {index}: no ClockSnapshot relates BOOTTIME to the trace clock before the first event")
            clock_rule_reported = True
        clock = packet.timestamp_clock_id if packet.HasField("timestamp_clock_id") else s["clock"]
        if clock in s["incremental"]:
            ts = s["incremental"][clock] = s["incremental"][clock] + packet.timestamp
        elif clock == pb.BUILTIN_CLOCK_REALTIME:
            ts = packet.timestamp
            decoded.absolute_timestamps += 1
        else:
            errors.append(f"packet {index} uses clock {clock} with no snapshot")
            ts = packet.timestamp
        event = packet.track_event
        if event.track_uuid not in decoded.descriptors:
            errors.append(f"packet {index} uses track {event.track_uuid} before its descriptor")
        names = tables.get("names", {})
        name = None
        if event.HasField("name_iid"):
            if event.name_iid not in names:
                errors.append(f"packet {index}: event name iid {event.name_iid} used before defined")
            name = names.get(event.name_iid)
        elif event.HasField("name"):
            name = event.name
        categories = []
        for iid in event.category_iids:
            if iid not in tables.get("categories", {}):
                errors.append(f"packet {index}: category iid {iid} used before defined")
            categories.append(tables.get("categories", {}).get(iid))
        correlation = None
        if event.HasField("correlation_id_str_iid"):
            correlation = tables.get("correlations", {}).get(event.correlation_id_str_iid)
            if correlation is None:
                errors.append(f"packet {index}: correlation iid used before defined")
        args = _flatten(event.debug_annotations, tables.get("annotation_names", {}), tables.get("values", {}), errors)
        info = {
            "name": name,
            "categories": categories,
            "args": args,
            "flow_ids": list(event.flow_ids),
            "terminating_flow_ids": list(event.terminating_flow_ids),
            "correlation": correlation,
        }
        events.setdefault(event.track_uuid, []).append((ts, index, event.type, info))
    for uuid, items in events.items():
        items.sort(key=lambda item: (item[0], item[1]))
        stack: list[tuple[int, dict[str, Any]]] = []
        for ts, _, kind, info in items:
            if kind == pb.TrackEvent.TYPE_SLICE_BEGIN:
                stack.append((ts, info))
            elif kind == pb.TrackEvent.TYPE_SLICE_END:
                if not stack:
                    errors.append(f"END without BEGIN on track {uuid} at {ts}")
                    continue
                start, begin = stack.pop()
                # Flows on an END event belong to the slice it ends (as the trace processor binds them).
                begin = {
                    **begin,
                    "flow_ids": begin["flow_ids"] + info["flow_ids"],
                    "terminating_flow_ids": begin["terminating_flow_ids"] + info["terminating_flow_ids"],
                }
                decoded.slices.append(_slice(uuid, start, ts - start, begin, len(stack)))
            elif kind == pb.TrackEvent.TYPE_INSTANT:
                decoded.instants.append(_slice(uuid, ts, 0, info, len(stack)))
        if stack:
            errors.append(f"{len(stack)} slices left open on track {uuid}")
    _check_flows(decoded, events)
    return decoded


def _check_flows(decoded: Decoded, events: dict[int, list[tuple[int, int, Any, dict[str, Any]]]]) -> None:
    """Draw the flows as the trace processor does, and count the ones it would not draw.

    It parses every track event in timestamp order (file order for ties): a flow id in
    ``flow_ids`` starts a flow (or adds a step to an active one: an arrow); one in
    ``terminating_flow_ids`` ends an active flow (an arrow), and is silently ignored,
    no arrow and no stat, when the flow has not started yet.
    """
    ordered = sorted(
        (ts, index, info) for items in events.values() for ts, index, _, info in items
    )
    active: set[int] = set()
    for ts, index, info in ordered:
        for flow in info["flow_ids"]:
            if flow in active:
                decoded.flows_drawn += 1
            active.add(flow)
        for flow in info["terminating_flow_ids"]:
            decoded.flows_expected += 1
            if flow in active:
                decoded.flows_drawn += 1
                active.discard(flow)
            else:
                decoded.errors.append(f"packet {index}: flow {flow:#x} ends before it starts (at {ts}): not drawn")


def _slice(uuid: int, ts: int, dur: int, info: dict[str, Any], depth: int) -> Slice:
    return Slice(
        uuid,
        ts,
        dur,
        info["name"],
        info["categories"],
        info["args"],
        info["flow_ids"],
        info["terminating_flow_ids"],
        info["correlation"],
        depth,
    )


def expected_slices(spans: list[ReadableSpan]) -> list[tuple[str, int, int]]:
    """(name, start, duration) of every slice the spans should produce: theirs and GPU launches."""
    out = []
    for span in spans:
        out.append((span.name, span.start_time, span.end_time - span.start_time))
        attributes = span.attributes
        if attributes.get(A.CLOCK) == A.CLOCK_CUDA and A.HOST_START_NS in attributes:
            out.append((span.name, attributes[A.HOST_START_NS], attributes[A.HOST_DURATION_NS]))
    return sorted(out)
