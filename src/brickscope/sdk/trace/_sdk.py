# SPDX-License-Identifier: Apache-2.0
"""What brickscope needs from the OTel SDK beyond its public API, in one place.

Resolved spans are handed to the provider's processors directly (the SDK has no
public way to end a span it did not start), a batch at a time (the SDK's own
BatchSpanProcessor queue takes a batch in one step, under its own rules), batch
processors' queues are watched so a sync point does not overflow them, and a static
sampler's decision is read once instead of asked per root scope. Every private SDK
attribute brickscope reads is read here, except two it must read where they are used:
the fields ``ReadableSpan.__init__`` stores (``_spans``, checked on a probe span) and
whether the metrics API's proxy histogram has an SDK behind it (``_aggregation``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, StaticSampler

from brickscope.sdk.trace._aggregation import CategoryAggregator
from brickscope.sdk.trace._counters import Counters

try:  # the SDK's queue behind BatchSpanProcessor (1.34+); older SDKs: spans go one by one
    from opentelemetry.sdk._shared_internal import BatchProcessor as _SdkBatchProcessor
except ImportError:  # pragma: no cover - depends on the SDK version
    _SdkBatchProcessor = None

_QUEUE_FIELDS = ("_queue", "_max_queue_size", "_max_export_batch_size", "_worker_awaken", "_shutdown", "_pid")


def provider_processors(provider: TracerProvider) -> tuple:
    """The provider's processors in order (the SDK keeps them in a private tuple)."""
    return provider._active_span_processor._span_processors  # noqa: SLF001


def batch_queues(provider: TracerProvider) -> list[Any]:
    """The SDK batch processors (their private BatchProcessor) among the provider's processors."""
    return [
        processor._batch_processor  # noqa: SLF001 - the queue has no public view
        for processor in provider_processors(provider)
        if isinstance(processor, BatchSpanProcessor) and hasattr(processor, "_batch_processor")
    ]


def static_root_decision(sampler: Any) -> bool | None:
    """The decision for a root span when the sampler's answer cannot depend on the span."""
    if isinstance(sampler, ParentBased):
        sampler = sampler._root  # noqa: SLF001
    if isinstance(sampler, StaticSampler):
        return sampler._decision == Decision.RECORD_AND_SAMPLE  # noqa: SLF001
    return None


OTHER, AGGREGATOR, SIMPLE, BATCH = 0, 1, 2, 3


def _kind(processor: SpanProcessor) -> tuple[SpanProcessor, int, Any]:
    """(processor, kind, the delivery account of an export pipeline or None)."""
    if isinstance(processor, CategoryAggregator):
        return processor, AGGREGATOR, None
    if isinstance(processor, SimpleSpanProcessor):
        exporter = processor.span_exporter
        if getattr(exporter, "counts_deliveries", False) is True:
            return processor, SIMPLE, exporter.account
    if isinstance(processor, BatchSpanProcessor) and hasattr(processor, "_batch_processor"):
        exporter = processor._batch_processor._exporter  # noqa: SLF001
        if getattr(exporter, "counts_deliveries", False) is True:
            return processor, BATCH, exporter.account
    return processor, OTHER, None


class Downstream:
    """The provider's processors after brickscope's: resolved spans go to each of them."""

    def __init__(self, provider: TracerProvider, own: SpanProcessor, counters: Counters) -> None:
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
        (:func:`_enqueue`), which is what its ``on_end`` does span by span; any other
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
            batch = _sdk_batch_queue(processor)
            if batch is not None:
                try:
                    if _enqueue(batch, spans):
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
            queue, capacity = batch._queue, batch._max_queue_size  # noqa: SLF001
            if len(queue) * 4 < capacity * 3:
                continue
            self._counts["pacing_waits"] += 1
            batch._worker_awaken.set()  # noqa: SLF001
            while len(queue) * 2 > capacity:
                if time.monotonic() >= deadline:
                    self._counts["pacing_timeouts"] += 1
                    return False
                time.sleep(0.0005)
        return True


def _sdk_batch_queue(processor: SpanProcessor) -> Any:
    """The SDK's BatchProcessor behind ``processor`` when its ``on_end`` is the SDK
    BatchSpanProcessor's (sampled spans go to ``emit``) and the queue is the SDK's own
    (``emit`` not overridden, every field :func:`_enqueue` reads there); else None."""
    if _SdkBatchProcessor is None or type(processor).on_end is not BatchSpanProcessor.on_end:
        return None
    batch = getattr(processor, "_batch_processor", None)
    if type(batch).emit is not _SdkBatchProcessor.emit or not all(hasattr(batch, f) for f in _QUEUE_FIELDS):
        return None
    return batch


def _enqueue(batch: Any, spans: list) -> bool:
    """Append sampled spans to an SDK BatchProcessor's queue in one step, as its ``emit``
    does one at a time (``appendleft``; the worker woken once the queue holds a batch).
    Only when every span fits: a full queue, a processor shut down, or a forked child
    returns False, and the caller hands the spans over one by one so that the SDK logs,
    counts and drops them itself."""
    queue = batch._queue  # noqa: SLF001
    if batch._shutdown or batch._pid != os.getpid() or len(spans) > batch._max_queue_size - len(queue):  # noqa: SLF001
        return False
    queue.extendleft(spans)
    if len(queue) >= batch._max_export_batch_size and not batch._worker_awaken.is_set():  # noqa: SLF001
        batch._worker_awaken.set()  # noqa: SLF001
    return True
