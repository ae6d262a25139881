# SPDX-License-Identifier: Apache-2.0
"""The official OTLP/gRPC span exporter with brickscope's encoder.

Everything but the encoding is the official exporter's (opentelemetry-exporter-otlp-proto-grpc):
its arguments, ``OTEL_EXPORTER_OTLP_*`` variables, channel, TLS, compression, headers,
retries (with the server's RetryInfo), reconnection and its own metrics. Two of its
protected methods are overridden: ``_translate_data`` returns the request's bytes from
:class:`~brickscope.exporter.otlp._encode.SpanEncoder` instead of a protobuf message, and
``_initialize_channel_and_stub`` (called at construction and at each reconnection) puts
a stub on the channel that sends those bytes as they are. On a release outside those
checked (:mod:`~brickscope.exporter.otlp._checked`) neither override takes effect; else
the constructor checks that its stub is the one in use. Either way, where the fast
encoding is off (an unchecked release, or an official exporter laid out otherwise that
did not call the override) it logs one warning and sends the official encoding.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as _OfficialOTLPSpanExporter
from opentelemetry.exporter.otlp.proto.grpc.version import __version__ as _OFFICIAL_VERSION
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.version import __version__ as _SDK_VERSION

from brickscope.exporter.otlp import _checked
from brickscope.exporter.otlp._encode import SpanEncoder

logger = logging.getLogger(__name__)

#: The releases the fast encoding depends on, read once; tests set them to fake others.
VERSIONS = {"opentelemetry-sdk": _SDK_VERSION, "opentelemetry-exporter-otlp-proto-grpc": _OFFICIAL_VERSION}

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
        # Decided before the official constructor, which calls _initialize_channel_and_stub.
        reason = self._unchecked = _checked.outside(VERSIONS)
        super().__init__(*args, **kwargs)
        if reason is None and not isinstance(getattr(self, "_client", None), _EncodedTraceServiceStub):
            reason = "this opentelemetry-exporter-otlp-proto-grpc is laid out differently from 1.45"
        #: False on a release outside those checked, or where the official exporter did not
        #: take the encoded stub: the official encoding is sent.
        self.fast_encoding = reason is None
        if reason is not None:
            logger.warning(
                "brickscope OTLPGrpcSpanExporter: %s; spans are encoded by the official (slower) encoder", reason
            )

    def _initialize_channel_and_stub(self) -> None:
        super()._initialize_channel_and_stub()
        if self._unchecked is None:
            self._client = _EncodedTraceServiceStub(self._channel)

    def _translate_data(self, data: Sequence[ReadableSpan]) -> Any:
        if not self.fast_encoding:
            return super()._translate_data(data)
        return self._encoder.encode(data)
