# SPDX-License-Identifier: Apache-2.0
"""Parquet exporter for brickscope: OpenTelemetry spans as a Parquet dataset, one row per span.

Example::

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from brickscope.exporter.parquet import ParquetSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ParquetSpanExporter("traces/run1/rank-{rank}")))
    ...
    provider.shutdown()     # traces/run1/rank-0/part-00000.parquet, ...

Or, with no code: ``OTEL_TRACES_EXPORTER=parquet`` and optionally
``BRICKSCOPE_PARQUET_PATH``. ``brickscope report traces/run1`` reads the dataset; so do
DuckDB (``read_parquet('traces/run1/**/*.parquet')``) and Spark. The format is
documented in docs/semantic-conventions.md ("Parquet span format").
"""

from brickscope.exporter.parquet._exporter import ParquetSpanExporter
from brickscope.exporter.parquet.version import __version__

__all__ = ["ParquetSpanExporter", "__version__"]
