# SPDX-License-Identifier: Apache-2.0
"""CategoryAggregator: totals equal what the exported spans say, nested bricks never count twice."""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import brickscope as bs
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A


def independent_self_times(spans):
    """Self time per brick computed from scratch: duration minus nested bricks' durations,
    where 'nested' follows the span tree through any non-brick spans."""
    by_id = {s.context.span_id: s for s in spans}
    nested = defaultdict(int)
    for span in spans:
        if span.attributes.get(A.SCOPE_KIND) != "brick":
            continue
        parent = by_id.get(span.parent.span_id) if span.parent else None
        while parent is not None and parent.attributes.get(A.SCOPE_KIND) != "brick":
            parent = by_id.get(parent.parent.span_id) if parent.parent else None
        if parent is not None:
            nested[parent.context.span_id] += span.end_time - span.start_time
    return {
        s.context.span_id: (s.end_time - s.start_time) - nested[s.context.span_id]
        for s in spans
        if s.attributes.get(A.SCOPE_KIND) == "brick"
    }


class TestCategoryAggregator:
    def test_totals_equal_independent_sums_over_exported_spans(self):
        """Per-brick and per-category count/total/min/max/elements match sums over the spans."""
        rng = random.Random(7)
        with capture_spans() as captured:
            tracer = captured.session.tracer_provider.get_tracer("app")
            for step in range(3):
                with bs.step(step):
                    for layer in range(2):
                        with bs.layer(layer):
                            for name in ("rms_norm", "attention_score", "ffn_up"):
                                with bs.brick(name, elements=rng.randint(1, 100)):
                                    with bs.kernel("k"):
                                        time.sleep(rng.random() / 2000)
                                    if name == "ffn_up":
                                        with tracer.start_as_current_span("user"):
                                            with bs.brick("activation", elements=3):
                                                time.sleep(0.0005)
            spans = captured.spans
            aggregator = captured.session.aggregator
            self_times = independent_self_times(spans)
            expected = defaultdict(lambda: {"count": 0, "total": 0, "min": None, "max": 0, "elements": 0})
            for span in spans:
                if span.attributes.get(A.SCOPE_KIND) != "brick":
                    continue
                row = expected[span.name]
                value = self_times[span.context.span_id]
                row["count"] += 1
                row["total"] += value
                row["min"] = value if row["min"] is None else min(row["min"], value)
                row["max"] = max(row["max"], value)
                row["elements"] += span.attributes.get(A.BRICK_ELEMENTS, 0)
            for name, row in expected.items():
                stat = aggregator.bricks[name]
                assert (stat.count, stat.total_ns, stat.min_ns, stat.max_ns, stat.elements) == (
                    row["count"], row["total"], row["min"], row["max"], row["elements"]
                ), name
            categories = aggregator.categories
            assert categories["ffn"].total_ns == expected["ffn_up"]["total"] + expected["activation"]["total"]
            assert categories["ffn"].count == 12
            assert aggregator.total_ns() == sum(self_times.values())

    def test_nested_bricks_are_not_double_counted(self):
        """A brick around a brick: the outer's self time excludes the inner; the sum equals the outer's duration."""
        with capture_spans() as captured:
            with bs.brick("all_reduce"):
                time.sleep(0.002)
                with bs.brick("memcpy_d2h"):
                    time.sleep(0.004)
            spans = {s.name: s for s in captured.spans}
            aggregator = captured.session.aggregator
            outer = spans["all_reduce"]
            inner = spans["memcpy_d2h"]
            assert aggregator.total_ns() == outer.end_time - outer.start_time
            assert aggregator.bricks["all_reduce"].total_ns == (outer.end_time - outer.start_time) - (
                inner.end_time - inner.start_time
            )
            assert outer.attributes[A.BRICK_SELF_DURATION_NS] == aggregator.bricks["all_reduce"].total_ns

    def test_throughput_and_share(self):
        """elements/s is elements over self seconds; shares add up to 1."""
        with capture_spans() as captured:
            with bs.brick("embedding", elements=1000):
                time.sleep(0.002)
            with bs.brick("lm_head", elements=10):
                time.sleep(0.001)
            report = json.loads(captured.session.report("json"))
        bricks = [row for row in report["operations"] if row["kind"] == "brick"]
        rows = {row["name"]: row for row in bricks}
        assert rows["embedding"]["elements_per_second"] == pytest.approx(1000 / (rows["embedding"]["self_ns"] / 1e9))
        assert sum(row["share"] for row in bricks) == pytest.approx(1.0)
        assert {row["name"] for row in report["categories"]} == {"embedding"}
        assert report["clocks"] == ["host"]

    def test_metrics_carry_brick_and_category_only_with_exemplars(self):
        """The duration histogram and elements counter are labelled by brick and category, never kernel,
        and carry exemplars pointing at the brick spans."""
        reader = InMemoryMetricReader()
        meters = MeterProvider(metric_readers=[reader])
        with capture_spans(meter_provider=meters) as captured:
            for _ in range(4):
                with bs.brick("rms_norm", elements=8), bs.kernel("rms_kernel_v2"):
                    pass
            bricks = captured.bricks()
            data = reader.get_metrics_data()
        metrics = {
            m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        }
        (point,) = metrics[A.METRIC_BRICK_DURATION].data.data_points
        assert dict(point.attributes) == {A.BRICK_NAME: "rms_norm", A.BRICK_CATEGORY: "norm"}
        assert point.count == 4
        assert point.sum == pytest.approx(sum(b.attributes[A.BRICK_SELF_DURATION_NS] for b in bricks) / 1e9)
        span_ids = {b.context.span_id for b in bricks}
        assert point.exemplars and all(e.span_id in span_ids for e in point.exemplars)
        (counter,) = metrics[A.METRIC_BRICK_ELEMENTS].data.data_points
        assert counter.value == 32
        assert "rms_kernel_v2" not in repr(data)

    def test_force_flush_hands_the_kept_rows_to_the_report_table(self):
        """Rows wait in a batch (up to 2,048) before the report's table takes them; a flush
        leaves none waiting, so a flushed session holds nothing but finished work."""
        with capture_spans() as captured:
            with bs.step(0):
                for name in ("rms_norm", "attention_score", "ffn_up"):
                    with bs.brick(name):
                        pass
            bs.sync()
            aggregator = captured.session.aggregator
            waiting = len(aggregator._row_batch)
            assert waiting == len(captured.spans) == 4  # the step and its three bricks
            assert aggregator.force_flush() is True
            assert aggregator._row_batch == []
            assert aggregator._rows.rows == 4
            assert len(aggregator.table(backend="python")["start"]) == 4


class TestReport:
    def test_text_markdown_and_json_agree(self):
        """The three formats list the same bricks and categories; text has both sections."""
        with capture_spans() as captured:
            with bs.brick("rms_norm", elements=5):
                pass
            with bs.brick("attention_score"):
                pass
            text = captured.session.report()
            markdown = captured.session.report("markdown")
            data = json.loads(captured.session.report("json"))
        assert "Self time by brick" in text and "Self time by category" in text
        for name in ("rms_norm", "attention_score", "norm", "attention"):
            assert name in text
            assert f"| {name} |" in markdown
        assert {row["name"] for row in data["operations"] if row["kind"] == "brick"} == {"rms_norm", "attention_score"}
        assert {row["name"] for row in data["categories"]} == {"norm", "attention"}

    def test_unknown_format_is_an_error(self):
        """report('xml') raises ValueError naming the formats."""
        with capture_spans() as captured:
            with pytest.raises(ValueError, match="markdown"):
                captured.session.report("xml")


class TestHistogramBuckets:
    def test_brick_durations_spread_over_microsecond_buckets(self, clock):
        """The duration histogram's buckets are in seconds from 1 us, so a 2 ms brick (the
        driven clock moved by 2 ms inside it) is not in the first bucket."""
        reader = InMemoryMetricReader()
        with capture_spans(meter_provider=MeterProvider(metric_readers=[reader])):
            with bs.brick("rms_norm"):
                clock.now += 2_000_000
            bs.sync()
            data = reader.get_metrics_data()
        (point,) = [
            p for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
            if m.name == A.METRIC_BRICK_DURATION for p in m.data.data_points
        ]
        assert point.explicit_bounds[0] == pytest.approx(1e-6)
        index = next(i for i, count in enumerate(point.bucket_counts) if count)
        assert 1e-3 <= point.explicit_bounds[index - 1] < 2e-3 <= point.explicit_bounds[index] <= 1e-2
        assert sum(point.bucket_counts) == 1


class TestOneCategoryRule:
    def test_a_brick_recorded_under_two_categories_is_credited_alike_everywhere(self, clock):
        """Report rows, category table, aggregator views and metric labels agree: each span
        counts for the category it was recorded with. (Driven clock: every brick lasts 0 ns,
        so operations tie on time and are listed by name, whatever the machine's speed.)"""
        from opentelemetry.sdk.trace import TracerProvider as _Provider

        _bs = bs
        reader = InMemoryMetricReader()
        session = _bs.configure(_Provider(), clock="host", meter_provider=MeterProvider(metric_readers=[reader]))
        with _bs.step(0):
            for category in ("alpha", "beta", "beta"):
                with _bs.brick("mix", category=category):
                    pass
        report = json.loads(session.report("json"))
        aggregator = session.aggregator
        metric_counts = {
            dict(point.attributes)["brickscope.brick.category"]: point.count
            for resource in reader.get_metrics_data().resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "brickscope.brick.duration"
            for point in metric.data.data_points
        }
        assert metric_counts == {"alpha": 1, "beta": 2}
        assert {name: stat.count for name, stat in aggregator.categories.items()} == {"alpha": 1, "beta": 2}
        assert aggregator.brick_category == {"mix": ("alpha", "beta")}
        assert aggregator.bricks["mix"].count == 3
        rows = {op["category"]: op["count"] for op in report["operations"] if op["name"] == "mix"}
        assert rows == {"alpha": 1, "beta": 2}
        assert {c["name"]: c["count"] for c in report["categories"]} == {"alpha": 1, "beta": 2}
