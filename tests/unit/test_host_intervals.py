# SPDX-License-Identifier: Apache-2.0
"""brickscope's own work on the application thread (overhead spans) and GC pauses (gc
spans): where they are recorded, what they are parented to, and what analysis makes of
them. Every figure is computed from the spans the session emitted."""

from __future__ import annotations

import gc
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import brickscope as bs
from brickscope import analysis
from brickscope.analysis._table import TableBuilder
from brickscope.trace import attributes as A


@pytest.fixture(name="pipeline")
def _pipeline():
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def of_kind(exporter, kind):
    return [s for s in exporter.get_finished_spans() if (s.attributes or {}).get(A.SCOPE_KIND) == kind]


def named(exporter, name):
    return [s for s in exporter.get_finished_spans() if s.name == name]


def host_interval(span):
    start = span.attributes[A.HOST_START_NS]
    return start, start + span.attributes[A.HOST_DURATION_NS]


class TestOverheadSpans:
    def test_one_per_step_end_parented_where_it_ran(self, pipeline):
        """The quickstart's shape: a user span around three steps of one brick each. Each
        step end resolves the brick and the step (2 spans) on this thread: one overhead
        span per step, a child of ``generate``, after its step and inside generate; the
        emission of the overhead span itself is not measured (no fourth)."""
        provider, exporter = pipeline
        session = bs.configure(provider, clock="host", max_delay_millis=60_000, host_intervals=True)
        with provider.get_tracer("t").start_as_current_span("generate"):
            for number in range(3):
                with bs.step(number, tokens=1):
                    with bs.brick("rms_norm"):
                        pass
        stats = session.stats()
        session.shutdown()
        (generate,) = named(exporter, "generate")
        steps = {s.attributes[A.STEP_NUMBER]: s for s in named(exporter, "step")}
        overhead = of_kind(exporter, "overhead")
        assert [s.attributes[A.STEP_NUMBER] for s in overhead] == [0, 1, 2]
        for span in overhead:
            assert span.name == A.OVERHEAD_SPAN_NAME
            assert span.parent.span_id == generate.context.span_id
            assert span.context.trace_id == generate.context.trace_id
            assert span.attributes[A.OVERHEAD_SPANS] == 2
            assert span.attributes[A.CLOCK] == "host"
            assert host_interval(span) == (span.start_time, span.end_time)
            step = steps[span.attributes[A.STEP_NUMBER]]
            assert step.end_time <= span.start_time <= span.end_time <= generate.end_time
        assert stats["overhead_spans"] == 3
        assert stats["overhead_ns_app"] == sum(s.end_time - s.start_time for s in overhead)

    def test_the_report_leaves_it_out_of_the_parent_and_counts_it_in_the_wall(self, pipeline):
        """What a trace file of this run gives: generate's self time is its duration less
        the overhead spans; tokens/s is over each step's start to its resolution's end."""
        provider, exporter = pipeline
        session = bs.configure(provider, clock="host", max_delay_millis=60_000, host_intervals=True)
        with provider.get_tracer("t").start_as_current_span("generate"):
            for number in range(3):
                with bs.step(number, tokens=2):
                    with bs.brick("rms_norm"):
                        pass
        session.sync()  # nothing pending: no overhead span for it
        session.shutdown()
        (generate,) = named(exporter, "generate")
        overhead = of_kind(exporter, "overhead")
        assert len(overhead) == 3
        builder = TableBuilder()
        builder.add_all(exporter.get_finished_spans())
        table = builder.build()
        be = table.backend
        selfs = dict(zip(be.to_list(table["span_id"]), be.to_list(table["self"])))
        overhead_ns = sum(s.end_time - s.start_time for s in overhead)
        assert selfs[generate.context.span_id] == (generate.end_time - generate.start_time) - overhead_ns
        walls = {s.attributes[A.STEP_NUMBER]: (s.start_time, s.end_time) for s in named(exporter, "step")}
        for span in overhead:
            start, _ = walls[span.attributes[A.STEP_NUMBER]]
            walls[span.attributes[A.STEP_NUMBER]] = (start, span.end_time)
        wall_ns = sum(end - start for start, end in walls.values())
        report = analysis.analyse(table)
        assert report.throughput.tokens_per_second == pytest.approx(6 / (wall_ns / 1e9))
        assert (report.host.brickscope_ns, report.host.wall_ns) == (overhead_ns, wall_ns)

    def test_an_enclosing_brick_is_credited_like_a_nested_brick(self, pipeline):
        """bs.sync() inside a brick resolves the brick nested in it there: the overhead span is
        the outer brick's child, and the outer brick's self time leaves both out."""
        provider, exporter = pipeline
        session = bs.configure(provider, clock="host", max_delay_millis=60_000, host_intervals=True)
        with bs.brick("outer"):
            with bs.brick("inner"):
                pass
            bs.sync()
        session.shutdown()
        (outer,), (inner,), (overhead,) = named(exporter, "outer"), named(exporter, "inner"), of_kind(exporter, "overhead")
        assert overhead.parent.span_id == outer.context.span_id
        duration = lambda s: s.end_time - s.start_time  # noqa: E731
        assert outer.attributes[A.BRICK_SELF_DURATION_NS] == duration(outer) - duration(inner) - duration(overhead)
        assert "step" not in [s.name for s in exporter.get_finished_spans()]
        assert A.STEP_NUMBER not in overhead.attributes

    def test_brick_ends_in_immediate_mode_are_the_modes_own_wait(self, pipeline):
        """immediate syncs at every brick end (by design, not counted); the step end is one overhead."""
        provider, exporter = pipeline
        session = bs.configure(provider, clock="host", sync_mode="immediate", host_intervals=True)
        with bs.step(0):
            for _ in range(3):
                with bs.brick("rms_norm"):
                    pass
        session.shutdown()
        (overhead,) = of_kind(exporter, "overhead")
        assert overhead.attributes[A.OVERHEAD_SPANS] == 1  # the step; its bricks went at their ends

    def test_off_records_neither_and_installs_no_gc_callback(self, pipeline):
        provider, exporter = pipeline
        callbacks = len(gc.callbacks)
        session = bs.configure(provider, clock="host", host_intervals=False)
        assert len(gc.callbacks) == callbacks
        with bs.step(0):
            with bs.brick("rms_norm"):
                gc.collect()
        session.shutdown()
        assert of_kind(exporter, "overhead") == [] and of_kind(exporter, "gc") == []
        assert session.stats()["gc_pauses"] == 0

    def test_on_by_default_and_from_the_environment(self, pipeline, monkeypatch):
        provider, exporter = pipeline
        monkeypatch.delenv("BRICKSCOPE_HOST_INTERVALS", raising=False)
        session = bs.configure(provider, clock="host")
        with bs.step(0):
            pass
        session.shutdown()
        assert len(of_kind(exporter, "overhead")) == 1
        monkeypatch.setenv("BRICKSCOPE_HOST_INTERVALS", "maybe")
        with pytest.raises(ValueError, match="BRICKSCOPE_HOST_INTERVALS"):
            bs.configure(provider, clock="host")
        with pytest.raises(TypeError, match="host_intervals"):
            bs.configure(provider, clock="host", host_intervals="yes")


class TestStepThreadCpu:
    def test_a_step_that_sleeps_ran_less_than_its_duration(self, pipeline):
        """A step that sleeps 50 ms: its thread's CPU time is on the span, and below the step's
        duration (sleeping takes no CPU; a loaded machine only lengthens the wall time)."""
        provider, exporter = pipeline
        session = bs.configure(provider, clock="host", host_intervals=True)
        for number in range(2):
            with bs.step(number):
                with bs.brick("sleep"):
                    time.sleep(0.05)
        session.shutdown()
        steps = named(exporter, "step")
        assert len(steps) == 2
        for step in steps:
            cpu = step.attributes[A.STEP_THREAD_CPU_NS]
            assert type(cpu) is int and 0 <= cpu < step.attributes[A.HOST_DURATION_NS]

    def test_not_measured_with_host_intervals_off(self, pipeline):
        provider, exporter = pipeline
        session = bs.configure(provider, clock="host", host_intervals=False)
        with bs.step(0):
            pass
        session.shutdown()
        (step,) = named(exporter, "step")
        assert A.STEP_THREAD_CPU_NS not in step.attributes


class TestGcPauses:
    def test_a_collection_inside_a_step_is_a_gc_span_inside_its_scope(self, pipeline):
        provider, exporter = pipeline
        callbacks = len(gc.callbacks)
        session = bs.configure(provider, clock="host", host_intervals=True)
        assert len(gc.callbacks) == callbacks + 1
        with bs.step(4):
            with bs.brick("lm_head"):
                gc.collect()
        stats = session.stats()
        session.shutdown()
        assert len(gc.callbacks) == callbacks  # removed at shutdown
        (brick,) = named(exporter, "lm_head")
        pauses = of_kind(exporter, "gc")
        full = [p for p in pauses if p.parent.span_id == brick.context.span_id and p.attributes[A.GC_GENERATION] == 2]
        assert len(full) == 1
        (pause,) = full
        assert pause.name == A.GC_SPAN_NAME and pause.attributes[A.STEP_NUMBER] == 4
        assert brick.start_time <= pause.start_time <= pause.end_time <= brick.end_time
        by_id = {s.context.span_id: s for s in exporter.get_finished_spans()}
        for other in pauses:  # automatic collections too: each inside the scope it interrupted
            parent = by_id[other.parent.span_id]
            assert parent.start_time <= other.start_time <= other.end_time <= parent.end_time
        assert stats["gc_pauses"] >= len(pauses) and stats["gc_pause_ns"] >= pause.end_time - pause.start_time

    def test_outside_any_scope_it_is_counted_not_recorded(self, pipeline):
        provider, exporter = pipeline
        session = bs.configure(provider, clock="host", host_intervals=True)
        before = session.stats()["gc_pauses"]
        gc.collect()
        assert session.stats()["gc_pauses"] >= before + 1
        session.shutdown()
        assert of_kind(exporter, "gc") == []
