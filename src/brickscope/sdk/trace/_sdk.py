# SPDX-License-Identifier: Apache-2.0
"""Handing resolved spans to the provider's processors, a batch at a time.

Resolved spans are handed to the provider's processors directly (the SDK has no
public way to end a span it did not start), a batch at a time (the SDK's own
BatchSpanProcessor queue takes a batch in one step, under its own rules), and batch
processors' queues are watched so a sync point does not overflow them. Every private
SDK attribute this needs is read through :mod:`brickscope.sdk._otel_internals`.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from brickscope.sdk import _otel_internals
from brickscope.sdk._otel_internals import batch_queues, enqueue, provider_processors, sdk_batch_queue
from brickscope.sdk.trace._aggregation import CategoryAggregator
from brickscope.sdk.trace._counters import Counters

OTHER, AGGREGATOR, SIMPLE, BATCH = 0, 1, 2, 3


def _kind(processor: SpanProcessor) -> tuple[SpanProcessor, int, Any]:
    """(processor, kind, the delivery account of an export pipeline or None)."""
    if isinstance(processor, CategoryAggregator):
        return processor, AGGREGATOR, None
    if isinstance(processor, SimpleSpanProcessor):
        exporter = processor.span_exporter
        if getattr(exporter, "counts_deliveries", False) is True:
            return processor, SIMPLE, exporter.account
    exporter = _otel_internals.batch_exporter(processor)
    if exporter is not None and getattr(exporter, "counts_deliveries", False) is True:
        return processor, BATCH, exporter.account
    return processor, OTHER, None


class Downstream:
    """The provider's processors after brickscope's: resolved spans go to each of them."""

    def __init__(self, provider: TracerProvider, own: SpanProcessor, counters: Counters) -> None:
        _otel_internals.require_span_processors(provider)  # setup raises: no public way to reach them
        self._provider = provider
        self._own = own
        self._counters = counters
        self._counts = counters.values

    def processors(self) -> tuple[tuple[SpanProcessor, int, Any], ...]:
        """The provider's processors other than ours, in order, each with its kind
        (:data:`OTHER`, :data:`AGGREGATOR`, fed through its ``fold`` fast path, or an
        export pipeline whose exporter counts deliveries: :data:`SIMPLE`, :data:`BATCH`,
        with the batch queue). Look up once per batch of spans."""
        own = self._own
        return tuple(_kind(p) for p in provider_processors(self._provider) if p is not own)

    def emit_batch(self, spans: list, attributes: list, rows: list, processors: tuple) -> None:
        """Hand a batch of ended spans (in order) to every downstream processor, isolating
        their faults. Export pipelines count the spans handed to them (see ``_delivery``).

        A CategoryAggregator gets the attributes dicts we just built along with the spans
        (no read-only view, no lookups through one) and folds the batch at once (:meth:`CategoryAggregator.fold_batch`:
        the table takes the rows under one lock, the totals one merge); the SDK's own
        BatchSpanProcessor gets the batch appended to its queue at once when it all fits
        (:func:`~brickscope.sdk._otel_internals.enqueue`), which is what its ``on_end`` does span by span; any other
        processor gets ``on_end`` per span.
        """
        count = len(spans)
        for processor, kind, account in processors:
            if kind == AGGREGATOR:
                try:
                    processor.fold_batch(spans, attributes, rows)
                except Exception:
                    self._processor_failed(processor)
                continue
            if kind and not account.closed:
                account.handed += count
            batch = sdk_batch_queue(processor)
            if batch is not None:
                try:
                    if enqueue(batch, spans):
                        continue
                except Exception:
                    self._processor_failed(processor)
                    continue
            on_end = processor.on_end
            for span in spans:
                try:
                    on_end(span)
                except Exception:  # opentelemetry-python#5624: never let one reach the app
                    self._processor_failed(processor)

    def _processor_failed(self, processor: SpanProcessor) -> None:
        self._counts["processor_errors"] += 1
        self._counters.log_once(f"on_end:{type(processor).__name__}", "brickscope: a span processor failed")

    def fold_unsampled(self, sums: dict, values: list, processors: tuple) -> None:
        """End of a resolution batch: the unsampled bricks' sums (and, for a histogram of
        every brick, their values; see ``_unsampled``) go to every CategoryAggregator
        downstream, in one call each; other processors see nothing of them."""
        if not sums and not values:
            return
        for processor, kind, _ in processors:
            if kind == AGGREGATOR:
                try:
                    processor.fold_unsampled(sums, values)
                except Exception:
                    self._counts["processor_errors"] += 1
                    self._counters.log_once("fold_unsampled", "brickscope: a span processor failed")

    def batch_queues(self) -> list[Any]:
        return batch_queues(self._provider)

    def pace(self, queues: list[Any], deadline: float) -> bool:
        """Let BatchSpanProcessors drain before their queues overflow (they drop when full).

        A sync point can release thousands of spans at once; the SDK's default queue
        holds 2048. When a queue is three-quarters full, wake its worker and wait
        until it is half empty, but never past ``deadline``. Returns False when that
        budget ran out: the exporter is stuck (a receiver gone), and the caller stops
        pacing for a while, so the application is never held up for long; the
        BatchSpanProcessor's own drop counter says what it shed. Waits are counted
        in ``pacing_waits``.
        """
        for batch in queues:
            queued, capacity = _otel_internals.queue_fill(batch)
            if queued * 4 < capacity * 3:
                continue
            self._counts["pacing_waits"] += 1
            _otel_internals.wake_worker(batch)
            while _otel_internals.queue_fill(batch)[0] * 2 > capacity:
                if time.monotonic() >= deadline:
                    self._counts["pacing_timeouts"] += 1
                    return False
                time.sleep(0.0005)
        return True

