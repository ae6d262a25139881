# SPDX-License-Identifier: Apache-2.0
"""configure(resolver="thread"): resolution off the application thread, nothing lost or left pending.

The tests sequence the two threads with events (a processor that holds the resolver
thread inside a batch until released), never with time windows; the one wait for the
thread's own poll is bounded by WAIT_S only.
"""

from __future__ import annotations

import threading
import time

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

import brickscope as bs
from brickscope import environment_variables as env
from brickscope.sdk.trace._worker import THREAD_NAME
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A

WAIT_S = 30  # a bound on a hang, not a speed expectation


class Gate(SpanProcessor):
    """Notes which thread delivered each span; optionally holds the first delivery until released."""

    def __init__(self, hold: bool, expect: int = 0) -> None:
        self.hold = hold
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: list[str] = []
        self.seen = threading.Event()
        self.expect = expect

    def on_end(self, span) -> None:
        self.threads.append(threading.current_thread().name)
        if self.hold and not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(WAIT_S)
        if len(self.threads) >= self.expect:
            self.seen.set()


def gated_provider(hold: bool, expect: int = 0) -> tuple[TracerProvider, Gate]:
    """A provider with a Gate: ``seen`` is set once ``expect`` spans were delivered."""
    provider = TracerProvider()
    gate = Gate(hold, expect)
    provider.add_span_processor(gate)
    return provider, gate


def record_step(number: int, bricks: int) -> None:
    with bs.step(number):
        for index in range(bricks):
            with bs.brick("rms_norm", elements=index):
                pass


class TestResolverThread:
    def test_a_step_end_hands_resolution_to_the_thread(self):
        """The application thread records; the step end wakes the resolver thread, which emits."""
        provider, gate = gated_provider(hold=False, expect=4)
        with capture_spans(provider, resolver="thread") as captured:
            assert captured.session.sync_processor.resolver == "thread"
            record_step(0, 3)
            assert gate.seen.wait(WAIT_S)
            assert set(gate.threads) == {THREAD_NAME}
            assert captured.session.stats()["pending"] == 0
            assert len(captured.spans) == 4

    def test_sync_while_the_thread_is_mid_batch_returns_with_nothing_pending(self):
        provider, gate = gated_provider(hold=True)
        with capture_spans(provider, resolver="thread") as captured:
            record_step(0, 5)  # 6 spans; the thread takes them and stops inside the first
            assert gate.entered.wait(WAIT_S)
            record_step(1, 7)  # 8 more recorded while the thread is held
            assert captured.session.stats()["pending"] >= 8
            synced = []
            syncer = threading.Thread(target=lambda: synced.append(captured.session.sync()))
            syncer.start()
            gate.release.set()
            syncer.join(WAIT_S)
            assert synced == [True]
            assert captured.session.stats()["pending"] == 0
            assert captured.session.stats()["spans_emitted"] == 14
            assert len(captured.spans) == 14

    def test_shutdown_with_the_thread_busy_loses_nothing(self):
        """Shut down while the resolver thread is held inside a batch: every scope recorded
        before is delivered, none left pending, the thread has stopped."""
        provider, gate = gated_provider(hold=True)
        reader = InMemoryMetricReader()
        with capture_spans(
            provider, resolver="thread", meter_provider=MeterProvider(metric_readers=[reader])
        ) as captured:
            session = captured.session
            record_step(0, 5)
            assert gate.entered.wait(WAIT_S)
            for number in range(1, 4):
                record_step(number, 10)
            stopper = threading.Thread(target=session.shutdown)
            stopper.start()
            gate.release.set()
            stopper.join(WAIT_S)
            assert not stopper.is_alive()
            stats = session.stats()
            spans = captured.exporter.get_finished_spans()
            assert not session.sync_processor._worker.alive
        assert stats["pending"] == 0
        assert stats["spans_emitted"] == 6 + 3 * 11
        assert len(spans) == 6 + 3 * 11
        assert sorted(s.attributes[A.STEP_NUMBER] for s in spans if s.name == "step") == [0, 1, 2, 3]
        data = reader.get_metrics_data()
        (point,) = [
            p
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == A.METRIC_BRICK_DURATION
            for p in m.data.data_points
        ]
        assert point.count == 5 + 3 * 10

    def test_unsampled_steps_are_folded_by_the_thread_too(self):
        """Under step sampling the thread folds unsampled bricks into the metrics: exact counts."""
        reader = InMemoryMetricReader()
        with capture_spans(
            resolver="thread", step_sampling="every=2", meter_provider=MeterProvider(metric_readers=[reader])
        ) as captured:
            for number in range(5):
                record_step(number, 4)
            captured.session.sync()
            assert captured.session.aggregator.unsampled_bricks == 2 * 4
            steps = sorted(s.attributes[A.STEP_NUMBER] for s in captured.by_name("step"))
        assert steps == [0, 2, 4]
        metrics = {
            m.name: m for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        }
        (count,) = metrics[A.METRIC_BRICK_COUNT].data.data_points
        assert count.value == 20
        (point,) = metrics[A.METRIC_BRICK_DURATION].data.data_points
        assert point.count == 3 * 4  # the default histogram: the bricks of the sampled steps
        (elements,) = metrics[A.METRIC_BRICK_ELEMENTS].data.data_points
        assert elements.value == 5 * (0 + 1 + 2 + 3)

    def test_a_step_end_with_nothing_pending_wakes_nobody(self):
        """Host clock, step sampling: an unsampled step's bricks are folded as they end, so
        nothing wakes the thread; a sampled step's records do (at the first one left pending
        if the thread sleeps, and at the step end), never with nothing pending. The thread's
        batch hands the unsampled bricks to the metrics too, with no sync."""
        provider, gate = gated_provider(hold=False, expect=4)
        with capture_spans(provider, resolver="thread", step_sampling="every=2", max_delay_millis=5) as captured:
            recorder = captured.session.sync_processor.recorder
            wake, wakes = recorder.wake, []
            recorder.wake = lambda: (wakes.append(len(recorder.pending)), wake())
            record_step(1, 3)  # not sampled
            assert wakes == []
            record_step(2, 3)  # sampled: 4 records for the thread
            assert wakes
            assert all(pending > 0 for pending in wakes)
            assert gate.seen.wait(WAIT_S)
            aggregator = captured.session.aggregator
            deadline = time.monotonic() + WAIT_S  # a bound on a hang, not a speed expectation
            while aggregator.unsampled_bricks < 3 and time.monotonic() < deadline:
                time.sleep(0.001)
            assert aggregator.unsampled_bricks == 3
            assert captured.session.stats()["forced_syncs"] == 0
        assert gate.threads == [THREAD_NAME] * 4

    def test_an_idle_thread_sleeps_until_a_record_waits(self, clock):
        """Once idle, the thread needs no timer: metrics-only steps (folded as they end) never
        poll or wake it however much time passes; the first record left pending wakes it at
        its close (max_delay_millis=1e9: no timer would), and it delivers the span, no sync."""
        provider, gate = gated_provider(hold=False, expect=1)
        with capture_spans(provider, resolver="thread", step_sampling="every=2", max_delay_millis=1e9) as captured:
            recorder = captured.session.sync_processor.recorder
            deadline = time.monotonic() + WAIT_S
            while recorder._next_poll_ns != 0 and time.monotonic() < deadline:
                time.sleep(0.001)  # the thread starting up and going to sleep
            assert recorder._next_poll_ns == 0
            wake, wakes = recorder.wake, []
            recorder.wake = lambda: (wakes.append(len(recorder.pending)), wake())
            for number in (1, 3, 5):  # not sampled
                clock.now += 10**9
                record_step(number, 3)
            assert wakes == []
            assert captured.session.stats()["polls"] == 0
            with bs.brick("rms_norm"):  # a root brick: sampled, left pending at its close
                pass
            assert wakes == [1]
            assert gate.seen.wait(WAIT_S)
        assert gate.threads == [THREAD_NAME]

    def test_kept_histogram_values_keep_the_timer(self):
        """duration_histogram="all" keeps each unsampled brick's value until it is handed
        over: the thread keeps polling by time (bounded memory) instead of sleeping."""
        with capture_spans(resolver="thread", duration_histogram="all") as captured:
            recorder = captured.session.sync_processor.recorder
            assert recorder.poll_without_pending
            assert not recorder.arm_wake()

    def test_half_of_max_pending_wakes_the_thread_instead_of_blocking_the_application(self):
        """No step end and no poll due: at 4 of max_pending=8 ended bricks the thread is woken
        and resolves them; the application never resolves itself (no forced sync)."""
        provider, gate = gated_provider(hold=False, expect=4)
        with capture_spans(provider, resolver="thread", max_pending=8, max_delay_millis=1e9) as captured:
            for _ in range(4):
                with bs.brick("rms_norm"):
                    pass
            assert gate.seen.wait(WAIT_S)
            stats = captured.session.stats()
        assert set(gate.threads) == {THREAD_NAME}
        assert stats["forced_syncs"] == 0
        assert stats["resolution_cpu_ns_app"] == 0

    def test_environment_variable_selects_it_and_bad_values_fail_at_set_up(self, monkeypatch):
        monkeypatch.setenv(env.BRICKSCOPE_RESOLVER, "thread")
        with capture_spans() as captured:
            assert captured.session.sync_processor.resolver == "thread"
        monkeypatch.setenv(env.BRICKSCOPE_RESOLVER, "background")
        with pytest.raises(ValueError, match=env.BRICKSCOPE_RESOLVER):
            bs.configure(TracerProvider(), clock="host")

    def test_inline_is_the_default(self, monkeypatch):
        monkeypatch.delenv(env.BRICKSCOPE_RESOLVER, raising=False)
        with capture_spans() as captured:
            assert captured.session.sync_processor.resolver == "inline"


class TestSelfTelemetry:
    def cpu_points(self, reader: InMemoryMetricReader) -> dict[str, int]:
        return {
            dict(p.attributes)["brickscope.thread"]: p.value
            for rm in reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "brickscope.resolution.cpu_time"
            for p in m.data.data_points
        }

    def test_resolution_cpu_is_counted_on_the_thread_that_resolved(self):
        """With the resolver thread busy and the application never syncing, all resolution CPU
        is the thread's; the OTel counters read the same figures as stats()."""
        provider, gate = gated_provider(hold=False, expect=11)
        reader = InMemoryMetricReader()
        with capture_spans(
            provider, resolver="thread", meter_provider=MeterProvider(metric_readers=[reader])
        ) as captured:
            record_step(0, 10)
            assert gate.seen.wait(WAIT_S)
            stats = captured.session.stats()
            points = self.cpu_points(reader)
        assert stats["resolution_cpu_ns_app"] == 0
        assert stats["resolution_cpu_ns_worker"] > 0
        assert points["application"] == 0
        assert points["resolver"] >= stats["resolution_cpu_ns_worker"]  # collected a moment later

    def test_inline_resolution_is_the_application_threads(self):
        reader = InMemoryMetricReader()
        with capture_spans(meter_provider=MeterProvider(metric_readers=[reader])) as captured:
            record_step(0, 10)
            stats = captured.session.stats()
            points = self.cpu_points(reader)
        assert stats["resolution_cpu_ns_worker"] == 0
        assert stats["resolution_cpu_ns_app"] > 0
        assert points == {"application": stats["resolution_cpu_ns_app"], "resolver": 0}
