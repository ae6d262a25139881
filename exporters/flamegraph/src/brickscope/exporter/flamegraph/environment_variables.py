# SPDX-License-Identifier: Apache-2.0
"""Environment variables read by :class:`FlamegraphSpanExporter` for arguments left unset.

They configure the exporter when the OpenTelemetry SDK builds it from
``OTEL_TRACES_EXPORTER=flamegraph`` (no arguments are passed then).

Example::

    $ BRICKSCOPE_FLAMEGRAPH_PATH=run.folded BRICKSCOPE_FLAMEGRAPH_WEIGHT=host \\
      OTEL_TRACES_EXPORTER=flamegraph opentelemetry-instrument python serve.py
"""

BRICKSCOPE_FLAMEGRAPH_PATH = "BRICKSCOPE_FLAMEGRAPH_PATH"
"""Folded output file. Default: ``brickscope.folded`` in the working directory."""

BRICKSCOPE_FLAMEGRAPH_SPEEDSCOPE_PATH = "BRICKSCOPE_FLAMEGRAPH_SPEEDSCOPE_PATH"
"""speedscope JSON output file. Default: none (no speedscope file)."""

BRICKSCOPE_FLAMEGRAPH_WEIGHT = "BRICKSCOPE_FLAMEGRAPH_WEIGHT"
"""``gpu`` (default), ``host``, or the name of a numeric span attribute."""

BRICKSCOPE_FLAMEGRAPH_UNIT = "BRICKSCOPE_FLAMEGRAPH_UNIT"
"""Unit of folded time weights: ``us`` (default) or ``ns``."""

BRICKSCOPE_FLAMEGRAPH_OVERWRITE = "BRICKSCOPE_FLAMEGRAPH_OVERWRITE"
"""``true`` to replace output files that already exist. Default: ``false`` (refuse)."""
