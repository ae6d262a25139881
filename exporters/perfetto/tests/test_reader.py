# SPDX-License-Identifier: Apache-2.0
"""read_spans: a .pftrace back into ReadableSpans (the flamegraph's offline input)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode
from pftrace_testlib import T0, THREAD, TRACE_ID, gpu_attributes, make_span

from brickscope.exporter.perfetto import PerfettoSpanExporter, read_spans
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
