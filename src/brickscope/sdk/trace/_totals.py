# SPDX-License-Identifier: Apache-2.0
"""Exact per-brick totals (count, self time, elements) as observable OpenTelemetry counters,
and the brick duration histogram, aggregated here too.

Every brick, sampled or not, is added here: one dictionary update per brick span, and
one per (brick, category) per resolution batch for the bricks that produce no span. No
SDK call per brick: the counters are read once per collection. The OTel Python SDK
(1.45) offers no way to hand it pre-aggregated points (no MetricProducer, no observable
histogram), so exact totals are observable counters.

The ``brickscope.brick.duration`` histogram is aggregated here as well
(:class:`DurationHistogram`: bucket counts, sum, min and max per (brick, category), about
a microsecond a value) and handed to the SDK's histogram once per collection, one
``record()`` per (brick, category, bucket) plus the bucket's other values added to the
points that record reached (``sdk/_otel_internals.py``): the same exact points, exemplars and
views as one ``record()`` per value, which cost ~5 us each. Where that is not exact (a
View with other buckets, an attribute filter, another SDK's layout), one ``record()``
per value as before.

One table per meter provider, registered once (the SDK keeps the callbacks of the
first registration of a name and ignores later ones), shared by every aggregator
reporting to it: cumulative over the process, across reconfiguration.

Example::

    totals = for_meter_provider(meter_provider)
    totals.add("rms_norm", "norm", 1_200, 64)      # count 1, 1.2 us, 64 elements
"""

from __future__ import annotations

import logging
import threading
import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.trace import INVALID_SPAN, NonRecordingSpan

from brickscope._otel_context import EMPTY_CONTEXT, with_span
from brickscope.sdk import _otel_internals
from brickscope.trace.attributes import (
    BRICK_CATEGORY,
    BRICK_NAME,
    METRIC_BRICK_COUNT,
    METRIC_BRICK_ELEMENTS,
    METRIC_BRICK_SELF_TIME,
)
from brickscope.version import __version__

logger = logging.getLogger(__name__)

_ZERO = (0, 0, 0)


class BrickTotals:
    """(brick, category) -> (count, self time ns, elements), read by three observable counters."""

    def __init__(self, meter_provider: MeterProvider) -> None:
        self._meter_provider = meter_provider
        #: The duration histogram of this meter provider, once an aggregator asked for it.
        self.histogram: DurationHistogram | None = None
        self._lock = threading.Lock()
        self._sums: dict[tuple[str, str], tuple[int, int, int]] = {}
        self._labels: dict[tuple[str, str], dict[str, str]] = {}
        #: Called at each collection before anything is read: pipelines hand over the
        #: unsampled bricks folded since their last resolution batch (exact at collection).
        self._collect_hooks: list[Callable[[], None]] = []
        meter = meter_provider.get_meter("brickscope", __version__)
        meter.create_observable_counter(
            METRIC_BRICK_COUNT, callbacks=[self._observe_count], unit="{brick}",
            description="Bricks resolved, sampled or not (exact).",
        )  # fmt: skip
        meter.create_observable_counter(
            METRIC_BRICK_SELF_TIME, callbacks=[self._observe_self_time], unit="s",
            description="Self time of bricks (nested bricks excluded), summed exactly, sampled or not.",
        )  # fmt: skip
        meter.create_observable_counter(
            METRIC_BRICK_ELEMENTS, callbacks=[self._observe_elements], unit="{element}",
            description="Elements processed by bricks, sampled or not (exact).",
        )  # fmt: skip

    def add(self, name: str, category: str, self_ns: int, elements: int) -> None:
        """One brick."""
        key = (name, category)
        with self._lock:
            count, total, elems = self._sums.get(key, _ZERO)
            self._sums[key] = (count + 1, total + self_ns, elems + elements)

    def merge(self, sums: dict[tuple[str, str], tuple[int, int, int]]) -> None:
        """Many bricks at once: ``(name, category) -> (count, self ns, elements)``."""
        with self._lock:
            for key, (count, total, elems) in sums.items():
                c, t, e = self._sums.get(key, _ZERO)
                self._sums[key] = (c + count, t + total, e + elems)

    def add_collect_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` (it must not raise) at each collection, before the totals are read."""
        with self._lock:
            self._collect_hooks = [*self._collect_hooks, hook]

    def remove_collect_hook(self, hook: Callable[[], None]) -> None:
        with self._lock:
            self._collect_hooks = [h for h in self._collect_hooks if h is not hook]

    def snapshot(self) -> dict[tuple[str, str], tuple[int, int, int]]:
        """The totals so far (a copy)."""
        with self._lock:
            return dict(self._sums)

    def _points(self, field: int, scale: float | None, skip_zero: bool = False) -> Iterable[Observation]:
        points = []
        for key, sums in self.snapshot().items():
            value = sums[field]
            if skip_zero and not value:
                continue
            labels = self._labels.get(key)
            if labels is None:
                labels = self._labels[key] = {BRICK_NAME: key[0], BRICK_CATEGORY: key[1]}
            points.append(Observation(value / scale if scale else value, labels))
        return points

    def _observe_count(self, options: CallbackOptions) -> Iterable[Observation]:
        # Runs at every collection, first of the three counters and before the SDK collects
        # its histograms (callbacks first).
        for hook in self._collect_hooks:
            hook()
        histogram = self.histogram
        if histogram is not None:
            histogram.flush()
        return self._points(0, None)

    def _observe_self_time(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._points(1, 1e9)

    def _observe_elements(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._points(2, None, skip_zero=True)  # bricks that count elements only, as before

    def duration_histogram(self, instrument: Any, bounds: Sequence[float]) -> DurationHistogram:
        """The histogram table feeding ``instrument`` (the meter provider's one instrument of
        that name: the SDK hands the same object to every aggregator), created on first use."""
        with self._lock:
            if self.histogram is None or self.histogram.instrument is not instrument:
                self.histogram = DurationHistogram(self._meter_provider, instrument, bounds)
            return self.histogram


class _Buckets:
    """One (brick, category)'s values since the last flush."""

    __slots__ = ("counts", "sum_ns", "min_ns", "max_ns", "last")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets
        self.sum_ns = 0
        self.min_ns = self.max_ns = -1
        #: per bucket: (self ns, span context or None) of the value that stands for the
        #: bucket in the SDK: the last with a span (the exemplar the SDK's reservoir would
        #: keep: the last sampled value of the bucket), else the last
        self.last: list[tuple[int, Any] | None] = [None] * buckets


class DurationHistogram:
    """Exact histogram of brick self times, aggregated here and handed to the SDK's
    histogram once per collection (see the module docstring).

    :meth:`add` and :meth:`add_many` run on the resolving thread; :meth:`flush` runs in
    a collection (the count counter's callback). Without the exact hand-over
    (:attr:`direct` False) every value is one ``record()``, as the SDK API has it.

    Args:
        meter_provider: the instrument's meter provider.
        instrument: the ``brickscope.brick.duration`` histogram (seconds).
        bounds: its bucket boundaries, seconds.
    """

    def __init__(self, meter_provider: Any, instrument: Any, bounds: Sequence[float]) -> None:
        self._meter_provider = meter_provider
        self.instrument = instrument
        self._bounds = tuple(bounds)
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], _Buckets] = {}
        self._labels: dict[tuple[str, str], dict[str, str]] = {}
        self.direct = _otel_internals.can_add_points(meter_provider, instrument, self._bounds)
        self._warned = False

    def _labels_of(self, key: tuple[str, str]) -> dict[str, str]:
        labels = self._labels.get(key)
        if labels is None:
            labels = self._labels[key] = {BRICK_NAME: key[0], BRICK_CATEGORY: key[1]}
        return labels

    def add(self, name: str, category: str, self_ns: int, span_context: Any = None) -> None:
        """One brick's self time; ``span_context``: its span's, for an exemplar (None: none)."""
        if not self.direct:
            context = _NO_SPAN if span_context is None else _span_context(span_context)
            self.instrument.record(self_ns / 1e9, self._labels_of((name, category)), context=context)
            return
        bucket = bisect_left(self._bounds, self_ns / 1e9)  # the SDK's bucket for the same float
        with self._lock:
            self._add(self._pending, (name, category), bucket, self_ns, span_context)

    def add_many(self, values: Iterable[tuple[str, str, int]]) -> None:
        """Bricks without a span: ``(name, category, self ns)`` each, no exemplar."""
        if not self.direct:
            record, labels_of = self.instrument.record, self._labels_of
            for name, category, self_ns in values:
                record(self_ns / 1e9, labels_of((name, category)), context=_NO_SPAN)
            return
        bounds, add, pending = self._bounds, self._add, self._pending
        with self._lock:
            for name, category, self_ns in values:
                add(pending, (name, category), bisect_left(bounds, self_ns / 1e9), self_ns, None)

    def _add(self, pending: dict, key: tuple[str, str], bucket: int, self_ns: int, span_context: Any) -> None:
        buckets = pending.get(key)
        if buckets is None:
            buckets = pending[key] = _Buckets(len(self._bounds) + 1)
        buckets.counts[bucket] += 1
        buckets.sum_ns += self_ns
        if buckets.min_ns < 0 or self_ns < buckets.min_ns:
            buckets.min_ns = self_ns
        if self_ns > buckets.max_ns:
            buckets.max_ns = self_ns
        last = buckets.last[bucket]
        if span_context is not None or last is None or last[1] is None:
            buckets.last[bucket] = (self_ns, span_context)

    def flush(self) -> None:
        """Hand what was added since the last flush to the SDK: per (brick, category) and
        bucket one ``record()`` of the value standing for the bucket (views, exemplars and
        the point itself stay the SDK's), then the bucket's other values added to the
        points it reached. Never raises."""
        with self._lock:
            pending, self._pending = self._pending, {}
        for key, buckets in pending.items():
            try:
                labels = self._labels_of(key)
                extra = list(buckets.counts)
                recorded_ns = 0
                for bucket, last in enumerate(buckets.last):
                    if last is None:
                        continue
                    self_ns, span_context = last
                    context = _NO_SPAN if span_context is None else _span_context(span_context)
                    self.instrument.record(self_ns / 1e9, labels, context=context)
                    extra[bucket] -= 1
                    recorded_ns += self_ns
                if any(extra):
                    exact = _otel_internals.add_to_points(
                        self._meter_provider, self.instrument, labels, extra,
                        (buckets.sum_ns - recorded_ns) / 1e9, buckets.min_ns / 1e9, buckets.max_ns / 1e9,
                    )  # fmt: skip
                    if not exact and not self._warned:
                        self._warned = True
                        logger.warning(
                            "brickscope: a metric reader added after configure() aggregates %s differently; "
                            "its points get one value per bucket until brickscope is configured again",
                            self.instrument.name,
                        )
            except Exception:  # never into the collection
                logger.exception("brickscope: handing the duration histogram over failed")


#: The context of a value without a span: no exemplar (an empty Context would not do: the
#: SDK takes a falsy context as "the current one", which may be an unrelated sampled span).
_NO_SPAN = with_span(EMPTY_CONTEXT, INVALID_SPAN)


def _span_context(span_context: Any) -> Any:
    """The context the SDK reads an exemplar from: that span as the current one."""
    return with_span(EMPTY_CONTEXT, NonRecordingSpan(span_context))


_registry_lock = threading.Lock()
#: Meter providers hash by identity; a provider that is gone takes its totals with it.
_registry: weakref.WeakKeyDictionary[Any, BrickTotals] = weakref.WeakKeyDictionary()


def for_meter_provider(meter_provider: MeterProvider) -> BrickTotals:
    """The totals reported to ``meter_provider``, created (and its counters registered) on first use."""
    with _registry_lock:
        totals = _registry.get(meter_provider)
        if totals is None:
            totals = _registry[meter_provider] = BrickTotals(meter_provider)
        return totals
