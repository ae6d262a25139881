# SPDX-License-Identifier: Apache-2.0
"""Exact per-brick counters (count, self time, elements) read through a real SDK MeterProvider:
every brick, sampled or not, cumulative across reconfiguration, nothing lost at shutdown."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

import brickscope as bs
from brickscope import environment_variables as env
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A

WAIT_S = 30  # a bound on a hang, not a speed expectation


def decode_step(clock, number: int) -> None:
    """attention_score 30 ns around ffn_up 12 ns (8 elements); rms_norm 5 ns (category given)."""
    with bs.step(number):
        with bs.layer(0):
            with bs.brick("attention_score"):
                clock.now += 18
                with bs.brick("ffn_up", elements=8):
                    clock.now += 12
            with bs.brick("rms_norm", category="custom"):
                clock.now += 5


def per_step(steps: int) -> dict[tuple[str, str], tuple]:
    """What ``steps`` decode steps must count, by hand: self times 18, 12 and 5 ns."""
    return {
        ("attention_score", "attention"): (steps, pytest.approx(steps * 18e-9), None),
        ("ffn_up", "ffn"): (steps, pytest.approx(steps * 12e-9), steps * 8),
        ("rms_norm", "custom"): (steps, pytest.approx(steps * 5e-9), None),
    }


class TestExactCounters:
    def test_metrics_only_counts_every_brick_with_no_span_built(self, clock, counters):
        reader = InMemoryMetricReader()
        provider = TracerProvider(sampler=ALWAYS_OFF)
        with capture_spans(provider, meter_provider=MeterProvider(metric_readers=[reader])) as captured:
            for number in range(7):
                decode_step(clock, number)
            captured.session.sync()
            assert captured.spans == ()
            assert counters(reader) == per_step(7)
            assert captured.session.aggregator.unsampled_bricks == 3 * 7
            assert captured.session.stats()["pending"] == 0

    def test_host_clock_unsampled_bricks_never_wait_in_the_pending_queue(self, clock):
        with capture_spans(TracerProvider(sampler=ALWAYS_OFF)) as captured:
            with bs.step(0), bs.layer(0):
                for _ in range(50):
                    with bs.brick("rms_norm"):
                        clock.now += 1
                assert captured.session.stats()["pending"] == 0

    def test_the_counters_are_cumulative_across_reconfiguration(self, clock, counters):
        reader = InMemoryMetricReader()
        meters = MeterProvider(metric_readers=[reader])
        bs.configure(TracerProvider(), clock="host", meter_provider=meters, step_sampling="every=2")
        for number in range(3):
            decode_step(clock, number)
        bs.configure(TracerProvider(sampler=ALWAYS_OFF), clock="host", meter_provider=meters)
        assert counters(reader) == per_step(3)  # the first session's, flushed as it was replaced
        for number in range(3, 7):
            decode_step(clock, number)
        bs.sync()
        assert counters(reader) == per_step(7)
        bs.shutdown()
        assert counters(reader) == per_step(7)

    def test_threads_recording_while_the_resolver_takes_lose_nothing(self, clock, counters):
        """Four threads fold unsampled bricks (each into its own table) while the main
        thread resolves again and again: every brick is counted once; the tables of the
        threads that ended are gone once handed over."""
        reader = InMemoryMetricReader()
        with capture_spans(TracerProvider(sampler=ALWAYS_OFF), meter_provider=MeterProvider(metric_readers=[reader])) as captured:
            go = threading.Event()

            def work(number: int) -> None:
                assert go.wait(WAIT_S)
                for _ in range(500):
                    with bs.brick("ffn_up", elements=number):
                        pass

            threads = [threading.Thread(target=work, args=(number,)) for number in range(1, 5)]
            for thread in threads:
                thread.start()
            go.set()
            while any(thread.is_alive() for thread in threads):
                captured.session.sync()
            for thread in threads:
                thread.join()
            captured.session.sync()
            (count, _, elements) = counters(reader)[("ffn_up", "ffn")]
            assert (count, elements) == (4 * 500, 500 * (1 + 2 + 3 + 4))
            assert captured.session.sync_processor.unsampled._tables == []

    @pytest.mark.parametrize("fold", ["at_close", "python_reference"])
    def test_unusual_bricks_fold_exactly(self, clock, fold, counters):
        """Bricks folded where they end, by what the recorder calls (the C table where the
        accelerator is built) and by the Python reference: a record_gpu brick is timed by its
        GPU interval (50 ns), longer than its enclosing brick (10 ns), whose self time is
        clamped to 0 and counted; elements past 64 bits add up exactly, also with a small
        count of the same brick; figures by hand."""
        reader = InMemoryMetricReader()
        with capture_spans(TracerProvider(sampler=ALWAYS_OFF), meter_provider=MeterProvider(metric_readers=[reader])) as captured:
            processor = captured.session.sync_processor
            if fold == "python_reference":
                processor.recorder.fold_closed = processor.unsampled.fold_closed
            with bs.step(0), bs.layer(0):
                with bs.brick("outer", category="custom", elements=2):
                    clock.now += 10
                    bs.record_gpu("gpu_work", 5_000, 5_050, category="custom", elements=3)
                with bs.brick("wide", category="custom", elements=1 << 70):
                    clock.now += 20
                with bs.brick("wide", category="custom", elements=1):
                    clock.now += 30
            captured.session.sync()
            stats = captured.session.stats()
        assert counters(reader) == {
            ("outer", "custom"): (1, 0.0, 2),
            ("gpu_work", "custom"): (1, pytest.approx(50e-9), 3),
            ("wide", "custom"): (2, pytest.approx(50e-9), (1 << 70) + 1),
        }
        assert stats["self_time_clamped"] == 1
        assert stats["scopes_unsampled"] == 6  # step, layer, 4 bricks

    @pytest.mark.parametrize("resolver", ["inline", "thread"])
    def test_a_collection_reads_every_brick_ended_before_it(self, clock, resolver, counters):
        """A step end with nothing pending hands the unsampled sums over at most once per
        max_delay_millis (here: the first only); a metric collection takes the rest itself,
        so the counters are exact whenever they are read, with no sync, and nothing twice."""
        reader = InMemoryMetricReader()
        with capture_spans(
            TracerProvider(sampler=ALWAYS_OFF),
            max_delay_millis=1e9,
            resolver=resolver,
            meter_provider=MeterProvider(metric_readers=[reader]),
        ) as captured:
            aggregator = captured.session.aggregator
            decode_step(clock, 0)
            decode_step(clock, 1)
            assert aggregator.unsampled_bricks <= 3  # the second step's bricks wait in the table
            assert counters(reader) == per_step(2)
            assert aggregator.unsampled_bricks == 6
            decode_step(clock, 2)
            captured.session.sync()
            assert counters(reader) == per_step(3)
            assert counters(reader) == per_step(3)

    def test_a_retired_session_is_not_asked_at_collection(self, clock, counters):
        """configure() again: the old pipeline's hand-over leaves the shared totals; the new
        one's joins; the counters stay cumulative over both."""
        reader = InMemoryMetricReader()
        meters = MeterProvider(metric_readers=[reader])
        with capture_spans(TracerProvider(sampler=ALWAYS_OFF), meter_provider=meters) as first:
            decode_step(clock, 0)
        old = first.session.aggregator
        assert old._hand_over is None
        with capture_spans(TracerProvider(sampler=ALWAYS_OFF), meter_provider=meters) as second:
            decode_step(clock, 1)
            assert counters(reader) == per_step(2)
            totals = second.session.aggregator._totals
            assert totals._collect_hooks == [second.session.sync_processor.hand_over_unsampled]

    def test_elements_only_for_bricks_that_count_them(self, clock):
        reader = InMemoryMetricReader()
        with capture_spans(meter_provider=MeterProvider(metric_readers=[reader])) as captured:
            decode_step(clock, 0)
            captured.session.sync()
        data = reader.get_metrics_data()
        (elements,) = [
            m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
            if m.name == A.METRIC_BRICK_ELEMENTS
        ]  # fmt: skip
        assert [(p.attributes[A.BRICK_NAME], p.value) for p in elements.data.data_points] == [("ffn_up", 8)]
        assert elements.unit == "{element}"

    @pytest.mark.parametrize("path", ["folded_at_close", "resolved"])
    def test_shutdown_with_the_resolver_thread_busy_loses_nothing(self, clock, path, counters):
        """Shut down while the resolver thread is held inside a batch of spans: every brick
        recorded before, sampled or not, folded where it ended or waiting to be resolved
        (as GPU-timed ones do), is in the counters afterwards."""
        provider = TracerProvider()
        gate = Hold()
        provider.add_span_processor(gate)
        reader = InMemoryMetricReader()
        with capture_spans(
            provider, resolver="thread", step_sampling="every=3", meter_provider=MeterProvider(metric_readers=[reader])
        ) as captured:
            session = captured.session
            if path == "resolved":
                session.sync_processor.recorder.fold_closed = None
            decode_step(clock, 0)  # sampled: the thread takes its spans and stops inside the first
            assert gate.entered.wait(WAIT_S)
            for number in range(1, 8):  # steps 3 and 6 sampled, the others not
                decode_step(clock, number)
            stopper = threading.Thread(target=session.shutdown)
            stopper.start()
            gate.release.set()
            stopper.join(WAIT_S)
            assert not stopper.is_alive()
            stats = session.stats()
        assert stats["pending"] == 0
        assert stats["spans_emitted"] == 3 * (2 + 3)  # step, layer and 3 bricks in steps 0, 3, 6
        assert counters(reader) == per_step(8)
        assert session.aggregator.unsampled_bricks == 5 * 3


class Hold(SpanProcessor):
    """Holds the first span delivered (the resolver thread, inside a batch) until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_end(self, span) -> None:
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(WAIT_S)


class TestDurationHistogramSetting:
    def test_bad_value_fails_at_configure(self):
        with pytest.raises(ValueError, match="duration_histogram 'every'"):
            bs.configure(TracerProvider(), clock="host", duration_histogram="every")

    def test_bad_environment_value_names_the_variable(self, monkeypatch):
        monkeypatch.setenv(env.BRICKSCOPE_DURATION_HISTOGRAM, "some")
        with pytest.raises(ValueError, match=env.BRICKSCOPE_DURATION_HISTOGRAM):
            bs.configure(TracerProvider(), clock="host")

    def test_environment_variable_sets_the_default(self, monkeypatch):
        monkeypatch.setenv(env.BRICKSCOPE_DURATION_HISTOGRAM, "ALL")
        with capture_spans() as captured:
            assert captured.session.aggregator.duration_histogram == "all"
            assert captured.session.sync_processor.unsampled.keep_values

    def test_default_is_the_sampled_bricks(self):
        with capture_spans() as captured:
            assert captured.session.aggregator.duration_histogram == "sampled"
            assert not captured.session.sync_processor.unsampled.keep_values
