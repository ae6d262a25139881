# SPDX-License-Identifier: Apache-2.0
"""The official OTLP/gRPC span exporter with brickscope's encoder.

Everything but the encoding is the official exporter's (opentelemetry-exporter-otlp-proto-grpc):
its arguments, ``OTEL_EXPORTER_OTLP_*`` variables, channel, TLS, compression, headers,
retries (with the server's RetryInfo), reconnection and its own metrics. Two of its
protected methods are overridden: ``_translate_data`` returns the request's bytes from
:class:`~brickscope.exporter.otlp._encode.SpanEncoder` instead of a protobuf message, and
``_initialize_channel_and_stub`` (called at construction and at each reconnection) puts
a stub on the channel that sends those bytes as they are. The constructor checks that
its stub is the one in use; where the official exporter is laid out otherwise (it did not
call the override) it logs one warning and sends the official encoding.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as _OfficialOTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace import ReadableSpan

from brickscope.exporter.otlp._encode import SpanEncoder

logger = logging.getLogger(__name__)

#: The OTLP trace service's one method (opentelemetry/proto/collector/trace/v1/trace_service.proto).
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class _EncodedTraceServiceStub:
    """``TraceServiceStub`` whose ``Export`` takes the request already serialised."""

    def __init__(self, channel: Any) -> None:
        # No request serializer: gRPC sends the bytes it is given.
        self.Export = channel.unary_unary(EXPORT_METHOD, response_deserializer=ExportTraceServiceResponse.FromString)


class OTLPGrpcSpanExporter(_OfficialOTLPSpanExporter):
    """OTLP/gRPC span exporter: the official one, encoding ~4x cheaper.

    Takes the official exporter's arguments and environment variables, and sends the same
    request bytes as the official encoding.

    .. versionadded:: 0.1.0
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._encoder = SpanEncoder()
        super().__init__(*args, **kwargs)
        #: False where the official exporter did not take the encoded stub: the official
        #: encoding is sent.
        self.fast_encoding = isinstance(getattr(self, "_client", None), _EncodedTraceServiceStub)
        if not self.fast_encoding:
            logger.warning(
                "brickscope OTLPGrpcSpanExporter: this opentelemetry-exporter-otlp-proto-grpc is laid out "
                "differently from 1.45; spans are encoded by the official (slower) encoder"
            )

    def _initialize_channel_and_stub(self) -> None:
        super()._initialize_channel_and_stub()
        self._client = _EncodedTraceServiceStub(self._channel)

    def _translate_data(self, data: Sequence[ReadableSpan]) -> Any:
        if not self.fast_encoding:
            return super()._translate_data(data)
        return self._encoder.encode(data)
