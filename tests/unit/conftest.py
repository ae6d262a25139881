# SPDX-License-Identifier: Apache-2.0
"""Unit-test fixtures: a host clock the tests drive by hand, and the exact brick counters
as a metric reader collects them."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from brickscope.sdk.trace import _recorder
from brickscope.trace import attributes as A


class DrivenClock:
    """Stands in for perf_counter_ns where the recorder reads it: each read returns ``now``."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    driven = DrivenClock()
    monkeypatch.setattr(_recorder, "perf_counter_ns", driven)
    return driven


def read_counters(reader: InMemoryMetricReader) -> dict[tuple[str, str], tuple]:
    """(brick, category) -> (count, self time s, elements) as the reader collects them."""
    data = reader.get_metrics_data()
    metrics = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}

    def values(name: str) -> dict[tuple[str, str], float]:
        metric = metrics.get(name)
        points = metric.data.data_points if metric is not None else ()
        return {(p.attributes[A.BRICK_NAME], p.attributes[A.BRICK_CATEGORY]): p.value for p in points}

    counts, times, elements = values(A.METRIC_BRICK_COUNT), values(A.METRIC_BRICK_SELF_TIME), values(A.METRIC_BRICK_ELEMENTS)
    return {key: (counts[key], times[key], elements.get(key)) for key in counts}


@pytest.fixture
def counters():
    """:func:`read_counters`."""
    return read_counters
