# SPDX-License-Identifier: Apache-2.0
"""examples/deploy hangs together: every file parses and every reference points at something real.

Docker does not run here, so the stack itself is not started; these checks catch what
breaks such a stack silently: a pipeline naming an undefined component, an exporter
aimed at a service or port nobody listens on, a mount of a file that does not exist,
a query in docs/deploy.md using an attribute brickscope never writes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from brickscope.trace import attributes as A

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "examples" / "deploy"
#: Component types of the Collector this example uses, all in otelcol-contrib.
KNOWN_COMPONENTS = {
    "receivers": {"otlp"},
    "processors": {"memory_limiter", "batch"},
    "exporters": {"otlp", "prometheus", "debug"},
    "extensions": {"health_check"},
}
#: Ports the services listen on inside the compose network (Jaeger's are its image defaults).
JAEGER_OTLP_GRPC, JAEGER_UI = 4317, 16686


def load(name: str) -> Any:
    return yaml.safe_load((DEPLOY / name).read_text())


def host_port(endpoint: str) -> tuple[str, int]:
    """``http://tempo:3200`` or ``tempo:4317`` -> ("tempo", port)."""
    match = re.fullmatch(r"(?:\w+://)?([\w.-]+):(\d+)/?", endpoint)
    assert match, endpoint
    return match.group(1), int(match.group(2))


@pytest.fixture(scope="module")
def compose() -> dict:
    return load("docker-compose.yaml")


@pytest.fixture(scope="module")
def collector() -> dict:
    return load("otel-collector.yaml")


def listen_port(compose: dict, service: str) -> dict[str, int]:
    """What each backend service listens on, read from its own configuration."""
    tempo = load("tempo.yaml")
    return {
        "tempo": {
            "otlp": host_port(tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])[1],
            "http": tempo["server"]["http_listen_port"],
        },
        "jaeger": {"otlp": JAEGER_OTLP_GRPC, "http": JAEGER_UI},
        "prometheus": {"http": 9090},
    }[service]


class TestCollectorConfig:
    def test_pipelines_use_defined_components(self, collector):
        """Every receiver, processor and exporter a pipeline names is defined, and each definition is used."""
        used: dict[str, set[str]] = {kind: set() for kind in ("receivers", "processors", "exporters")}
        for pipeline in collector["service"]["pipelines"].values():
            for kind in used:
                used[kind].update(pipeline.get(kind, []))
        for kind, names in used.items():
            assert names == set(collector[kind]), kind
        assert set(collector["service"]["extensions"]) == set(collector["extensions"])

    def test_components_exist_in_the_contrib_distribution(self, collector):
        """Each component type (before the ``/``) is one otelcol-contrib ships."""
        for kind, known in KNOWN_COMPONENTS.items():
            for name in collector.get(kind, {}):
                assert name.split("/")[0] in known, (kind, name)

    def test_traces_and_metrics_pipelines(self, collector):
        """Traces go to Jaeger and Tempo, metrics to Prometheus, memory_limiter first."""
        pipelines = collector["service"]["pipelines"]
        assert set(pipelines["traces"]["exporters"]) == {"otlp/jaeger", "otlp/tempo"}
        assert pipelines["metrics"]["exporters"] == ["prometheus"]
        for pipeline in pipelines.values():
            assert pipeline["processors"][0] == "memory_limiter"

    def test_exporters_reach_listening_services(self, collector, compose):
        """otlp/jaeger and otlp/tempo point at compose services on the port their OTLP receiver uses."""
        for name in ("otlp/jaeger", "otlp/tempo"):
            host, port = host_port(collector["exporters"][name]["endpoint"])
            assert host in compose["services"]
            assert port == listen_port(compose, host)["otlp"]


class TestCompose:
    def test_services(self, compose):
        """The stack the docs describe: Collector, Jaeger, Tempo, Prometheus, Grafana."""
        assert {"otel-collector", "jaeger", "tempo", "prometheus", "grafana"} <= set(compose["services"])

    def test_mounted_files_exist_and_are_the_ones_read(self, compose):
        """Every bind mount names a file of examples/deploy, and each config flag reads its mount."""
        for name, service in compose["services"].items():
            for volume in service.get("volumes", []):
                source, target = volume.split(":")[:2]
                if source.startswith("./"):
                    assert (DEPLOY / source).exists(), (name, source)
                    flags = " ".join(service.get("command", []))
                    if (DEPLOY / source).is_file() and name != "grafana":
                        assert target in flags, (name, target, flags)

    def test_collector_publishes_its_otlp_receivers(self, compose, collector):
        """The host ports brickscope is pointed at are the Collector's receiver ports."""
        published = {int(p.split(":")[0]) for p in compose["services"]["otel-collector"]["ports"]}
        for protocol in ("grpc", "http"):
            _, port = host_port(collector["receivers"]["otlp"]["protocols"][protocol]["endpoint"])
            assert port in published

    def test_prometheus_scrapes_the_collector(self, collector):
        """Prometheus's target is the Collector's prometheus exporter."""
        (job,) = load("prometheus.yaml")["scrape_configs"]
        (target,) = job["static_configs"][0]["targets"]
        assert host_port(target) == ("otel-collector", host_port(collector["exporters"]["prometheus"]["endpoint"])[1])


class TestGrafana:
    def test_datasources_reach_their_services(self, compose):
        """Tempo, Jaeger and Prometheus data sources use the services' HTTP ports; exemplars open Tempo."""
        sources = load("grafana/provisioning/datasources/datasources.yaml")["datasources"]
        uids = {source["uid"] for source in sources}
        for source in sources:
            host, port = host_port(source["url"])
            assert host in compose["services"] and port == listen_port(compose, host)["http"]
        prometheus = next(s for s in sources if s["type"] == "prometheus")
        for destination in prometheus["jsonData"]["exemplarTraceIdDestinations"]:
            assert destination["datasourceUid"] in uids


class TestDeployDoc:
    def test_queries_use_attributes_brickscope_writes(self):
        """Every brickscope attribute a TraceQL or PromQL query in docs/deploy.md uses is a real key."""
        keys = {value for name, value in vars(A).items() if name.isupper() and isinstance(value, str)}
        text = (ROOT / "docs" / "deploy.md").read_text()
        traceql = set(re.findall(r"(?:span|resource)\.(brickscope\.[a-z_.]+[a-z_])", text))
        promql = set(re.findall(r"\b(brickscope_(?:rank|local_rank|world_size|brick_name|brick_category))\b", text))
        assert traceql, "docs/deploy.md has no TraceQL query"
        assert traceql <= keys, traceql - keys
        assert promql <= {key.replace(".", "_") for key in keys}  # how Prometheus spells them
