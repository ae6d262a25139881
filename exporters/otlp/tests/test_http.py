# SPDX-License-Identifier: Apache-2.0
"""The HTTP exporter sends the official encoding's bytes through the official exporter's transport."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as official_encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as OfficialExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from brickscope.exporter.otlp import OTLPHttpSpanExporter, _http


class Receiver:
    """A loopback OTLP/HTTP endpoint that keeps each request body and answers ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.bodies: list[bytes] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                receiver.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    served = Receiver()
    yield served
    served.close()


def test_sends_the_official_encoding(receiver, make_spans):
    exporter = OTLPHttpSpanExporter(endpoint=receiver.endpoint, timeout=10)
    assert exporter.fast_encoding
    first, second = make_spans(20), make_spans(7)
    assert exporter.export(first) is SpanExportResult.SUCCESS
    assert exporter.export(second) is SpanExportResult.SUCCESS
    exporter.shutdown()
    expected = [official_encode_spans(batch).SerializePartialToString() for batch in (first, second)]
    assert receiver.bodies == expected


def test_a_refusal_is_a_failed_export(make_spans):
    refusing = Receiver(status=400)  # not retryable: one request
    try:
        exporter = OTLPHttpSpanExporter(endpoint=refusing.endpoint, timeout=10)
        assert exporter.export(make_spans(3)) is SpanExportResult.FAILURE
        assert len(refusing.bodies) == 1
        exporter.shutdown()
    finally:
        refusing.close()


def test_a_batch_over_the_size_limit_is_dropped_unsent(receiver, caplog, make_spans):
    batch = make_spans(10)
    size = len(official_encode_spans(batch).SerializePartialToString())
    exporter = OTLPHttpSpanExporter(endpoint=receiver.endpoint, timeout=10, max_request_size=size - 1)
    with caplog.at_level(logging.WARNING):
        assert exporter.export(batch) is SpanExportResult.FAILURE
    assert receiver.bodies == []
    assert f"serialized size {size} bytes exceeds max_request_size {size - 1}" in caplog.text
    exporter.shutdown()


def test_after_shutdown_nothing_is_sent(receiver, make_spans):
    exporter = OTLPHttpSpanExporter(endpoint=receiver.endpoint, timeout=10)
    exporter.shutdown()
    assert exporter.export(make_spans(2)) is SpanExportResult.FAILURE
    assert receiver.bodies == []


def test_another_layout_falls_back_to_the_official_encoder(receiver, monkeypatch, caplog, make_spans):
    """Without the 1.45 internals: one warning at construction, then the official export."""
    monkeypatch.setattr(_http, "_is_request_too_large", None)
    official_calls = []
    monkeypatch.setattr(
        OfficialExporter, "export", lambda self, batch: official_calls.append(len(batch)) or SpanExportResult.SUCCESS
    )
    with caplog.at_level(logging.WARNING):
        exporter = OTLPHttpSpanExporter(endpoint=receiver.endpoint, timeout=10)
    assert not exporter.fast_encoding
    assert "encoded by the official (slower) encoder" in caplog.text
    assert exporter.export(make_spans(4)) is SpanExportResult.SUCCESS
    assert official_calls == [4]
    exporter.shutdown()


@pytest.mark.parametrize(
    ("distribution", "version"),
    [("opentelemetry-sdk", "1.46.0"), ("opentelemetry-exporter-otlp-proto-http", "1.46.0"), ("opentelemetry-sdk", "1.44.0")],
)
def test_a_release_outside_those_checked_uses_the_official_encoder(
    receiver, monkeypatch, caplog, make_spans, distribution, version
):
    """An SDK or official exporter outside 1.45 (forced past the pins): one warning naming it,
    then the official export, though the 1.45 layout is there."""
    monkeypatch.setitem(_http.VERSIONS, distribution, version)
    official_calls = []
    monkeypatch.setattr(
        OfficialExporter, "export", lambda self, batch: official_calls.append(len(batch)) or SpanExportResult.SUCCESS
    )
    with caplog.at_level(logging.WARNING, logger=_http.__name__):
        exporter = OTLPHttpSpanExporter(endpoint=receiver.endpoint, timeout=10)
    assert not exporter.fast_encoding
    assert [record.getMessage() for record in caplog.records if record.name == _http.__name__] == [
        f"brickscope OTLPHttpSpanExporter: {distribution} {version} is outside the releases checked (1.45); "
        "spans are encoded by the official (slower) encoder"
    ]
    assert exporter.export(make_spans(3)) is SpanExportResult.SUCCESS
    assert official_calls == [3]
    exporter.shutdown()
