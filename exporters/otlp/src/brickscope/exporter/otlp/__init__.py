# SPDX-License-Identifier: Apache-2.0
"""OTLP span export at a third to a quarter of the official encoder's CPU.

The official OTLP span exporters (their arguments, ``OTEL_EXPORTER_OTLP_*`` variables,
transport, retries and metrics) with an encoder that writes the same request bytes
without building protobuf objects:

- :class:`OTLPHttpSpanExporter`: OTLP/HTTP protobuf (``OTEL_TRACES_EXPORTER=brickscope_otlp_proto_http``);
- :class:`OTLPGrpcSpanExporter`: OTLP/gRPC (``brickscope_otlp_proto_grpc``; the ``grpc`` extra);
- :class:`OTLPSpanExporter`: either, by the OTLP protocol variables, as the SDK's ``otlp``
  (``OTEL_TRACES_EXPORTER=brickscope_otlp``).

In code::

    from brickscope.exporter.otlp import OTLPHttpSpanExporter
    provider.add_span_processor(BatchSpanProcessor(OTLPHttpSpanExporter(endpoint="http://collector:4318/v1/traces")))
"""

from brickscope.exporter.otlp._http import OTLPHttpSpanExporter
from brickscope.exporter.otlp._protocol import OTLPSpanExporter

__all__ = ["OTLPGrpcSpanExporter", "OTLPHttpSpanExporter", "OTLPSpanExporter"]


def __getattr__(name: str) -> object:
    # The gRPC exporter imports grpcio: only when asked for (the ``grpc`` extra).
    if name == "OTLPGrpcSpanExporter":
        from brickscope.exporter.otlp._grpc import OTLPGrpcSpanExporter

        return OTLPGrpcSpanExporter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
