# SPDX-License-Identifier: Apache-2.0
"""The gRPC exporter sends the official encoding's bytes over the official exporter's channel."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as official_encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as OfficialExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from brickscope.exporter.otlp import OTLPGrpcSpanExporter, _grpc
from brickscope.exporter.otlp._grpc import _EncodedTraceServiceStub


class Receiver:
    """A loopback OTLP/gRPC TraceService that keeps each request's bytes and answers ``code``."""

    def __init__(self, code: grpc.StatusCode = grpc.StatusCode.OK) -> None:
        self.requests: list[bytes] = []

        def export(request: bytes, context: grpc.ServicerContext) -> bytes:
            self.requests.append(request)
            if code is not grpc.StatusCode.OK:
                context.abort(code, "refused by the test")
            return ExportTraceServiceResponse().SerializeToString()

        handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {"Export": grpc.unary_unary_rpc_method_handler(export)},  # bytes in, bytes out
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"127.0.0.1:{port}"
        self.server.start()

    def close(self) -> None:
        self.server.stop(grace=None).wait(timeout=10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    served = Receiver()
    yield served
    served.close()


def exporter_to(endpoint: str) -> OTLPGrpcSpanExporter:
    return OTLPGrpcSpanExporter(endpoint=endpoint, insecure=True, timeout=10)


def test_sends_the_official_encoding(receiver, make_spans):
    exporter = exporter_to(receiver.endpoint)
    assert exporter.fast_encoding
    first, second = make_spans(20), make_spans(3)
    assert exporter.export(first) is SpanExportResult.SUCCESS
    assert exporter.export(second) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert receiver.requests == [official_encode_spans(b).SerializeToString() for b in (first, second)]


def test_a_reconnection_keeps_the_encoded_stub(receiver, make_spans):
    """The official exporter re-creates channel and stub after UNAVAILABLE: still bytes."""
    exporter = exporter_to(receiver.endpoint)
    exporter._initialize_channel_and_stub()  # what the official retry loop calls
    assert isinstance(exporter._client, _EncodedTraceServiceStub)
    batch = make_spans(5)
    assert exporter.export(batch) is SpanExportResult.SUCCESS
    assert receiver.requests == [official_encode_spans(batch).SerializeToString()]
    exporter.shutdown()


def test_a_refusal_is_a_failed_export(make_spans):
    refusing = Receiver(grpc.StatusCode.INVALID_ARGUMENT)  # not retryable: one call
    try:
        exporter = exporter_to(refusing.endpoint)
        assert exporter.export(make_spans(2)) is SpanExportResult.FAILURE
        assert len(refusing.requests) == 1
        exporter.shutdown()
    finally:
        refusing.close()


def test_another_layout_falls_back_to_the_official_encoder(receiver, monkeypatch, caplog, make_spans):
    """An official exporter that never calls the stub hook: one warning, the official encoding sent."""
    monkeypatch.setattr(
        OTLPGrpcSpanExporter, "_initialize_channel_and_stub", OfficialExporter._initialize_channel_and_stub
    )
    with caplog.at_level(logging.WARNING):
        exporter = exporter_to(receiver.endpoint)
    assert not exporter.fast_encoding
    assert "encoded by the official (slower) encoder" in caplog.text
    batch = make_spans(4)
    assert exporter.export(batch) is SpanExportResult.SUCCESS
    assert receiver.requests == [official_encode_spans(batch).SerializeToString()]
    exporter.shutdown()


@pytest.mark.parametrize("distribution", ["opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-grpc"])
def test_a_release_outside_those_checked_uses_the_official_encoder(
    receiver, monkeypatch, caplog, make_spans, distribution
):
    """An SDK or official exporter newer than 1.45 (forced past the pins): one warning naming
    it, the official stub left in place, the official encoding sent."""
    monkeypatch.setitem(_grpc.VERSIONS, distribution, "1.46.0")
    with caplog.at_level(logging.WARNING, logger=_grpc.__name__):
        exporter = exporter_to(receiver.endpoint)
    assert not exporter.fast_encoding
    assert not isinstance(exporter._client, _EncodedTraceServiceStub)
    assert [record.getMessage() for record in caplog.records if record.name == _grpc.__name__] == [
        f"brickscope OTLPGrpcSpanExporter: {distribution} 1.46.0 is outside the releases checked (1.45); "
        "spans are encoded by the official (slower) encoder"
    ]
    batch = make_spans(4)
    assert exporter.export(batch) is SpanExportResult.SUCCESS
    assert receiver.requests == [official_encode_spans(batch).SerializeToString()]
    exporter.shutdown()
