# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: spans built by hand per the brickscope span contract."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from brickscope.testing import make_span
from brickscope.trace import attributes as A

TRACE_ID = 0xABCDEF0123456789ABCDEF0123456789
RESOURCE = Resource({"service.name": "svc"})
SCOPE = InstrumentationScope("brickscope", "0.1.0")
THREAD_ID = 4242
STREAM = 0x7F00


class SpanBuilder:
    """Builds contract-shaped ReadableSpans with sequential ids (through brickscope.testing.make_span).

    ``gpu=(start, end)`` makes a GPU-timed span (clock "cuda"); ``host=(start, end)``
    sets the host interval attributes; a span with neither is host-timed with its
    own start/end from ``host``.
    """

    def __init__(self) -> None:
        self._ids = itertools.count(1)

    def __call__(
        self,
        name: str,
        parent: ReadableSpan | int | None = None,
        *,
        host: tuple[int, int] | None = (0, 0),
        gpu: tuple[int, int] | None = None,
        stream: int = STREAM,
        device: int = 0,
        thread: int = THREAD_ID,
        attributes: dict[str, Any] | None = None,
        resource: Resource = RESOURCE,
        trace_id: int = TRACE_ID,
        remote_parent: bool = False,
        span_id: int | None = None,
    ) -> ReadableSpan:
        span_id = span_id if span_id is not None else next(self._ids)
        attrs: dict[str, Any] = {A.THREAD_ID: thread, A.THREAD_NAME: f"t{thread}"}
        if host is not None:
            attrs[A.HOST_START_NS] = host[0]
            attrs[A.HOST_DURATION_NS] = host[1] - host[0]
        if gpu is not None:
            attrs.update(
                {
                    A.CLOCK: A.CLOCK_CUDA,
                    A.GPU_DURATION_NS: gpu[1] - gpu[0],
                    A.GPU_DEVICE_ID: device,
                    A.GPU_STREAM_ID: stream,
                }
            )
            start, end = gpu
        else:
            attrs[A.CLOCK] = A.CLOCK_HOST
            start, end = host if host is not None else (0, 0)
        attrs.update(attributes or {})
        parent_id = parent if isinstance(parent, int) or parent is None else parent.context.span_id
        return make_span(
            span_id,
            name,
            start,
            end,
            parent_id,
            attributes=attrs,
            resource=resource,
            trace_id=trace_id,
            scope=SCOPE,
            remote_parent=remote_parent,
        )


@pytest.fixture(name="make_span")
def _make_span() -> Callable[..., ReadableSpan]:
    return SpanBuilder()


def _hex_ids(value: Any) -> Any:
    """Protobuf's JSON mapping writes ids as base64; OTLP JSON requires hex."""
    if isinstance(value, dict):
        return {
            key: base64.b64decode(item).hex()
            if key in ("traceId", "spanId", "parentSpanId") and isinstance(item, str)
            else _hex_ids(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(item) for item in value]
    return value


@pytest.fixture(name="write_otlp_json")
def _write_otlp_json() -> Callable[[Path, list[ReadableSpan]], Path]:
    """Writes spans as Collector-style OTLP JSON Lines, encoded by the official encoder."""
    json_format = pytest.importorskip("google.protobuf.json_format")
    trace_encoder = pytest.importorskip(
        "opentelemetry.exporter.otlp.proto.common.trace_encoder",
        reason="opentelemetry-exporter-otlp-proto-common encodes the reference OTLP JSON",
    )

    def write(path: Path, spans: list[ReadableSpan], per_line: int = 3) -> Path:
        with open(path, "w", encoding="utf-8") as out:
            for i in range(0, len(spans), per_line):
                request = trace_encoder.encode_spans(spans[i : i + per_line])
                message = json_format.MessageToDict(request, use_integers_for_enums=True)
                out.write(json.dumps(_hex_ids(message)) + "\n")
        return path

    return write
