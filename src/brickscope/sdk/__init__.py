# SPDX-License-Identifier: Apache-2.0
"""brickscope's OpenTelemetry SDK layer: configuration, the span pipeline and its processors,
the resource detector, self-metrics and the ``opentelemetry-instrument`` glue.

The API (``import brickscope``: scopes, the brick catalogue, kernel sources) imports nothing
from here and nothing from the OpenTelemetry SDK; this package is loaded when a program
configures brickscope (``bs.configure()``, the same function as :func:`configure` here) or
installs one of its processors. docs/architecture.md draws the layers.

Example::

    from brickscope.sdk import configure

    session = configure(sync_mode="deferred")
"""

from brickscope.sdk._config import Session, configure, current_session, disable, enable, shutdown
from brickscope.sdk.trace import SYNC_MODES, CategoryAggregator, GpuSyncSpanProcessor, StepSampling

__all__ = [
    "SYNC_MODES",
    "CategoryAggregator",
    "GpuSyncSpanProcessor",
    "Session",
    "StepSampling",
    "configure",
    "current_session",
    "disable",
    "enable",
    "shutdown",
]
