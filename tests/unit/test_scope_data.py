# SPDX-License-Identifier: Apache-2.0
"""Attributes, events and status added to an open scope reach its span."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import Status, StatusCode

import brickscope as bs
from brickscope import _scope_data
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A


def by_name(spans):
    return {span.name: span for span in spans}


class TestOtelSpanApiInsideAScope:
    def test_set_attribute_and_add_event_reach_the_brick(self):
        """What OTel users write inside a brick lands on the brick's span, not nowhere."""
        with capture_spans() as captured:
            with bs.step(0), bs.brick("attention"):
                span = trace.get_current_span()
                assert span.is_recording()
                span.set_attribute("cache.hit", True)
                span.set_attributes({"cache.blocks": 12, "cache.tiers": ["hbm", "host"]})
                span.add_event("cache.lookup", {"blocks": 3}, timestamp=1_000)
            spans = by_name(captured.spans)
        brick = spans["attention"]
        assert brick.attributes["cache.hit"] is True
        assert brick.attributes["cache.blocks"] == 12
        assert brick.attributes["cache.tiers"] == ("hbm", "host")
        assert [(e.name, dict(e.attributes), e.timestamp) for e in brick.events] == [("cache.lookup", {"blocks": 3}, 1_000)]
        assert "cache.hit" not in spans["step"].attributes and not spans["step"].events

    def test_data_goes_to_the_innermost_open_scope(self):
        """Inside a kernel the kernel is current; after it closes, its brick is again."""
        with capture_spans() as captured:
            with bs.brick("gemm"):
                with bs.kernel("gemm_fwd"):
                    trace.get_current_span().set_attribute("tile", 128)
                trace.get_current_span().set_attribute("after", 1)
            spans = by_name(captured.spans)
        assert spans["gemm_fwd"].attributes["tile"] == 128 and "after" not in spans["gemm_fwd"].attributes
        assert spans["gemm"].attributes["after"] == 1 and "tile" not in spans["gemm"].attributes

    def test_brickscope_keys_cannot_be_overwritten_but_new_ones_can_be_set(self):
        """The scope kind and self time stay brickscope's; work bytes set inside are taken."""
        with capture_spans() as captured:
            with bs.brick("gemm"):
                span = trace.get_current_span()
                span.set_attribute(A.SCOPE_KIND, "kernel")
                span.set_attribute(A.WORK_BYTES, 4096)
                span.set_attribute("bs.kind", "mine")
            (brick,) = captured.spans
        assert brick.attributes[A.SCOPE_KIND] == "brick"
        assert brick.attributes[A.WORK_BYTES] == 4096
        assert brick.attributes["bs.kind"] == "mine"

    def test_later_value_wins_and_status_is_set(self):
        with capture_spans() as captured:
            with bs.brick("a"):
                span = trace.get_current_span()
                span.set_attribute("x", 1)
                span.set_attribute("x", 2)
                span.set_status(Status(StatusCode.ERROR, "bad tile"))
            with bs.brick("b"):
                trace.get_current_span().set_status(StatusCode.OK)
                trace.get_current_span().set_status(StatusCode.ERROR, "ignored after OK")
            spans = by_name(captured.spans)
        assert spans["a"].attributes["x"] == 2
        assert (spans["a"].status.status_code, spans["a"].status.description) == (StatusCode.ERROR, "bad tile")
        assert spans["b"].status.status_code == StatusCode.OK

    def test_record_exception_and_an_escaping_error_both_arrive_in_order(self):
        with capture_spans() as captured:
            with pytest.raises(KeyError):
                with bs.brick("lookup"):
                    trace.get_current_span().record_exception(ValueError("retried"))
                    raise KeyError("gone")
            (brick,) = captured.spans
        assert [e.name for e in brick.events] == ["exception", "exception"]
        assert brick.events[0].attributes["exception.type"] == "ValueError"
        assert brick.events[0].attributes["exception.escaped"] is False
        assert brick.events[1].attributes["exception.type"] == "KeyError"
        assert brick.status.status_code == StatusCode.ERROR

    def test_invalid_values_are_dropped_and_counted(self):
        """What OTel cannot carry is dropped, as the SDK does, and counted: never raised."""
        with capture_spans() as captured:
            with bs.brick("a"):
                span = trace.get_current_span()
                span.set_attribute("obj", object())
                span.set_attribute("mixed", [1, "two"])
                span.set_attribute("", 1)
                span.set_attributes(42)
                span.add_event("e", {"ok": 1.5, "bad": {"nested": 1}})
                span.add_event(None)
            (brick,) = captured.spans
            stats = captured.session.stats()
        assert "obj" not in brick.attributes and "mixed" not in brick.attributes
        assert [(e.name, dict(e.attributes)) for e in brick.events] == [("e", {"ok": 1.5})]
        assert stats["scope_data_dropped"] == 6

    def test_bounded_like_the_sdk_defaults(self):
        """At most 128 events and 128 added attributes per scope; the rest counted."""
        with capture_spans() as captured:
            with bs.brick("a"):
                span = trace.get_current_span()
                for i in range(130):
                    span.add_event(f"e{i}")
                    span.set_attribute(f"k{i}", i)
            (brick,) = captured.spans
            stats = captured.session.stats()
        assert len(brick.events) == _scope_data.MAX_EVENTS == 128
        assert sum(1 for key in brick.attributes if key.startswith("k")) == 128
        assert stats["scope_data_dropped"] == 2 + 2

    def test_update_name_is_refused_and_counted(self):
        with capture_spans() as captured:
            with bs.brick("rms_norm"):
                trace.get_current_span().update_name("other")
            (brick,) = captured.spans
            stats = captured.session.stats()
        assert brick.name == "rms_norm"
        assert stats["misuse"] == 1

    def test_unsampled_scope_is_not_recording_and_keeps_nothing(self):
        with capture_spans(TracerProvider(sampler=ALWAYS_OFF)) as captured:
            with bs.brick("a"):
                span = trace.get_current_span()
                assert not span.is_recording()
                span.set_attribute("x", 1)
                bs.event("e")
            assert captured.spans == ()
            assert captured.session.stats()["scope_data_dropped"] == 0

    def test_outside_any_scope_the_scope_span_is_not_current(self):
        with capture_spans():
            assert not trace.get_current_span().is_recording()


class TestEventHelper:
    def test_event_lands_on_the_current_scope_with_its_attributes(self):
        with capture_spans() as captured:
            with bs.brick("sampling"):
                bs.event("eos", token=2, text="</s>", logits=[0.5, 0.25])
            (brick,) = captured.spans
        (event,) = brick.events
        assert event.name == "eos"
        assert dict(event.attributes) == {"token": 2, "text": "</s>", "logits": (0.5, 0.25)}
        host_start = brick.attributes[A.HOST_START_NS]
        assert host_start <= event.timestamp <= host_start + brick.attributes[A.HOST_DURATION_NS]

    def test_event_inside_a_user_span_inside_a_brick_goes_to_the_user_span(self):
        """The innermost span is current: a user span opened inside the brick gets the event."""
        with capture_spans() as captured:
            tracer = captured.session.tracer_provider.get_tracer("app")
            with bs.brick("outer"):
                with tracer.start_as_current_span("user"):
                    bs.event("inner")
                bs.event("outer")
            spans = by_name(captured.spans)
        assert [e.name for e in spans["user"].events] == ["inner"]
        assert [e.name for e in spans["outer"].events] == ["outer"]

    def test_event_outside_any_scope_is_counted(self):
        with capture_spans() as captured:
            bs.event("lost")
            assert captured.session.stats()["scope_data_dropped"] == 1

    def test_event_with_brickscope_off_does_nothing(self):
        bs.event("nothing", x=1)  # not configured: no error, nothing recorded
        with capture_spans() as captured:
            bs.disable()
            with bs.brick("a"):
                bs.event("off")
            bs.enable()
            assert captured.spans == ()
            assert captured.session.stats()["scope_data_dropped"] == 0
