# SPDX-License-Identifier: Apache-2.0
"""``OTEL_TRACES_EXPORTER=brickscope_otlp``: gRPC or HTTP by the OTLP protocol variables,
as the SDK chooses for ``otlp``."""

from __future__ import annotations

import os
from typing import Any

from opentelemetry.sdk.environment_variables import OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
from opentelemetry.sdk.trace.export import SpanExporter

from brickscope.exporter.otlp._http import OTLPHttpSpanExporter


class OTLPSpanExporter(SpanExporter):
    """The OTLP span exporter of the configured protocol, with brickscope's encoder.

    Constructing it returns an :class:`OTLPGrpcSpanExporter` or an
    :class:`OTLPHttpSpanExporter` (the arguments are theirs), chosen as the SDK chooses for
    ``OTEL_TRACES_EXPORTER=otlp``: ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``grpc``. It is a class only because the SDK's
    configuration accepts nothing else for an exporter name.

    .. versionadded:: 0.1.0
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> SpanExporter:  # type: ignore[misc]
        variable = (
            OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
            if os.environ.get(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)
            else OTEL_EXPORTER_OTLP_PROTOCOL
        )
        protocol = (os.environ.get(variable) or "grpc").strip()
        if protocol == "grpc":
            try:
                from brickscope.exporter.otlp._grpc import OTLPGrpcSpanExporter
            except ImportError as error:
                raise ImportError(
                    f"brickscope_otlp over gRPC needs opentelemetry-exporter-otlp-proto-grpc "
                    f"(pip install './exporters/otlp[grpc]' in the brickscope repository), or {variable}=http/protobuf: {error}"
                ) from error
            return OTLPGrpcSpanExporter(*args, **kwargs)
        if protocol == "http/protobuf":
            return OTLPHttpSpanExporter(*args, **kwargs)
        raise ValueError(f"{variable}={protocol!r}: brickscope_otlp sends 'grpc' or 'http/protobuf'")
