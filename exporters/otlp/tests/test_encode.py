# SPDX-License-Identifier: Apache-2.0
"""brickscope's OTLP encoder writes the official encoder's bytes, on spans of every shape."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as official_encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

import brickscope as bs
from brickscope.exporter.otlp import _encode
from brickscope.exporter.otlp._encode import SpanEncoder, encode_spans

TRACE_ID = 0x0123456789ABCDEF0123456789ABCDEF
RESOURCE = Resource({"service.name": "decoder", "host.name": "node-7", "rank": 3})
SCOPE = InstrumentationScope("brickscope", "0.1.0")


def official(spans: list[ReadableSpan]) -> bytes:
    return official_encode_spans(spans).SerializePartialToString()


def context(
    span_id: int, trace_id: int = TRACE_ID, remote: bool = False, state: TraceState | None = None
) -> SpanContext:
    return SpanContext(trace_id, span_id, is_remote=remote, trace_flags=TraceFlags(1), trace_state=state)


def span(span_id: int = 1, **fields: Any) -> ReadableSpan:
    fields.setdefault("name", "span")
    fields.setdefault("context", context(span_id))
    fields.setdefault("resource", RESOURCE)
    fields.setdefault("instrumentation_scope", SCOPE)
    fields.setdefault("start_time", 1_700_000_000_000_000_000 + span_id)
    fields.setdefault("end_time", 1_700_000_000_000_001_000 + span_id)
    return ReadableSpan(**fields)


def brickscope_spans() -> list[ReadableSpan]:
    """A decode step as brickscope makes it (host clock), under a user span, with an event."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    session = bs.configure(provider, clock="host")
    try:
        with provider.get_tracer("decoder_app").start_as_current_span("generate"):
            for number in range(2):
                with bs.step(number):
                    for index in range(3):
                        with bs.layer(index):
                            for name in ("rms_norm", "attention_score", "ffn_down"):
                                with bs.brick(name, elements=4096):
                                    if name == "attention_score":
                                        bs.event("kv.lookup", hit=index % 2 == 0)
        session.force_flush()
    finally:
        session.shutdown()
    return list(exporter.get_finished_spans())


class TestSameBytesAsTheOfficialEncoder:
    def test_brickscope_spans(self):
        spans = brickscope_spans()
        assert len(spans) == 1 + 2 * (1 + 3 * 4)
        assert encode_spans(spans) == official(spans)

    def test_a_reused_encoder_writes_each_batch_as_a_fresh_one(self):
        """The caches carry bytes from batch to batch, never a different result."""
        spans = brickscope_spans()
        encoder = SpanEncoder()
        for start in range(0, len(spans), 5):
            batch = spans[start : start + 5]
            assert encoder.encode(batch) == official(batch) == encode_spans(batch)

    @pytest.mark.parametrize(
        "fields",
        [pytest.param({"kind": kind}, id=f"kind-{kind.name}") for kind in SpanKind]
        + [
            pytest.param({"parent": context(99)}, id="local-parent"),
            pytest.param({"parent": context(99, remote=True)}, id="remote-parent"),
            pytest.param(
                {"context": context(5, state=TraceState([("vendor", "a1"), ("other", "b=2")]))}, id="trace-state"
            ),
            pytest.param({"status": Status(StatusCode.ERROR, "kernel failed")}, id="error-status"),
            pytest.param({"status": Status(StatusCode.OK)}, id="ok-status"),
            pytest.param({"name": ""}, id="empty-name"),
            pytest.param({"name": "attention · 注意"}, id="unicode-name"),
            pytest.param({"start_time": None, "end_time": None}, id="no-times"),
            pytest.param({"start_time": 0, "end_time": 0}, id="zero-times"),
            pytest.param(
                {
                    "events": [
                        Event("retry", {"attempt": 2, "ok": False}, timestamp=1_700_000_000_000_000_500),
                        Event("", {}, timestamp=0),
                    ]
                },
                id="events",
            ),
            pytest.param(
                {
                    "links": [
                        Link(context(7, trace_id=TRACE_ID + 1), {"link.kind": "follows"}),
                        Link(context(8, remote=True)),
                    ]
                },
                id="links",
            ),
            pytest.param(
                {"resource": Resource({"service.name": "x"}, schema_url="https://opentelemetry.io/schemas/1.21.0")},
                id="resource-schema-url",
            ),
            pytest.param(
                {"instrumentation_scope": InstrumentationScope("lib", None, "https://s/1", {"scope.attr": [1, 2]})},
                id="scope-with-schema-and-attributes",
            ),
            pytest.param({"instrumentation_scope": None}, id="no-scope"),
            pytest.param({"attributes": BoundedAttributes(2, {"a": 1, "b": 2, "c": 3})}, id="dropped-attributes"),
        ],
    )
    def test_span_shapes(self, fields):
        spans = [span(1, **fields), span(2)]
        assert encode_spans(spans) == official(spans)

    @pytest.mark.parametrize(
        "value",
        [
            "", "text", "注意", True, False, 0, 1, -1, 1024, -1024, 1025, 2**63 - 1, -(2**63), 1_795_653_097_121_676_655,
            0.0, -0.0, 1.5, float("inf"), float("nan"), b"", b"\x00\xff", [], ["a", "b"], [True, False], [1, -2, 2**40],
            [0.5, 2.5], (1, 2), [None, 1], {"k": "v", "n": [1, 2]}, None,
        ],
    )  # fmt: skip
    def test_attribute_values(self, value):
        """Every value type the official encoder takes, in a span, an event, a link, the resource and the scope."""
        attributes = {"key": value, "": value, "after": 1}
        spans = [
            span(
                1,
                attributes=attributes,
                events=[Event("e", attributes, timestamp=5)],
                links=[Link(context(3), attributes)],
                resource=Resource(attributes),
                instrumentation_scope=InstrumentationScope("s", "1", None, attributes),
            )
        ]
        assert encode_spans(spans) == official(spans)

    @pytest.mark.parametrize(
        "value", [2**63, -(2**63) - 1, object(), [1, object()]], ids=["above", "below", "object", "nested"]
    )
    def test_what_the_official_encoder_cannot_encode_is_left_out_and_logged(self, value, caplog):
        spans = [span(1, attributes={"before": 1, "bad": value, "after": 2})]
        with caplog.at_level(logging.ERROR):
            ours = encode_spans(spans)
        ours_logged = [r for r in caplog.records if r.name == _encode.__name__]
        assert ours == official(spans)
        assert len(ours_logged) == 1 and "bad" in ours_logged[0].getMessage()
        decoded = ExportTraceServiceRequest.FromString(ours).resource_spans[0].scope_spans[0].spans[0]
        assert [kv.key for kv in decoded.attributes] == ["before", "after"]

    def test_resources_and_scopes_grouped_in_order_of_first_appearance(self):
        """Equal resources built apart share one ResourceSpans, as the official encoder groups them."""
        other = Resource({"service.name": "other"})
        equal_copy = Resource(dict(RESOURCE.attributes))
        scope_b = InstrumentationScope("decoder_app")
        spans = [
            span(1),
            span(2, resource=other),
            span(3, instrumentation_scope=scope_b),
            span(4, resource=equal_copy),
            span(5, resource=other, instrumentation_scope=scope_b),
            span(6, instrumentation_scope=None),
        ]
        ours = encode_spans(spans)
        assert ours == official(spans)
        request = ExportTraceServiceRequest.FromString(ours)
        assert [len(r.scope_spans) for r in request.resource_spans] == [3, 2]
        assert [[len(s.spans) for s in r.scope_spans] for r in request.resource_spans] == [[2, 1, 1], [1, 1]]

    def test_no_spans(self):
        assert encode_spans([]) == official([]) == b""


class TestCaches:
    def test_bounded_whatever_the_cardinality(self, monkeypatch):
        """Distinct values beyond the limit empty a cache; the bytes stay right."""
        monkeypatch.setattr(_encode, "CACHE_LIMIT", 8)
        encoder = SpanEncoder()
        for batch in range(5):
            spans = [
                span(i, name=f"op{i % 13}", attributes={"request.id": f"r{batch}-{i}", "n": i % 50})
                for i in range(1, 40)
            ]
            assert encoder.encode(spans) == official(spans)
            caches = encoder._caches  # the bound is the behaviour under test
            assert max(len(caches.strings), len(caches.ints), len(caches.names), len(caches.keys)) <= 8

    def test_a_value_equal_across_types_is_cached_per_type(self):
        """1, True and 1.0 are equal dictionary keys; each keeps its own wire type."""
        encoder = SpanEncoder()
        spans = [span(1, attributes={"v": 1}), span(2, attributes={"v": True}), span(3, attributes={"v": 1.0})]
        spans += [span(4, attributes={"v": True}), span(5, attributes={"v": 1})]
        assert encoder.encode(spans) == official(spans)


def attribute_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.text(max_size=8),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False),
        st.binary(max_size=4),
    )
    return st.one_of(scalars, st.lists(scalars, max_size=3))


@st.composite
def spans_strategy(draw: st.DrawFn) -> list[ReadableSpan]:
    resources = [RESOURCE, Resource({"service.name": "b"})]
    scopes = [SCOPE, InstrumentationScope("user"), None]
    out = []
    for span_id in range(1, draw(st.integers(1, 6)) + 1):
        attributes = draw(st.dictionaries(st.text(max_size=6), attribute_values(), max_size=6))
        parent = draw(st.sampled_from([None, context(1000), context(1001, remote=True)]))
        events = [
            Event(
                draw(st.text(max_size=5)),
                draw(st.dictionaries(st.text(max_size=4), attribute_values(), max_size=3)),
                timestamp=draw(st.integers(0, 2**64 - 1)),
            )
            for _ in range(draw(st.integers(0, 2)))
        ]
        out.append(
            span(
                span_id,
                name=draw(st.text(max_size=10)),
                kind=draw(st.sampled_from(list(SpanKind))),
                parent=parent,
                attributes=attributes,
                events=events,
                status=draw(
                    st.sampled_from([Status(StatusCode.UNSET), Status(StatusCode.ERROR, "x"), Status(StatusCode.OK)])
                ),
                resource=draw(st.sampled_from(resources)),
                instrumentation_scope=draw(st.sampled_from(scopes)),
                start_time=draw(st.integers(0, 2**64 - 1)),
                end_time=draw(st.integers(0, 2**64 - 1)),
            )
        )
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spans_strategy())
def test_any_spans_encode_as_the_official_encoder_does(spans):
    assert encode_spans(spans) == official(spans)
