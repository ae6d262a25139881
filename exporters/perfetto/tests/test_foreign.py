# SPDX-License-Identifier: Apache-2.0
"""Perfetto traces of other producers: TrackEvent slices without brickscope's ``otel``
annotation read as spans named by their slice, and report, tree and flamegraph work on them.

The traces are built here with Google's ``perfetto_trace_pb2`` the way the Perfetto SDK
writes them (interned or not, thread, process and custom tracks); every expected figure is
worked out by hand from the timestamps written.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from pftrace_testlib import T0, gpu_attributes, make_span

from brickscope.cli import main
from brickscope.exporter.perfetto import PerfettoSpanExporter, _reader, read_spans
from brickscope.exporter.perfetto._foreign import CATEGORY, TRACK_NAME
from brickscope.offline import IMPOSSIBLE_REASONS, open_records

BEGIN, END, INSTANT = pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END, pb.TrackEvent.TYPE_INSTANT
CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS_STATE = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
PROCESS, THREAD, QUEUE, COPIES = 10, 11, 20, 21


class Trace:
    """A foreign trace, packet by packet."""

    def __init__(self) -> None:
        self.trace = pb.Trace()

    def packet(self, sequence: int = 1, **fields: object) -> pb.TracePacket:
        packet = self.trace.packet.add(**fields)
        packet.trusted_packet_sequence_id = sequence
        return packet

    def process(self, uuid: int = PROCESS, pid: int = 100, name: str = "game") -> None:
        descriptor = self.packet().track_descriptor
        descriptor.uuid = uuid
        descriptor.process.pid = pid
        descriptor.process.process_name = name

    def thread(self, uuid: int = THREAD, pid: int = 100, tid: int = 101, name: str = "main") -> None:
        descriptor = self.packet().track_descriptor
        descriptor.uuid = uuid
        descriptor.thread.pid = pid
        descriptor.thread.tid = tid
        descriptor.thread.thread_name = name

    def track(self, uuid: int, name: str, parent: int) -> None:
        self.packet(track_descriptor=pb.TrackDescriptor(uuid=uuid, name=name, parent_uuid=parent))

    def event(self, ts: int, kind: int, track: int | None = THREAD, name: str | None = None, **fields: object):
        packet = self.packet(timestamp=ts, sequence=fields.pop("sequence", 1))
        packet.track_event.type = kind
        if track is not None:
            packet.track_event.track_uuid = track
        if name is not None:
            packet.track_event.name = name
        for key, value in fields.items():
            if isinstance(value, list):
                getattr(packet.track_event, key).extend(value)
            else:
                setattr(packet.track_event, key, value)
        return packet

    def write(self, path) -> str:
        path.write_bytes(self.trace.SerializeToString())
        return str(path)


def frame_trace() -> Trace:
    """A game's frame on its main thread, plain strings: frame [1000, 5000] holds update
    [1500, 2500] and render [3000, 4500], which holds draw [3200, 3700]."""
    trace = Trace()
    trace.process()
    trace.thread()
    trace.event(1000, BEGIN, name="frame", categories=["game"])
    trace.event(1500, BEGIN, name="update")
    trace.event(2500, END)
    trace.event(3000, BEGIN, name="render", categories=["gfx", "gpu"])
    trace.event(3200, BEGIN, name="draw")
    trace.event(3700, END)
    trace.event(4500, END)
    trace.event(5000, END)
    return trace


def by_name(spans) -> dict:
    return {span.name: span for span in spans}


class TestSlices:
    def test_thread_track_slices_are_spans_named_by_their_slice(self, tmp_path):
        """Each slice is a span with its exact times, its parent the slice open on its track
        when it began, its thread as attributes and its process as the resource."""
        spans = read_spans(frame_trace().write(tmp_path / "frame.pftrace"))
        assert [(s.name, s.start_time, s.end_time) for s in spans] == [
            ("frame", 1000, 5000), ("update", 1500, 2500), ("render", 3000, 4500), ("draw", 3200, 3700),
        ]  # fmt: skip
        named = by_name(spans)
        assert named["frame"].parent is None
        assert named["update"].parent.span_id == named["frame"].context.span_id
        assert named["render"].parent.span_id == named["frame"].context.span_id
        assert named["draw"].parent.span_id == named["render"].context.span_id
        assert len({s.context.span_id for s in spans}) == 4
        assert {s.context.trace_id for s in spans} == {named["frame"].context.trace_id}
        assert dict(named["draw"].attributes) == {"thread.id": 101, "thread.name": "main"}
        assert dict(named["render"].attributes)[CATEGORY] == "gfx,gpu"
        assert dict(named["frame"].resource.attributes) == {"service.name": "game", "process.pid": 100}

    def test_interned_names_categories_and_annotations(self, tmp_path):
        """As the Perfetto SDK writes: incremental state cleared, interned event names,
        categories and annotation names, sequence-scoped incremental timestamps, and the
        track taken from the sequence's TracePacketDefaults."""
        trace = Trace()
        trace.process()
        trace.thread()
        first = trace.packet(sequence_flags=CLEARED | NEEDS_STATE)
        first.trace_packet_defaults.timestamp_clock_id = 64
        first.trace_packet_defaults.track_event_defaults.track_uuid = THREAD
        clock = trace.packet(sequence_flags=NEEDS_STATE).clock_snapshot
        clock.clocks.add(clock_id=pb.BUILTIN_CLOCK_BOOTTIME, timestamp=T0)
        clock.clocks.add(clock_id=64, timestamp=T0, is_incremental=True)
        begin = trace.event(100, BEGIN, track=None, name_iid=1, category_iids=[1])
        begin.sequence_flags = NEEDS_STATE
        begin.interned_data.event_names.add(iid=1, name="decode")
        begin.interned_data.event_categories.add(iid=1, name="media")
        begin.interned_data.debug_annotation_names.add(iid=1, name="bytes_in")
        begin.track_event.debug_annotations.add(name_iid=1, int_value=4096)
        inner = trace.event(50, BEGIN, track=None, name_iid=2)
        inner.sequence_flags = NEEDS_STATE
        inner.interned_data.event_names.add(iid=2, name="huffman")
        trace.event(25, END, track=None).sequence_flags = NEEDS_STATE
        trace.event(200, END, track=None).sequence_flags = NEEDS_STATE
        spans = read_spans(trace.write(tmp_path / "interned.pftrace"))
        # decode: T0 + 100 to T0 + 100 + 50 + 25 + 200; huffman: T0 + 150 to T0 + 175
        assert [(s.name, s.start_time - T0, s.end_time - T0) for s in spans] == [
            ("decode", 100, 375),
            ("huffman", 150, 175),
        ]
        decode = by_name(spans)["decode"]
        assert dict(decode.attributes) == {"bytes_in": 4096, CATEGORY: "media", "thread.id": 101, "thread.name": "main"}

    def test_interning_is_per_sequence_and_per_generation(self, tmp_path):
        """The same iid means what its own sequence defined, and a cleared state may redefine it."""
        trace = Trace()
        trace.thread()
        for sequence, name in ((1, "alpha"), (2, "beta")):
            packet = trace.packet(sequence=sequence, sequence_flags=CLEARED)
            packet.interned_data.event_names.add(iid=1, name=name)
        trace.event(10, BEGIN, name_iid=1, sequence=1)
        trace.event(20, END, sequence=1)
        trace.event(30, BEGIN, name_iid=1, sequence=2)
        trace.event(40, END, sequence=2)
        again = trace.packet(sequence=1, sequence_flags=CLEARED)
        again.interned_data.event_names.add(iid=1, name="gamma")
        trace.event(50, BEGIN, name_iid=1, sequence=1)
        trace.event(60, END, sequence=1)
        spans = read_spans(trace.write(tmp_path / "sequences.pftrace"))
        assert [(s.name, s.start_time) for s in spans] == [("alpha", 10), ("beta", 30), ("gamma", 50)]

    def test_clock_units(self, tmp_path):
        """An incremental clock in microseconds (unit_multiplier_ns 1000): deltas scaled to ns."""
        trace = Trace()
        trace.thread()
        packet = trace.packet(sequence_flags=CLEARED)
        packet.trace_packet_defaults.timestamp_clock_id = 64
        packet.clock_snapshot.clocks.add(clock_id=64, timestamp=7, is_incremental=True, unit_multiplier_ns=1000)
        trace.event(3, BEGIN, name="tick")  # 7 + 3 = 10 us
        trace.event(2, END)  # 12 us
        (span,) = read_spans(trace.write(tmp_path / "micro.pftrace"))
        assert (span.start_time, span.end_time) == (10_000, 12_000)

    def test_custom_and_process_tracks(self, tmp_path):
        """A custom track keeps its name (the innermost of nested ones) and its process; a
        slice on the process track has the process and no thread."""
        trace = Trace()
        trace.process()
        trace.track(QUEUE, "GPU queue", PROCESS)
        trace.track(COPIES, "copies", QUEUE)
        trace.event(100, BEGIN, track=QUEUE, name="submit")
        trace.event(110, BEGIN, track=COPIES, name="upload")
        trace.event(150, END, track=COPIES)
        trace.event(300, END, track=QUEUE)
        trace.event(120, BEGIN, track=PROCESS, name="load")
        trace.event(130, END, track=PROCESS)
        named = by_name(read_spans(trace.write(tmp_path / "tracks.pftrace")))
        assert dict(named["submit"].attributes) == {TRACK_NAME: "GPU queue"}
        assert dict(named["upload"].attributes) == {TRACK_NAME: "copies"}
        assert named["upload"].parent is None  # another track: no nesting across tracks
        assert dict(named["load"].attributes) == {}
        for span in named.values():
            assert dict(span.resource.attributes) == {"service.name": "game", "process.pid": 100}

    def test_custom_track_nesting_follows_begin_end_order(self, tmp_path):
        """On a custom track, an END closes the most recent open slice: [0,100] holds [10,20]
        and [30,90], which holds [40,50]."""
        trace = Trace()
        trace.track(QUEUE, "async", 0)
        for ts, kind, name in ((0, BEGIN, "a"), (10, BEGIN, "b"), (20, END, None), (30, BEGIN, "c"),
                               (40, BEGIN, "d"), (50, END, None), (90, END, None), (100, END, None)):  # fmt: skip
            trace.event(ts, kind, track=QUEUE, name=name)
        named = by_name(read_spans(trace.write(tmp_path / "nest.pftrace")))
        assert {n: (s.start_time, s.end_time) for n, s in named.items()} == {
            "a": (0, 100), "b": (10, 20), "c": (30, 90), "d": (40, 50),
        }  # fmt: skip
        parents = {n: s.parent.span_id if s.parent else None for n, s in named.items()}
        ids = {n: s.context.span_id for n, s in named.items()}
        assert parents == {"a": None, "b": ids["a"], "c": ids["a"], "d": ids["c"]}

    def test_instants_are_zero_length_slices_in_the_open_slice(self, tmp_path):
        """As the trace processor stores an instant: a slice of no duration, nested in the
        slice open on its track; one with none open is a root."""
        trace = Trace()
        trace.thread()
        trace.event(10, BEGIN, name="load")
        trace.event(15, INSTANT, name="cache miss")
        trace.event(20, END)
        trace.event(30, INSTANT, name="idle")
        named = by_name(read_spans(trace.write(tmp_path / "instants.pftrace")))
        assert (named["cache miss"].start_time, named["cache miss"].end_time) == (15, 15)
        assert named["cache miss"].parent.span_id == named["load"].context.span_id
        assert (named["idle"].start_time, named["idle"].end_time, named["idle"].parent) == (30, 30, None)

    def test_flows_do_not_hide_a_slice(self, tmp_path):
        """A slice carrying flow ids (as brickscope's launch slices do) is still a span."""
        trace = Trace()
        trace.thread()
        trace.event(10, BEGIN, name="post", flow_ids=[77])
        trace.event(20, END)
        trace.event(30, BEGIN, name="run", terminating_flow_ids=[77])
        trace.event(40, END)
        assert [s.name for s in read_spans(trace.write(tmp_path / "flows.pftrace"))] == ["post", "run"]


class TestWhatIsLeftOut:
    def test_a_slice_never_ended_is_counted_not_invented(self, tmp_path, caplog):
        """A slice still open at the end of the trace has no end: left out and counted as
        ``no_end_time``; the slices that ended are kept."""
        assert "no_end_time" in IMPOSSIBLE_REASONS
        trace = frame_trace()
        trace.event(6000, BEGIN, name="frame")
        trace.event(6100, BEGIN, name="update")
        trace.event(6200, END)
        path = trace.write(tmp_path / "open.pftrace")
        with open_records(path) as records:
            names = sorted(record[0] for record in records)
            assert records.dropped == {"no_end_time": 1}
        assert names == ["draw", "frame", "render", "update", "update"]
        with caplog.at_level(logging.WARNING):
            assert len(read_spans(path)) == 5
        assert "1 impossible span left out (1 with no end time)" in caplog.text

    def test_unknown_packets_are_skipped(self, tmp_path):
        """Packets the reader has no use for (system data, counters, unknown fields) change nothing."""
        trace = Trace()
        trace.packet(for_testing=pb.TestEvent(str="x"))
        trace.packet().process_tree.processes.add(pid=100, cmdline=["game"])
        trace.thread()
        trace.event(5, pb.TrackEvent.TYPE_COUNTER, counter_value=3)
        trace.event(10, BEGIN, name="work")
        trace.event(20, END)
        data = trace.trace.SerializeToString() + b"\x0a\x03\xa0\x06\x01"  # a packet of field 100 only
        path = tmp_path / "mixed.pftrace"
        path.write_bytes(data)
        assert [(s.name, s.start_time, s.end_time) for s in read_spans(path)] == [("work", 10, 20)]

    def test_data_before_the_state_was_set_is_skipped(self, tmp_path, caplog):
        """As the trace processor: a packet that needs incremental state on a sequence whose
        state was never cleared (a ring buffer that wrapped) is skipped and counted."""
        trace = Trace()
        trace.thread()
        lost = trace.event(1, BEGIN, name_iid=9)
        lost.sequence_flags = NEEDS_STATE
        trace.packet(sequence_flags=CLEARED).interned_data.event_names.add(iid=9, name="kept")
        trace.event(10, BEGIN, name_iid=9).sequence_flags = NEEDS_STATE
        trace.event(20, END).sequence_flags = NEEDS_STATE
        with caplog.at_level(logging.WARNING):
            spans = read_spans(trace.write(tmp_path / "wrapped.pftrace"))
        assert [(s.name, s.start_time, s.end_time) for s in spans] == [("kept", 10, 20)]
        assert "1 packets written before their sequence's incremental state was set were skipped" in caplog.text


class TestBrickscopeTracesUnchanged:
    def test_launch_slices_that_end_before_their_span_are_not_spans(self, tmp_path):
        """A GPU span whose launch slice ends before its GPU slice begins (the first slices
        of its sequence carry no otel annotation yet) reads back as that one span."""
        path = tmp_path / "gpu.pftrace"
        exporter = PerfettoSpanExporter(path)
        exporter.export([make_span(8, "gemm", T0 + 20, T0 + 120, attributes=gpu_attributes(T0 + 1, 9, 100))])
        exporter.shutdown()
        (span,) = read_spans(path)
        assert (span.name, span.context.span_id, span.start_time, span.end_time) == ("gemm", 8, T0 + 20, T0 + 120)

    def test_a_long_undecided_sequence_is_decided_foreign(self, tmp_path, monkeypatch):
        """More slices without the annotation than a brickscope batch can hold before its
        first span: the sequence is another producer's, and all of them are spans."""
        monkeypatch.setattr(_reader, "_HOLD_SPANS", 3)
        trace = Trace()
        trace.thread()
        for i in range(10):
            trace.event(10 * i, BEGIN, name=f"s{i}")
            trace.event(10 * i + 5, END)
        spans = read_spans(trace.write(tmp_path / "long.pftrace"))
        assert [s.name for s in spans] == [f"s{i}" for i in range(10)]


class TestCommands:
    def test_report_ranks_slices_by_self_time(self, tmp_path, capsys):
        """Self time = duration less the children's: frame 4000 - 1000 - 1500 = 1500 ns,
        render 1500 - 500 = 1000, update 1000, draw 500 (of 4000 in all)."""
        path = frame_trace().write(tmp_path / "frame.pftrace")
        assert main(["report", "--format", "json", path]) == 0
        report = json.loads(capsys.readouterr().out)
        assert [(s["name"], s["count"], s["self_ns"], s["total_ns"], s["share"]) for s in report["others"]] == [
            ("frame", 1, 1500, 4000, 1500 / 4000),
            ("render", 1, 1000, 1500, 1000 / 4000),
            ("update", 1, 1000, 1000, 1000 / 4000),
            ("draw", 1, 500, 500, 500 / 4000),
        ]
        assert report["operations"] == [] and report["ranks"] == []
        assert main(["report", path]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "Steps: not shown, no step spans (needs brickscope.scope.kind=step)" in lines
        assert (
            "Self time by brick and category: not shown, no brick spans"
            " (needs brickscope.scope.kind=brick, and brickscope.brick.category for categories)"
        ) in lines

    def test_tree_draws_the_slices(self, tmp_path, capsys):
        """The whole trace as one tree per process; the frame's own work is on the path, so
        the one-lane path is the whole 4 us."""
        path = frame_trace().write(tmp_path / "frame.pftrace")
        assert main(["tree", "-q", path]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith("whole trace (no step scopes), rank game pid 100: one lane")
        assert "spans ran 0.004 ms of 0.004 ms, gaps 0.000 ms" in out[0]
        assert [line.strip("│ ").split()[1] for line in out[2:]] == ["frame", "update", "render", "draw"]

    def test_flamegraph_weighs_self_time(self, tmp_path, capsys):
        """Folded stacks by host time: each stack's own time, in ns."""
        path = frame_trace().write(tmp_path / "frame.pftrace")
        out = tmp_path / "frame.folded"
        assert main(["flamegraph", "-q", "--unit", "ns", path, "-o", str(out)]) == 0
        assert sorted(out.read_text().splitlines()) == [
            "game;frame 1500", "game;frame;render 1000", "game;frame;render;draw 500", "game;frame;update 1000",
        ]  # fmt: skip


class TestRealProducer:
    def test_tg4perfetto_example(self, caplog):
        """tests/data/tg4perfetto_example.pftrace is what ``python -m tg4perfetto.example``
        (tg4perfetto 0.0.6, Apache-2.0, a TrackEvent writer on PyPI) writes: interned names,
        process, custom and nested group tracks, instants, nested debug annotations, and a
        category id it never interns on each of its 13 events. Expected: its example's calls."""
        path = Path(__file__).parent / "data" / "tg4perfetto_example.pftrace"
        with caplog.at_level(logging.WARNING):
            spans = read_spans(path)
        assert "13 interned category ids that were never defined were left out" in caplog.text
        ids = {span.context.span_id: span.name for span in spans}
        got = sorted(
            (
                span.resource.attributes["service.name"],
                span.attributes.get(TRACK_NAME),
                span.name,
                span.start_time,
                span.end_time,
                ids.get(span.parent.span_id) if span.parent else None,
            )
            for span in spans
        )
        assert got == sorted([
            ("aaa", "example_track", "SOME_TRACK", 100, 250, None),
            ("aaa", "ddd", "WXX", 100, 300, None),
            ("vvv", "ddd3", "WXYZ", 200, 200, None),
            ("vvv", "ddd2", "XXX", 222, 333, None),
            ("vvv", "ddd3", "WXX3", 300, 900, None),
            ("vvv", "ddd3", "ABCDE", 300, 300, "WXX3"),
            ("vvv", "ddd3", "WXX4", 400, 670, "WXX3"),
            ("vvv", "ddd3", "ABCDE", 400, 400, "WXX4"),
            ("vvv", "ddd3", "ADE", 600, 600, "WXX4"),
            ("vvv", "ddd3", "ADE2", 700, 700, "WXX3"),
            ("vvv", "ddd2", "WXX2", 900, 1000, None),
            ("abc.2", "XX", "X", 100, 500, None),
            ("abc.2", "XX", "Y", 300, 600, None),
        ])  # fmt: skip
        ade = next(span for span in spans if span.name == "ADE")
        assert dict(ade.attributes) == {
            "aaa": "abc", "ccc": "xxx", "eee.aaa": "abc", "eee.ccc": "ddd", TRACK_NAME: "ddd3",
        }  # fmt: skip

    @pytest.mark.parametrize("command", ["report", "tree", "flamegraph"])
    def test_each_command_says_what_was_left_out_once(self, tmp_path, capsys, command):
        """The undefined category ids are said once per command, though flamegraph reads the
        file twice (GPU time first, then host time) and report reads it to a table."""
        path = Path(__file__).parent / "data" / "tg4perfetto_example.pftrace"
        extra = ["-o", str(tmp_path / "t.folded")] if command == "flamegraph" else []
        assert main([command, "-q", str(path), *extra]) == 0
        err = capsys.readouterr().err
        assert err.count("13 interned category ids that were never defined were left out") == 1
