# SPDX-License-Identifier: Apache-2.0
"""Flamegraphs of brickscope spans: folded stacks and speedscope profiles, weighted by
measured GPU time, host time or any numeric attribute.

Example::

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from brickscope.exporter.flamegraph import FlamegraphSpanExporter

    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(FlamegraphSpanExporter("run.folded", speedscope_path="run.json"))
    )

Or with no code: ``OTEL_TRACES_EXPORTER=flamegraph`` and the
``BRICKSCOPE_FLAMEGRAPH_*`` variables of :mod:`.environment_variables`.
Offline: ``brickscope flamegraph trace.pftrace -o run.folded``.
"""

from brickscope.exporter.flamegraph._exporter import FlamegraphSpanExporter
from brickscope.exporter.flamegraph.version import __version__

__all__ = ["FlamegraphSpanExporter", "__version__"]
