# SPDX-License-Identifier: Apache-2.0
"""OTEL_TRACES_EXPORTER=brickscope_otlp picks gRPC or HTTP as the SDK's otlp does."""

from __future__ import annotations

import sys

import pytest
from opentelemetry.sdk._configuration import _import_exporters

from brickscope.exporter.otlp import OTLPGrpcSpanExporter, OTLPHttpSpanExporter, OTLPSpanExporter


@pytest.fixture(autouse=True)
def no_protocol(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, OTLPGrpcSpanExporter),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, OTLPGrpcSpanExporter),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, OTLPHttpSpanExporter),
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": " http/protobuf"},
            OTLPHttpSpanExporter,
        ),
        (
            {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
            OTLPGrpcSpanExporter,
        ),
    ],
)
def test_the_protocol_variables_choose(monkeypatch, variables, expected):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    exporter = OTLPSpanExporter(timeout=1)
    assert type(exporter) is expected
    assert exporter.fast_encoding
    exporter.shutdown()


def test_an_unknown_protocol_is_named(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match=r"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='http/json'.*'grpc' or 'http/protobuf'"):
        OTLPSpanExporter()


def test_grpc_without_its_package_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "brickscope.exporter.otlp._grpc", None)  # as if grpcio were missing
    with pytest.raises(
        ImportError, match=r"pip install './exporters/otlp\[grpc\]'.*OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"
    ):
        OTLPSpanExporter()


def test_the_sdk_configuration_finds_each_name():
    names = ["brickscope_otlp", "brickscope_otlp_proto_grpc", "brickscope_otlp_proto_http"]
    trace_exporters, _, _ = _import_exporters(names, [], [])
    assert trace_exporters == {
        "brickscope_otlp": OTLPSpanExporter,
        "brickscope_otlp_proto_grpc": OTLPGrpcSpanExporter,
        "brickscope_otlp_proto_http": OTLPHttpSpanExporter,
    }
