# SPDX-License-Identifier: Apache-2.0
"""The official OTLP/HTTP span exporter with brickscope's encoder.

Everything but the encoding is the official exporter's (opentelemetry-exporter-otlp-proto-http):
its ``OTEL_EXPORTER_OTLP_*`` variables, endpoint, headers, TLS, compression, timeout,
retries, size limit and its own metrics. ``export`` is the official one with
:class:`~brickscope.exporter.otlp._encode.SpanEncoder` in place of the protobuf objects,
so it reaches into the same private parts the official ``export`` uses (``_client``,
``_metrics``, ``_max_request_size``: opentelemetry-exporter-otlp-proto-http 1.45). On a
release outside those checked (:mod:`~brickscope.exporter.otlp._checked`), or one laid out
otherwise, the exporter says so once at construction and exports with the official
encoder: slower, never broken.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as _OfficialOTLPSpanExporter
from opentelemetry.exporter.otlp.proto.http.version import __version__ as _OFFICIAL_VERSION
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.version import __version__ as _SDK_VERSION
from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE

from brickscope.exporter.otlp import _checked
from brickscope.exporter.otlp._encode import SpanEncoder

try:
    from opentelemetry.exporter.otlp.proto.http._common import RequestPayloadTooLargeError, _is_request_too_large
except ImportError:  # another layout: the official encoding is used (_has_official_layout)
    RequestPayloadTooLargeError = _is_request_too_large = None  # type: ignore[assignment,misc]

logger = logging.getLogger(__name__)

#: The releases the fast encoding depends on, read once; tests set them to fake others.
VERSIONS = {"opentelemetry-sdk": _SDK_VERSION, "opentelemetry-exporter-otlp-proto-http": _OFFICIAL_VERSION}


class OTLPHttpSpanExporter(_OfficialOTLPSpanExporter):
    """OTLP/HTTP protobuf span exporter: the official one, encoding ~4x cheaper.

    Takes the official exporter's arguments and environment variables. Sends the same
    bytes (an ``ExportTraceServiceRequest`` equal to the official encoding, byte for
    byte); encoding a brickscope span costs ~7 µs instead of ~29 µs (docs/benchmarks.md).

    .. versionadded:: 0.1.0
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._encoder = SpanEncoder()
        reason = _checked.outside(VERSIONS)
        if reason is None and not _has_official_layout(self):
            reason = "this opentelemetry-exporter-otlp-proto-http is laid out differently from 1.45"
        #: False on a release outside those checked, or where the official exporter's
        #: internals differ from 1.45's: the official encoding is used.
        self.fast_encoding = reason is None
        if reason is not None:
            logger.warning(
                "brickscope OTLPHttpSpanExporter: %s; spans are encoded by the official (slower) encoder", reason
            )

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not self.fast_encoding or self._shutdown:
            return super().export(spans)
        # The official export (1.45) with the body from brickscope's encoder.
        with self._metrics.export_operation(len(spans)) as result:
            try:
                body = self._encoder.encode(spans)
            except Exception as error:  # as the official exporter
                logger.error("Failed to encode span batch: %s", error)
                result.error = error
                return SpanExportResult.FAILURE
            if _is_request_too_large(body, self._max_request_size):
                logger.warning(
                    "Dropping span batch: serialized size %d bytes exceeds max_request_size %d bytes.",
                    len(body),
                    self._max_request_size,
                )
                result.error = RequestPayloadTooLargeError(
                    f"Serialized span request size {len(body)} bytes exceeds max_request_size "
                    f"{self._max_request_size} bytes."
                )
                return SpanExportResult.FAILURE
            exported = self._client.export(body)
            if not exported.success:
                result.error = exported.error
                result.error_attrs = (
                    {HTTP_RESPONSE_STATUS_CODE: exported.status_code} if exported.status_code is not None else None
                )
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS


def _has_official_layout(exporter: Any) -> bool:
    """Whether ``exporter`` has the private parts the official 1.45 ``export`` uses."""
    return (
        callable(getattr(getattr(exporter, "_client", None), "export", None))
        and callable(getattr(getattr(exporter, "_metrics", None), "export_operation", None))
        and isinstance(getattr(exporter, "_max_request_size", None), int)
        and isinstance(getattr(exporter, "_shutdown", None), bool)
        and _is_request_too_large is not None
    )
