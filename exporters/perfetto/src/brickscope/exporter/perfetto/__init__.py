# SPDX-License-Identifier: Apache-2.0
"""Perfetto exporter for brickscope: OpenTelemetry spans as a native ``.pftrace``.

Example::

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from brickscope.exporter.perfetto import PerfettoSpanExporter, read_spans

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(PerfettoSpanExporter("trace.pftrace")))
    ...
    provider.shutdown()
    spans = read_spans("trace.pftrace")   # back into ReadableSpans, offline

Open the file in https://ui.perfetto.dev. ``brickscope merge`` combines per-rank
files into one timeline and ``brickscope convert`` turns an OTLP JSON file into a
``.pftrace``.
"""

from brickscope.exporter.perfetto._exporter import BRICKSCOPE_PERFETTO_PATH, PerfettoSpanExporter
from brickscope.exporter.perfetto._merge import merge_traces
from brickscope.exporter.perfetto._reader import read_spans
from brickscope.exporter.perfetto.version import __version__

__all__ = ["BRICKSCOPE_PERFETTO_PATH", "PerfettoSpanExporter", "merge_traces", "read_spans", "__version__"]
