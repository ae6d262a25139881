# SPDX-License-Identifier: Apache-2.0
"""Scopes become ordinary OTel spans: tree, ids, attributes, errors, sampling, context."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased
from opentelemetry.trace import StatusCode

import brickscope as bs
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A


def by_name(spans):
    return {span.name: span for span in spans}


class TestSpanTree:
    def test_step_layer_brick_kernel_nest_under_the_user_span(self):
        """step -> layer -> brick -> kernel are parented in order, all under the current user span."""
        with capture_spans() as captured:
            tracer = captured.session.tracer_provider.get_tracer("app")
            with tracer.start_as_current_span("request") as request:
                with bs.step(0), bs.layer(3), bs.brick("rms_norm"), bs.kernel("rms_fwd"):
                    pass
            spans = by_name(captured.spans)
        request_ctx = request.get_span_context()
        assert spans["step"].parent.span_id == request_ctx.span_id
        assert spans["layer"].parent.span_id == spans["step"].context.span_id
        assert spans["rms_norm"].parent.span_id == spans["layer"].context.span_id
        assert spans["rms_fwd"].parent.span_id == spans["rms_norm"].context.span_id
        assert {s.context.trace_id for s in spans.values()} == {request_ctx.trace_id}
        assert len({s.context.span_id for s in spans.values()}) == 5

    def test_outermost_scope_without_a_user_span_is_a_root(self):
        """With no current span, the outermost scope starts a new trace."""
        with capture_spans() as captured:
            with bs.brick("rms_norm"):
                pass
            (span,) = captured.spans
        assert span.parent is None
        assert span.context.trace_id != 0

    def test_user_span_inside_a_brick_gets_the_brick_as_parent(self):
        """An OTel span started by user code inside a brick is the brick's child."""
        with capture_spans() as captured:
            tracer = captured.session.tracer_provider.get_tracer("app")
            with bs.brick("attention_score"):
                with tracer.start_as_current_span("user work"):
                    pass
            spans = by_name(captured.spans)
        assert spans["user work"].parent.span_id == spans["attention_score"].context.span_id
        assert spans["user work"].context.trace_id == spans["attention_score"].context.trace_id

    def test_brick_inside_a_user_span_inside_a_brick_nests_through_it(self):
        """brick -> user span -> brick: the inner brick's parent is the user span."""
        with capture_spans() as captured:
            tracer = captured.session.tracer_provider.get_tracer("app")
            with bs.brick("ffn_up"):
                with tracer.start_as_current_span("user"):
                    with bs.brick("activation"):
                        pass
            spans = by_name(captured.spans)
        assert spans["user"].parent.span_id == spans["ffn_up"].context.span_id
        assert spans["activation"].parent.span_id == spans["user"].context.span_id

    def test_propagation_can_be_switched_off(self):
        """With propagate_context=False the user span parents to the user's own context instead."""
        with capture_spans(propagate_context=False) as captured:
            tracer = captured.session.tracer_provider.get_tracer("app")
            with bs.brick("attention_score"):
                with tracer.start_as_current_span("user work"):
                    pass
            spans = by_name(captured.spans)
        assert spans["user work"].parent is None

    def test_spans_carry_provider_resource_and_instrumentation_scope(self):
        """Spans use the provider's resource and the instrumentation scope brickscope/<version>."""
        provider = TracerProvider(resource=Resource.create({"service.name": "decoder"}))
        with capture_spans(provider) as captured:
            with bs.brick("rms_norm"):
                pass
            (span,) = captured.spans
        assert span.resource.attributes["service.name"] == "decoder"
        assert span.instrumentation_scope.name == "brickscope"
        assert span.instrumentation_scope.version == bs.__version__


class TestAttributes:
    def test_brick_attributes_follow_the_conventions(self):
        """A brick carries kind, name, category, elements, clock, host timing, thread and user attributes."""
        with capture_spans() as captured:
            with bs.step(7), bs.layer(2):
                with bs.brick("qkv_projection", elements=4096, dtype="bf16"):
                    pass
            brick = captured.by_name("qkv_projection")[0]
        attributes = brick.attributes
        assert attributes[A.SCOPE_KIND] == "brick"
        assert attributes[A.BRICK_NAME] == "qkv_projection"
        assert attributes[A.BRICK_CATEGORY] == "attention"
        assert attributes[A.BRICK_ELEMENTS] == 4096
        assert attributes[A.LAYER_INDEX] == 2
        assert attributes[A.STEP_NUMBER] == 7
        assert attributes[A.CLOCK] == "host"
        assert attributes[A.HOST_START_NS] == brick.start_time
        assert attributes[A.HOST_DURATION_NS] == brick.end_time - brick.start_time
        assert attributes[A.THREAD_NAME] == "MainThread"
        assert attributes["dtype"] == "bf16"
        assert A.GPU_DURATION_NS not in attributes

    def test_kernel_carries_launch_configuration_and_its_brick(self):
        """A kernel span has grid/block normalised to 3 dims, shared memory, and its brick's name and category."""
        with capture_spans() as captured:
            with bs.brick("ffn_down"):
                with bs.kernel("gemm_bf16", grid=(128, 4), block=256, shared_mem_bytes=49152):
                    pass
            kernel = captured.kernels()[0]
        attributes = kernel.attributes
        assert attributes[A.SCOPE_KIND] == "kernel"
        assert attributes[A.KERNEL_NAME] == "gemm_bf16"
        assert tuple(attributes[A.KERNEL_GRID]) == (128, 4, 1)
        assert tuple(attributes[A.KERNEL_BLOCK]) == (256, 1, 1)
        assert attributes[A.KERNEL_SHARED_MEM_BYTES] == 49152
        assert attributes[A.BRICK_NAME] == "ffn_down"
        assert attributes[A.BRICK_CATEGORY] == "ffn"

    def test_unknown_brick_is_other_unless_given_a_category(self):
        """Dynamic bricks land in 'other'; an explicit category wins; registered names keep theirs."""
        with capture_spans() as captured:
            bs.register_brick("flash_decode", "attention")
            with bs.brick("my_custom_op"):
                pass
            with bs.brick("my_other_op", category="moe_routing"):
                pass
            with bs.brick("flash_decode"):
                pass
            spans = by_name(captured.spans)
        assert spans["my_custom_op"].attributes[A.BRICK_CATEGORY] == "other"
        assert spans["my_other_op"].attributes[A.BRICK_CATEGORY] == "moe_routing"
        assert spans["flash_decode"].attributes[A.BRICK_CATEGORY] == "attention"

    def test_host_timing_measures_the_body(self):
        """A brick around a 20 ms sleep lasts at least 20 ms on the host clock, and no longer than the
        interval measured around it (however loaded the machine: no fixed upper bound)."""
        with capture_spans() as captured:
            before = time.time_ns()
            with bs.brick("sampling"):
                time.sleep(0.02)
            after = time.time_ns()
            (span,) = captured.spans
        duration = span.end_time - span.start_time
        assert duration >= 20_000_000
        assert before - 1_000_000 <= span.start_time <= span.end_time <= after + 1_000_000


class TestErrors:
    def test_exception_sets_error_status_records_it_and_propagates(self):
        """The body's exception propagates unchanged; the span is ERROR with an exception event."""
        error = KeyError("missing expert")
        with capture_spans() as captured:
            with pytest.raises(KeyError) as raised:
                with bs.brick("ffn_gate"):
                    raise error
            (span,) = captured.spans
        assert raised.value is error
        assert span.status.status_code is StatusCode.ERROR
        (event,) = span.events
        assert event.name == "exception"
        assert event.attributes["exception.type"] == "KeyError"
        assert "missing expert" in event.attributes["exception.message"]
        assert "raise error" in event.attributes["exception.stacktrace"]

    def test_failing_span_processor_never_reaches_the_application(self, caplog):
        """A processor raising in on_end is logged once and counted; the app and other processors go on."""

        class Broken:
            def on_start(self, span, parent_context=None):
                pass

            def on_end(self, span):
                raise RuntimeError("exporter bug")

            def shutdown(self):
                pass

            def force_flush(self, timeout_millis=30000):
                return True

        provider = TracerProvider()
        provider.add_span_processor(Broken())
        with capture_spans(provider) as captured:
            for _ in range(3):
                with bs.brick("rms_norm"):
                    pass
            assert len(captured.spans) == 3
            assert captured.session.stats()["processor_errors"] == 3
        assert sum("a span processor failed" in r.message for r in caplog.records) == 1


class TestSampling:
    def test_always_off_sampler_records_nothing(self):
        """A provider whose sampler drops roots gets no brickscope spans, and nothing pends."""
        with capture_spans(TracerProvider(sampler=ALWAYS_OFF)) as captured:
            with bs.step(0), bs.brick("rms_norm"), bs.kernel("k"):
                pass
            assert captured.spans == ()
            assert captured.session.stats()["scopes_unsampled"] == 3
            assert captured.session.stats()["pending"] == 0

    def test_unsampled_parent_span_means_unsampled_scopes(self):
        """Under an unsampled user span (ParentBased), scopes and user spans inside them are dropped."""
        provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
        with capture_spans(provider) as captured:
            tracer = provider.get_tracer("app")
            with tracer.start_as_current_span("request"):
                with bs.brick("rms_norm"):
                    with tracer.start_as_current_span("inner"):
                        pass
            assert captured.spans == ()

    def test_ratio_sampler_decides_per_trace(self):
        """A ratio sampler keeps whole trees: every kept brick has its kernel, and some trees are dropped."""
        with capture_spans(TracerProvider(sampler=TraceIdRatioBased(0.5))) as captured:
            for _ in range(200):
                with bs.brick("rms_norm"), bs.kernel("k"):
                    pass
            bricks, kernels = captured.bricks(), captured.kernels()
        assert 40 < len(bricks) < 160
        assert {k.parent.span_id for k in kernels} == {b.context.span_id for b in bricks}


class TestDisabled:
    def test_disabled_records_nothing(self):
        """After disable(), scopes produce no spans; enable() turns them back on."""
        with capture_spans() as captured:
            bs.disable()
            with bs.brick("rms_norm"):
                pass

            @bs.brick("ffn_up")
            def ffn():
                return 1

            assert ffn() == 1
            assert captured.spans == ()
            bs.enable()
            with bs.brick("rms_norm"):
                pass
            assert [s.name for s in captured.spans] == ["rms_norm"]

    def test_configured_disabled(self):
        """configure(enabled=False) records nothing until enable()."""
        with capture_spans(enabled=False) as captured:
            with bs.brick("rms_norm"):
                pass
            assert captured.spans == ()

    def test_unconfigured_scopes_are_no_ops(self):
        """Before configure(), scopes and decorators just run the code."""

        @bs.brick("rms_norm")
        def f(x):
            return x + 1

        with bs.step(0), bs.layer(0), bs.kernel("k"):
            assert f(1) == 2
        assert bs.sync() is True
