# SPDX-License-Identifier: Apache-2.0
"""Delivery accounting: what becomes of the spans brickscope hands to export pipelines.

An export pipeline is an SDK ``SimpleSpanProcessor`` or ``BatchSpanProcessor`` on the
session's provider. configure() wraps each one's exporter in a :class:`CountingExporter`,
which counts brickscope's spans (not the application's own) as they are exported or
fail. Together with what the resolver sees when it hands a span over (a full batch
queue, a processor already shut down) and what is left when a shutdown deadline
passes, every span produced for a pipeline ends up counted exactly once:

    spans_produced == spans_exported + spans_dropped   (once the session is shut down)

Counts are per pipeline: a span sent to two exporters is produced twice.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult

from brickscope.trace._counters import Counters
from brickscope.trace._sdk import provider_processors
from brickscope.trace._spans import INSTRUMENTATION_SCOPE


def ours(spans: Sequence[ReadableSpan]) -> int:
    """How many of ``spans`` brickscope made."""
    return sum(1 for span in spans if span.instrumentation_scope is INSTRUMENTATION_SCOPE)


class CountingExporter(SpanExporter):
    """Wraps an exporter: counts brickscope's spans exported, failed, and in flight."""

    counts_deliveries = True  # how the resolver tells a counted pipeline (see _sdk)

    def __init__(self, inner: SpanExporter, counters: Counters) -> None:
        self.inner = inner
        self.counters = counters
        self._lock = threading.Lock()
        self._in_flight = 0
        self._settled = False  # after a shutdown deadline: late results are not counted again

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        count = ours(spans)
        with self._lock:
            self._in_flight += count
        result = SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        finally:
            with self._lock:
                self._in_flight -= count
                if count and not self._settled:
                    if result == SpanExportResult.SUCCESS:
                        self.counters.add("spans_exported", count)
                    else:
                        self.counters.add("spans_dropped", count)
                        self.counters.add("dropped_export_failed", count)
        return result

    def settle(self) -> int:
        """The spans still being exported, counted dropped now (a deadline passed)."""
        with self._lock:
            self._settled = True
            left, self._in_flight = self._in_flight, 0
        return left

    def shutdown(self, timeout_millis: float = 30000, **kwargs: Any) -> None:
        if "timeout_millis" in inspect.getfullargspec(self.inner.shutdown).args:
            self.inner.shutdown(timeout_millis=timeout_millis)
        else:
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def wrap_exporters(provider: TracerProvider, counters: Counters) -> None:
    """Count what each export pipeline on ``provider`` delivers, into ``counters``
    (an exporter wrapped for an earlier session is pointed at the new one)."""
    for processor in provider_processors(provider):
        if isinstance(processor, SimpleSpanProcessor):
            processor.span_exporter = _counting(processor.span_exporter, counters)
        elif isinstance(processor, BatchSpanProcessor) and hasattr(processor, "_batch_processor"):
            batch = processor._batch_processor  # noqa: SLF001 - the exporter has no setter
            batch._exporter = _counting(batch._exporter, counters)  # noqa: SLF001


def _counting(exporter: SpanExporter, counters: Counters) -> CountingExporter:
    if isinstance(exporter, CountingExporter):
        exporter.counters = counters
        exporter._settled = False  # noqa: SLF001 - a new session counts afresh
        return exporter
    return CountingExporter(exporter, counters)


def settle(provider: TracerProvider, counters: Counters) -> int:
    """At a shutdown deadline: brickscope's spans still queued or being exported in the
    provider's pipelines are counted dropped (``dropped_at_shutdown``); returns how many."""
    left = 0
    for processor in provider_processors(provider):
        exporter = None
        if isinstance(processor, SimpleSpanProcessor):
            exporter = processor.span_exporter
        elif isinstance(processor, BatchSpanProcessor) and hasattr(processor, "_batch_processor"):
            batch = processor._batch_processor  # noqa: SLF001
            exporter = batch._exporter  # noqa: SLF001
            if isinstance(exporter, CountingExporter) and exporter.counters is counters:
                left += ours(list(batch._queue))  # noqa: SLF001 - settled: a late export is not counted
        if isinstance(exporter, CountingExporter) and exporter.counters is counters:
            left += exporter.settle()
    if left:
        counters.add("spans_dropped", left)
        counters.add("dropped_at_shutdown", left)
    return left
