# SPDX-License-Identifier: Apache-2.0
"""read_spans: a .pftrace back into ReadableSpans (the flamegraph's offline input)."""

from __future__ import annotations

import gzip
import io

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode
from pftrace_testlib import T0, THREAD, TRACE_ID, gpu_attributes, make_span

from brickscope.exporter.perfetto import PerfettoSpanExporter, _reader, read_spans
from brickscope.exporter.perfetto._reader import iter_packets
from brickscope.offline import TraceFileError, open_spans
from brickscope.trace import attributes as A


def _roundtrip(tmp_path, *batches):
    path = tmp_path / "t.pftrace"
    with PerfettoSpanExporter(path) as exporter:
        for batch in batches:
            exporter.export(batch)
    return {s.context.span_id: s for s in read_spans(path)}


class TestReadSpans:
    def test_identity_and_times(self, tmp_path):
        """Name, trace id, span id, parent and times come back."""
        span = make_span(7, "brick", T0 + 5, T0 + 50, 3, attributes=dict(THREAD))
        back = _roundtrip(tmp_path, [span])[7]
        assert (back.name, back.context.trace_id, back.parent.span_id) == ("brick", TRACE_ID, 3)
        assert (back.start_time, back.end_time) == (T0 + 5, T0 + 50)

    def test_gpu_span_that_began_before_its_launch_keeps_its_host_attributes(self, tmp_path):
        """Its flow ends on the GPU slice's END; the reader still finds the launch interval."""
        attributes = gpu_attributes(T0 + 30, 9, 100)
        back = _roundtrip(tmp_path, [make_span(8, "gemm", T0 + 20, T0 + 120, attributes=attributes)])
        assert dict(back[8].attributes) == attributes

    def test_gpu_span_keeps_gpu_times_and_host_attributes(self, tmp_path):
        """A GPU-timed span comes back once, at its GPU interval, with its host interval attributes."""
        attributes = gpu_attributes(T0 + 1, 9, 100)
        back = _roundtrip(tmp_path, [make_span(8, "gemm", T0 + 20, T0 + 120, attributes=attributes)])
        assert list(back) == [8]
        assert (back[8].start_time, back[8].end_time) == (T0 + 20, T0 + 120)
        assert dict(back[8].attributes) == attributes

    def test_attribute_types(self, tmp_path):
        """Attributes come back with their types, including arrays and awkward keys."""
        attributes = {
            "a": 1,
            "a.b": 2.5,
            "x..y": "dots",
            "otel.status_code": "user",
            "flag": False,
            "big": (1 << 63) + 5,
            "empty": (),
            "floats": (0.5, 1.5),
            "bools": (True, False),
            "": "blank",
        }
        back = _roundtrip(tmp_path, [make_span(9, "x", T0, T0 + 1, attributes=attributes)])[9]
        assert dict(back.attributes) == attributes
        assert all(type(back.attributes[k]) is type(v) for k, v in attributes.items())

    def test_kind_status_scope(self, tmp_path):
        """Kind, error status with its description and the instrumentation scope come back."""
        span = make_span(
            4,
            "rpc",
            T0,
            T0 + 10,
            kind=SpanKind.SERVER,
            status=Status(StatusCode.ERROR, "boom"),
            scope=InstrumentationScope("my.lib", "2.0"),
        )
        back = _roundtrip(tmp_path, [span])[4]
        assert back.kind is SpanKind.SERVER
        assert (back.status.status_code, back.status.description) == (StatusCode.ERROR, "boom")
        assert (back.instrumentation_scope.name, back.instrumentation_scope.version) == ("my.lib", "2.0")

    def test_events_and_links(self, tmp_path):
        """Events (name, time, attributes) and links (ids, attributes) come back."""
        link = Link(SpanContext(0xFEED, 77, True, TraceFlags(1)), {"reason": "batched"})
        span = make_span(
            5,
            "x",
            T0,
            T0 + 100,
            attributes=dict(THREAD),
            events=[Event("exception", {"exception.type": "ValueError"}, timestamp=T0 + 30)],
            links=[link],
        )
        back = _roundtrip(tmp_path, [span])[5]
        (event,) = back.events
        assert (event.name, event.timestamp, dict(event.attributes)) == (
            "exception",
            T0 + 30,
            {"exception.type": "ValueError"},
        )
        (back_link,) = back.links
        assert (back_link.context.trace_id, back_link.context.span_id, back_link.context.is_remote) == (0xFEED, 77, True)
        assert dict(back_link.attributes) == {"reason": "batched"}

    def test_resource_service_and_pid(self, tmp_path):
        """The resource keeps service.name, process.pid and other attributes as strings."""
        resource = Resource({"service.name": "svc", "process.pid": 321, "host.name": "node7"})
        back = _roundtrip(tmp_path, [make_span(6, "x", T0, T0 + 1, attributes=dict(THREAD), resource=resource)])[6]
        assert dict(back.resource.attributes) == {"service.name": "svc", "process.pid": 321, "host.name": "node7"}

    def test_overflow_and_out_of_order_batches(self, tmp_path):
        """Spans on overflow tracks and from out-of-order batches all come back exactly."""
        spans = [
            make_span(1, "a", T0 + 1000, T0 + 2000, attributes=dict(THREAD)),
            make_span(2, "b", T0, T0 + 1500, attributes=dict(THREAD)),
            make_span(3, "c", T0 + 10, T0 + 20, attributes=dict(THREAD)),
        ]
        back = _roundtrip(tmp_path, spans[:1], spans[1:])
        assert {k: (v.start_time, v.end_time) for k, v in back.items()} == {
            s.context.span_id: (s.start_time, s.end_time) for s in spans
        }

    def test_not_a_trace(self, tmp_path):
        """A file that is not a Perfetto trace is a ValueError."""
        path = tmp_path / "x.pftrace"
        path.write_bytes(b"\x08\x01not a trace")
        with pytest.raises(ValueError, match="not a Perfetto trace"):
            read_spans(path)

    def test_progress(self, tmp_path):
        """The progress callback ends at the file size."""
        path = tmp_path / "t.pftrace"
        with PerfettoSpanExporter(path) as exporter:
            exporter.export([make_span(1, "x", T0, T0 + 1, attributes={A.SCOPE_KIND: "brick"})])
        calls = []
        read_spans(path, progress=lambda done, total: calls.append((done, total)))
        assert calls[-1] == (path.stat().st_size, path.stat().st_size)


def _trace(path, batches):
    with PerfettoSpanExporter(path) as exporter:
        for batch in batches:
            exporter.export(batch)
    return path


def _step(i: int) -> list:
    """A parent step with a host child, a GPU child and an event: one export batch."""
    base = T0 + i * 1_000
    return [
        make_span(10 * i + 2, "child", base + 10, base + 20, 10 * i + 1, attributes=dict(THREAD)),
        make_span(10 * i + 3, "gemm", base + 30, base + 90, 10 * i + 1, attributes=gpu_attributes(base + 12, 5, 60)),
        make_span(
            10 * i + 1, "step", base, base + 100, attributes=dict(THREAD), events=[Event("mark", {"i": i}, base + 50)]
        ),
    ]


class TestOpenSpans:
    """The .pftrace format of brickscope.offline.open_spans (registered through brickscope.readers)."""

    def test_open_spans_reads_what_read_spans_reads(self, tmp_path):
        path = _trace(tmp_path / "t.pftrace", [_step(i) for i in range(5)])
        with open_spans(path) as spans:
            streamed = sorted(spans, key=lambda s: (s.start_time, s.end_time))
            assert (spans.format, spans.spans_read, spans.truncation) == ("pftrace", 15, None)
        listed = read_spans(path)
        assert [(s.name, s.context.span_id, s.start_time, s.end_time, dict(s.attributes)) for s in streamed] == [
            (s.name, s.context.span_id, s.start_time, s.end_time, dict(s.attributes)) for s in listed
        ]
        assert [[e.name for e in s.events] for s in streamed if s.name == "step"] == [["mark"]] * 5

    def test_gzip_pftrace(self, tmp_path):
        path = _trace(tmp_path / "t.pftrace", [_step(0)])
        packed = tmp_path / "t.pftrace.gz"
        packed.write_bytes(gzip.compress(path.read_bytes()))
        assert sorted(s.name for s in open_spans(packed)) == ["child", "gemm", "step"]

    def test_streams_with_bounded_holding(self, tmp_path, monkeypatch):
        """Spans come out before the file is read whole, events and GPU launches still attached."""
        monkeypatch.setattr(_reader, "_HOLD_SPANS", 6)
        monkeypatch.setattr(_reader, "_CHUNK", 256)
        path = _trace(tmp_path / "t.pftrace", [_step(i) for i in range(40)])
        spans = open_spans(path)
        first = next(spans)
        assert spans.bytes_read < spans.total_bytes / 2
        rest = [first, *spans]
        assert len(rest) == 120
        steps = [s for s in rest if s.name == "step"]
        assert [(e.name, dict(e.attributes)) for s in steps for e in s.events] == [("mark", {"i": i}) for i in range(40)]
        gemms = [s for s in rest if s.name == "gemm"]
        assert [s.attributes[A.HOST_START_NS] for s in gemms] == [T0 + i * 1_000 + 12 for i in range(40)]

    def test_cut_inside_any_packet_is_an_error_naming_the_offset(self, tmp_path):
        """Cutting the file at every byte inside its last packets: an error at that packet's offset."""
        path = _trace(tmp_path / "t.pftrace", [_step(0), _step(1)])
        data = path.read_bytes()
        starts = [offset for offset, _ in iter_packets(io.BytesIO(data))]
        cut_path = tmp_path / "cut.pftrace"
        for start in starts[-3:]:
            end = next((s for s in starts if s > start), len(data))
            for cut in range(start + 1, end):
                cut_path.write_bytes(data[:cut])
                with pytest.raises(TraceFileError, match=rf"cut\.pftrace: offset {start}: truncated: the file ends inside a packet"):
                    list(open_spans(cut_path))

    def test_allow_truncated_keeps_the_spans_ended_before_the_cut(self, tmp_path):
        path = _trace(tmp_path / "t.pftrace", [_step(0), _step(1)])
        data = path.read_bytes()
        cut_path = tmp_path / "cut.pftrace"
        cut_path.write_bytes(data[:-3])
        spans = open_spans(cut_path, allow_truncated=True)
        names = sorted(s.name for s in spans)
        # the second step's slice is the last to end: its END packet is the one cut
        assert names == ["child", "child", "gemm", "gemm", "step"]
        last = [offset for offset, _ in iter_packets(io.BytesIO(data))][-1]
        assert spans.truncation is not None and spans.truncation.offset == last

    def test_cut_at_a_packet_boundary_inside_a_batch_is_truncated(self, tmp_path):
        """Slices begun and never ended: the writer was cut off between two packets."""
        path = _trace(tmp_path / "t.pftrace", [_step(0)])
        data = path.read_bytes()
        last = [offset for offset, _ in iter_packets(io.BytesIO(data))][-1]
        cut_path = tmp_path / "cut.pftrace"
        cut_path.write_bytes(data[:last])
        with pytest.raises(TraceFileError, match=r"cut\.pftrace: truncated: 1 slices begun and never ended"):
            list(open_spans(cut_path))
        assert sorted(s.name for s in open_spans(cut_path, allow_truncated=True)) == ["child", "gemm"]

    def test_byte_flips_never_escape_as_other_errors(self, tmp_path):
        """Any single flipped byte gives spans or one TraceFileError, never another exception."""
        path = _trace(tmp_path / "t.pftrace", [_step(0)])
        data = path.read_bytes()
        flipped = tmp_path / "flip.pftrace"
        outcomes = set()
        for index in range(len(data)):
            corrupt = bytearray(data)
            corrupt[index] ^= 0xFF
            flipped.write_bytes(bytes(corrupt))
            try:
                list(open_spans(flipped))
                outcomes.add("read")
            except TraceFileError as error:
                assert str(error).startswith(str(flipped)) and "\n" not in str(error)
                outcomes.add("error")
        assert outcomes == {"read", "error"}

