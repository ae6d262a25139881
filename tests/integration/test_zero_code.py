# SPDX-License-Identifier: Apache-2.0
"""``opentelemetry-instrument`` installs brickscope in an app that has no set-up code at all."""

from __future__ import annotations

from typing import Any

import pytest

from brickscope.trace import attributes as A

STEPS, LAYERS = 2, 1
SPANS_PER_STEP = 1 + LAYERS * 7
EXPECTED_SPANS = STEPS * SPANS_PER_STEP + 1  # and the app's "generate" span
APP_ARGS = ("--steps", str(STEPS), "--layers", str(LAYERS), "--no-setup")
INSTRUMENT = ("opentelemetry-instrument", "--traces_exporter", "otlp", "--metrics_exporter", "otlp")


def zero_code_env(receiver: Any, **extra: str) -> dict[str, str]:
    """Only where to send and who we are: the exporters are chosen on the command line."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_SERVICE_NAME": "zero-code",
        "RANK": "5",
        "WORLD_SIZE": "6",
        **extra,
    }


def run_instrumented(app: Any, receiver: Any, prefix: tuple[str, ...] = INSTRUMENT, **extra: str) -> Any:
    result = app.run(zero_code_env(receiver, **extra), *APP_ARGS, prefix=prefix)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert receiver.wait_for(lambda r: len(r.spans()) >= EXPECTED_SPANS, timeout_s=60), result.stderr
    return result


class TestOpentelemetryInstrument:
    @pytest.mark.parametrize(
        "configurator",
        [None, "brickscope", "configurator"],
        ids=["whichever-loads-first", "brickscope-configurator", "opentelemetry-distro-configurator"],
    )
    def test_bricks_reach_otlp_whatever_configurator_runs(self, app, grpc_receiver, configurator):
        """With brickscope's or opentelemetry-distro's configurator, every scope arrives in the app's trace."""
        extra = {"OTEL_PYTHON_CONFIGURATOR": configurator} if configurator else {}
        result = run_instrumented(app, grpc_receiver, **extra)
        spans = grpc_receiver.spans()
        assert len(spans) == EXPECTED_SPANS
        assert {s.trace_id for s in spans} == {result.report["trace_id"]}
        kinds = sorted(s.attributes.get(A.SCOPE_KIND, s.name) for s in spans)
        assert kinds == sorted(
            ["generate"] + ["step"] * STEPS + ["layer"] * STEPS * LAYERS + ["brick", "kernel"] * 3 * STEPS * LAYERS
        )
        assert sorted(s.span_id for s in spans if s.name == "step") == sorted(result.report["steps"])

    def test_resource_has_service_and_rank(self, app, grpc_receiver):
        """Spans carry the service name, the SDK's auto-instrumentation version and the launcher's rank."""
        run_instrumented(app, grpc_receiver)
        resource = grpc_receiver.spans()[0].resource
        assert resource["service.name"] == "zero-code"
        assert resource["telemetry.auto.version"]
        assert (resource[A.RANK], resource[A.WORLD_SIZE]) == (5, 6)

    def test_metrics_with_the_brickscope_configurator(self, app, grpc_receiver):
        """The aggregator's metrics use the SDK MeterProvider the configurator built, rank on its resource."""
        run_instrumented(app, grpc_receiver, OTEL_PYTHON_CONFIGURATOR="brickscope")
        assert grpc_receiver.wait_for(
            lambda r: any(p.metric == A.METRIC_BRICK_DURATION and p.count == STEPS * LAYERS for p in r.points()),
            timeout_s=60,
        )
        points = [p for p in grpc_receiver.latest_points().values() if p.metric == A.METRIC_BRICK_DURATION]
        assert {p.attributes[A.BRICK_NAME] for p in points} == {"rms_norm", "attention", "ffn_down"}
        assert all(p.count == STEPS * LAYERS for p in points)
        assert all(p.exemplars for p in points)
        assert points[0].resource[A.RANK] == 5

    def test_user_resource_attributes_win(self, app, grpc_receiver):
        """OTEL_RESOURCE_ATTRIBUTES overrides what brickscope detects (here the rank)."""
        run_instrumented(
            app, grpc_receiver, OTEL_PYTHON_CONFIGURATOR="brickscope", OTEL_RESOURCE_ATTRIBUTES="brickscope.rank=42"
        )
        assert grpc_receiver.spans()[0].resource[A.RANK] == "42"  # a string, as the variable gives it

    @pytest.mark.parametrize("setup", ["opentelemetry-instrument", "configure"])
    def test_otlp_and_perfetto_get_the_same_spans(self, app, grpc_receiver, tmp_path, setup):
        """OTEL_TRACES_EXPORTER=otlp,perfetto sends the same spans, ids and times to both exporters."""
        perfetto = pytest.importorskip("brickscope.exporter.perfetto")
        path = tmp_path / "trace.pftrace"
        if setup == "configure":  # the app calls bs.configure(); the variables do the rest
            env = zero_code_env(grpc_receiver, OTEL_TRACES_EXPORTER="otlp,perfetto", BRICKSCOPE_PERFETTO_PATH=str(path))
            result = app.run(env, *APP_ARGS[:-1])
            assert result.returncode == 0, result.stderr
            assert grpc_receiver.wait_for(lambda r: len(r.spans()) >= EXPECTED_SPANS, timeout_s=60)
        else:
            prefix = ("opentelemetry-instrument", "--traces_exporter", "otlp,perfetto", "--metrics_exporter", "none")
            run_instrumented(app, grpc_receiver, prefix=prefix, BRICKSCOPE_PERFETTO_PATH=str(path))
        from_otlp = {
            (s.trace_id, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns) for s in grpc_receiver.spans()
        }
        from_perfetto = {
            (
                format(s.context.trace_id, "032x"),
                format(s.context.span_id, "016x"),
                format(s.parent.span_id, "016x") if s.parent else "",
                s.name,
                s.start_time,
                s.end_time,
            )
            for s in perfetto.read_spans(str(path))
        }
        assert len(from_otlp) == EXPECTED_SPANS
        assert from_perfetto == from_otlp

    def test_bad_brickscope_setting_leaves_the_rest_working(self, app, grpc_receiver):
        """A bad BRICKSCOPE_* value is logged once, naming it; the app and its other telemetry run on."""
        result = app.run(zero_code_env(grpc_receiver, BRICKSCOPE_SYNC_MODE="sometimes"), *APP_ARGS, prefix=INSTRUMENT)
        assert result.returncode == 0, result.stderr
        assert result.stderr.count("BRICKSCOPE_SYNC_MODE") == 1, result.stderr
        assert grpc_receiver.wait_for(lambda r: len(r.spans()) >= 1, timeout_s=60)
        assert [s.name for s in grpc_receiver.spans()] == ["generate"]
