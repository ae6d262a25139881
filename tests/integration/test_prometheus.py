# SPDX-License-Identifier: Apache-2.0
"""OTEL_METRICS_EXPORTER=prometheus: the aggregator's metrics on the official Prometheus reader's endpoint."""

from __future__ import annotations

import urllib.request

import pytest
from otlp_receiver import free_port

pytest.importorskip("opentelemetry.exporter.prometheus", reason="the 'prometheus' extra is not installed")
from prometheus_client.parser import text_string_to_metric_families

STEPS, LAYERS = 2, 2


def scrape(port: int) -> dict[str, list]:
    """The endpoint's samples by metric family name."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


class TestPrometheus:
    def test_brick_metrics_are_scraped(self, app):
        """While the app runs, the scrape has per-brick duration counts and element totals, and rank in target_info."""
        port = free_port()
        env = {
            "OTEL_METRICS_EXPORTER": "prometheus",
            "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
            "OTEL_EXPORTER_PROMETHEUS_PORT": str(port),
            "OTEL_SERVICE_NAME": "decoder-prom",
            "RANK": "1",
        }
        running = app.start(env, "--phases", "2", "--steps", str(STEPS), "--layers", str(LAYERS))
        try:
            running.wait_phase()
            families = scrape(port)
        finally:
            running.go_on()
            result = running.finish()
        assert result.returncode == 0, result.stderr
        counts = {
            s.labels["brickscope_brick_name"]: s.value
            for s in families["brickscope_brick_duration_seconds"]
            if s.name.endswith("_count")
        }
        assert counts == {"rms_norm": STEPS * LAYERS, "attention": STEPS * LAYERS, "ffn_down": STEPS * LAYERS}
        elements = {s.labels["brickscope_brick_name"]: s.value for s in families["brickscope_brick_elements"]}
        assert elements == {brick: STEPS * LAYERS * 4096 for brick in counts}
        # the exact counters, under the names docs/deploy.md's queries use
        exact = {s.labels["brickscope_brick_name"]: s.value for s in families["brickscope_brick_count"]}
        assert exact == counts
        sums = {s.labels["brickscope_brick_name"]: s.value for s in families["brickscope_brick_duration_seconds"]
                if s.name.endswith("_sum")}  # fmt: skip
        self_time = families["brickscope_brick_self_time_seconds"]
        assert {s.name for s in self_time} == {"brickscope_brick_self_time_seconds_total"}
        assert {s.labels["brickscope_brick_name"]: s.value for s in self_time} == pytest.approx(sums)
        (info,) = families["target_info"]
        assert info.labels["brickscope_rank"] == "1" and info.labels["service_name"] == "decoder-prom"
