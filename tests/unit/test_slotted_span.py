# SPDX-License-Identifier: Apache-2.0
"""The spans brickscope builds are ``SlottedReadableSpan``s: ReadableSpans whose fields are
slots. Whatever reads a ReadableSpan (properties, ``to_json``, the OTLP encoder, pickle, copy)
must see the same span as it would from a plain ``ReadableSpan`` with the same fields, and
the delivery books must tell brickscope's spans from the application's in one batch."""

from __future__ import annotations

import copy
import pickle

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import brickscope as bs
from brickscope.sdk import _otel_internals
from brickscope.sdk.trace import _delivery, _spans
from brickscope.testing import reset_globals

pytestmark = pytest.mark.skipif(
    _spans.SPAN_TYPE is not _otel_internals.SlottedReadableSpan, reason="this SDK's ReadableSpan failed the probe"
)


@pytest.fixture
def spans():
    """Application spans and brickscope's from one session, in the order they ended."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    session = bs.configure(provider, clock="host")
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("request"):
        with bs.step(0):
            with bs.layer(0):
                with bs.brick("attention_score", category="attention"):
                    pass
        bs.sync()
    session.shutdown()
    yield list(exporter.get_finished_spans())
    reset_globals()


def plain_twin(span: ReadableSpan) -> ReadableSpan:
    """A plain ReadableSpan holding the same field objects."""
    twin = ReadableSpan.__new__(ReadableSpan)
    for field in _otel_internals.READABLE_SPAN_FIELDS:
        setattr(twin, field, getattr(span, field))
    return twin


def brickscope_spans(spans: list) -> list:
    return [s for s in spans if s.instrumentation_scope is _spans.INSTRUMENTATION_SCOPE]


class TestWhatReadersSee:
    def test_brickscope_spans_are_slotted_and_the_application_spans_are_not(self, spans):
        names = {s.name: type(s) for s in spans}
        assert names == {
            "request": ReadableSpan,  # the SDK ends its spans as plain ReadableSpans
            "step": _otel_internals.SlottedReadableSpan,
            "layer": _otel_internals.SlottedReadableSpan,
            "attention_score": _otel_internals.SlottedReadableSpan,
        }
        for span in brickscope_spans(spans):
            assert isinstance(span, ReadableSpan)
            assert vars(span) == {}

    def test_to_json_and_the_otlp_encoding_equal_a_plain_readable_span_s(self, spans):
        ours = brickscope_spans(spans)
        assert len(ours) == 3
        twins = [plain_twin(s) for s in ours]
        assert [s.to_json() for s in ours] == [t.to_json() for t in twins]
        assert encode_spans(ours).SerializeToString() == encode_spans(twins).SerializeToString()

    def test_a_copy_keeps_every_field(self, spans):
        for span in brickscope_spans(spans):
            clone = copy.copy(span)
            assert type(clone) is _otel_internals.SlottedReadableSpan
            assert [getattr(clone, f) for f in _otel_internals.READABLE_SPAN_FIELDS] == [
                getattr(span, f) for f in _otel_internals.READABLE_SPAN_FIELDS
            ]
            assert clone.to_json() == span.to_json()

    def test_pickling_fails_as_for_the_sdk_s_own_spans(self, spans):
        """Neither pickles: the resource's attributes hold a lock (so does the SDK's every
        span); the error is the same one, not a new one of brickscope's."""
        for span in spans:
            with pytest.raises(TypeError, match="cannot pickle '_thread.lock' object"):
                pickle.dumps(span)


class TestDeliveryBooks:
    def test_ours_counts_brickscope_spans_in_a_mixed_batch(self, spans):
        assert _delivery.ours(spans) == 3
        assert _delivery.ours(spans[:1]) == (spans[0].name != "request")
        assert _delivery.ours([]) == 0

    def test_ours_by_scope_where_the_spans_are_plain(self, spans, monkeypatch):
        """Where the probe failed brickscope's spans are plain ReadableSpans: told by scope."""
        plain = [plain_twin(s) if s.name != "request" else s for s in spans]
        monkeypatch.setattr(_delivery, "SPAN_TYPE", ReadableSpan)
        assert _delivery.ours(plain) == 3
