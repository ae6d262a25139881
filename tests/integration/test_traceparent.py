# SPDX-License-Identifier: Apache-2.0
"""Many ranks, one trace: the trace context travels to launched processes in TRACEPARENT."""

from __future__ import annotations

import os
from typing import Any

import pytest
from harness import otlp_env
from opentelemetry import baggage, trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

import brickscope as bs
from brickscope.propagation import context_from_environment, environment_variable_name, inject_into_environment
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A

STEPS, LAYERS = 2, 1
SPANS_PER_STEP = 1 + LAYERS * 7
TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331
TRACEPARENT = f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01"


def remote_context(trace_state: TraceState | None = None) -> Any:
    span = NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, True, TraceFlags(1), trace_state or TraceState()))
    return trace.set_span_in_context(span)


class TestTwoProcesses:
    def test_child_rank_joins_the_parents_step(self, app, grpc_receiver):
        """Rank 0 starts rank 1 inside its step 0: both ranks' spans form one trace at the receiver."""
        result = app.run(
            otlp_env(grpc_receiver, RANK="0", LOCAL_RANK="0", WORLD_SIZE="2"),
            "--steps", str(STEPS), "--layers", str(LAYERS), "--spawn-child",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.report["child_returncode"] == 0
        parent_spans = 1 + 1 + (STEPS - 1) * SPANS_PER_STEP  # generate, the spawning step, the others
        child_spans = STEPS * SPANS_PER_STEP
        assert grpc_receiver.wait_for(lambda r: len(r.spans()) >= parent_spans + child_spans, timeout_s=60)
        spans = grpc_receiver.spans()
        assert {s.trace_id for s in spans} == {result.report["trace_id"]}
        by_rank = {rank: [s for s in spans if s.resource[A.RANK] == rank] for rank in (0, 1)}
        assert (len(by_rank[0]), len(by_rank[1])) == (parent_spans, child_spans)
        child_steps = [s for s in by_rank[1] if s.name == "step"]
        assert {s.parent_span_id for s in child_steps} == {result.report["steps"][0]}
        assert {s.resource[A.WORLD_SIZE] for s in spans} == {2}

    def test_ranks_of_a_launcher_join_its_trace(self, app, grpc_receiver):
        """Two ranks started with the launcher's TRACEPARENT put their steps under the launcher's span."""
        for rank in ("0", "1"):
            result = app.run(
                otlp_env(grpc_receiver, TRACEPARENT=TRACEPARENT, RANK=rank, WORLD_SIZE="2"),
                "--steps", str(STEPS), "--layers", str(LAYERS), "--no-generate-span",
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
        assert grpc_receiver.wait_for(lambda r: len(r.spans()) >= 2 * STEPS * SPANS_PER_STEP, timeout_s=60)
        spans = grpc_receiver.spans()
        assert {s.trace_id for s in spans} == {f"{TRACE_ID:032x}"}
        steps = [s for s in spans if s.name == "step"]
        assert len(steps) == 2 * STEPS
        assert {s.parent_span_id for s in steps} == {f"{SPAN_ID:016x}"}
        assert sorted(s.resource[A.RANK] for s in steps) == [0, 0, 1, 1]


class TestEnvironmentCarrier:
    def test_variable_names_follow_the_specification(self):
        """Fields become upper case with non-alphanumerics as underscores and no leading digit."""
        assert environment_variable_name("traceparent") == "TRACEPARENT"
        assert environment_variable_name("x-b3-traceid") == "X_B3_TRACEID"
        assert environment_variable_name("1field") == "_1FIELD"

    def test_round_trip(self):
        """What inject writes, extract reads back: span context, trace state and baggage."""
        context = baggage.set_baggage("model", "llama", remote_context(TraceState([("vendor", "x")])))
        env = inject_into_environment({}, context)
        assert env["TRACEPARENT"] == TRACEPARENT
        extracted = context_from_environment(env)
        span_context = trace.get_current_span(extracted).get_span_context()
        assert (span_context.trace_id, span_context.span_id, span_context.is_remote) == (TRACE_ID, SPAN_ID, True)
        assert span_context.trace_state.get("vendor") == "x"
        assert baggage.get_baggage("model", extracted) == "llama"

    def test_inject_replaces_inherited_fields(self):
        """A TRACESTATE or BAGGAGE inherited from the parent's own launcher does not travel with a new span."""
        env = inject_into_environment({"TRACESTATE": "old=1", "BAGGAGE": "old=1", "HOME": "/x"}, remote_context())
        assert env == {"TRACEPARENT": TRACEPARENT, "HOME": "/x"}

    def test_no_span_no_traceparent(self):
        """Without a span in the context the child gets no TRACEPARENT."""
        assert "TRACEPARENT" not in inject_into_environment({"TRACEPARENT": TRACEPARENT}, Context())

    def test_default_environment_is_a_copy(self, monkeypatch):
        """With no mapping given, inject returns a new dict and leaves os.environ alone."""
        monkeypatch.setenv("BRICKSCOPE_MARKER", "1")
        env = inject_into_environment(context=remote_context())
        assert env["BRICKSCOPE_MARKER"] == "1" and env["TRACEPARENT"] == TRACEPARENT
        assert "TRACEPARENT" not in os.environ

    def test_malformed_traceparent_is_ignored(self):
        """A malformed TRACEPARENT yields a context without a span, as a bad header would."""
        extracted = context_from_environment({"TRACEPARENT": "00-nothex-01"})
        assert not trace.get_current_span(extracted).get_span_context().is_valid

    def test_inject_inside_a_step_names_the_step(self):
        """Inside an open step, TRACEPARENT carries the step span's id."""
        with capture_spans() as captured:
            with bs.step(0):
                env = inject_into_environment({})
            (step,) = captured.by_name("step")
        assert env["TRACEPARENT"] == f"00-{step.context.trace_id:032x}-{step.context.span_id:016x}-01"


class TestConfigureAttaches:
    def test_scopes_become_children_of_traceparent(self, monkeypatch):
        """With TRACEPARENT set, configure() makes it the parent of the outermost scopes."""
        monkeypatch.setenv("TRACEPARENT", TRACEPARENT)
        with capture_spans() as captured:
            with bs.step(0), bs.brick("rms_norm"):
                pass
            (step,) = captured.by_name("step")
        assert step.context.trace_id == TRACE_ID
        assert step.parent is not None and step.parent.span_id == SPAN_ID and step.parent.is_remote

    def test_shutdown_detaches(self, monkeypatch):
        """After the session shuts down, TRACEPARENT is no longer the current parent."""
        monkeypatch.setenv("TRACEPARENT", TRACEPARENT)
        session = bs.configure(TracerProvider(), clock="host")
        assert trace.get_current_span().get_span_context().span_id == SPAN_ID
        session.shutdown()
        assert not trace.get_current_span().get_span_context().is_valid

    def test_the_applications_span_wins(self, monkeypatch):
        """configure() inside an application span leaves that span the parent."""
        monkeypatch.setenv("TRACEPARENT", TRACEPARENT)
        provider = TracerProvider()
        with provider.get_tracer("app").start_as_current_span("request") as request:
            with capture_spans(provider) as captured:
                with bs.step(0):
                    pass
                (step,) = captured.by_name("step")
        assert step.parent.span_id == request.get_span_context().span_id

    @pytest.mark.parametrize("value", ["", "garbage", "00-" + "0" * 32 + "-" + "1" * 16 + "-01"])
    def test_no_valid_traceparent_attaches_nothing(self, monkeypatch, value):
        """An empty, malformed or all-zero TRACEPARENT leaves scopes as roots of their own traces."""
        monkeypatch.setenv("TRACEPARENT", value)
        with capture_spans() as captured:
            with bs.step(0):
                pass
            (step,) = captured.by_name("step")
        assert step.parent is None
