# SPDX-License-Identifier: Apache-2.0
"""Exact per-brick totals (count, self time, elements) as observable OpenTelemetry counters.

Every brick, sampled or not, is added here: one dictionary update per brick span, and
one per (brick, category) per resolution batch for the bricks that produce no span. No
SDK call per brick: the counters are read once per collection. The OTel Python SDK
(1.45) offers no way to hand it pre-aggregated points (no MetricProducer, no observable
histogram), so exact totals are observable counters; a distribution costs one
``Histogram.record`` per brick (see ``CategoryAggregator``'s ``duration_histogram``).

One table per meter provider, registered once (the SDK keeps the callbacks of the
first registration of a name and ignores later ones), shared by every aggregator
reporting to it: cumulative over the process, across reconfiguration.

Example::

    totals = for_meter_provider(meter_provider)
    totals.add("rms_norm", "norm", 1_200, 64)      # count 1, 1.2 us, 64 elements
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Iterable

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from brickscope.trace.attributes import (
    BRICK_CATEGORY,
    BRICK_NAME,
    METRIC_BRICK_COUNT,
    METRIC_BRICK_ELEMENTS,
    METRIC_BRICK_SELF_TIME,
)
from brickscope.version import __version__

_ZERO = (0, 0, 0)


class BrickTotals:
    """(brick, category) -> (count, self time ns, elements), read by three observable counters."""

    def __init__(self, meter_provider: MeterProvider) -> None:
        self._lock = threading.Lock()
        self._sums: dict[tuple[str, str], tuple[int, int, int]] = {}
        self._labels: dict[tuple[str, str], dict[str, str]] = {}
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
        return self._points(0, None)

    def _observe_self_time(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._points(1, 1e9)

    def _observe_elements(self, options: CallbackOptions) -> Iterable[Observation]:
        return self._points(2, None, skip_zero=True)  # bricks that count elements only, as before


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
