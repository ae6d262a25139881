# SPDX-License-Identifier: Apache-2.0
"""What the exporter writes, checked by decoding with Google's schema only."""

from __future__ import annotations

import time
from collections import Counter

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.trace import Link, SpanContext, TraceFlags
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from pftrace_testlib import T0, THREAD, TRACE_ID, decode_trace, expected_slices, gpu_attributes, make_span

from brickscope.exporter.perfetto import PerfettoSpanExporter, _writer as writer_module
from brickscope.exporter.perfetto._writer import TraceWriter
from brickscope.trace import attributes as A

# Perfetto builtin clock -> POSIX clock (Linux: REALTIME_COARSE 5, MONOTONIC_COARSE 6).
_POSIX = {
    pb.BUILTIN_CLOCK_BOOTTIME: time.CLOCK_BOOTTIME,
    pb.BUILTIN_CLOCK_REALTIME: time.CLOCK_REALTIME,
    pb.BUILTIN_CLOCK_MONOTONIC: time.CLOCK_MONOTONIC,
    pb.BUILTIN_CLOCK_MONOTONIC_RAW: time.CLOCK_MONOTONIC_RAW,
}


def _export(path, *batches):
    with PerfettoSpanExporter(path) as exporter:
        for batch in batches:
            assert exporter.export(batch).name == "SUCCESS"
    return decode_trace(path)


def _model_spans():
    """A step with a host-timed brick and a GPU-timed kernel inside it."""
    step = make_span(1, "step", T0, T0 + 1000, attributes={A.SCOPE_KIND: "step", A.STEP_NUMBER: 3, **THREAD})
    brick = make_span(
        2,
        "attention",
        T0 + 100,
        T0 + 400,
        1,
        attributes={A.SCOPE_KIND: "brick", A.BRICK_CATEGORY: "attention", A.CLOCK: "host", **THREAD},
    )
    kernel = make_span(3, "gemm_qkv", T0 + 500, T0 + 900, 2, attributes=gpu_attributes(T0 + 150, 20, 400))
    return step, brick, kernel


class TestTracks:
    def test_process_track_named_from_the_resource(self, tmp_path):
        """Each resource becomes a process track with its service.name and process.pid."""
        decoded = _export(tmp_path / "t.pftrace", list(_model_spans()))
        processes = [d.process for d in decoded.descriptors.values() if d.HasField("process")]
        assert [(p.pid, p.process_name) for p in processes] == [(4242, "decoder")]

    def test_host_spans_on_their_thread_track(self, tmp_path):
        """Host-timed spans go on a thread track carrying the thread's name."""
        decoded = _export(tmp_path / "t.pftrace", list(_model_spans()))
        step = next(s for s in decoded.slices if s.name == "step")
        descriptor = decoded.descriptors[step.track]
        assert descriptor.thread.thread_name == "MainThread"
        assert descriptor.thread.pid == 4242

    def test_spans_without_thread_id_share_one_process_track(self, tmp_path):
        """Spans from other instrumentation without thread.id go on one track of their process."""
        spans = [make_span(i, f"op{i}", T0 + 10 * i, T0 + 10 * i + 5, scope=None) for i in range(1, 4)]
        decoded = _export(tmp_path / "t.pftrace", spans)
        tracks = {s.track for s in decoded.slices}
        assert len(tracks) == 1
        assert decoded.track_kind(tracks.pop()) == "process"

    def test_gpu_span_on_its_stream_track_at_gpu_times(self, tmp_path):
        """A GPU-timed span is a slice on its device's stream track at the GPU interval."""
        decoded = _export(tmp_path / "t.pftrace", list(_model_spans()))
        gpu = [s for s in decoded.slices if decoded.track_kind(s.track) == "gpu"]
        assert [(s.name, s.ts, s.dur) for s in gpu] == [("gemm_qkv", T0 + 500, 400)]
        stream = decoded.descriptors[gpu[0].track]
        group = decoded.descriptors[stream.parent_uuid]
        assert (group.name, stream.name) == ("GPU 0", "stream 0x7f00")

    def test_gpu_span_has_a_launch_slice_with_a_flow(self, tmp_path):
        """The host launch interval is a slice on the thread track, with a flow to the GPU slice."""
        decoded = _export(tmp_path / "t.pftrace", list(_model_spans()))
        gpu = next(s for s in decoded.slices if decoded.track_kind(s.track) == "gpu")
        launch = next(s for s in decoded.slices if s.name == "gemm_qkv" and s is not gpu)
        assert decoded.track_kind(launch.track) == "thread"
        assert (launch.ts, launch.dur) == (T0 + 150, 20)
        assert launch.flow_ids and launch.flow_ids == gpu.terminating_flow_ids

    def test_streams_and_devices_get_their_own_tracks(self, tmp_path):
        """Overlapping kernels on different streams and devices are all kept, one track each."""
        spans = [
            make_span(10 + i, "k", T0, T0 + 100, attributes=gpu_attributes(T0, 5, 100, device=d, stream=st))
            for i, (d, st) in enumerate([(0, 1), (0, 2), (1, 1)])
        ]
        decoded = _export(tmp_path / "t.pftrace", spans)
        gpu = [s for s in decoded.slices if decoded.track_kind(s.track) == "gpu"]
        assert len(gpu) == 3 and len({s.track for s in gpu}) == 3
        groups = {decoded.descriptors[decoded.descriptors[s.track].parent_uuid].name for s in gpu}
        assert groups == {"GPU 0", "GPU 1"}

    def test_device_name_from_resource(self, tmp_path):
        """The GPU group names the device from the resource's brickscope.gpu.device.names."""
        resource = Resource({"service.name": "x", A.GPU_DEVICE_NAMES: ("NVIDIA H100",)})
        span = make_span(5, "k", T0, T0 + 10, attributes=gpu_attributes(T0, 1, 10), resource=resource)
        decoded = _export(tmp_path / "t.pftrace", [span])
        assert any(d.name == "GPU 0 (NVIDIA H100)" for d in decoded.descriptors.values())

    def test_every_track_described_before_use(self, tmp_path):
        """Every track uuid used by an event has a descriptor earlier in the file."""
        decoded = _export(tmp_path / "t.pftrace", list(_model_spans())[2:], list(_model_spans())[:2])
        assert decoded.errors == []
        assert all(s.track in decoded.descriptors for s in decoded.slices)


class TestSlices:
    def test_slices_match_spans_across_batches(self, tmp_path):
        """Children exported before their parents still give every slice its exact ts and dur."""
        step, brick, kernel = _model_spans()
        decoded = _export(tmp_path / "t.pftrace", [kernel], [brick], [step])
        assert decoded.errors == []
        got = sorted((s.name, s.ts, s.dur) for s in decoded.slices)
        assert got == expected_slices([step, brick, kernel])

    def test_parent_after_child_with_same_start(self, tmp_path):
        """A parent exported after a child that starts with it keeps both slices exact."""
        child = make_span(2, "child", T0, T0 + 50, 1, attributes=dict(THREAD))
        parent = make_span(1, "parent", T0, T0 + 100, attributes=dict(THREAD))
        decoded = _export(tmp_path / "t.pftrace", [child], [parent])
        assert decoded.errors == []
        assert sorted((s.name, s.ts, s.dur) for s in decoded.slices) == expected_slices([child, parent])

    def test_partial_overlap_goes_to_an_overflow_track(self, tmp_path):
        """An async child that outlives its parent moves to an overflow child track, not dropped."""
        parent = make_span(1, "request", T0, T0 + 100, attributes=dict(THREAD))
        child = make_span(2, "async_tail", T0 + 50, T0 + 300, 1, attributes=dict(THREAD))
        decoded = _export(tmp_path / "t.pftrace", [parent, child])
        assert decoded.errors == []
        by_name = {s.name: s for s in decoded.slices}
        assert (by_name["async_tail"].ts, by_name["async_tail"].dur) == (T0 + 50, 250)
        overflow = decoded.descriptors[by_name["async_tail"].track]
        assert overflow.parent_uuid == by_name["request"].track
        assert "(overlap 1)" in overflow.name

    def test_slices_nest_properly(self, tmp_path):
        """Each slice lies inside the slice the trace processor makes its parent."""
        step, brick, kernel = _model_spans()
        decoded = _export(tmp_path / "t.pftrace", [brick, kernel, step])
        by_track = {}
        for s in sorted(decoded.slices, key=lambda s: (s.ts, -s.dur)):
            stack = by_track.setdefault(s.track, [])
            while stack and stack[-1].ts + stack[-1].dur <= s.ts and stack[-1].dur:
                stack.pop()
            if stack:
                assert stack[-1].ts <= s.ts and s.ts + s.dur <= stack[-1].ts + stack[-1].dur
            stack.append(s)

    def test_zero_length_span(self, tmp_path):
        """A zero-length span is a slice of duration 0."""
        span = make_span(1, "tick", T0 + 5, T0 + 5, attributes=dict(THREAD))
        decoded = _export(tmp_path / "t.pftrace", [span])
        assert [(s.name, s.ts, s.dur) for s in decoded.slices] == [("tick", T0 + 5, 0)]


class TestAnnotations:
    def test_category_from_brick_category(self, tmp_path):
        """Slices carry the brick category; layer/step spans carry their scope kind."""
        decoded = _export(tmp_path / "t.pftrace", list(_model_spans()))
        categories = {s.name: s.categories for s in decoded.slices}
        assert categories["attention"] == ["attention"]
        assert categories["step"] == ["step"]

    def test_attributes_typed(self, tmp_path):
        """Attributes become debug annotations of their real types, dotted keys nested."""
        attributes = {
            **THREAD,
            "i": -7,
            "f": 2.5,
            "b": True,
            "s": "text",
            "ints": (1, 2, 3),
            "strs": ("a", "b"),
            "brickscope.kernel.grid": (4, 5, 6),
        }
        decoded = _export(tmp_path / "t.pftrace", [make_span(1, "x", T0, T0 + 9, attributes=attributes)])
        args = decoded.slices[0].args
        for key, value in attributes.items():
            assert args[key] == value and type(args[key]) is type(value), key

    def test_dotted_keys_are_nested_dictionaries(self, tmp_path):
        """brickscope.gpu.device.id is written as nested dictionaries, not one dotted name."""
        span = make_span(5, "k", T0, T0 + 10, attributes=gpu_attributes(T0, 1, 10))
        path = tmp_path / "t.pftrace"
        _export(path, [span])
        trace = pb.Trace.FromString(path.read_bytes())
        names = {n.name for p in trace.packet for n in p.interned_data.debug_annotation_names}
        assert {"brickscope", "gpu", "device", "id"} <= names
        assert not any("." in n for n in names)

    def test_trace_id_is_the_correlation_id(self, tmp_path):
        """Each span's slice carries its trace id as correlation id, so the UI groups a trace."""
        decoded = _export(tmp_path / "t.pftrace", list(_model_spans()))
        spans = [s for s in decoded.slices if "otel" in s.args]
        assert {s.correlation for s in spans} == {f"{TRACE_ID:032x}"}

    def test_span_identity_in_the_otel_dictionary(self, tmp_path):
        """The span id and parent span id are annotations in the otel dictionary."""
        decoded = _export(tmp_path / "t.pftrace", list(_model_spans()))
        brick = next(s for s in decoded.slices if s.name == "attention")
        assert brick.args["otel"]["span_id"] == 2
        assert brick.args["otel"]["parent_span_id"] == 1


class TestEventsAndLinks:
    def test_span_events_are_instants(self, tmp_path):
        """A span event is an instant on the span's track at the event's time."""
        span = make_span(
            1, "x", T0, T0 + 100, attributes=dict(THREAD), events=[Event("exception", {"k": 1}, timestamp=T0 + 40)]
        )
        decoded = _export(tmp_path / "t.pftrace", [span])
        (instant,) = decoded.instants
        assert (instant.name, instant.ts, instant.track) == ("exception", T0 + 40, decoded.slices[0].track)
        assert instant.args["k"] == 1

    def test_events_of_a_gpu_span_are_instants_on_its_launch_thread_track(self, tmp_path):
        """Event times are host times: a GPU-timed span's events sit on the launch side, not the stream."""
        event = Event("cache.miss", {"blocks": 2}, timestamp=T0 + 160)
        span = make_span(3, "gemm", T0 + 500, T0 + 900, attributes=gpu_attributes(T0 + 150, 20, 400), events=[event])
        decoded = _export(tmp_path / "t.pftrace", [span])
        (instant,) = decoded.instants
        launch = next(s for s in decoded.slices if s.name == "gemm" and decoded.track_kind(s.track) == "thread")
        assert (instant.name, instant.ts, instant.track) == ("cache.miss", T0 + 160, launch.track)
        assert instant.args["blocks"] == 2

    def test_link_within_a_batch_is_a_flow(self, tmp_path):
        """A link to a span in the same batch is one flow id on both slices."""
        a = make_span(1, "producer", T0, T0 + 10, attributes=dict(THREAD))
        link = Link(SpanContext(TRACE_ID, 1, False, TraceFlags(1)))
        b = make_span(2, "consumer", T0 + 20, T0 + 30, attributes=dict(THREAD), links=[link])
        decoded = _export(tmp_path / "t.pftrace", [a, b])
        by_name = {s.name: s for s in decoded.slices}
        shared = set(by_name["producer"].flow_ids) & set(by_name["consumer"].flow_ids)
        assert len(shared) == 1

    def test_link_to_a_span_already_written(self, tmp_path):
        """A link to a span of an earlier batch starts its flow at an instant on that span's start."""
        a = make_span(1, "producer", T0, T0 + 10, attributes=dict(THREAD))
        link = Link(SpanContext(TRACE_ID, 1, False, TraceFlags(1)))
        b = make_span(2, "consumer", T0 + 20, T0 + 30, attributes=dict(THREAD), links=[link])
        decoded = _export(tmp_path / "t.pftrace", [a], [b])
        (marker,) = decoded.instants
        consumer = next(s for s in decoded.slices if s.name == "consumer")
        assert marker.ts == T0 and set(marker.flow_ids) & set(consumer.flow_ids)

    def test_links_reach_back_to_the_newest_remembered_spans_only(self, tmp_path, monkeypatch):
        """The writer remembers where the newest spans went (65,536; 3 here) and forgets the
        oldest first: a link to a remembered span gets its marker, one to a forgotten span none."""
        monkeypatch.setattr(writer_module, "_MAX_REMEMBERED_SPANS", 3)
        old = [make_span(i, f"old{i}", T0 + 100 * i, T0 + 100 * i + 10, attributes=dict(THREAD)) for i in (1, 2, 3, 4)]
        links = [Link(SpanContext(TRACE_ID, i, False, TraceFlags(1))) for i in (1, 2)]
        late = make_span(9, "late", T0 + 1000, T0 + 1010, attributes=dict(THREAD), links=links)
        decoded = _export(tmp_path / "t.pftrace", old, [late])
        # Span 1 was forgotten when span 4 was written; span 2 is the oldest remembered.
        (marker,) = decoded.instants
        assert marker.ts == T0 + 200
        late_slice = next(s for s in decoded.slices if s.name == "late")
        assert len(late_slice.flow_ids) == 2 and set(marker.flow_ids) < set(late_slice.flow_ids)

    def test_link_to_a_span_written_later(self, tmp_path):
        """A link to a span not yet written puts the flow id on that span when it comes."""
        link = Link(SpanContext(TRACE_ID, 1, False, TraceFlags(1)))
        b = make_span(2, "consumer", T0 + 20, T0 + 30, attributes=dict(THREAD), links=[link])
        a = make_span(1, "producer", T0, T0 + 10, attributes=dict(THREAD))
        decoded = _export(tmp_path / "t.pftrace", [b], [a])
        by_name = {s.name: s for s in decoded.slices}
        assert set(by_name["producer"].flow_ids) & set(by_name["consumer"].flow_ids)


class TestEncoding:
    def test_one_sequence_cleared_first(self, tmp_path):
        """All packets share one trusted sequence whose first packet clears incremental state."""
        decoded = _export(tmp_path / "t.pftrace", list(_model_spans()))
        assert len(decoded.sequence_ids) == 1
        first = decoded.packets[0]
        assert first.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        assert decoded.errors == []

    def test_varints_are_protobufs_at_every_length(self):
        """The hand encoder's varints are the bytes Google's encoder writes, from one byte to
        ten, on each side of every 7- and 14-bit boundary (span ids use all 64 bits)."""
        from brickscope.exporter.perfetto._wire import varint

        values = {0, 1, (1 << 64) - 1} | {(1 << bits) + d for bits in range(7, 64, 7) for d in (-1, 0, 1)}
        for value in sorted(values):
            packet = pb.TracePacket(timestamp=value).SerializeToString()  # tag 0x40, then the varint
            assert varint(value) == packet[1:], value

    def test_names_interned_once(self, tmp_path):
        """A name used by many events is defined once in the interned data."""
        spans = [make_span(i, "same", T0 + 10 * i, T0 + 10 * i + 5, attributes=dict(THREAD)) for i in range(1, 50)]
        path = tmp_path / "t.pftrace"
        _export(path, spans)
        trace = pb.Trace.FromString(path.read_bytes())
        names = Counter(n.name for p in trace.packet for n in p.interned_data.event_names)
        assert names["same"] == 1
        assert all(not p.track_event.HasField("name") for p in trace.packet)

    def test_realtime_is_the_primary_clock(self, tmp_path):
        """The clock snapshot declares REALTIME the trace clock and slices keep epoch times."""
        decoded = _export(tmp_path / "t.pftrace", list(_model_spans()))
        assert decoded.primary_clocks == {pb.BUILTIN_CLOCK_REALTIME}
        assert min(s.ts for s in decoded.slices) == T0

    def test_out_of_order_batch_continues_on_another_clock(self, tmp_path):
        """A batch earlier than what was written uses a second incremental clock, not absolute times."""
        late = make_span(1, "late", T0 + 1000, T0 + 1100, attributes=dict(THREAD))
        early = make_span(2, "early", T0, T0 + 100, attributes=dict(THREAD))
        path = tmp_path / "t.pftrace"
        decoded = _export(path, [late], [early])
        snapshots = [p.clock_snapshot for p in decoded.packets if p.HasField("clock_snapshot")]
        incremental = [c.clock_id for s in snapshots for c in s.clocks if c.is_incremental]
        assert incremental == [64, 65] and decoded.absolute_timestamps == 0
        assert sorted((s.name, s.ts, s.dur) for s in decoded.slices) == expected_slices([late, early])

    def test_absolute_timestamps_once_clocks_run_out(self):
        """After 63 incremental clocks (64..126; 127 anchors the opening snapshot), a batch earlier than all of them uses absolute REALTIME times."""
        writer = TraceWriter()
        spans = [make_span(i, "s", T0 + 1000 * (70 - i), T0 + 1000 * (70 - i) + 10, attributes=dict(THREAD)) for i in range(1, 70)]
        data = writer.header() + b"".join(writer.encode([span]) for span in spans)
        decoded = decode_trace(None, data=data)
        assert decoded.errors == []
        assert decoded.absolute_timestamps == 2 * (len(spans) - 63)
        assert sorted((s.name, s.ts, s.dur) for s in decoded.slices) == expected_slices(spans)

    def test_full_intern_table_starts_a_new_generation(self, tmp_path):
        """When the interning tables are full, state is cleared again and names redefined."""
        writer = TraceWriter(max_interned=40)
        spans = [make_span(i, f"name{i}", T0 + 10 * i, T0 + 10 * i + 5, attributes=dict(THREAD)) for i in range(1, 200)]
        data = writer.header() + writer.encode(spans[:100]) + writer.encode(spans[100:])
        decoded = decode_trace(None, data=data)
        assert decoded.errors == []
        assert decoded.resets > 2
        assert sorted(s.name for s in decoded.slices) == sorted(s.name for s in spans)

    def test_lane_memory_is_bounded(self, tmp_path):
        """With a small budget, remembered slices stay bounded and late spans still decode exactly."""
        writer = TraceWriter(max_tracked_slices=100)
        spans = [make_span(i, "k", T0 + 10 * i, T0 + 10 * i + 5, 1, attributes=dict(THREAD)) for i in range(2, 1000)]
        parent = make_span(1, "parent", T0, T0 + 20_000, attributes=dict(THREAD))
        chunks = [writer.encode(spans[i : i + 50]) for i in range(0, len(spans), 50)]
        assert sum(t.lanes.size for t in writer._tracks) <= 150
        data = writer.header() + b"".join(chunks) + writer.encode([parent])
        decoded = decode_trace(None, data=data)
        assert decoded.errors == []
        assert sorted((s.name, s.ts, s.dur) for s in decoded.slices) == expected_slices([*spans, parent])


class TestClocks:
    def test_trace_opens_with_real_readings_of_the_machines_clocks(self):
        """BOOTTIME, MONOTONIC... as read when the trace starts, REALTIME the trace clock (as traced does)."""
        before = {name: time.clock_gettime_ns(clock) for name, clock in _POSIX.items()}
        header = TraceWriter().header()
        after = {name: time.clock_gettime_ns(clock) for name, clock in _POSIX.items()}
        (snapshot,) = [p.clock_snapshot for p in pb.Trace.FromString(header).packet if p.HasField("clock_snapshot")]
        assert snapshot.primary_trace_clock == pb.BUILTIN_CLOCK_REALTIME
        readings = {c.clock_id: c.timestamp for c in snapshot.clocks}
        for name in _POSIX:
            assert before[name] <= readings[name] <= after[name], name
        assert readings[127] == readings[pb.BUILTIN_CLOCK_REALTIME]  # the file's own anchor clock

    def test_checker_flags_a_trace_without_boottime(self):
        """The checker enforces the trace processor's rule: BOOTTIME related to the trace clock."""
        writer = TraceWriter()
        packets = list(pb.Trace.FromString(writer.header()).packet)
        for clock in list(packets[1].clock_snapshot.clocks):
            if clock.clock_id == pb.BUILTIN_CLOCK_BOOTTIME:
                packets[1].clock_snapshot.clocks.remove(clock)
        header = pb.Trace(packet=packets).SerializeToString()
        decoded = decode_trace(None, data=header + writer.encode([make_span(1, "s", T0, T0 + 5, attributes=dict(THREAD))]))
        assert any("relates BOOTTIME" in e for e in decoded.errors), decoded.errors

    def test_merged_files_keep_their_readings_apart(self, tmp_path):
        """Two files whose clocks read in any order merge without a clock going backwards in one set."""
        from brickscope.exporter.perfetto import merge_traces

        for span_id, name in enumerate(("late", "early"), 1):  # other spans: the same ones would be refused
            with PerfettoSpanExporter(tmp_path / f"{name}.pftrace") as exporter:
                exporter.export([make_span(span_id, "s", T0, T0 + 5, attributes=dict(THREAD))])
        merge_traces([tmp_path / "early.pftrace", tmp_path / "late.pftrace"], tmp_path / "all.pftrace")
        assert decode_trace(tmp_path / "all.pftrace").errors == []


class TestFlows:
    def test_gpu_work_that_starts_before_its_launch_still_gets_its_arrow(self):
        """With the GPU clock mapped slightly early, the flow ends on the GPU slice's END, after the launch began."""
        early = make_span(1, "k", T0 + 5, T0 + 60, attributes=gpu_attributes(T0 + 10, 20, 55))
        late = make_span(2, "k", T0 + 130, T0 + 190, attributes=gpu_attributes(T0 + 100, 20, 60))
        same = make_span(3, "k", T0 + 300, T0 + 360, attributes=gpu_attributes(T0 + 300, 20, 60))
        writer = TraceWriter()
        decoded = decode_trace(None, data=writer.header() + writer.encode([early, late, same]))
        assert decoded.errors == []
        assert (decoded.flows_expected, decoded.flows_drawn) == (3, 3)

    def test_gpu_work_ending_before_its_launch_gets_no_arrow_and_is_counted(self):
        impossible = make_span(1, "k", T0, T0 + 10, attributes=gpu_attributes(T0 + 50, 20, 10))
        writer = TraceWriter()
        decoded = decode_trace(None, data=writer.header() + writer.encode([impossible]))
        assert decoded.errors == [] and (decoded.flows_expected, decoded.flows_drawn) == (0, 0)
        assert writer.flows_without_arrow == 1


class TestFlowsOnEqualEnds:
    def test_gpu_slices_with_one_end_in_one_batch_keep_their_flows(self, tmp_path):
        """Two GPU slices ending together on one stream: each END-borne flow stays on its own slice."""
        outer = make_span(1, "outer", T0 + 20, T0 + 60, attributes=gpu_attributes(T0 + 50, 30, 40, device=0, stream=0))
        inner = make_span(2, "inner", T0 + 30, T0 + 60, 1, attributes=gpu_attributes(T0 + 40, 0, 30, device=0, stream=0))
        decoded = _export(tmp_path / "t.pftrace", [outer, inner])
        flows = {s.args["otel"]["span_id"]: s.terminating_flow_ids for s in decoded.slices if "otel" in s.args}
        assert flows == {1: [1], 2: [2]}

    def test_gpu_slices_with_one_end_across_batches_keep_their_flows(self, tmp_path):
        """Found by hypothesis (dev profile): the same two slices exported in two batches.

        The trace processor orders equal timestamps by file order, so the outer slice's END
        (earlier batch) would close the inner one if they shared a lane: the inner one goes
        on an overlap lane (lane rule 4), and each flow lands on its own slice.
        """
        outer = make_span(1, "outer", T0 + 20, T0 + 60, attributes=gpu_attributes(T0 + 50, 30, 40, device=0, stream=0))
        inner = make_span(2, "inner", T0 + 30, T0 + 60, 1, attributes=gpu_attributes(T0 + 40, 0, 30, device=0, stream=0))
        decoded = _export(tmp_path / "t.pftrace", [outer], [inner])
        flows = {s.args["otel"]["span_id"]: s.terminating_flow_ids for s in decoded.slices if "otel" in s.args}
        assert flows == {1: [1], 2: [2]}
