# SPDX-License-Identifier: Apache-2.0
"""CategoryAggregator: per-brick and per-category totals from ended brick spans.

A span processor like any other: add it to a TracerProvider and it aggregates
every brick span that reaches it. Times are **self time**: a brick's duration
minus the durations of bricks nested inside it (on the same clock), so nested
bricks are never counted twice and the per-category
totals add up to the time covered by bricks. Kernels are part of their brick's
work and are not subtracted. The recorder computes self time when it resolves a
brick (``brickscope.brick.self_duration_ns``); spans without it count whole. The same numbers go to OTel metrics: a duration
histogram and an elements counter, labelled by brick and category only (kernel
names would explode metric cardinality).

Example::

    aggregator = CategoryAggregator()
    provider.add_span_processor(aggregator)
    ...
    print(aggregator.report())
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import NonRecordingSpan

from brickscope._otel_context import EMPTY_CONTEXT, with_span
from brickscope.trace import attributes as A
from brickscope.trace.attributes import (
    BRICK_CATEGORY,
    BRICK_ELEMENTS,
    BRICK_NAME,
    BRICK_SELF_DURATION_NS,
    CLOCK,
    CLOCK_HOST,
    SCOPE_KIND,
    SCOPE_KIND_BRICK,
)
from brickscope.version import __version__

logger = logging.getLogger(__name__)


#: Histogram boundaries, seconds: 1 us to 10 s in 1-2.5-5 steps. The SDK's defaults
#: (0 to 10000) assume milliseconds and would put every brick in the first bucket.
DURATION_BUCKETS_S = tuple(float(f"{m}e{e}") for e in range(-6, 1) for m in (1, 2.5, 5)) + (10.0,)


@dataclass
class Stat:
    """Aggregated self time of one brick or one category (nanoseconds)."""

    count: int = 0
    total_ns: int = 0
    min_ns: int = 0
    max_ns: int = 0
    elements: int = 0

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0

    @property
    def elements_per_second(self) -> float:
        return self.elements / (self.total_ns / 1e9) if self.total_ns else 0.0


class CategoryAggregator(SpanProcessor):
    """Aggregates brick spans per brick and per category, and records OTel metrics.

    ``on_end`` runs on whichever thread ended the span; it takes a lock for a few
    dictionary updates and never raises.

    Args:
        meter_provider: where the metrics go; default: the global MeterProvider
            (a no-op until the application configures one).

    .. versionadded:: 0.1.0
    """

    def __init__(self, meter_provider: otel_metrics.MeterProvider | None = None) -> None:
        meter_provider = meter_provider or otel_metrics.get_meter_provider()
        meter = meter_provider.get_meter("brickscope", __version__)
        # Exemplars cost a context per span; only an SDK MeterProvider can keep them.
        self._exemplars = isinstance(meter_provider, SdkMeterProvider)
        self._duration = meter.create_histogram(
            A.METRIC_BRICK_DURATION,
            unit="s",
            description="Self time of a brick (nested bricks excluded).",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
        )
        self._elements = meter.create_counter(
            A.METRIC_BRICK_ELEMENTS, unit="{element}", description="Elements processed by a brick."
        )
        self._lock = threading.Lock()
        # (brick, category) -> (its Stat, its metric labels): one lookup per span
        self._entries: dict[tuple[str, str], tuple[Stat, dict[str, str]]] = {}
        self.bricks: dict[str, Stat] = {}
        self.brick_category: dict[str, str] = {}
        self.clocks: set[str] = set()
        self.errors = 0

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        """Nothing to do at start."""

    def on_end(self, span: ReadableSpan) -> None:
        """Fold one ended span into the aggregates. Never raises."""
        self.fold(span, span.attributes)

    def fold(self, span: ReadableSpan, attributes: Any) -> None:
        """Fold a span whose attributes the caller already holds (on_end's work). Never raises."""
        try:
            if not attributes or attributes.get(SCOPE_KIND) != SCOPE_KIND_BRICK:
                return
            name = attributes.get(BRICK_NAME, span.name)
            category = attributes.get(BRICK_CATEGORY, "other")
            self_ns = attributes.get(BRICK_SELF_DURATION_NS)
            if self_ns is None:  # not resolved by brickscope: no nesting information
                self_ns = span.end_time - span.start_time
            elements = attributes.get(BRICK_ELEMENTS, 0)
            clock = attributes.get(CLOCK, CLOCK_HOST)
            with self._lock:
                entry = self._entries.get((name, category))
                if entry is None:
                    entry = self._new_entry(name, category)
                stat, labels = entry
                if stat.count == 0 or self_ns < stat.min_ns:
                    stat.min_ns = self_ns
                if self_ns > stat.max_ns:
                    stat.max_ns = self_ns
                stat.count += 1
                stat.total_ns += self_ns
                stat.elements += elements
                if clock not in self.clocks:
                    self.clocks.add(clock)
            # The context the SDK reads exemplars from: this span as the current one.
            context = with_span(EMPTY_CONTEXT, NonRecordingSpan(span.context)) if self._exemplars else None
            self._duration.record(self_ns / 1e9, labels, context=context)
            if elements:
                self._elements.add(elements, labels, context=context)
        except Exception:
            self.errors += 1
            if self.errors == 1:
                logger.exception("brickscope: CategoryAggregator could not fold a span")

    def _new_entry(self, name: str, category: str) -> tuple[Stat, dict[str, str]]:
        """The Stat and metric labels of a brick seen for the first time (lock held)."""
        stat = self.bricks.get(name)
        if stat is None:
            stat = self.bricks[name] = Stat()
            self.brick_category[name] = category
        entry = self._entries[(name, category)] = (stat, {BRICK_NAME: name, BRICK_CATEGORY: category})
        return entry

    @property
    def categories(self) -> dict[str, Stat]:
        """Per-category aggregates, summed from the bricks of each category."""
        with self._lock:
            categories: dict[str, Stat] = {}
            for name, stat in self.bricks.items():
                total = categories.setdefault(self.brick_category[name], Stat())
                if stat.count:
                    total.min_ns = stat.min_ns if not total.count else min(total.min_ns, stat.min_ns)
                    total.max_ns = max(total.max_ns, stat.max_ns)
                total.count += stat.count
                total.total_ns += stat.total_ns
                total.elements += stat.elements
            return categories

    def total_ns(self) -> int:
        """Sum of all brick self times: the denominator of every share."""
        return sum(stat.total_ns for stat in self.bricks.values())

    def report(self, format: str = "text") -> str:  # noqa: A002 - the natural name
        """The aggregates as a ``"text"`` table, ``"markdown"`` or ``"json"``."""
        from brickscope import _report

        return _report.render(self, format)

    def reset(self) -> None:
        """Forget everything aggregated so far."""
        with self._lock:
            self.bricks.clear()
            self._entries.clear()
            self.brick_category.clear()
            self.clocks.clear()

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Aggregation is synchronous: always flushed."""
        return True
