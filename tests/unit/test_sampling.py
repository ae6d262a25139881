# SPDX-License-Identifier: Apache-2.0
"""Production sampling: step policies choose which steps produce spans; metrics see every brick."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

import brickscope as bs
from brickscope import environment_variables as env
from brickscope.testing import capture_spans
from brickscope.trace import attributes as A


def run_steps(clock, steps: int) -> None:
    """Each step: attention (50 ns) with rms_norm (10 ns, 64 elements) inside, then lm_head (7 ns)."""
    for number in range(steps):
        with bs.step(number):
            with bs.brick("attention_score"):
                clock.now += 20
                with bs.brick("rms_norm", elements=64):
                    clock.now += 10
                clock.now += 20
            with bs.brick("lm_head", elements=number):
                clock.now += 7


def metrics_by_name(reader: InMemoryMetricReader) -> dict:
    data = reader.get_metrics_data()
    return {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


def brick_metrics(reader: InMemoryMetricReader) -> dict[str, tuple]:
    """brick name -> (count, self time in s, elements) from the exact counters the reader collects."""
    metrics = metrics_by_name(reader)

    def values(name: str) -> dict[str, float]:
        return {p.attributes[A.BRICK_NAME]: p.value for p in metrics[name].data.data_points}

    counts, self_times = values(A.METRIC_BRICK_COUNT), values(A.METRIC_BRICK_SELF_TIME)
    elements = values(A.METRIC_BRICK_ELEMENTS)
    return {name: (counts[name], self_times[name], elements.get(name, 0)) for name in counts}


def histogram(reader: InMemoryMetricReader) -> dict[str, tuple]:
    """brick name -> (count, sum in s) of the duration histogram; {} when it recorded nothing."""
    metric = metrics_by_name(reader).get(A.METRIC_BRICK_DURATION)
    points = metric.data.data_points if metric is not None else ()
    return {p.attributes[A.BRICK_NAME]: (p.count, p.sum) for p in points}


class TestStepSamplingPolicy:
    def test_every_nth_step_keeps_multiples_of_n(self):
        policy = bs.StepSampling(every=3)
        assert [n for n in range(10) if policy.samples(n)] == [0, 3, 6, 9]

    def test_schedule_cycles_wait_warmup_active_then_stops_after_repeat(self):
        """skip 1, then (wait 1, warmup 1, active 2) twice: steps 3, 4, 7, 8 and no more."""
        policy = bs.StepSampling(wait=1, warmup=1, active=2, repeat=2, skip_first=1)
        assert [n for n in range(20) if policy.samples(n)] == [3, 4, 7, 8]

    def test_schedule_without_repeat_cycles_forever(self):
        policy = bs.StepSampling(wait=2, active=1)
        assert [n for n in range(10) if policy.samples(n)] == [2, 5, 8]

    def test_text_form_parses_to_the_same_policy(self):
        assert bs.StepSampling.parse("every=100") == bs.StepSampling(every=100)
        assert bs.StepSampling.parse(" wait=5, warmup=1,active=3 ,repeat=2") == bs.StepSampling(
            wait=5, warmup=1, active=3, repeat=2
        )

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("every=0", "every=N"),
            ("every=-1", "every must be an int >= 0"),
            ("every=2,wait=1", "either every=N or"),
            ("wait=3", "active >= 1"),
            ("often", "bad step sampling 'often'"),
            ("active=x", "active='x' is not an int"),
            ("cycles=3", "bad step sampling"),
        ],
    )
    def test_bad_policies_fail_at_set_up(self, text, message):
        with pytest.raises(ValueError, match=message):
            bs.StepSampling.parse(text)

    def test_bad_environment_value_names_the_variable(self, monkeypatch):
        monkeypatch.setenv(env.BRICKSCOPE_STEP_SAMPLING, "every=two")
        with pytest.raises(ValueError, match=env.BRICKSCOPE_STEP_SAMPLING):
            bs.configure(TracerProvider(), clock="host")

    def test_configure_rejects_other_types(self):
        with pytest.raises(TypeError, match="step_sampling"):
            bs.configure(TracerProvider(), clock="host", step_sampling=5)


class TestScheduledSpans:
    def test_schedule_produces_spans_for_exactly_the_active_steps(self, clock):
        with capture_spans(step_sampling="wait=1,warmup=1,active=2,repeat=2,skip_first=1") as captured:
            run_steps(clock, 12)
            captured.session.sync()
            spans = captured.spans
        steps = sorted(s.attributes[A.STEP_NUMBER] for s in spans if s.name == "step")
        assert steps == [3, 4, 7, 8]
        bricks = [s for s in spans if s.attributes[A.SCOPE_KIND] == "brick"]
        assert len(bricks) == 4 * 3
        assert sorted({b.attributes[A.STEP_NUMBER] for b in bricks}) == [3, 4, 7, 8]

    def test_environment_variable_sets_the_policy(self, clock, monkeypatch):
        monkeypatch.setenv(env.BRICKSCOPE_STEP_SAMPLING, "every=4")
        with capture_spans() as captured:
            run_steps(clock, 10)
            captured.session.sync()
            steps = sorted(s.attributes[A.STEP_NUMBER] for s in captured.by_name("step"))
        assert steps == [0, 4, 8]

    def test_step_policy_combines_with_an_unsampled_parent(self, clock):
        """Under an unsampled request span an active step still produces nothing."""
        provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
        with capture_spans(provider, step_sampling="every=1") as captured:
            with provider.get_tracer("app").start_as_current_span("request"):
                run_steps(clock, 2)
            captured.session.sync()
            assert captured.spans == ()


class TestExactMetricsUnderSampling:
    def metrics_of(self, clock, **configure_kwargs) -> tuple[dict, int, int, dict]:
        reader = InMemoryMetricReader()
        with capture_spans(meter_provider=MeterProvider(metric_readers=[reader]), **configure_kwargs) as captured:
            run_steps(clock, 10)
            captured.session.sync()
            metrics = brick_metrics(reader)
            spans = len(captured.spans)
            unsampled = captured.session.aggregator.unsampled_bricks
            durations = histogram(reader)
        return metrics, spans, unsampled, durations

    @pytest.mark.parametrize("policy", ["every=4", "wait=2,warmup=1,active=1", "every=1000"])
    def test_counts_and_sums_equal_the_unsampled_run(self, clock, policy):
        full, full_spans, full_unsampled, _ = self.metrics_of(clock)
        sampled, sampled_spans, sampled_unsampled, _ = self.metrics_of(clock, step_sampling=policy)
        assert sampled == full
        assert full_unsampled == 0
        assert sampled_spans < full_spans
        # 4 spans per kept step (step + 3 bricks); the other steps' 3 bricks each folded without one.
        kept = full_spans // 4 - sampled_spans // 4
        assert sampled_unsampled == 3 * kept

    @pytest.mark.parametrize("policy", ["every=4", "every=1000"])
    def test_the_all_histogram_equals_the_unsampled_run_too(self, clock, policy):
        _, _, _, full = self.metrics_of(clock, duration_histogram="all")
        _, _, _, sampled = self.metrics_of(clock, step_sampling=policy, duration_histogram="all")
        assert sampled == full
        assert full["rms_norm"] == (10, pytest.approx(10 * 10 / 1e9))

    def test_the_default_histogram_records_the_sampled_bricks_only(self, clock):
        """every=4 keeps steps 0, 4 and 8: three values per brick; the counters have all ten."""
        metrics, _, _, durations = self.metrics_of(clock, step_sampling="every=4")
        assert durations["rms_norm"] == (3, pytest.approx(3 * 10 / 1e9))
        assert durations["lm_head"] == (3, pytest.approx(3 * 7 / 1e9))
        assert metrics["rms_norm"][0] == 10

    def test_the_histogram_can_be_turned_off_and_the_counters_stay_exact(self, clock):
        full, _, _, _ = self.metrics_of(clock)
        metrics, _, _, durations = self.metrics_of(clock, step_sampling="every=4", duration_histogram="off")
        assert durations == {}
        assert metrics == full

    def test_gpu_style_resolution_folds_the_same_totals(self, clock):
        """Unsampled bricks that wait to be resolved (as GPU-timed ones do) sum to the
        same figures as those folded where they end (the host clock's fast path)."""
        folded_at_close, _, _, _ = self.metrics_of(clock, step_sampling="every=4")
        reader = InMemoryMetricReader()
        with capture_spans(step_sampling="every=4", meter_provider=MeterProvider(metric_readers=[reader])) as captured:
            captured.session.sync_processor.recorder.fold_closed = None  # the resolver's path
            run_steps(clock, 10)
            captured.session.sync()
            resolved = brick_metrics(reader)
        assert resolved == folded_at_close

    def test_figures_are_the_bricks_self_times(self, clock):
        """Hand-computed: attention 50 ns minus its nested rms_norm 10 ns, ten steps."""
        metrics, _, _, _ = self.metrics_of(clock, step_sampling="every=3")
        assert metrics["attention_score"] == (10, pytest.approx(10 * 40 / 1e9), 0)
        assert metrics["rms_norm"] == (10, pytest.approx(10 * 10 / 1e9), 640)
        assert metrics["lm_head"] == (10, pytest.approx(10 * 7 / 1e9), sum(range(10)))

    def test_an_unsampled_parent_span_still_feeds_the_metrics(self, clock):
        provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
        reader = InMemoryMetricReader()
        with capture_spans(provider, meter_provider=MeterProvider(metric_readers=[reader])) as captured:
            with provider.get_tracer("app").start_as_current_span("request"):
                run_steps(clock, 3)
            captured.session.sync()
            assert captured.spans == ()
            assert brick_metrics(reader)["rms_norm"] == (3, pytest.approx(3 * 10 / 1e9), 192)
            assert captured.session.stats()["pending"] == 0

    def test_unsampled_bricks_leave_no_exemplar_even_under_a_sampled_current_span(self, clock):
        """Resolved while a sampled user span is current, unsampled bricks must not point
        exemplars at it: only the sampled step's bricks carry exemplars, all of their spans."""
        reader = InMemoryMetricReader()
        with capture_spans(
            step_sampling="every=2", duration_histogram="all", meter_provider=MeterProvider(metric_readers=[reader])
        ) as captured:
            tracer = captured.session.tracer_provider.get_tracer("app")
            with tracer.start_as_current_span("request"):
                run_steps(clock, 2)
                captured.session.sync()
            kept = {s.context.span_id for s in captured.spans if s.name == "rms_norm"}
        metrics = metrics_by_name(reader)
        points = {p.attributes[A.BRICK_NAME]: p for p in metrics[A.METRIC_BRICK_DURATION].data.data_points}
        assert points["rms_norm"].count == 2
        assert {e.span_id for e in points["rms_norm"].exemplars} == kept

    def test_without_an_aggregator_unsampled_scopes_are_dropped_at_close(self, clock):
        with capture_spans(step_sampling="every=1000", aggregate=False) as captured:
            with bs.step(1), bs.brick("rms_norm"):
                assert captured.session.stats()["pending"] == 0
            stats = captured.session.stats()
        assert stats["pending"] == 0
        assert stats["scopes_unsampled"] == 2
