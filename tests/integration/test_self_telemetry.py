# SPDX-License-Identifier: Apache-2.0
"""Self-telemetry an operator reads: export bytes as the receiver counts them, and the
record's estimated CPU time, through a real SDK MeterProvider."""

from __future__ import annotations

import os

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

import brickscope as bs


def self_metric(reader: InMemoryMetricReader, name: str) -> dict[tuple, int]:
    data = reader.get_metrics_data()
    return {
        tuple(sorted(p.attributes.items())): p.value
        for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics if m.name == name
        for p in m.data.data_points
    }  # fmt: skip


def decode(steps: int) -> None:
    for number in range(steps):
        with bs.step(number), bs.layer(0):
            for name in ("rms_norm", "attention_score", "ffn_down"):
                with bs.brick(name, elements=16):
                    pass


class TestExportBytes:
    @pytest.mark.parametrize("exporter_class", ["official", "brickscope"])
    @pytest.mark.parametrize("compression", [None, "gzip"])
    def test_otlp_http_bytes_are_the_request_bodies_the_receiver_got(self, http_receiver, compression, exporter_class):
        from opentelemetry.exporter.otlp.proto.http import Compression

        if exporter_class == "brickscope":  # the official exporter with brickscope's encoder
            exporter_type = pytest.importorskip("brickscope.exporter.otlp").OTLPHttpSpanExporter
        else:
            exporter_type = OTLPSpanExporter
        exporter = exporter_type(
            endpoint=f"{http_receiver.endpoint}/v1/traces",
            compression=Compression.Gzip if compression else Compression.NoCompression,
        )
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=16))
        reader = InMemoryMetricReader()
        session = bs.configure(provider, clock="host", meter_provider=MeterProvider(metric_readers=[reader]))
        decode(6)  # 6 x (step, layer, 3 bricks) = 30 spans, in batches of 16
        session.shutdown()
        stats = session.stats()
        assert stats["spans_exported"] == 30
        assert http_receiver.body_bytes["traces"] > 0
        assert stats["export_bytes"] == http_receiver.body_bytes["traces"]
        assert self_metric(reader, "brickscope.export.bytes") == {(): http_receiver.body_bytes["traces"]}
        provider.shutdown()

    def test_perfetto_bytes_are_what_the_file_grew_by(self, tmp_path):
        perfetto = pytest.importorskip("brickscope.exporter.perfetto")
        path = tmp_path / "run.pftrace"
        exporter = perfetto.PerfettoSpanExporter(path)
        header = os.path.getsize(path)  # written before brickscope's session opened
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        session = bs.configure(provider, clock="host")
        decode(3)
        session.shutdown()
        assert session.stats()["export_bytes"] == os.path.getsize(path) - header > 0
        provider.shutdown()

    def test_an_exporter_that_says_nothing_counts_nothing(self):
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
        session = bs.configure(provider, clock="host")
        decode(2)
        session.shutdown()
        assert session.stats()["spans_exported"] == 10
        assert session.stats()["export_bytes"] == 0


class TestRecordCpuEstimate:
    def test_records_times_the_calibrated_cost_read_through_the_meter_provider(self):
        """every=2 over 3 steps: steps 0 and 2 emit 5 spans each, step 1's 5 scopes are
        unsampled: 15 records, each estimated at the calibrated cost (set here: 700 ns)."""
        reader = InMemoryMetricReader()
        session = bs.configure(
            TracerProvider(), clock="host", step_sampling="every=2", meter_provider=MeterProvider(metric_readers=[reader])
        )
        session.sync_processor.record_ns = 700.0
        decode(3)
        session.sync()
        assert session.stats()["record_cpu_ns_estimated"] == 15 * 700
        assert self_metric(reader, "brickscope.record.cpu_time") == {(("brickscope.thread", "application"),): 15 * 700}
        session.shutdown()
