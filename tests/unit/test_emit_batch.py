# SPDX-License-Identifier: Apache-2.0
"""Resolved spans go downstream a batch at a time (sdk/trace/_sdk.py ``Downstream.emit_batch``):
every processor still sees every span, in order; the SDK's BatchSpanProcessor gets its queue
extended at once only when the batch fits, and its own ``emit`` otherwise (so it logs, counts
and drops as it always does); the CategoryAggregator folds a batch as it folds spans one by one;
and the C span maker (``brickscope._hotpath.SpanMaker``) builds what the Python builder builds."""

from __future__ import annotations

import gc
import random
import threading
import weakref

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

import brickscope as bs
from brickscope.sdk import _otel_internals
from brickscope.sdk.trace import _aggregation, _spans
from brickscope.sdk.trace._aggregation import CategoryAggregator
from brickscope.testing import SequentialIdGenerator, reset_globals
from brickscope.trace import attributes as A


@pytest.fixture(autouse=True)
def _reset():
    yield
    reset_globals()


def _bricks(count: int) -> None:
    with bs.step(0):
        with bs.layer(0):
            for index in range(count):
                with bs.brick("rms_norm" if index % 2 else "ffn_up", elements=index):
                    pass


class Recording(SpanProcessor):
    """Records the names of the spans it is handed, in order."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.names.append(span.name)


class BlockedExporter(SpanExporter):
    """Holds the BatchSpanProcessor's worker in export until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.exported: list[str] = []

    def export(self, spans):
        self.release.wait(10)
        self.exported.extend(span.name for span in spans)
        return SpanExportResult.SUCCESS


class TestEmitBatch:
    def test_every_processor_sees_every_span_in_order(self):
        """An SDK BatchSpanProcessor (batch path), a plain processor (on_end per span) and a
        subclass of BatchSpanProcessor overriding on_end (per span) all get the same spans,
        in the order they were resolved, and the aggregator counts them all."""
        provider = TracerProvider()
        exporter = InMemorySpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=4096))
        plain = Recording()
        provider.add_span_processor(plain)

        class Overriding(BatchSpanProcessor):
            def __init__(self) -> None:
                super().__init__(InMemorySpanExporter(), max_queue_size=4096)
                self.names: list[str] = []

            def on_end(self, span: ReadableSpan) -> None:
                self.names.append(span.name)
                super().on_end(span)

        overriding = Overriding()
        provider.add_span_processor(overriding)
        session = bs.configure(provider, clock="host")
        _bricks(300)  # more than one batch of 128
        bs.sync()
        provider.force_flush()
        exported = [span.name for span in exporter.get_finished_spans()]
        assert len(exported) == 302 and exported[-2:] == ["layer", "step"]
        assert exported == plain.names == overriding.names
        assert exported[:3] == ["ffn_up", "rms_norm", "ffn_up"]
        assert session.aggregator.bricks["rms_norm"].count == 150
        assert session.aggregator.bricks["ffn_up"].count == 150
        assert session.stats()["spans_emitted"] == 302
        session.shutdown()

    def test_a_full_batch_queue_drops_as_the_sdk_does_and_the_books_say_so(self):
        """A batch that does not fit the SDK queue goes through its own emit, span by span:
        the queue keeps its newest spans and the delivery books count the rest as dropped."""
        provider = TracerProvider()
        exporter = BlockedExporter()
        batch = BatchSpanProcessor(exporter, max_queue_size=64, max_export_batch_size=16, schedule_delay_millis=1)
        provider.add_span_processor(batch)
        session = bs.configure(provider, clock="host")
        _bricks(300)
        bs.sync()
        exporter.release.set()
        session.shutdown()
        stats = session.stats()
        assert stats["spans_produced"] == 302
        assert stats["spans_exported"] + stats["spans_dropped"] == 302
        assert stats["spans_dropped"] > 0
        assert len(exporter.exported) == stats["spans_exported"]

    def test_a_processor_that_fails_misses_no_other_span_and_is_counted_per_span(self):
        """A processor raising on some spans is isolated span by span: it still sees the rest,
        the processors after it see everything, and each failure is counted."""

        class Failing(Recording):
            def on_end(self, span: ReadableSpan) -> None:
                super().on_end(span)
                if span.name == "rms_norm":
                    raise RuntimeError("injected")

        provider = TracerProvider()
        failing, after = Failing(), Recording()
        provider.add_span_processor(failing)
        provider.add_span_processor(after)
        session = bs.configure(provider, clock="host")
        _bricks(200)
        bs.sync()
        assert failing.names == after.names and len(after.names) == 202
        assert session.stats()["processor_errors"] == 100
        session.shutdown()

    def test_a_shut_down_batch_processor_gets_spans_through_its_own_emit(self):
        """After the BatchSpanProcessor is shut down, spans go through its emit (which
        refuses and counts them), never straight into its queue."""
        provider = TracerProvider()
        exporter = InMemorySpanExporter()
        batch = BatchSpanProcessor(exporter)
        provider.add_span_processor(batch)
        session = bs.configure(provider, clock="host")
        batch.shutdown()
        _bricks(10)
        bs.sync()
        assert len(batch._batch_processor._queue) == 0
        assert exporter.get_finished_spans() == ()
        session.shutdown()

    def test_the_batch_path_is_only_taken_for_the_sdk_queue(self):
        """_sdk_batch_queue finds the SDK's own queue, and nothing for a processor whose on_end
        or whose queue's emit is not the SDK's."""
        plain = BatchSpanProcessor(InMemorySpanExporter())
        assert _otel_internals.sdk_batch_queue(plain) is plain._batch_processor

        class Overriding(BatchSpanProcessor):
            def on_end(self, span: ReadableSpan) -> None:
                super().on_end(span)

        assert _otel_internals.sdk_batch_queue(Overriding(InMemorySpanExporter())) is None
        assert _otel_internals.sdk_batch_queue(SimpleSpanProcessor(InMemorySpanExporter())) is None
        plain.shutdown()


def _spans_of(build: str, ids: str, seed: int = 7) -> list[tuple]:
    """The spans of one small program, built by the C maker or the Python builder."""
    random.seed(seed)
    generator = RandomIdGenerator() if ids == "random" else SequentialIdGenerator()
    provider = TracerProvider(id_generator=generator)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    session = bs.configure(provider, clock="host")
    builder = session.sync_processor._resolver._builder
    if build == "python":
        builder._fast = builder.drain = None
    else:
        assert builder._fast is not None
    bs.register_kernel_source("gemm_kernel", "__global__ void gemm() {}")  # the kernel source hash attribute
    with bs.step(3):
        for layer in range(2):
            with bs.layer(layer):
                with bs.brick("rms_norm", elements=4096, heads=8):
                    with bs.kernel("gemm_kernel", grid=(4, 1), block=128):
                        pass
                with bs.brick("attention_score", category="attention"):
                    with bs.brick("attention_softmax"):
                        pass
                with bs.brick("noted"):
                    bs.event("eos", token=1)  # notes: the Python builder either way
    bs.sync()
    session.shutdown()
    out = []
    for span in exporter.get_finished_spans():
        attributes = {
            k: v for k, v in span.attributes.items()
            if k not in (A.HOST_START_NS, A.HOST_DURATION_NS, A.BRICK_SELF_DURATION_NS)  # the real clock
        }  # fmt: skip
        parent = None if span.parent is None else (span.parent.trace_id, span.parent.span_id, span.parent.trace_flags)
        out.append((
            span.name, span.context.trace_id, span.context.span_id, span.context.trace_flags,
            span.context.is_remote, span.context.trace_state, parent, span.kind, span.status.status_code,
            span.instrumentation_scope, span.resource, list(attributes.items()), len(span.events), span.links,
            span.end_time >= span.start_time, span.dropped_attributes, span.dropped_events,
        ))  # fmt: skip
        # every span (C-built or not) keeps ReadableSpan's fields in slots, none in a dict
        assert type(span) is _spans.SPAN_TYPE is _otel_internals.SlottedReadableSpan
        assert vars(span) == {}
        assert all(hasattr(span, field) for field in _otel_internals.READABLE_SPAN_FIELDS)
        assert span.to_json()  # what the console exporter reads
    reset_globals()
    return out


@pytest.mark.skipif(not _spans._MAKER_USABLE, reason="the C span maker is not in use (pure Python, or an unexpected SDK)")
class TestSpanMaker:
    @pytest.mark.parametrize("ids", ["random", "sequential"])
    def test_the_c_maker_builds_what_the_python_builder_builds(self, ids):
        """Same program, same seed: the same spans field by field (ids, parents, flags, kind,
        status, scope, resource, attributes in their order, events), random ids drawn in C
        included; a record with notes still goes to the Python builder."""
        native, python = _spans_of("c", ids), _spans_of("python", ids)
        assert [s[0] for s in native].count("noted") == 2
        assert native == python

    def test_c_built_spans_are_left_to_reference_counting(self):
        """A span the C maker builds is not walked by the cyclic GC (nothing it holds can refer
        back to it) and is freed as soon as the last holder lets go of it, without a collection."""
        provider = TracerProvider()
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        session = bs.configure(provider, clock="host")
        with bs.step(0), bs.brick("rms_norm", elements=4, path="model.norm"):
            pass
        bs.sync()
        spans = {s.name: s for s in exporter.get_finished_spans()}
        assert not gc.is_tracked(spans["rms_norm"]) and not gc.is_tracked(spans["step"])
        freed = weakref.ref(spans["rms_norm"])
        gc.disable()  # no collection may free it
        try:
            exporter.clear()
            spans.clear()
            assert freed() is None
        finally:
            gc.enable()
        session.shutdown()
        reset_globals()

    def test_self_time_is_credited_as_in_python(self):
        """Nested bricks: the outer brick's self time is its duration minus the inner one's,
        with the C maker as with the Python builder."""
        for build in ("c", "python"):
            provider = TracerProvider()
            exporter = InMemorySpanExporter()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            session = bs.configure(provider, clock="host")
            if build == "python":
                builder = session.sync_processor._resolver._builder
                builder._fast = builder.drain = None
            with bs.brick("outer"):
                with bs.brick("inner"):
                    pass
            bs.sync()
            spans = {s.name: s for s in exporter.get_finished_spans()}
            outer, inner = spans["outer"], spans["inner"]
            inner_ns = inner.end_time - inner.start_time
            assert inner.attributes[A.BRICK_SELF_DURATION_NS] == inner_ns
            assert outer.attributes[A.BRICK_SELF_DURATION_NS] == outer.end_time - outer.start_time - inner_ns
            session.shutdown()
            reset_globals()


class TestFoldBatch:
    def _spans(self) -> tuple[list, list]:
        provider = TracerProvider()
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        session = bs.configure(provider, clock="host", aggregate=False)
        _bricks(40)
        with bs.brick("other_kind", category="custom"):
            pass
        bs.sync()
        session.shutdown()
        spans = list(exporter.get_finished_spans())
        return spans, [dict(span.attributes) for span in spans]

    def test_c_sums_equal_the_python_sums(self):
        """brickscope._hotpath.fold_sums gives the reference loop's sums and histogram values."""
        if _aggregation._fold_sums is None:
            pytest.skip("pure Python: no C fold")
        spans, attributes = self._spans()
        c_sums, c_values, py_sums, py_values = {}, [], {}, []
        assert _aggregation._fold_sums(spans, attributes, _aggregation._SUM_KEYS, c_sums, c_values)
        CategoryAggregator()._fold_sums(spans, attributes, py_sums, py_values)
        assert c_sums == py_sums and c_values == py_values
        assert c_sums[("rms_norm", "norm")][0] == 20

    def test_unusual_attributes_go_to_the_python_loop(self):
        """A batch with a brick the C fold does not read (no brick name, a float self time,
        a mapping that is not a dict) is left whole to the Python loop, which folds it."""
        if _aggregation._fold_sums is None:
            pytest.skip("pure Python: no C fold")
        spans, attributes = self._spans()
        for change in (
            lambda a: a.pop(A.BRICK_NAME),
            lambda a: a.__setitem__(A.BRICK_SELF_DURATION_NS, 1.5),
        ):
            attrs = [dict(a) for a in attributes]
            change(attrs[0])
            sums: dict = {}
            assert not _aggregation._fold_sums(spans, attrs, _aggregation._SUM_KEYS, sums, None)
            assert sums == {}
        assert not _aggregation._fold_sums(spans, [a.items() for a in attributes], _aggregation._SUM_KEYS, {}, None)

    def test_a_batch_folds_as_spans_one_by_one(self):
        """fold_batch and fold give the same report table, totals and brick figures."""
        spans, attributes = self._spans()
        one, batch = CategoryAggregator(), CategoryAggregator()
        for span, attrs in zip(spans, attributes):
            one.fold(span, attrs)
        rows = [
            (s.name, s.start_time, s.end_time, s.context.span_id, s.parent.span_id if s.parent else 0, s.resource, a)
            for s, a in zip(spans, attributes)
        ]
        batch.fold_batch(spans, attributes, rows)
        assert one.bricks == batch.bricks and one.categories == batch.categories
        assert one.report("json") == batch.report("json")
        assert one.errors == batch.errors == 0

    def test_rows_a_batch_keeps_are_in_every_read_of_the_table_in_order(self):
        """fold_batch keeps rows for the table a few thousand at a time: a table read, a span
        folded one by one, the drop count and reset all see them, in the order folded."""
        spans, attributes = self._spans()
        rows = [
            (s.name, s.start_time, s.end_time, s.context.span_id, s.parent.span_id if s.parent else 0, s.resource, a)
            for s, a in zip(spans, attributes)
        ]
        aggregator = CategoryAggregator()
        aggregator.fold_batch(spans[:10], attributes[:10], rows[:10])
        aggregator.fold(spans[10], attributes[10])
        aggregator.fold_batch(spans[11:], attributes[11:], rows[11:])
        table = aggregator.table(backend="python")
        assert table.rows == len(spans)
        assert list(table["span_id"]) == [s.context.span_id for s in spans]
        assert aggregator.dropped == 0
        bounded = CategoryAggregator(max_spans=5)
        bounded.fold_batch(spans, attributes, rows)
        assert bounded.dropped == len(spans) - 5
        aggregator.fold_batch(spans, attributes, rows)
        aggregator.reset()
        assert aggregator.table(backend="python").rows == 0
