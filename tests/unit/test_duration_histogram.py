# SPDX-License-Identifier: Apache-2.0
"""The duration histogram aggregated by brickscope and handed to the SDK once per collection
(``_totals.DurationHistogram``): the same points as one SDK ``record()`` per value."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.trace import SpanContext, TraceFlags

from brickscope import native
from brickscope._otel_context import EMPTY_CONTEXT, with_span
from brickscope.sdk import _otel_internals
from brickscope.sdk.trace import _totals
from brickscope.sdk.trace._aggregation import DURATION_BUCKETS_S
from brickscope.trace import attributes as A

NORM = {A.BRICK_NAME: "rms_norm", A.BRICK_CATEGORY: "norm"}
FFN = {A.BRICK_NAME: "ffn_up", A.BRICK_CATEGORY: "ffn"}
#: rms_norm: 1 us x3 (bucket 0: <= 1 us), 3 us x2 (bucket 2: 2.5-5 us), 7 ms (bucket 12: 5-10 ms)
VALUES = [("rms_norm", "norm", 1_000)] * 3 + [("rms_norm", "norm", 3_000)] * 2 + [("rms_norm", "norm", 7_000_000)]
VALUES += [("ffn_up", "ffn", 20_000)]  # bucket 4: 10-25 us


def bucket_counts(**at: int) -> tuple[int, ...]:
    counts = [0] * (len(DURATION_BUCKETS_S) + 1)
    for index, count in at.items():
        counts[int(index[1:])] = count
    return tuple(counts)


def setup(*readers: InMemoryMetricReader, views: tuple = ()) -> tuple[MeterProvider, _totals.DurationHistogram]:
    provider = MeterProvider(metric_readers=list(readers), views=list(views))
    totals = _totals.for_meter_provider(provider)
    instrument = provider.get_meter("brickscope").create_histogram(
        A.METRIC_BRICK_DURATION, unit="s", explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S
    )
    return provider, totals.duration_histogram(instrument, DURATION_BUCKETS_S)


def points(reader: InMemoryMetricReader) -> dict[str, object]:
    data = reader.get_metrics_data()
    metrics = [m for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics for m in sm.metrics]
    found = {}
    for metric in metrics:
        if metric.name == A.METRIC_BRICK_DURATION:
            found.update({p.attributes[A.BRICK_NAME]: p for p in metric.data.data_points})
    return found


def span(span_id: int) -> SpanContext:
    return SpanContext(trace_id=0xABC, span_id=span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))


class TestDurationHistogram:
    def test_points_are_exact_by_hand(self):
        """Bucket counts, count, sum, min and max of each (brick, category) are those of its values."""
        reader = InMemoryMetricReader()
        _, histogram = setup(reader)
        assert histogram.direct == (native.implementations()["sdk.histogram"].in_use == "fast")  # (not checked: per value)
        histogram.add_many(VALUES)
        found = points(reader)
        norm = found["rms_norm"]
        assert norm.bucket_counts == bucket_counts(b0=3, b2=2, b12=1)
        assert (norm.count, norm.min, norm.max) == (6, 1e-6, 7e-3)
        assert norm.sum == pytest.approx(3e-6 + 6e-6 + 7e-3, rel=1e-12)
        ffn = found["ffn_up"]
        assert (ffn.bucket_counts, ffn.count, ffn.sum, ffn.min, ffn.max) == (bucket_counts(b4=1), 1, 2e-5, 2e-5, 2e-5)
        assert dict(norm.attributes) == NORM and dict(ffn.attributes) == FFN

    @pytest.mark.parametrize("temporality", [AggregationTemporality.CUMULATIVE, AggregationTemporality.DELTA])
    def test_same_points_as_one_sdk_record_per_value(self, temporality):
        """Over two collections, cumulative or delta, the points equal those of a histogram fed value by value."""
        preferred = {Histogram: temporality}
        ours_reader = InMemoryMetricReader(preferred_temporality=preferred)
        sdk_reader = InMemoryMetricReader(preferred_temporality=preferred)
        _, histogram = setup(ours_reader)
        plain = MeterProvider(metric_readers=[sdk_reader]).get_meter("brickscope").create_histogram(
            A.METRIC_BRICK_DURATION, unit="s", explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S
        )
        for batch in (VALUES, VALUES[2:5] + [("ffn_up", "ffn", 900)]):
            for one in batch:
                histogram.add(*one)
                plain.record(one[2] / 1e9, {A.BRICK_NAME: one[0], A.BRICK_CATEGORY: one[1]})
            ours, sdk = points(ours_reader), points(sdk_reader)
            assert ours.keys() == sdk.keys() == {"rms_norm", "ffn_up"}
            for name in ours:
                mine, theirs = ours[name], sdk[name]
                assert (mine.bucket_counts, mine.count, mine.min, mine.max) == (
                    theirs.bucket_counts, theirs.count, theirs.min, theirs.max,
                )  # fmt: skip
                assert mine.sum == pytest.approx(theirs.sum, rel=1e-12)

    def test_exemplar_per_bucket_is_its_last_value_with_a_span(self):
        """A bucket's exemplar is its last value that had a span, as the SDK's reservoir keeps; values
        without a span leave none."""
        reader = InMemoryMetricReader()
        _, histogram = setup(reader)
        histogram.add("rms_norm", "norm", 1_000, span(0x1))
        histogram.add("rms_norm", "norm", 1_000, span(0x2))
        histogram.add("rms_norm", "norm", 1_000)  # no span: not an exemplar
        histogram.add("rms_norm", "norm", 3_000)
        norm = points(reader)["rms_norm"]
        assert norm.bucket_counts == bucket_counts(b0=3, b2=1)
        assert [(e.span_id, e.value) for e in norm.exemplars] == [(0x2, 1e-6)]

    def test_an_sdk_release_not_checked_gets_every_value_through_the_sdk(self, monkeypatch):
        """Private names may stay and change meaning in another release: only checked ones are added to."""
        monkeypatch.setattr(_otel_internals, "SDK_VERSION", "1.99.0")
        monkeypatch.setattr(_otel_internals.FAST_PATHS["sdk.histogram"], "on", None)
        reader = InMemoryMetricReader()
        _, histogram = setup(reader)
        assert not histogram.direct
        histogram.add_many(VALUES)
        norm = points(reader)["rms_norm"]
        assert norm.bucket_counts == bucket_counts(b0=3, b2=2, b12=1)
        assert (norm.count, norm.min, norm.max) == (6, 1e-6, 7e-3)

    def test_a_view_with_other_buckets_gets_every_value_through_the_sdk(self):
        """With a View that re-buckets the histogram the hand-over is not exact: every value is
        recorded by the SDK (per value), so the view's points are exact too."""
        reader = InMemoryMetricReader()
        view = View(instrument_name=A.METRIC_BRICK_DURATION, aggregation=ExplicitBucketHistogramAggregation((2e-6, 1e-3)))
        _, histogram = setup(reader, views=(view,))
        assert not histogram.direct
        histogram.add_many(VALUES)
        norm = points(reader)["rms_norm"]
        assert (norm.bucket_counts, norm.count, norm.min, norm.max) == ((3, 2, 1), 6, 1e-6, 7e-3)

    def test_a_reader_preferring_exponential_histograms_gets_every_value_through_the_sdk(self):
        """A reader whose default histogram aggregation is exponential (as OTLP's
        ``base2_exponential_bucket_histogram`` setting makes it) gets one SDK record per value."""
        from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation

        reader = InMemoryMetricReader(preferred_aggregation={Histogram: ExponentialBucketHistogramAggregation()})
        _, histogram = setup(reader)
        assert not histogram.direct
        histogram.add_many(VALUES)
        norm = points(reader)["rms_norm"]
        assert (norm.count, norm.min, norm.max) == (6, 1e-6, 7e-3)

    def test_nothing_added_adds_no_point(self):
        """A collection with nothing added since the last one leaves the cumulative points as they were."""
        reader = InMemoryMetricReader()
        _, histogram = setup(reader)
        assert points(reader) == {}
        histogram.add("ffn_up", "ffn", 20_000)
        first = points(reader)["ffn_up"]
        again = points(reader)["ffn_up"]
        assert (again.bucket_counts, again.count, again.sum) == (first.bucket_counts, 1, 2e-5)

    def test_two_readers_both_get_the_exact_points(self):
        """Every reader of the provider gets every value, whichever collects first."""
        first, second = InMemoryMetricReader(), InMemoryMetricReader()
        _, histogram = setup(first, second)
        histogram.add_many(VALUES)
        a = points(first)["rms_norm"]
        histogram.add("rms_norm", "norm", 3_000)
        b = points(second)["rms_norm"]
        assert a.bucket_counts == bucket_counts(b0=3, b2=2, b12=1)
        assert b.bucket_counts == bucket_counts(b0=3, b2=3, b12=1)
        assert points(first)["rms_norm"].bucket_counts == b.bucket_counts


def test_the_exemplar_context_is_that_of_the_span():
    """The context the SDK reads an exemplar from makes the span current."""
    from opentelemetry.trace import get_current_span

    assert get_current_span(_totals._span_context(span(0x7))).get_span_context().span_id == 0x7
    assert get_current_span(with_span(EMPTY_CONTEXT, get_current_span(_totals._NO_SPAN))).get_span_context().is_valid is False
