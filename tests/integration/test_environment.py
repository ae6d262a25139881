# SPDX-License-Identifier: Apache-2.0
"""Providers built from the standard OTEL_* variables through the SDK's own code; bad values fail early."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from harness import clean_environment
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

import brickscope as bs
from brickscope.sdk import _environment

RESOURCE = Resource.create({"service.name": "env-test"})


def exporters_of(provider: TracerProvider) -> list[type]:
    processors = provider._active_span_processor._span_processors  # no public view
    return [type(p.span_exporter) for p in processors if isinstance(p, BatchSpanProcessor)]


def queue_size(provider: TracerProvider) -> int:
    processors = provider._active_span_processor._span_processors
    (processor,) = [p for p in processors if isinstance(p, BatchSpanProcessor)]
    return processor._batch_processor._max_queue_size


@pytest.fixture
def built():
    """Providers a test builds, shut down after it (their exporters may hold threads)."""
    providers: list = []
    yield providers
    for provider in providers:
        provider.shutdown()


class TestTracerProviderFromEnvironment:
    def test_exporters_by_name(self, monkeypatch, built):
        """OTEL_TRACES_EXPORTER names entry points; each exporter gets a BatchSpanProcessor."""
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console,otlp")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider = _environment.tracer_provider_from_environment(RESOURCE)
        built.append(provider)
        assert exporters_of(provider) == [ConsoleSpanExporter, OTLPSpanExporter]
        assert provider.resource is RESOURCE

    def test_no_exporter_named(self, built):
        """Without OTEL_TRACES_EXPORTER the provider has no exporter (the SDK's reading of unset)."""
        provider = _environment.tracer_provider_from_environment(RESOURCE)
        built.append(provider)
        assert exporters_of(provider) == []

    def test_sampler_from_the_environment(self, monkeypatch, built):
        """OTEL_TRACES_SAMPLER and its argument pick the provider's sampler."""
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
        provider = _environment.tracer_provider_from_environment(RESOURCE)
        built.append(provider)
        assert isinstance(provider.sampler, TraceIdRatioBased) and provider.sampler.rate == 0.25

    def test_default_sampler_is_parent_based(self, built):
        """With no sampler named, the SDK's default (parent-based always-on) applies."""
        provider = _environment.tracer_provider_from_environment(RESOURCE)
        built.append(provider)
        assert isinstance(provider.sampler, ParentBased)

    def test_queue_holds_a_burst(self, monkeypatch, built):
        """Unless OTEL_BSP_MAX_QUEUE_SIZE says otherwise, the queue holds brickscope's pending bound."""
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
        provider = _environment.tracer_provider_from_environment(RESOURCE, min_queue_size=16384)
        built.append(provider)
        assert queue_size(provider) == 16384
        monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "1000")
        provider = _environment.tracer_provider_from_environment(RESOURCE, min_queue_size=16384)
        built.append(provider)
        assert queue_size(provider) == 1000


class TestMeterProviderFromEnvironment:
    def test_none_named_builds_nothing(self, monkeypatch):
        """No OTEL_METRICS_EXPORTER, or "none": no MeterProvider."""
        assert _environment.meter_provider_from_environment(RESOURCE) is None
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
        assert _environment.meter_provider_from_environment(RESOURCE) is None

    def test_push_exporter_gets_a_periodic_reader(self, monkeypatch, built):
        """A push exporter is wrapped in the SDK's PeriodicExportingMetricReader."""
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "console")
        provider = _environment.meter_provider_from_environment(RESOURCE)
        built.append(provider)
        assert isinstance(provider, MeterProvider)
        (reader,) = provider._metric_readers  # no public view
        assert isinstance(reader, PeriodicExportingMetricReader)


class TestBadValues:
    @pytest.mark.parametrize(
        ("variables", "match"),
        [
            ({"OTEL_TRACES_EXPORTER": "otlpp"}, r"OTEL_TRACES_EXPORTER='otlpp'.*installed: .*console"),
            ({"OTEL_METRICS_EXPORTER": "statsd"}, r"OTEL_METRICS_EXPORTER='statsd'"),
            (
                {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"},
                r"carrier-pigeon.*OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            ({"OTEL_TRACES_SAMPLER": "sometimes"}, r"unknown OTEL_TRACES_SAMPLER='sometimes'.*always_on"),
            (
                {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"},
                r"OTEL_TRACES_SAMPLER_ARG='half'",
            ),
            ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"}, r"between 0 and 1"),
            ({"OTEL_PYTHON_ID_GENERATOR": "sequential"}, r"OTEL_PYTHON_ID_GENERATOR='sequential'"),
            ({"OTEL_SDK_DISABLED": "1"}, r"OTEL_SDK_DISABLED='1' is not 'true' or 'false'"),
        ],
    )
    def test_configure_names_the_variable(self, monkeypatch, variables, match):
        """configure() with no provider rejects a bad OTEL_* value with an error naming it."""
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        with pytest.raises(ValueError, match=match):
            bs.configure(clock="host")

    def test_variables_not_used_are_not_checked(self, monkeypatch):
        """With the application's own provider and meter provider, OTEL_TRACES_EXPORTER is not read."""
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlpp")
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "statsd")
        session = bs.configure(TracerProvider(), clock="host", meter_provider=MeterProvider())
        assert session.sync_processor is not None


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (OpenTelemetry's global providers can be set once per process)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=clean_environment(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


class TestGlobalProviders:
    def test_configure_builds_and_registers_from_the_environment(self):
        """configure() with no SDK provider registered builds one from OTEL_* and registers it globally."""
        result = run_python(
            """
            import brickscope as bs
            from opentelemetry import metrics, trace
            session = bs.configure()
            provider = trace.get_tracer_provider()
            assert provider is session.tracer_provider, provider
            assert type(provider.sampler).__name__ == "_AlwaysOff", provider.sampler
            assert provider.resource.attributes["service.name"] == "from-env"
            assert type(metrics.get_meter_provider()).__name__ == "MeterProvider"
            with bs.step(0), bs.brick("rms_norm"):
                pass
            print(session.stats()["scopes_unsampled"])
            """,
            OTEL_TRACES_SAMPLER="always_off",
            OTEL_SERVICE_NAME="from-env",
            OTEL_METRICS_EXPORTER="console",
            OTEL_METRIC_EXPORT_INTERVAL="600000",
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[0] == "2"

    def test_existing_provider_gets_brickscope_in_front(self):
        """An SDK provider the application registered is used: brickscope first, its exporters, the aggregator last."""
        result = run_python(
            """
            import brickscope as bs
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor, ConsoleSpanExporter
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
            trace.set_tracer_provider(provider)
            session = bs.configure(clock="host")
            assert session.tracer_provider is provider
            print([type(p).__name__ for p in provider._active_span_processor._span_processors])
            """,
            OTEL_TRACES_EXPORTER="otlpp",  # not read: the application configured tracing itself
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "['GpuSyncSpanProcessor', 'SimpleSpanProcessor', 'CategoryAggregator']"

    def test_sdk_disabled_turns_scopes_off(self):
        """OTEL_SDK_DISABLED=true: configure() succeeds, starts no exporter, and scopes record nothing."""
        result = run_python(
            """
            import brickscope as bs
            session = bs.configure(clock="host")
            with bs.step(0), bs.brick("rms_norm"):
                pass
            session.sync()
            processors = session.tracer_provider._active_span_processor._span_processors
            print(session.stats()["spans_emitted"], len(processors))
            """,
            OTEL_SDK_DISABLED="TRUE",
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["0", "2"]  # brickscope's two processors, no exporter
        assert "Failed to export" not in result.stderr
